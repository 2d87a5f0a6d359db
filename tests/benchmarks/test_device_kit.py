"""benchmarks/device_kit.sh: the wheels a bare GPU machine lacks, resolved offline, <= 60 MiB.

The offline tests run the kit's pieces with the real pip: the Ray repack keeps a wheel pip
installs (RECORD consistent, executables executable, the dropped folder gone), and the
GPU machine's stand-ins carry its documented versions (torch 2.11 there, so a wheel asking for
torch>=2.12 does not resolve). The slow test builds the whole kit from the registries (about a
minute here, 85 MB downloaded) and runs the resolution check on it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

LONG = pytest.mark.skipif(
    os.environ.get("RAYLAB_DEVICE_TESTS") != "1", reason="long (minutes, or the network): RAYLAB_DEVICE_TESTS=1 runs it"
)
REPO = Path(__file__).resolve().parents[2]


def load_kit():
    spec = importlib.util.spec_from_file_location("device_kit", REPO / "benchmarks" / "device_kit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_kit"] = module
    spec.loader.exec_module(module)
    return module


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)


def record_matches(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(z.read(record).decode())))
        listed = {row[0] for row in rows}
        for name, digest, _ in rows:
            if digest:
                actual = base64.urlsafe_b64encode(hashlib.sha256(z.read(name)).digest()).rstrip(b"=").decode()
                if digest != f"sha256={actual}":
                    return False
        return listed == {i.filename for i in z.infolist() if not i.is_dir()}


def tiny_wheel(folder: Path, name: str, requires: list[str], extra: dict[str, tuple[bytes, int]] | None = None) -> Path:
    kit = load_kit()
    base = f"{name}-1.0"
    files = {
        f"{name}/__init__.py": b"",
        **{k: v[0] for k, v in (extra or {}).items()},
        f"{base}.dist-info/METADATA": (
            "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n%s"
            % (name, "".join(f"Requires-Dist: {r}\n" for r in requires))
        ).encode(),
        f"{base}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    path = folder / f"{base}-py3-none-any.whl"
    kit.write_wheel(path, files, {k: v[1] for k, v in (extra or {}).items()})
    return path


def test_the_repacked_wheel_installs_without_the_dropped_folder_and_keeps_executables(tmp_path):
    kit = load_kit()
    wheel = tiny_wheel(
        tmp_path,
        "rayish",
        [],
        {"rayish/core/server": (b"#!/bin/sh\necho up\n", 0o755), "rayish/jars/big.jar": (b"x" * 100_000, 0o644)},
    )
    saved = kit.repack_without(wheel, ("rayish/jars/*",))
    assert saved > 0 and record_matches(wheel)
    done = pip("install", "--quiet", "--no-deps", "--no-index", "--target", str(tmp_path / "t"), str(wheel))
    assert done.returncode == 0, done.stderr
    server = tmp_path / "t" / "rayish" / "core" / "server"
    assert os.access(server, os.X_OK) and not (tmp_path / "t" / "rayish" / "jars").exists()
    assert subprocess.run([str(server)], capture_output=True, text=True).stdout == "up\n"


def test_the_kit_carries_every_checked_workloads_extra_but_what_it_leaves_out_and_the_dashboard(tmp_path):
    kit = load_kit()
    names = {kit.canonical(r.split(">")[0].split("=")[0].split("<")[0]) for r in kit.kit_requirements()}
    assert {
        "gymnasium",
        "ale-py",
        "opencv-python-headless",
        "pyautoattack",
        "torch-geometric",
        "scikit-image",
        "aiohttp-cors",
        "opencensus",
    } <= names
    assert not names & {"rdkit", "mlxtend", "optuna", "google-api-core"}
    # what Ray's dashboard imports is all there: on the machine (its list) or named for the kit
    optional = next(Path(p) for p in sys.path if (Path(p) / "ray" / "dashboard" / "optional_deps.py").is_file())
    text = (optional / "ray" / "dashboard" / "optional_deps.py").read_text()
    dists = {
        "aiohttp": "aiohttp",
        "aiohttp_cors": "aiohttp-cors",
        "grpc": "grpcio",
        "opencensus": "opencensus",
        "opentelemetry": "opentelemetry-sdk",
        "prometheus_client": "prometheus-client",
        "pydantic": "pydantic",
    }
    imported = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imported <= set(dists), imported
    assert {dists[m] for m in imported} <= names


def test_pyautoattacks_sample_model_is_dropped_and_its_package_still_installs(tmp_path):
    kit = load_kit()
    wheel = tiny_wheel(
        tmp_path,
        "pyautoattack",
        [],
        {
            "pyautoattack/examples/model_test.pt": (b"x" * 200_000, 0o644),
            "pyautoattack/autoattack.py": (b"class AutoAttack: pass\n", 0o644),
        },
    )
    kit.repack_kit(tmp_path)
    assert record_matches(wheel)
    done = pip(
        "install", "--quiet", "--no-deps", "--no-index", "--no-compile", "--target", str(tmp_path / "t"), str(wheel)
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t" / "pyautoattack" / "autoattack.py").is_file()
    assert not (tmp_path / "t" / "pyautoattack" / "examples").exists()


def test_the_machine_stand_ins_resolve_its_versions_and_nothing_else(tmp_path):
    kit = load_kit()
    packages = kit.machine_packages()
    assert packages["torch"] == "2.11.0" and "ray" not in packages and "gymnasium" not in packages
    stubs, folder = tmp_path / "stubs", tmp_path / "kit"
    folder.mkdir()
    kit.write_stubs(stubs, {k: v for k, v in packages.items() if k in ("torch", "numpy", "pandas")})
    fits = tiny_wheel(folder, "fits", ["torch>=2.11", "numpy>=2", "pandas"])
    newer = tiny_wheel(folder, "newer", ["torch>=2.12"])
    absent = tiny_wheel(folder, "absent", ["ray"])
    (tmp_path / "target").mkdir()
    assert kit.resolve(folder, stubs, [str(fits)], tmp_path / "target").returncode == 0
    assert kit.resolve(folder, stubs, [str(newer)], tmp_path / "target").returncode != 0
    assert kit.resolve(folder, stubs, [str(absent)], tmp_path / "target").returncode != 0


@LONG  # downloads about 90 MB from the package registries (120 with rdkit); about 1 to 5 minutes
@pytest.mark.slow
def test_device_kit_sh_writes_a_kit_under_60_mib_that_resolves_offline(tmp_path):
    """The kit (plus this tree) under 60 MiB, Ray without its jars, pyautoattack without its
    sample model, seagram's smoke split cached in it, kit.json naming what it relies on; rdkit
    only where asked (--mol-kit); the offline resolution passes."""
    kit_dir, mol, stubs = tmp_path / ".kit", tmp_path / ".kit-mol", tmp_path / ".kit-stubs"
    built = subprocess.run(
        [
            "bash",
            str(REPO / "benchmarks" / "device_kit.sh"),
            "--kit",
            str(kit_dir),
            "--mol-kit",
            str(mol),
            "--stubs",
            str(stubs),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PY": sys.executable},
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheels = sorted(kit_dir.glob("*.whl"))
    size_mib = sum(w.stat().st_size for w in wheels) / 2**20
    print(f".kit: {len(wheels)} wheels, {size_mib:.1f} MiB")
    assert size_mib <= 60
    names = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
    assert {"ray", "raylab", "gymnasium", "ale-py"} <= names and not names & {"torch", "numpy", "rdkit"}
    assert [w.name.split("-")[0] for w in mol.glob("*.whl")] == ["rdkit"]
    ray_wheel = next(w for w in wheels if w.name.startswith("ray-"))
    assert record_matches(ray_wheel)
    assert not any(n.startswith("ray/jars/") or n.endswith(".js.map") for n in zipfile.ZipFile(ray_wheel).namelist())
    attack = next(w for w in wheels if w.name.startswith("pyautoattack-"))
    assert record_matches(attack) and attack.stat().st_size < 2**20
    meta = json.loads((kit_dir / "kit.json").read_text())
    assert sorted(meta["wheels"]) == sorted(w.name for w in wheels) and "torch" in meta["machine_packages"]
    assert [p.name for p in sorted((kit_dir / "seagram-cache").glob("*.npz"))] == [
        k + ".npz" for k in meta["seagram_cache"]
    ]
    assert "google-api-core" in meta["not_carried"] and "google-api-core" not in names
    # the resolution check, as a user runs it: offline, the kit and the machine's stand-ins only
    check = pip(
        "install",
        "--dry-run",
        "--no-index",
        "--find-links",
        str(kit_dir),
        "--find-links",
        str(stubs),
        "--python-version",
        "3.12",
        "--only-binary=:all:",
        "--target",
        str(tmp_path / "T"),
        "-c",
        str(REPO / "benchmarks" / "gpu_machine_constraints.txt"),
        *map(str, wheels),
    )
    assert check.returncode == 0, check.stderr[-3000:]
    assert "Would install" in check.stdout


def test_the_kits_raylab_wheel_asks_the_gpu_machines_torch_and_no_workload_package(tmp_path):
    """``build_raylab_wheel`` (offline: pip wheel --no-deps) applies ``KIT_EDITS`` to this
    pyproject.toml: the wheel's core requirements take torch 2.11, Ray without its dashboard
    extra, and no workload package (those sit behind the workloads' extras)."""
    wheel = load_kit().build_raylab_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line.split(":", 1)[1].strip()
            for line in zf.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    core = [r for r in requires if "extra ==" not in r]
    assert "torch>=2.11" in core and "ray[rllib,train,tune]==2.60.*" in core, core
    assert not any(
        r.split("[")[0].split(">")[0].split("=")[0].strip() in ("rdkit", "torch-geometric", "gymnasium", "ale-py")
        for r in core
    ), core
    assert any(r.startswith("rdkit") and 'extra == "seagram"' in r for r in requires), requires


def test_a_kit_wheel_outside_another_packages_pin_is_named_for_replacement():
    """pip's conflict lines, in both forms it prints them: a requirement of the kit's own list
    ("The user requested gymnasium", satisfied by no wheel in the kit) against Ray's pin, and
    two packages' pins of one dependency."""
    kit = load_kit()
    user = (
        "ERROR: Cannot install gymnasium and ray[rllib,train,tune]==2.60.0 because these "
        "package versions have conflicting dependencies.\n\nThe conflict is caused by:\n"
        "    The user requested gymnasium\n"
        '    ray[rllib,train,tune] 2.60.0 depends on gymnasium==1.2.2; extra == "rllib"\n'
    )
    assert kit.conflicting(user) == ("gymnasium", "gymnasium==1.2.2")
    pins = "The conflict is caused by:\n    ray 2.60.0 depends on click>=7.0\n    typer 0.12 depends on click<8.2\n"
    assert kit.conflicting(pins) == ("click", "click>=7.0,<8.2")
    assert kit.conflicting("ERROR: something else\n") is None
