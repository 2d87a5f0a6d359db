"""session.device(): a Ray Train worker that reserved a GPU never trains on the CPU silently."""

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
