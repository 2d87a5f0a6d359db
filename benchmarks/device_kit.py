"""Build the wheels a bare GPU machine lacks, for Python 3.12 on manylinux x86-64.

    python benchmarks/device_kit.py [--kit .kit] [--mol-kit .kit-mol]   (or bash benchmarks/device_kit.sh)

The GPU machine (benchmarks/gpu_machine_constraints.txt) holds torch, numpy, pandas, pyarrow
and most of what raylab needs, and cannot download anything. This script, run where the
package registries answer:

1. writes a metadata-only stand-in wheel for each package of that list into ``.kit-stubs/``
   (its pinned version, else the version of this Python's own copy, else 0), so that pip can
   resolve against "what is installed there" without that machine;
2. builds this project's wheel with the kit's requirements (torch>=2.11 instead of this
   machine's ==2.13.0 pin; Ray without its dashboard extra; the workloads' packages are in
   extras, which the resolution leaves out: gymnasium and ale-py are named, rdkit goes to
   ``.kit-mol/``, the rest that machine holds);
3. resolves raylab's wheel with gymnasium and ale-py against the stand-ins and the kit,
   offline (``pip install --dry-run --no-index``), and each time a requirement is missing
   downloads that one wheel (``--no-deps``) into the kit, until the resolution passes: the
   kit then holds exactly the wheels the resolution takes from it;
4. repacks Ray without ``ray/jars`` (Java, which Python never loads), RECORD rewritten;
5. writes rdkit into ``.kit-mol/`` the same way.

It prints the kit's size and fails (exit 1) above ``--max-mib`` (60). On the GPU machine:
``python3 -m pip install --no-deps --no-index --target DIR .kit/*.whl`` and
``PYTHONPATH=DIR``; ``benchmarks/gpu_check.sh`` does that for you.
"""
from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.metadata
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "benchmarks" / "gpu_machine_constraints.txt"
TARGET = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
          *(f"--platform=manylinux{tag}_x86_64" for tag in
            ("_2_28", "_2_27", "_2_26", "_2_25", "_2_24", "_2_17", "2014", "2010", "1")),
          "--only-binary=:all:"]
"""The GPU machine's interpreter and platform, for pip's resolver and downloads."""
REQUIREMENTS = ["gymnasium", "ale-py"]
"""What the kit brings besides raylab's own wheel (which pulls in Ray)."""
RAY_DROP = ("ray/jars/",)
"""Paths of Ray's wheel that Python never loads (Ray's Java worker jars)."""
KIT_EDITS = [
    ('"torch==2.13.0"', '"torch>=2.11"'),
    ('"ray[default,train,tune,rllib]==2.60.*"', '"ray[train,tune,rllib]==2.60.*"'),
]
"""pyproject.toml edits for the kit's wheel: (this machine's requirement, the kit's)."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_packages(path: Path = CONSTRAINTS) -> dict[str, str | None]:
    """The GPU machine's packages, name -> pinned version (None where the list gives none)."""
    packages = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        packages[canonical(name)] = version.strip() or None
    return packages


def write_wheel(path: Path, files: dict[str, bytes], modes: dict[str, int] | None = None) -> None:
    """A wheel of ``files`` (archive name -> bytes) with a RECORD that lists them all.

    ``modes``: Unix permissions by name (Ray's gcs_server and raylet must stay executable:
    pip sets the executable bit from them); 0o644 for the others.
    """
    dist_info = next(n.split("/")[0] for n in files if n.split("/")[0].endswith(".dist-info"))
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append([name, f"sha256={digest}", str(len(data))])
    rows.append([f"{dist_info}/RECORD", "", ""])
    record = io.StringIO()
    csv.writer(record, lineterminator="\n").writerows(rows)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = ((modes or {}).get(name, 0o644) & 0o7777 | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            out.writestr(info, data)
        out.writestr(f"{dist_info}/RECORD", record.getvalue())


def write_stubs(folder: Path, packages: dict[str, str | None]) -> None:
    """One metadata-only wheel per package of the GPU machine (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, version in packages.items():
        if version is None:
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                version = "0"
        base = f"{name.replace('-', '_')}-{version}"
        write_wheel(folder / f"{base}-py3-none-any.whl", {
            f"{base}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
            f"{base}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: raylab-device-kit\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        })


def repack_without(wheel: Path, drop: tuple[str, ...]) -> int:
    """Rewrite ``wheel`` without the members under ``drop``; returns the bytes saved."""
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as z:
        kept = [i for i in z.infolist()
                if not i.filename.startswith(drop) and not i.filename.endswith(".dist-info/RECORD")
                and not i.is_dir()]
        files = {i.filename: z.read(i) for i in kept}
        modes = {i.filename: (i.external_attr >> 16) or 0o644 for i in kept}
    write_wheel(wheel, files, modes)
    return before - wheel.stat().st_size


def build_raylab_wheel(out: Path) -> Path:
    """This project's wheel with the kit's requirements (``KIT_EDITS``), built from a copy."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
            ".git", ".venv*", ".kit*", "results", "data", "build", "*.egg-info", "__pycache__",
            "tests", "docs", "benchmarks", ".pytest_cache", ".hypothesis"))
        pyproject = (src / "pyproject.toml").read_text()
        for old, new in KIT_EDITS:
            if old not in pyproject:
                raise SystemExit(f"device_kit: pyproject.toml no longer has {old.strip()!r}; update KIT_EDITS")
            pyproject = pyproject.replace(old, new)
        (src / "pyproject.toml").write_text(pyproject)
        for old in out.glob("raylab-*.whl"):
            old.unlink()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--no-build-isolation", "-w", str(out), str(src)], check=True)
    return next(out.glob("raylab-*.whl"))


def resolve(kit: Path, stubs: Path, requirements: list[str], target: Path) -> subprocess.CompletedProcess:
    """The offline resolution check: pip, no index, the kit and the stand-ins only."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
         "--find-links", str(kit), "--find-links", str(stubs), *TARGET, "--target", str(target),
         "-c", str(CONSTRAINTS), "--report", str(target / "report.json"), *requirements],
        capture_output=True, text=True)


MISSING = re.compile(r"(?:satisfies the requirement|distribution found for) ([^\s(]+(?: ?[<>=!~][^\s(]*)?)")


DEPENDS = re.compile(r"(?:depends on|The user requested) ([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?([<>=!~][^\s;]*)?")


def conflicting(text: str) -> tuple[str, str] | None:
    """From pip's "The conflict is caused by" lines: a package and all its requirements, joined.

    A line is "X depends on NAME<spec>" or "The user requested NAME<spec>" (a kit requirement,
    unpinned, whose downloaded wheel is outside another package's pin)."""
    specs: dict[str, list[str]] = {}
    for name, spec in DEPENDS.findall(text.split("The conflict is caused by", 1)[-1]):
        specs.setdefault(canonical(name), []).append(spec)
    for name, found in specs.items():
        if len(found) > 1:
            return name, name + ",".join(s for s in found if s)
    return None


def fill(kit: Path, stubs: Path, requirements: list[str], rounds: int = 60) -> list[str]:
    """Download missing wheels into ``kit`` until ``requirements`` resolve; the names taken."""
    target = Path(tempfile.mkdtemp(prefix="kit-target-"))
    for _ in range(rounds):
        result = resolve(kit, stubs, requirements, target)
        if result.returncode == 0:
            report = json.loads((target / "report.json").read_text())
            shutil.rmtree(target, ignore_errors=True)
            return [item["metadata"]["name"] for item in report["install"]
                    if Path(item["download_info"]["url"].removeprefix("file://")).parent == kit.resolve()]
        found = MISSING.search(result.stderr)
        if found:
            requirement = found.group(1)
        elif conflict := conflicting(result.stdout + result.stderr):
            name, requirement = conflict  # a wheel taken earlier is outside another's pin: replace it
            for wheel in kit.glob("*.whl"):
                if canonical(wheel.name.split("-")[0]) == canonical(name):
                    wheel.unlink()
        else:
            raise SystemExit("device_kit: pip could not resolve, and named no missing package:\n" + result.stderr[-3000:])
        print(f"download {requirement}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *TARGET,
                        "-c", str(CONSTRAINTS), "-d", str(kit), requirement], check=True)
        for ray_wheel in kit.glob("ray-*.whl"):
            if any(n.startswith(RAY_DROP) for n in zipfile.ZipFile(ray_wheel).namelist()):
                saved = repack_without(ray_wheel, RAY_DROP)
                print(f"repacked {ray_wheel.name} without {', '.join(RAY_DROP)}: {saved / 2**20:.1f} MiB less")
    raise SystemExit(f"device_kit: still unresolved after {rounds} downloads:\n{result.stderr[-3000:]}")


def prune(kit: Path, keep: list[str]) -> None:
    """Remove the kit's wheels the resolution did not take (left from an earlier build)."""
    wanted = {canonical(n) for n in keep}
    for wheel in kit.glob("*.whl"):
        if canonical(wheel.name.split("-")[0]) not in wanted:
            wheel.unlink()


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.whl")) / 2**20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kit", type=Path, default=ROOT / ".kit")
    p.add_argument("--mol-kit", type=Path, default=ROOT / ".kit-mol")
    p.add_argument("--stubs", type=Path, default=ROOT / ".kit-stubs")
    p.add_argument("--max-mib", type=float, default=60.0)
    args = p.parse_args(argv)
    kit, mol = args.kit.resolve(), args.mol_kit.resolve()
    kit.mkdir(parents=True, exist_ok=True)
    mol.mkdir(parents=True, exist_ok=True)
    write_stubs(args.stubs, machine_packages())
    raylab_wheel = build_raylab_wheel(kit)
    taken = fill(kit, args.stubs, [str(raylab_wheel), *REQUIREMENTS])
    prune(kit, taken)
    taken_mol = fill(mol, args.stubs, ["rdkit"])
    prune(mol, taken_mol)
    for folder, names in ((kit, taken), (mol, taken_mol)):
        print(f"{folder.name}: {len(names)} wheels, {size_mib(folder):.1f} MiB: {', '.join(sorted(names))}")
    if size_mib(kit) > args.max_mib:
        print(f"{kit.name} is {size_mib(kit):.1f} MiB, over the {args.max_mib:g} MiB limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
