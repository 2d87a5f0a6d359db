"""The small file helpers that checkpoints, datasets and caches share: a file written atomically
(``write_atomic``), a file's SHA-256 (``sha256_file``), how a path a user gives is resolved
(``user_path``), whether a location is a URI (``is_uri``), and the refusal of a storage URI that carries credentials
(``refuse_credentials``)."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl

CREDENTIAL_QUERY_KEYS = ("access_key", "secret_key", "session_token")
"""Query keys with which pyarrow's S3 filesystem takes keys from the URI itself."""

_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#]*@|[^@?#]*:[^@?#]*@)")
"""``scheme://USER[:SECRET]@host...``: an ``@`` in the authority, or a ``:`` before an ``@``
(an AWS secret key may hold ``/``, which would otherwise end the authority early)."""


_USERINFO_ANYWHERE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^@?#\s]*@")
_CREDENTIAL_VALUE = re.compile(r"((?:%s)=)[^&\s]*" % "|".join(CREDENTIAL_QUERY_KEYS), re.IGNORECASE)


def redacted(text: str) -> str:
    """``text`` with every URI's ``user:password@`` and credential query values replaced by
    ``***`` (``config.data_dir=s3://KEY:SECRET@bucket`` -> ``config.data_dir=s3://***@bucket``):
    for echoing what a user typed in an error without the keys it held."""
    return _CREDENTIAL_VALUE.sub(r"\1***", _USERINFO_ANYWHERE.sub(r"\1***@", text))


def refuse_credentials(location: str, what: str = "--storage") -> None:
    """Refuse a URI that holds credentials: userinfo (``s3://KEY:SECRET@bucket/runs``), keys in
    its query (``?access_key=...&secret_key=...``), or userinfo in its ``endpoint_override``.

    pyarrow honours each of them, and the URI is printed, saved in the run's provenance and in
    Ray Tune's state. The refusal names the URI's scheme and the keys' places, never their
    values. Raises ``raylab.errors.UserError``."""
    if not is_uri(location):
        return
    from raylab.errors import UserError

    path, _, query = location.partition("?")
    fields = parse_qsl(query, keep_blank_values=True)
    where = []
    if _USERINFO.match(path):
        where.append("user:password@ before the host")
    where += [f"query key {key}" for key, _ in fields if key.lower() in CREDENTIAL_QUERY_KEYS]
    where += [f"{key}'s user:password@" for key, value in fields if _USERINFO.match(value)]
    if where:
        scheme = location.split("://", 1)[0]
        raise UserError(
            f"{what}: a {scheme}:// URI holding credentials ({', '.join(where)}) is refused, as it "
            "would be printed and saved with the run; put keys in the environment, a profile or a role"
        )


def is_uri(location: str | os.PathLike) -> bool:
    """Whether ``location`` names a filesystem by scheme (``s3://``, ``gs://``, ``file://``):
    raylab's one test of a URI against a local path."""
    return "://" in str(location)


LAUNCH_DIR_ENV = "RAYLAB_LAUNCH_DIR"
"""The folder the sweep was started from, set in each trial's process by raylab."""


def user_location(location: str) -> str:
    """A storage URI (``s3://...``) as given, or a local path resolved as ``user_path`` does."""
    if is_uri(location):
        refuse_credentials(location, "storage")
        return location
    return str(user_path(location))


def user_path(path: str | os.PathLike) -> Path:
    """``path`` with ``~`` expanded; a relative path is taken from where the command ran.

    Ray Tune runs each trial in a working folder of its own; raylab records the folder the
    sweep was launched from in ``RAYLAB_LAUNCH_DIR`` for the trial: relative paths resolve
    against that, and against the current folder outside a trial.
    """
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    return Path(os.environ.get(LAUNCH_DIR_ENV) or os.getcwd()) / path


def sha256_file(path: str | os.PathLike) -> str:
    """The SHA-256 hex digest of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never a part.

    The bytes go to a temporary file in the same folder (unique, so concurrent writers do not
    collide), are flushed to disk, and the file is renamed over ``path``.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
