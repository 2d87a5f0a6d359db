"""``python -m raylab.cluster.node_gpu``: can this node's GPU run the installed torch?

Run by cluster/gpu.yaml's GPU node types at setup and by the KubeRay GPU pods' startup probe
(cluster/kuberay/raycluster.yaml). Exit 0 when the NVIDIA driver is new enough for the CUDA
torch was built with and torch sees a CUDA device; otherwise exit 1 with one line on stderr
that names the host and what is wrong: a driver older than torch's CUDA needs (both versions,
and the floor), or torch seeing no device.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys

CUDA_DRIVER_FLOOR = {13: (580, 65, 6), 12: (525, 60, 13), 11: (450, 80, 2)}
"""The oldest Linux NVIDIA driver that runs an application built with CUDA ``major.x``, by
CUDA's minor-version compatibility (NVIDIA's CUDA Compatibility guide, "Minor Version
Compatibility" table): a CUDA 13 build such as torch 2.13's (the lock's nvidia-cuda-runtime
13.0) needs 580.65.06 or newer; CUDA 12 needed 525.60.13."""


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"580.65.06"`` -> ``(580, 65, 6)``; None when ``text`` holds no dotted number."""
    found = re.search(r"\d+(?:\.\d+)+", text or "")
    return tuple(int(part) for part in found.group(0).split(".")) if found else None


def driver_floor(cuda: str) -> tuple[int, ...] | None:
    """The oldest driver for a CUDA version string (``"13.0"``); None for an unknown major."""
    version = parse_version(cuda)
    return CUDA_DRIVER_FLOOR.get(version[0]) if version else None


def driver_problem(driver: str | None, cuda: str | None, torch_version: str = "torch") -> str:
    """Why a driver cannot run a CUDA build: ``driver < floor(cuda)``; "" when it can, or when
    either version is unknown (the device check then decides)."""
    have, need = parse_version(driver or ""), driver_floor(cuda or "")
    if have is None or need is None or have >= need:
        return ""
    floor = ".".join(f"{part:02d}" if i else str(part) for i, part in enumerate(need))
    return (
        f"NVIDIA driver {driver} is older than {torch_version}'s CUDA {cuda} needs ({floor} or newer); "
        "use a host image with a newer driver (cluster/gpu.yaml's ImageId, the node pool's AMI)"
    )


def read_driver() -> str | None:
    """The first GPU's driver version as ``nvidia-smi`` reports it, or None."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.strip().splitlines()[0] if out.strip() else ""
    return line if parse_version(line) and re.fullmatch(r"[\d.]+", line.strip()) else None


def parser():
    """The command's parser: no options (``--help`` prints what it checks)."""
    import argparse

    return argparse.ArgumentParser(
        prog="python -m raylab.cluster.node_gpu",
        description="Exit 0 when this node's NVIDIA driver is new enough for torch's CUDA and torch sees a device; "
        "otherwise exit 1 with one line naming the host and what is wrong.",
    )


def main() -> int:
    import torch

    host = socket.gethostname()
    problem = driver_problem(read_driver(), torch.version.cuda, f"torch {torch.__version__}")
    if not problem and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
        problem = f"a GPU node type, but torch sees no CUDA device (torch {torch.__version__}, {build})"
    if problem:
        print(f"{host}: {problem}", file=sys.stderr)
        return 1
    print(f"{host}: {torch.cuda.get_device_name(0)}, driver {read_driver()}, torch CUDA {torch.version.cuda}")
    return 0


if __name__ == "__main__":
    parser().parse_args()
    sys.exit(main())
