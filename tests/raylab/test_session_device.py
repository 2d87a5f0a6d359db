"""session.device(): a trial that reserved a GPU (a Ray Train worker, or a single-worker Tune
trial) gets it, and never trains on the CPU silently."""

from __future__ import annotations

import pytest
import ray.train.torch
import torch

from raylab import session


@pytest.fixture
def train_worker(monkeypatch):
    """This process as a Ray Train worker that Ray gave ``cuda:0``, on a node without CUDA."""
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("RAYLAB_SIMULATED_GPUS", raising=False)
    session.start(backend="train")
    yield
    session.start()


def test_a_reserved_gpu_without_cuda_is_one_line_naming_the_node(train_worker, monkeypatch):
    import ray

    class Context:
        def get_node_id(self):
            return "abcdef0123456789ffff"

    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context())
    with pytest.raises(session.GPUUnavailableError) as error:
        session.device()
    message = str(error.value)
    assert "\n" not in message and "abcdef012345" in message and "sees no CUDA device" in message


def test_a_simulated_cluster_says_so_and_trains_on_the_cpu(train_worker, monkeypatch):
    monkeypatch.setenv("RAYLAB_SIMULATED_GPUS", "1")
    assert session.device() == torch.device("cpu")


def test_a_cpu_worker_and_a_real_gpu_get_what_ray_assigned():
    assert session.checked_device(torch.device("cpu"), False, node="n") == torch.device("cpu")
    assert session.checked_device(torch.device("cuda", 0), True, node="n") == torch.device("cuda", 0)


@pytest.fixture
def tune_trial(monkeypatch):
    """This process as a single-worker Tune trial (the Tune path) that Ray gave GPU 3: Ray
    narrowed ``CUDA_VISIBLE_DEVICES`` to it, so torch sees it as ``cuda:0``."""
    monkeypatch.setattr(session, "reserved_gpus", lambda: ["3"])
    monkeypatch.delenv("RAYLAB_SIMULATED_GPUS", raising=False)
    session.start(backend="tune")
    yield
    session.start()


def test_a_tune_trial_that_reserved_a_gpu_trains_on_it(tune_trial, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert session.device() == torch.device("cuda", 0)


def test_a_tune_trial_that_reserved_a_gpu_without_cuda_is_refused(tune_trial, monkeypatch):
    import ray

    class Context:
        def get_node_id(self):
            return "0123456789abcdef0000"

    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(session.GPUUnavailableError, match="sees no CUDA device"):
        session.device()
    monkeypatch.setenv("RAYLAB_SIMULATED_GPUS", "1")  # a simulated cluster's GPUs are labels
    assert session.device() == torch.device("cpu")


def test_a_tune_trial_without_a_gpu_trains_on_the_cpu(monkeypatch):
    monkeypatch.setattr(session, "reserved_gpus", lambda: [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU node: not this trial's
    session.start(backend="tune")
    try:
        assert session.device() == torch.device("cpu")
    finally:
        session.start()


def test_outside_ray_no_gpu_is_reserved_and_ray_is_not_started():
    """In a fresh process (this one may hold the test session's Ray): asking for the reserved
    GPUs outside Ray answers none and does not start a local Ray."""
    import subprocess
    import sys

    code = (
        "import ray; from raylab import session; "
        "assert not ray.is_initialized(); assert session.reserved_gpus() == []; "
        "assert not ray.is_initialized(); print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_ddp_puts_the_model_on_the_checked_device_not_ray_trains_cuda(train_worker, monkeypatch):
    """Two Ray Train workers that reserved (simulated) GPUs: DDP wraps a model on the CPU, where
    Ray Train alone would move it to ``cuda``, which a CPU torch refuses."""
    monkeypatch.setenv("RAYLAB_SIMULATED_GPUS", "1")
    monkeypatch.setattr(session, "world_size", lambda: 2)
    moved = {}
    monkeypatch.setattr(ray.train.torch, "prepare_model", lambda model, move_to_device: moved.update(to=move_to_device))
    session.prepare_model(torch.nn.Linear(2, 1))
    assert moved["to"] == torch.device("cpu")
