"""The GPU speed options, checked where a CPU can check them (``raylab/accel.py``).

- bf16 autocast and channels_last, as config of every image workload, take effect inside the
  real train loop: a forward pre-hook on the network sees the input's memory format and the
  autocast state of every call (training calls: bf16 and NHWC; evaluation: float32);
- host-to-device copies of batches made on the host go pinned and ``non_blocking`` when the
  device is CUDA (``torch.Tensor.pin_memory``/``to`` patched: no CUDA here), and every other
  ``.to(device)``/``.cuda()`` in ``trainers/`` and ``raylab/`` is on a reviewed list of
  copies made once (setup, restore, a report), so a new per-step copy fails here;
- ``compile: true`` falls back to eager mode with one warning line when ``torch.compile``
  raises, or when the compiled module raises at its first call, and the trial trains.
"""

from __future__ import annotations

import ast
import math
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from raylab import accel

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- channels_last and bf16


def recording(build, calls: list):
    """``build`` with a forward pre-hook noting, for each call of the network: training mode,
    NHWC input, autocast on the CPU and its dtype, NHWC first conv weight."""

    def make(*args, **kwargs):
        net = build(*args, **kwargs)
        conv = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d))

        def hook(module, inputs):
            x = inputs[0]
            calls.append(
                {
                    "training": module.training,
                    "nhwc_input": x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last),
                    "autocast": torch.is_autocast_enabled("cpu"),
                    "dtype": torch.get_autocast_dtype("cpu"),
                    "nhwc_weight": conv.weight.is_contiguous(memory_format=torch.channels_last),
                }
            )

        net.register_forward_pre_hook(hook)
        return net

    return make


FAIR_ADV = [
    "config.method=pgd_at",
    "config.epochs=1",
    "config.lr_milestones=[1]",
    "config.autoattack='off'",
    "stop.train/epoch=1",
    "config.synthetic_train=160",
    "config.val_size=40",
    "config.eval_size=40",
    "config.final_eval_size=20",
]
BACKDOOR = ["config.epochs=1", "config.early_epochs=0", "config.finetune_epochs=0", "config.model_width=8"]


def run_recorded(name: str, on: bool, local_trial, monkeypatch, trial_dir: Path) -> tuple[list, list]:
    calls: list = []
    flags = [f"config.amp_bf16={str(on).lower()}", f"config.channels_last={str(on).lower()}"]
    if name == "fair_adv":
        import trainers.fair_adv.loop as loop

        monkeypatch.setattr(loop, "build_model", recording(loop.build_model, calls))
        rows = local_trial("fair_adv", *FAIR_ADV, *flags, trial_dir=trial_dir)
    else:
        import trainers.backdoor.loop as loop

        model = "preact_resnet18"
        monkeypatch.setitem(loop.MODELS, model, recording(loop.MODELS[model], calls))
        rows = local_trial("backdoor", *BACKDOOR, f"config.model={model}", *flags, trial_dir=trial_dir)
    return calls, rows


@pytest.mark.parametrize("name", ["fair_adv", "backdoor"])
def test_bf16_and_channels_last_take_effect_in_the_training_steps(name, local_trial, monkeypatch, one_thread, tmp_path):
    off, rows_off = run_recorded(name, False, local_trial, monkeypatch, tmp_path / "off")
    off = list(off)  # the second run wraps the first's recorder, whose list would grow on
    on, rows_on = run_recorded(name, True, local_trial, monkeypatch, tmp_path / "on")
    train_off = [c for c in off if c["training"]]
    train_on = [c for c in on if c["training"]]
    assert train_off and train_on
    # control: the defaults train in float32, NCHW
    assert not any(c["autocast"] or c["nhwc_input"] or c["nhwc_weight"] for c in train_off), [
        c for c in train_off if c["autocast"] or c["nhwc_input"] or c["nhwc_weight"]
    ][:1]
    # on: every training call under bf16 autocast with NHWC input and weights
    assert all(
        c["autocast"] and c["dtype"] == torch.bfloat16 and c["nhwc_input"] and c["nhwc_weight"] for c in train_on
    ), train_on[0]
    # evaluations stay float32
    assert not any(c["autocast"] for c in on if not c["training"])
    for rows in (rows_off, rows_on):
        losses = [r["train/loss"] for r in rows if "train/loss" in r]
        assert losses and all(math.isfinite(v) for v in losses), losses


# ---------------------------------------------------------------- host-to-device copies


@pytest.fixture
def copies(monkeypatch):
    """Patched ``pin_memory`` and ``to``: a CUDA copy noted, not made (there is no CUDA here)."""
    seen = {"pinned": 0, "to": []}
    to = torch.Tensor.to

    def pin_memory(self, *args, **kwargs):
        seen["pinned"] += 1
        return self

    def fake_to(self, *args, **kwargs):
        target = next((a for a in args if isinstance(a, (torch.device, str))), kwargs.get("device"))
        if target is not None and torch.device(target).type == "cuda":
            seen["to"].append(kwargs.get("non_blocking", False))
            dtype = next((a for a in args if isinstance(a, torch.dtype)), None)
            return self if dtype is None else to(self, dtype)
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    return seen


def test_to_device_pins_and_does_not_block_on_cuda_only(copies):
    x = torch.arange(6)
    assert accel.to_device(x, torch.device("cpu")) is x and copies == {"pinned": 0, "to": []}
    out = accel.to_device(x, torch.device("cuda"), torch.float32)
    assert copies == {"pinned": 1, "to": [True]} and out.dtype == torch.float32


def test_dqn_replay_batches_go_pinned_and_non_blocking_when_the_device_is_cuda(copies):
    from trainers.dqn_softlinf import loop

    run = types.SimpleNamespace(device=torch.device("cuda"), envs=types.SimpleNamespace(obs_shape=(4,)))
    window = np.stack([np.zeros((8, 4), np.float32), np.ones((8, 4), np.float32)], 1)  # (s, s') rows
    sample = {
        "window": window,
        "obs": window[:, :1],
        "next_obs": window[:, 1:],
        "action": np.zeros(8, np.int64),
        "reward": np.zeros(8, np.float32),
        "done": np.zeros(8, bool),
    }
    batch = loop.to_batch(run, sample)
    assert copies == {"pinned": 2, "to": [True] * 2}  # the window and one (action, reward, done) array
    assert batch["action"].dtype == torch.long and batch["done"].dtype == torch.float32


# every .to(<device>) / .cuda() in trainers/ and raylab/ outside raylab.accel.to_device, by
# file::function (a device is ``device``, ``dev``, ``device()`` or any ``<expr>.device``): each
# copies once (setup, a whole dataset, a restore), at a report or an epoch, or per step only a
# few bytes drawn by a CPU generator (so that a seed gives the same draws on every device) and
# a trigger pattern; a ``.to(y.device)`` of a tensor already there copies nothing. A new one
# fails the test until it is reviewed here (or goes through to_device).
REVIEWED = {
    "trainers/backdoor/loop.py::build_data": (1, "the whole dataset, once"),
    "trainers/backdoor/loop.py::neuron_report": (1, "random neurons' indices, at a report"),
    "trainers/backdoor/loop.py::poisoned_training": (1, "an epoch's order"),
    "trainers/backdoor/loop.py::clean_finetuning": (2, "the fine-tuning subset's indices and an epoch's order"),
    "trainers/backdoor/attack.py::blended": (1, "the trigger image, once per poisoning of a set"),
    "trainers/backdoor/attack.py::wanet": (1, "the warping grid, once per poisoning of a set"),
    "trainers/backdoor/attack.py::wanet_noise": (2, "the grid and per-image noise of a set's noise-mode images"),
    "trainers/backdoor/wanet.py::poison_batch": (
        2,
        "per step: the grid (2 x H x W floats) and the cross images' noise from the CPU generator",
    ),
    "trainers/dqn_softlinf/shared_states.py::targets": (
        5,
        "the shared state set's states and K successors, at a report",
    ),
    "trainers/fair_adv/loop.py::autoattack_predictions": (1, "AutoAttack's predictions, once at the end"),
    "trainers/fair_adv/metrics.py::evaluate": (2, "predictions to the labels' device: already there"),
    "raylab/data/augment.py::random_crop_flip": (2, "per step: B crop offsets and flips from the CPU generator"),
    "trainers/boltz_distill/teacher/boltz2.py::__init__": (1, "the teacher model, once"),
    "trainers/boltz_distill/teacher/boltz2.py::embed": (1, "one teacher call per molecule set"),
    "trainers/boltz_distill/loop.py::init_training": (1, "the model, once"),
    "trainers/boltz_distill/loop.py::distill": (2, "target statistics, once"),
    "trainers/boltz_distill/loop.py::train_loop": (2, "target statistics, once"),
    "trainers/dqn_softlinf/heldout.py::q_values": (1, "the held-out probe, at a report"),
    "trainers/dqn_softlinf/heldout.py::residuals": (6, "the held-out probe, at a report"),
    "trainers/dqn_softlinf/loop.py::load_state_dict": (1, "the restored probe, once"),
    "trainers/dqn_softlinf/loop.py::build_run": (1, "the Q-network, once"),
    "trainers/dqn_softlinf/loop.py::q_on_all_states": (1, "exact model probe, at a report"),
    "trainers/fair_adv/loop.py::build_trial": (9, "the whole dataset and model, once"),
    "trainers/fair_adv/step.py::train_epoch": (1, "an epoch's order"),
    "trainers/seagram/attack.py::_to": (1, "a classifier's labelled set, once per round"),
    "trainers/seagram/attack.py::first_order_gain": (1, "an attack's candidate graphs"),
    "trainers/seagram/attack.py::noncritical_prob": (1, "an active-learning round"),
    "trainers/seagram/attack.py::train_classifier": (2, "once per round; an epoch's order"),
    "trainers/seagram/loop.py::build_trial": (2, "the models, once"),
    "raylab/session.py::prepare_model": (1, "the model, once"),
    "raylab/checkpoint.py::_moved": (
        1,
        "fields declared on_device, once at a restore (backdoor's ablated neurons, fair_adv's FRL multipliers)",
    ),
    "trainers/boltz_distill/batches.py::__init__": (1, "the graph bank, once, without pinning"),
    "trainers/seagram/batches.py::__init__": (1, "the training pairs' bank, once, without pinning"),
}
DEVICE_NAMES = {"device", "dev", "device()"}


def names_a_device(arg: ast.expr) -> bool:
    """``device``, ``dev``, ``device()`` or any ``<expr>.device`` (``run.device``, ``t.device``)."""
    text = ast.unparse(arg)
    return text in DEVICE_NAMES or text.endswith(".device")


def device_copies(root: Path) -> dict[str, int]:
    """file::function -> its calls ``x.to(<a device>, ...)`` and ``x.cuda()``."""
    found: dict[str, int] = {}
    for top in ("trainers", "raylab"):
        for path in sorted((root / top).rglob("*.py")):
            if path.name == "accel.py":
                continue

            def visit(node, function):
                for child in ast.iter_child_nodes(node):
                    inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
                    if (
                        isinstance(child, ast.Call)
                        and isinstance(child.func, ast.Attribute)
                        and (
                            child.func.attr == "cuda"
                            or (child.func.attr == "to" and child.args and names_a_device(child.args[0]))
                        )
                    ):
                        key = f"{path.relative_to(root)}::{function}"
                        found[key] = found.get(key, 0) + 1
                    visit(child, inner)

            visit(ast.parse(path.read_text()), "<module>")
    return found


def test_every_host_to_device_copy_outside_to_device_is_reviewed(tmp_path):
    found = device_copies(REPO)
    assert found == {k: n for k, (n, _) in REVIEWED.items()}
    # control: a planted per-step copy in a loop is found
    planted = tmp_path / "trainers" / "planted"
    planted.mkdir(parents=True)
    (planted / "loop.py").write_text("def step(x, device):\n    return x.to(device) + x.cuda()\n")
    assert device_copies(tmp_path) == {"trainers/planted/loop.py::step": 2}


def test_the_per_step_copies_go_through_to_device():
    """The tensors made on the host every step: dqn's replay sample and acting input, and the
    indices seagram's and boltz_distill's batches are gathered by on the device."""
    for path, function in [
        ("trainers/dqn_softlinf/loop.py", "to_batch"),
        ("trainers/dqn_softlinf/loop.py", "to_obs"),
        ("trainers/dqn_softlinf/loop.py", "greedy"),
        ("trainers/seagram/batches.py", "sample"),
        ("trainers/boltz_distill/batches.py", "batch"),
    ]:
        tree = ast.parse((REPO / path).read_text())
        fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
        names = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert "to_device" in names, (path, function)


def test_cudnn_benchmark_is_set_on_cuda_only(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    accel.fixed_shapes(torch.device("cpu"))
    assert torch.backends.cudnn.benchmark is False
    accel.fixed_shapes(torch.device("cuda"))
    assert torch.backends.cudnn.benchmark is True


# ---------------------------------------------------------------- torch.compile fallback


def test_compile_failure_at_the_first_call_falls_back_to_eager(monkeypatch, capsys):
    def failing_compile(module, *args, **kwargs):
        def compiled(*a, **k):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

        return compiled

    monkeypatch.setattr(torch, "compile", failing_compile)
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    fwd = accel.compiled(net, True, "test net")
    opt = torch.optim.SGD(fwd.parameters(), lr=0.1)
    x = torch.randn(32, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    losses = []
    for _ in range(60):
        loss = (fwd(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    err = capsys.readouterr().err.strip().splitlines()
    assert fwd.eager and len(err) == 1 and "torch.compile of the test net failed" in err[0], err
    assert losses[-1] < 0.5 * losses[0]  # it trains
    assert set(fwd.state_dict()) == {f"module.{k}" for k in net.state_dict()}
    assert accel.compiled(net, False) is net


def test_compile_failure_falls_back_and_the_trial_trains(monkeypatch, local_trial, capfd, one_thread):
    def raising_compile(*args, **kwargs):
        raise RuntimeError("torch.compile is not supported on this machine")

    monkeypatch.setattr(torch, "compile", raising_compile)
    rows = local_trial("fair_adv", *FAIR_ADV, "config.compile=true")
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "torch.compile" in ln]
    assert lines == [
        "raylab: warning: torch.compile of the fair_adv network failed (RuntimeError: "
        "torch.compile is not supported on this machine); running it eagerly"
    ]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert losses and all(math.isfinite(v) for v in losses)
