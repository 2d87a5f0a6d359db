"""Stage a CIFAR archive once, where every trial of a sweep reads it.

    python -m raylab.data.stage cifar10 DEST [--url URL --md5 MD5]

``DEST`` is a folder every trial can read: a path on a shared filesystem or on each node
(``/mnt/shared/cifar``, ``data/cifar`` before ``ray up`` syncs it), or the run's storage
(``s3://bucket/data/cifar``, any URI ``pyarrow.fs`` opens, ``file://`` included). The archive is
downloaded once (from the dataset's home page, or ``--url``: a mirror, or a file server on an
offline network), checked against its published MD5 (or ``--md5`` for a mirror whose bytes
differ; then an ``.md5`` sidecar beside it carries that checksum to the loader), and written to
``DEST`` whole or not at all. A ``DEST`` that already holds a verified archive is left as it is.

Trials then read it with ``config.data_dir=DEST`` and ``download: false``. A local ``DEST`` is
read in place (``raylab.data.cifar``). For a URI, each node copies the archive once into a local
cache (``raylab.data.node_copy``: ``$RAYLAB_DATA_CACHE`` or ``~/.cache/raylab/data``, one
folder per URI) and trials read that copy; the loader checks its MD5 every time.

Bad input (unknown dataset, an unreachable URL, a checksum that does not match) is one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

from raylab.data import cifar
from raylab.errors import UserError
from raylab.files import is_uri, refuse_credentials, user_path, write_atomic
from raylab.run_folder import filesystem, join


def stage(name: str, dest: str, url: str | None = None, md5: str | None = None, timeout_s: float = 60) -> str:
    """Download ``name``'s archive once into ``dest`` (a folder or a URI); return what was done.

    ``url`` replaces the dataset's home-page URLs; ``md5`` the published checksum (a sidecar
    ``<archive>.md5`` is written beside an archive whose checksum is not the published one).
    Returns ``"already staged"`` or ``"staged"``; raises ``UserError`` naming the URL or file.
    """
    refuse_credentials(dest, "DEST")
    spec = cifar._spec(name)
    expected = md5 or spec.archive_md5
    dest = dest if is_uri(dest) else str(user_path(dest))
    fs, folder = filesystem(dest)
    target = f"{folder.rstrip('/')}/{spec.archive}"
    if _file_md5(fs, target) == expected:
        return "already staged"
    with tempfile.TemporaryDirectory(prefix="raylab-stage-") as tmp:
        local = Path(tmp) / spec.archive
        errors = []
        for source in [url] if url else list(spec.urls):
            try:
                with urllib.request.urlopen(source, timeout=timeout_s) as response, open(local, "wb") as out:
                    shutil.copyfileobj(response, out)
            except (OSError, ValueError) as err:
                errors.append(f"{source}: {err}")
                continue
            actual = _md5(local)
            if actual == expected:
                break
            errors.append(f"{source}: MD5 {actual}, expected {expected}")
        else:
            raise UserError(f"could not stage {spec.archive} into {dest}: {'; '.join(errors)}")
        fs.create_dir(folder, recursive=True)
        sidecar = target + cifar.SIDECAR_SUFFIX
        if expected != spec.archive_md5:
            _put(fs, f"{expected}  {spec.archive}\n".encode(), sidecar)
        elif fs.get_file_info(sidecar).type.name == "File":
            fs.delete_file(sidecar)  # the published checksum applies again
        _put(fs, local, target)
    return "staged"


def _put(fs, source: Path | bytes, target: str) -> None:
    """Write a file or bytes to ``target`` on ``fs`` whole or not at all (a temporary name, then
    a move; on object stores one put is already atomic)."""
    data = source if isinstance(source, bytes) else source.read_bytes()
    if fs.type_name == "local":
        write_atomic(target, data)
        return
    with fs.open_output_stream(target, compression=None) as out:
        out.write(data)


def _file_md5(fs, path: str) -> str | None:
    if fs.get_file_info(path).type.name != "File":
        return None
    digest = hashlib.md5()
    with fs.open_input_stream(path, compression=None) as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="python -m raylab.data.stage",
        description="Download a CIFAR archive once into a folder or URI that every trial reads.",
    )
    parser.add_argument("dataset", help=f"one of {', '.join(cifar.SPECS)}")
    parser.add_argument("dest", help="a folder (shared or on each node) or a URI (s3://..., file://...)")
    parser.add_argument("--url", help="download from this URL instead of the dataset's home page")
    parser.add_argument("--md5", help="the archive's MD5 when it is not the published one (a mirror)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        done = stage(args.dataset, args.dest, args.url, args.md5)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    archive = join(args.dest, cifar.SPECS[args.dataset].archive)
    print(f"{done}: {archive}")
    print(f"use it in every trial: config.data_dir={args.dest} config.download=false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
