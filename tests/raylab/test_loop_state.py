"""A loop's state in one list: ``raylab.checkpoint.LoopState`` saves every field and restores
every field, and a checkpoint that lacks one is refused by name."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from raylab import checkpoint as ckpt
from raylab.checkpoint import GlobalRNG, LoopState, on_device, saved_only


@dataclass
class State(LoopState):
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    gen: torch.Generator
    np_gen: np.random.Generator
    rng: GlobalRNG = field(default_factory=GlobalRNG)
    step: int = 0
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    latest: dict = field(default_factory=dict)
    best: torch.Tensor | None = None
    config: dict = saved_only()


def fresh(seed: int = 0) -> State:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    return State(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        torch.Generator().manual_seed(seed),
        np.random.default_rng(seed),
        config={"lr": 0.1},
    )


def advance(st: State) -> None:
    loss = st.model(torch.randn(4, 3, generator=st.gen)).square().sum()
    loss.backward()
    st.optimizer.step()
    st.step += 1
    st.rows = np.vstack([st.rows, st.np_gen.integers(0, 9, (1, 2))])
    st.latest["loss"] = loss.item()
    st.best = st.model.weight.detach().clone()


def draws(st: State) -> tuple:
    return (
        torch.rand(2, generator=st.gen).tolist(),
        st.np_gen.random(),
        random.random(),
        torch.rand(1).item(),
        np.random.rand(),
    )


def test_every_field_round_trips_through_a_checkpoint(tmp_path):
    st = fresh()
    for _ in range(3):
        advance(st)
    ckpt.save(tmp_path / "c", st.state_dict())
    expected = draws(st)

    other = fresh(seed=1)  # different weights, generators and counters until restored
    other.config = {"lr": 0.5}
    other.load_state_dict(ckpt.load(tmp_path / "c"))
    assert draws(other) == expected  # every generator, global ones too, continues where it was
    assert other.step == 3 and other.latest == st.latest and isinstance(other.rows, np.ndarray)
    assert np.array_equal(other.rows, st.rows) and torch.equal(other.best, st.best)
    assert all(torch.equal(a, b) for a, b in zip(other.model.parameters(), st.model.parameters()))
    assert other.optimizer.state_dict()["state"][0]["momentum_buffer"].shape == (2, 3)
    assert other.config == {"lr": 0.5}  # saved for readers, not restored
    assert ckpt.load(tmp_path / "c")["config"] == {"lr": 0.1}


def test_a_key_missing_from_the_checkpoint_is_refused_by_name_before_anything_changes():
    saved = fresh().state_dict()
    del saved["step"], saved["latest"]
    st = fresh(seed=1)
    before = st.model.weight.detach().clone()
    with pytest.raises(KeyError, match=r"State: the checkpoint has no 'step', 'latest'"):
        st.load_state_dict(saved)
    assert torch.equal(st.model.weight, before)
    del saved["config"]  # a saved-only field may be absent
    saved |= {"step": 0, "latest": {}}
    st.load_state_dict(saved)


def test_saved_tensors_are_on_the_cpu_and_unknown_keys_are_left_alone():
    st = fresh()
    st.latest = {"t": torch.ones(2), "nested": [torch.zeros(1)]}
    saved = st.state_dict()
    assert set(saved) == {"model", "optimizer", "gen", "np_gen", "rng", "step", "rows", "latest", "best", "config"}
    assert saved["latest"]["t"].device.type == "cpu" and isinstance(saved["rows"], torch.Tensor)
    fresh(seed=1).load_state_dict({**saved, "from_an_older_loop": 1})


def test_the_toy_loop_keeps_its_state_in_one_list():
    """A workload's own state class: a key its checkpoint lacks is caught on restore."""
    from trainers.toy.loop import ToyState

    model = torch.nn.Linear(2, 1)
    st = ToyState(model, torch.optim.SGD(model.parameters(), lr=0.1), config={})
    saved = st.state_dict()
    assert {"model", "optimizer", "rng", "step", "loss", "resumed_from_step", "config"} <= set(saved)
    del saved["loss"]
    with pytest.raises(KeyError, match="'loss'"):
        ToyState(model, torch.optim.SGD(model.parameters(), lr=0.1)).load_state_dict(saved)


@dataclass
class Placed(LoopState):
    top: torch.Tensor | None = on_device()
    lam: dict = on_device(default_factory=dict)
    kept: torch.Tensor | None = None


def test_load_state_dict_moves_the_on_device_fields_to_the_device_it_is_given():
    """``device=`` puts the ``on_device()`` fields' tensors (nested ones too) on that device (the
    meta device stands in for a GPU here) and leaves every other field on the CPU."""
    saved = Placed(torch.arange(3), {"nat": torch.zeros(2), "pair": [torch.ones(1)]}, torch.ones(2)).state_dict()
    assert saved["top"].device.type == "cpu" and saved["lam"]["nat"].device.type == "cpu"
    st = Placed()
    st.load_state_dict(saved, device=torch.device("meta"))
    assert st.top.device.type == "meta"
    assert st.lam["nat"].device.type == "meta" and st.lam["pair"][0].device.type == "meta"
    assert st.kept.device.type == "cpu"  # not declared on_device: restored as saved
    st = Placed()
    st.load_state_dict(saved)  # no device: restored as saved
    assert st.top.device.type == "cpu" and torch.equal(st.top, torch.arange(3))
    st = Placed()
    st.load_state_dict({**saved, "top": None}, device="meta")  # None stays None
    assert st.top is None
