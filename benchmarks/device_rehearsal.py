"""The GPU check rehearsed here, on the CPU, in a Python 3.12 venv holding what the GPU machine has.

    python benchmarks/device_rehearsal.py [--venv DIR] [--python python3.12] [--out DIR] [--only STEP ...]
    make device-rehearsal          (builds .kit first with benchmarks/device_kit.sh)

The GPU machine runs Python 3.12 with torch 2.11 and its image's packages
(benchmarks/gpu_machine_constraints.txt), no Ray and no network; ``benchmarks/gpu_check.sh``
unpacks ``.kit/`` there and runs its steps. This script does the same here:

1. a venv of ``--python`` (3.12) with torch 2.11.0 from PyPI and, under that list as pip
   constraints, the machine's packages the kit relies on (``.kit/kit.json``'s
   ``machine_packages``: what the kit's resolution took from the list) and the ones of Ray's
   ``default`` extra that the list holds (Ray uses them when present). No Ray, no raylab, not
   this project's .venv. Built once and cached (``--venv``, outside the tree; rebuilt when the
   package list or the constraints change); its size and build time are printed;
2. the kit resolved for real: pip in that venv, offline (``--no-index``), the kit's wheels
   against the venv's installed packages (not the stand-ins ``device_kit.py`` resolves against);
3. ``PY=<venv python> bash benchmarks/gpu_check.sh --rehearse``: the kit unpacked exactly as on
   the GPU machine (PYTHONPATH unset), then every step up to where CUDA is required, each GPU
   assertion replaced by its CPU twin where the step cannot start otherwise
   (``benchmarks/gpu_check.py``'s step table says which; ``--rehearse`` there).

Exit code: 0 when the venv, the resolution and every step passed (a step may skip, with its
reason printed); 1 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "benchmarks" / "gpu_machine_constraints.txt"
TORCH = "torch==2.11.0"
"""The GPU machine's torch (its image: 2.11.0+cu130; PyPI's 2.11.0 wheel for Linux is the same
release built for CUDA 13.0, and runs on the CPU here)."""
DEFAULT_VENV = Path(
    os.environ.get("RAYLAB_DEVICE_VENV") or Path.home() / ".cache" / "raylab" / "device-py312-torch2.11"
)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_list() -> set[str]:
    names = set()
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.add(canonical(line.split("==")[0]))
    return names


def find_python() -> str | None:
    """A Python 3.12 that runs here: python3.12 on PATH (a pyenv shim may not), else pyenv's."""
    candidates = [
        shutil.which("python3.12"),
        *sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / "3.12.*" / "bin" / "python3.12"))),
    ]
    for candidate in filter(None, candidates):
        works = subprocess.run(
            [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"], capture_output=True
        )
        if works.returncode == 0:
            return candidate
    return None


def ray_default_on_machine(kit: Path) -> set[str]:
    """The packages of Ray's ``default`` extra that the machine's list holds (Ray's dashboard
    and agents import them when present, so the rehearsal has them as the machine does)."""
    wheel = next(kit.glob("ray-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    names = {
        canonical(re.match(r"[A-Za-z0-9_.-]+", line.split(":", 1)[1].strip()).group(0))
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and 'extra == "default"' in line
    }
    return names & machine_list()


def venv_packages(kit: Path) -> list[str]:
    """What the rehearsal venv installs: torch 2.11, the machine's packages the kit relies on,
    and those of Ray's default extra the machine holds."""
    relied = set(json.loads((kit / "kit.json").read_text())["machine_packages"])
    return [TORCH, *sorted((relied | ray_default_on_machine(kit)) - {"torch"})]


def folder_mib(folder: Path) -> float:
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total / 2**20


def build_venv(venv: Path, python: str, packages: list[str]) -> dict:
    """The cached venv, built when missing or when its package list or constraints changed.

    Returns its record: packages, seconds the build took, size in MiB, built now or cached."""
    stamp = hashlib.sha256((CONSTRAINTS.read_text() + "\n".join(packages)).encode()).hexdigest()[:16]
    record_path = venv / "rehearsal.json"
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        if record.get("stamp") == stamp and (venv / "bin" / "python").exists():
            return {**record, "built_now": False}
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    print(
        f"building {venv}: {len(packages)} packages from PyPI (torch 2.11 is about 4 GB with its CUDA libraries)",
        flush=True,
    )
    subprocess.run(
        [
            "nice",
            "-n",
            "10",
            py,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--progress-bar",
            "off",
            "-c",
            str(CONSTRAINTS),
            *packages,
        ],
        check=True,
    )
    record = {
        "stamp": stamp,
        "packages": packages,
        "python": python,
        "build_s": round(time.monotonic() - start, 1),
        "mib": round(folder_mib(venv), 1),
    }
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    return {**record, "built_now": True}


def check_venv(py: str) -> str | None:
    """Why the venv is not the machine's (one line), or None: Python 3.12, torch 2.11, no Ray."""
    code = (
        "import sys, importlib.util, torch; print(sys.version_info[:2] == (3, 12), "
        "torch.__version__.split('+')[0], importlib.util.find_spec('ray') is None, "
        "importlib.util.find_spec('raylab') is None)"
    )
    got = subprocess.run([py, "-c", code], capture_output=True, text=True, cwd="/", env=clean_env())
    if got.returncode != 0:
        return f"{py} cannot import torch: {got.stderr.strip()[-300:]}"
    is312, torch_version, no_ray, no_raylab = got.stdout.split()
    if is312 != "True":
        return f"{py} is not Python 3.12"
    if torch_version != "2.11.0":
        return f"{py} has torch {torch_version}, not 2.11.0"
    if no_ray != "True" or no_raylab != "True":
        return f"{py} imports ray or raylab on its own: the GPU machine has neither"
    return None


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without PYTHONPATH and virtualenv variables (the machine has neither)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


def real_resolution(py: str, kit: Path) -> subprocess.CompletedProcess:
    """The kit resolved offline against the venv's installed packages (real versions, Python
    3.12), with stand-ins only for what the kit leaves out on purpose (``NOT_CARRIED``)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import device_kit

    meta = json.loads((kit / "kit.json").read_text())
    raylab_wheel = next(kit.glob("raylab-*.whl"))
    with tempfile.TemporaryDirectory() as stubs:
        device_kit.write_stubs(Path(stubs), {n: v for n, (v, _) in device_kit.NOT_CARRIED.items()})
        return subprocess.run(
            [
                py,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--no-index",
                "--find-links",
                str(kit),
                "--find-links",
                stubs,
                str(raylab_wheel),
                *meta["requirements"],
            ],
            capture_output=True,
            text=True,
            env=clean_env(),
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the cached rehearsal venv (outside the tree)")
    p.add_argument("--python", default=None, help="a Python 3.12 (default: python3.12 on PATH, else pyenv's)")
    p.add_argument("--kit", type=Path, default=ROOT / ".kit")
    p.add_argument("--out", type=Path, default=ROOT / "results" / f"device-rehearsal-{time.strftime('%Y%m%d-%H%M%S')}")
    p.add_argument("--only", nargs="*", default=None, help="run only these gpu_check steps")
    args = p.parse_args(argv)
    kit = args.kit.resolve()
    if not (kit / "kit.json").is_file():
        print(f"no kit at {kit} (kit.json missing): run bash benchmarks/device_kit.sh first")
        return 2
    python = args.python or find_python()
    if not python:
        print("no Python 3.12 here (python3.12 on PATH or under ~/.pyenv/versions/3.12.*): pass --python")
        return 2
    record = build_venv(args.venv.expanduser(), python, venv_packages(kit))
    py = str(args.venv.expanduser() / "bin" / "python")
    print(
        f"rehearsal venv {args.venv}: {len(record['packages'])} packages, {record['mib']:.0f} MiB, "
        f"built in {record['build_s']:.0f} s{' (now)' if record['built_now'] else ' (cached)'}",
        flush=True,
    )
    why = check_venv(py)
    if why:
        print(f"FAIL  venv: {why}")
        return 1
    resolved = real_resolution(py, kit)
    if resolved.returncode != 0:
        print("FAIL  the kit does not resolve against the venv's real packages:\n" + resolved.stderr[-3000:])
        return 1
    print(
        "ok    the kit resolves offline against the venv's real packages: "
        + (resolved.stdout.strip().splitlines() or ["?"])[-1][:300],
        flush=True,
    )
    kit_mib = sum(f.stat().st_size for f in kit.rglob("*") if f.is_file()) / 2**20
    print(f"kit {kit}: {kit_mib:.1f} MiB", flush=True)
    # a fresh site each time: the unpack itself is rehearsed (and timed), as on a fresh machine
    site = args.out.resolve() / "kit-site"
    shutil.rmtree(site, ignore_errors=True)
    env = clean_env(PY=py, OUT_DIR=str(args.out), KIT=str(kit), KIT_SITE=str(site))
    env.pop("OUT", None)
    only = ["--only", *args.only] if args.only else []
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--rehearse", *only], env=env, cwd=ROOT)
    print(f"rehearsal: gpu_check.sh --rehearse exit {done.returncode}; table {args.out / 'gpu_check.json'}")
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
