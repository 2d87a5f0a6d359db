"""A throwaway Python environment for the tutorial's commands: a venv (no pip of its own) that
sees this environment's packages and this checkout, so ``python -m pip install -e .`` installs the
tutorial's package into it, offline, and nowhere else."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def make_env(root: Path) -> dict[str, str]:
    """Create the venv under ``root``; return the environment to run the tutorial's commands in."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # this checkout's raylab first, then every package of the environment running the tests
    shared = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "_tutorial_shared.pth").write_text("\n".join([str(REPO), *sorted(shared)]) + "\n")
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")]),
        "VIRTUAL_ENV": str(venv),
        # offline, with the build backend already here (setuptools from the shared packages)
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    for name in ("RAYLAB_CONFIGS", "PYTHONHOME", "RAY_ADDRESS"):
        env.pop(name, None)
    env["PYTHONPATH"] = str(REPO)
    return env
