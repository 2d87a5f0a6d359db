"""The GPU image and the container Ray starts for it: one CUDA stack, `--gpus all` in the
`docker run` line Ray's own code builds from cluster/gpu.yaml, and a node check that names a
driver older than torch's CUDA needs.

Ray's DockerCommandRunner (autoscaler/_private/command_runner.py) and the autoscaler's
per-node-type docker merge (StandardAutoscaler._get_node_specific_docker_config) run as they
would on each node type of gpu.yaml after Ray's own prepare_config; only the SSH runner under
them is a recorder that answers the host's questions (docker present, no container yet, the
image's HOME, `docker info` without the nvidia runtime, /proc/meminfo). No Docker runs here.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
import types
from pathlib import Path

import pytest
import yaml
from scenarios.clusters.dockerfile_steps import steps

from raylab.cluster import node_gpu

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = REPO / "cluster" / "gpu.yaml"
DOCKERFILE = REPO / "cluster" / "Dockerfile"
LOCK = REPO / "cluster" / "lock" / "gpu-py311.txt"


def prepared_config(config: dict | None = None) -> dict:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(config or yaml.safe_load(GPU_YAML.read_text()))
    validate_config(config)
    return config


def docker_run_line(config: dict, node_type: str, monkeypatch, runtimes: str = "map[runc:{}]") -> str:
    """The `docker run` command Ray issues on a fresh node of ``node_type``."""
    from ray.autoscaler._private.autoscaler import StandardAutoscaler
    from ray.autoscaler._private.command_runner import DockerCommandRunner, SSHCommandRunner
    from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

    fake = types.SimpleNamespace(
        config=config,
        available_node_types=config["available_node_types"],
        provider=types.SimpleNamespace(node_tags=lambda node_id: {TAG_RAY_USER_NODE_TYPE: node_type}),
    )
    fake._get_node_type_specific_fields = functools.partial(StandardAutoscaler._get_node_type_specific_fields, fake)
    docker_config = StandardAutoscaler._get_node_specific_docker_config(fake, "node-1")
    issued = []

    def run(self, cmd=None, with_output=False, **kwargs):
        issued.append(cmd)
        answers = {
            "command -v": b"/usr/bin/docker",
            "docker inspect -f '{{.State.Running}}'": b"Error: No such object",
            ".Config.Env": b'["PATH=/usr/bin", "HOME=/home/ray"]',
            "info -f": runtimes.encode(),
            "/proc/meminfo": b"MemAvailable:   15000000 kB",
        }
        return next((out for key, out in answers.items() if key in (cmd or "")), b"")

    monkeypatch.setattr(SSHCommandRunner, "run", run)
    runner = DockerCommandRunner(
        docker_config,
        log_prefix="",
        node_id="node-1",
        provider=fake.provider,
        auth_config=config["auth"],
        cluster_name=config["cluster_name"],
        process_runner=None,
        use_internal_ip=True,
    )
    runner.run_init(as_head=node_type == config["head_node_type"], file_mounts={"~/raylab": "."}, sync_run_yet=True)
    (line,) = [c for c in issued if c and re.match(r"docker run ", c)]
    return line


def test_gpu_node_types_pass_gpus_all_in_the_docker_run_line_ray_builds(monkeypatch):
    config = prepared_config()
    for name, node_type in config["available_node_types"].items():
        line = docker_run_line(config, name, monkeypatch)
        assert config["docker"]["image"] in line and "--ulimit nofile=65536:65536" in line, line
        gpu = node_type["resources"].get("GPU", 0) > 0
        assert ("--gpus all" in line) == gpu, (name, line)
        assert "--runtime=nvidia" not in line  # `docker info` listed no nvidia runtime


def test_without_the_node_types_option_ray_passes_no_gpu_flag(monkeypatch):
    """Control: gpu.yaml less the GPU types' docker block gives a `docker run` with no GPU
    option when the host's docker lists no nvidia runtime (Ray's runtime detection is all)."""
    raw = yaml.safe_load(GPU_YAML.read_text())
    for node_type in raw["available_node_types"].values():
        node_type.pop("docker", None)
    config = prepared_config(raw)
    line = docker_run_line(config, "gpu_small", monkeypatch)
    assert "--gpus" not in line and "--runtime=nvidia" not in line
    detected = docker_run_line(config, "gpu_small", monkeypatch, runtimes="map[nvidia:{nvidia-container-runtime}]")
    assert "--runtime=nvidia" in detected


def lock_cuda_major() -> int:
    """The CUDA major of torch's CUDA libraries in the GPU lock (its nvidia-cuda-runtime pin)."""
    (pin,) = re.findall(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+)\.", LOCK.read_text(), re.M)
    return int(pin)


def image_cuda_major(tag: str) -> int | None:
    """The CUDA major a rayproject/ray tag brings (``-cu128`` -> 12, ``-gpu`` -> 12, the alias
    of Ray 2.x's default CUDA 12 build); None for the CPU base (``-cpu`` or no platform)."""
    platform = tag.rsplit(":", 1)[1].split("@")[0].split("-")[-1]
    if platform == "gpu":
        return 12
    found = re.fullmatch(r"cu(\d\d)\d", platform)
    return int(found.group(1)) if found else None


def test_the_image_has_one_cuda_stack_torchs():
    """The Dockerfile's base brings no CUDA or the one torch's wheels pin; a CPU base sets the
    NVIDIA container toolkit's variables; `pip check` runs; gpu.yaml runs the same base."""
    assert lock_cuda_major() == 13
    assert re.search(r"^torch==2\.13\.0$", LOCK.read_text(), re.M)
    recipe = steps(DOCKERFILE)
    base = next(arg for word, arg in recipe if word == "FROM")
    cuda = image_cuda_major(base)
    assert cuda in (None, lock_cuda_major()), base
    if cuda is None:
        env = dict(pair.split("=", 1) for word, arg in recipe if word == "ENV" for pair in arg.split())
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
        # the container toolkit's driver check asks for torch's CUDA, not an older one
        assert env["NVIDIA_REQUIRE_CUDA"] == f"cuda>={lock_cuda_major()}.0"
    assert ("RUN", "pip check") in recipe
    assert yaml.safe_load(GPU_YAML.read_text())["docker"]["image"] == base


def test_the_old_base_is_two_cuda_stacks():
    """Control: Ray's -gpu tag is a CUDA 12 base under torch's CUDA 13 libraries."""
    assert image_cuda_major("rayproject/ray:2.60.0-py311-gpu") == 12 != lock_cuda_major()
    assert image_cuda_major("rayproject/ray:2.60.0-py311-cu130") == 13
    assert image_cuda_major("rayproject/ray:2.60.0-py311-cpu") is None


@pytest.mark.parametrize(
    "driver, cuda, refused",
    [
        ("550.54.15", "13.0", True),  # the CUDA 12.4 generation's driver under torch's CUDA 13
        ("575.57.08", "13.0", True),
        ("580.65.06", "13.0", False),  # the floor itself
        ("590.44.01", "13.0", False),
        ("535.104.05", "12.4", False),  # CUDA 12 builds run from 525.60.13 (minor-version compatibility)
        ("520.61.05", "12.1", True),
        (None, "13.0", False),  # unknown: the device check decides
        ("550.54.15", None, False),  # CPU torch
    ],
)
def test_driver_floor_against_hand_cases(driver, cuda, refused):
    problem = node_gpu.driver_problem(driver, cuda, "torch 2.13.0")
    assert bool(problem) == refused, problem
    if refused:
        floor = {"13": "580.65.06", "12": "525.60.13"}[cuda.split(".")[0]]
        assert driver in problem and f"CUDA {cuda}" in problem and f"{floor} or newer" in problem


def test_the_node_check_names_an_old_driver(tmp_path, monkeypatch, capsys):
    """The module's main with a stand-in nvidia-smi reporting driver 550.54.15 and torch
    reporting a CUDA 13.0 build: exit 1, one line naming this host, the driver, torch's CUDA and
    the floor."""
    import torch

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 550.54.15\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert node_gpu.read_driver() == "550.54.15"
    assert node_gpu.main() == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{socket.gethostname()}: NVIDIA driver 550.54.15 is older than torch ")
    assert "CUDA 13.0" in line and "580.65.06 or newer" in line
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 580.95.05\n")
    assert node_gpu.main() == 1  # a new enough driver: now torch's missing device is the problem
    assert "torch sees no CUDA device" in capsys.readouterr().err
    assert sys.modules["raylab.cluster.node_gpu"] is node_gpu
