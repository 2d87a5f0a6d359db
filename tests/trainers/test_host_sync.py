"""No per-step host sync in the training loops: .item()/.cpu()/.tolist()/float() counted by line.

A device-to-host read (``.item()``, ``.cpu()``, ``.tolist()``, ``float(tensor)``) waits for the
GPU to finish everything queued. Once per report is fine; once per optimizer step stalls the
GPU every step. The test patches those methods of ``torch.Tensor`` to note, for each calling
line, between which training steps (``backward`` calls) it read the device; it runs a
workload's smoke trial in this process (``raylab.train.run_local``) and fails for any line of
``trainers/`` that read in at least 90% of the steps (an evaluation's many reads at a report
fall between two steps only). The positive control is a planted per-step ``.item()``.

Below that, each loop's step (DQN acting and update, fair_adv, backdoor, seagram and
boltz_distill training steps) is traced on fake tensors (``raylab.testing.host_sync``): no
device read, no data-dependent shape, no host tensor beyond a step's one index copy, with
planted controls (a read, a ``nonzero``, a ``bincount``, a mask, a ``torch.tensor``) it must catch.
"""

from __future__ import annotations

import collections
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

LONG = pytest.mark.skipif(
    os.environ.get("RAYLAB_DEVICE_TESTS") != "1", reason="long (minutes, or the network): RAYLAB_DEVICE_TESTS=1 runs it"
)
REPO = Path(__file__).resolve().parents[2]
READS = ("item", "cpu", "tolist", "__float__")
STEP = [0]  # training steps so far, counted by the test's patched backward


@pytest.fixture
def host_reads(monkeypatch):
    """(file, line) -> the step numbers (``STEP[0]``, set by the test) its reads fell in."""
    counts: collections.defaultdict = collections.defaultdict(set)
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            caller = sys._getframe(1)
            path = Path(caller.f_code.co_filename)
            if REPO in path.parents:
                counts[(str(path.relative_to(REPO)), caller.f_lineno)].add(STEP[0])
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


def per_step_lines(counts, steps: int, prefix: str = "trainers/") -> dict:
    """Lines under ``prefix`` that read the device in at least 90% of the steps."""
    return {k: len(v) for k, v in counts.items() if k[0].startswith(prefix) and len(v) >= 0.9 * steps}


def test_positive_control_a_planted_per_step_item_is_flagged(host_reads):
    w = torch.zeros(3, requires_grad=True)
    losses = []
    for step in range(20):
        STEP[0] = step
        loss = (w - 1).pow(2).sum()
        loss.backward()
        losses.append(loss.item())  # planted: one sync per step
        if step % 10 == 9:
            reported = [loss.item() for _ in range(30)]  # many reads, at two reports only
    here = str(Path(__file__).resolve().relative_to(REPO))
    flagged = per_step_lines(host_reads, 20, here)
    assert len(flagged) == 1 and len(reported) == 30, dict(host_reads)


# experiment -> overrides that make many optimizer steps per report (small batches, one epoch)
CASES = {
    "backdoor": [
        "config.early_epochs=0",
        "config.epochs=1",
        "config.synthetic_train_size=256",
        "config.batch_size=8",
        "config.amp_bf16=true",
        "config.channels_last=true",
    ],
    "fair_adv": [
        "config.epochs=2",
        "config.frl_finetune_epochs=1",
        "config.synthetic_train=96",
        "config.batch_size=8",
        "config.lr_milestones=[1]",
    ],
}


@LONG  # two smoke trials in this process: one to four minutes each on two busy cores
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_line_of_the_loop_reads_the_device_every_step(name, host_reads, tmp_path, monkeypatch):
    from raylab import experiment as experiments
    from raylab import train
    from raylab.run_folder import TrialFolder

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    backward = torch.Tensor.backward
    STEP[0] = 0

    def counted_backward(self, *args, **kwargs):
        STEP[0] += 1
        return backward(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", counted_backward)
    exp = experiments.load(name, CASES[name], smoke=True)
    config, _ = train.single_config(exp)
    rows = train.run_local(exp, TrialFolder.at(tmp_path / "trial"), config, verbose=False)
    steps = STEP[0]  # training steps: one backward pass each
    reports = len(rows)
    table = sorted(
        ((len(v), f"{f}:{ln}") for (f, ln), v in host_reads.items() if f.startswith("trainers/")), reverse=True
    )
    print(f"{name}: {steps} steps, {reports} reports; reads by line: {table[:8]}")
    assert steps > 2 * reports, (steps, reports)  # else per-step and per-report reads look alike
    assert not per_step_lines(host_reads, steps), table
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert losses and all(math.isfinite(v) for v in losses), losses  # backdoor: under bf16 autocast


# ------------------------------------------------------------------ every loop's step, traced on fake tensors
# raylab.testing.host_sync runs a step on FakeTensorMode's tensors (no data, no arithmetic: a
# ResNet-18 step in well under a second) under a dispatch mode that flags each operation a GPU
# could not queue: a device read, a data-dependent shape, a tensor made from host data.


def host_flags(build, step, calls: int = 2):
    from raylab.testing.host_sync import trace_step

    traced = trace_step(build, step, calls)
    assert traced.ops > 10, traced.ops  # the step ran (a step that stopped at once would pass too)
    return traced


def test_planted_controls_a_read_a_nonzero_and_a_bincount_are_caught():
    def build():
        return torch.nn.Linear(4, 3), torch.randn(8, 4), torch.randint(0, 3, (8,))

    def clean(p):
        net, x, y = p
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        return loss.detach()

    def plant(extra):
        def step(p):
            loss = clean(p)
            extra(loss, p[2])

        return step

    assert host_flags(build, clean).flags == []  # control: the clean step passes
    for extra, kind, op in (
        (lambda loss, y: loss.item(), "read", "_local_scalar_dense"),
        (lambda loss, y: float(loss), "read", "_local_scalar_dense"),
        (lambda loss, y: torch.nonzero(y), "shape", "nonzero"),
        (lambda loss, y: torch.bincount(y, minlength=3), "shape", "bincount"),
        (lambda loss, y: y[y > 0], "shape", "index"),
        (lambda loss, y: y + torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]), "host", "lift_fresh"),
        (lambda loss, y: y + torch.from_numpy(np.arange(8)), "host", "lift_fresh"),
    ):
        flags = host_flags(build, plant(extra), calls=1).flags
        assert flags and (flags[0].kind, flags[0].op) == (kind, op), flags
        assert flags[0].where.startswith(__file__), flags[0]


def dqn_pieces(loss: str = "soft_linf"):
    """A Pong-shaped Run with the replay on the (fake) device, as build_run makes it there."""
    from types import SimpleNamespace

    from trainers.dqn_softlinf import loop
    from trainers.dqn_softlinf.config import Config
    from trainers.dqn_softlinf.device_replay import DeviceFrameReplay
    from trainers.dqn_softlinf.model import q_network

    cfg = Config(game="Pong", loss=loss, num_envs=4, batch_size=32, buffer_size=4000)
    envs = SimpleNamespace(obs_shape=(4, 84, 84), num_actions=6)
    q = q_network("atari", envs.obs_shape, envs.num_actions)
    target = q_network("atari", envs.obs_shape, envs.num_actions).requires_grad_(False)
    replay = DeviceFrameReplay(cfg.buffer_size, cfg.num_envs, (84, 84), np.uint8, 4)
    replay.count = 500
    replay.count_dev.fill_(500)
    run = loop.Run(
        cfg,
        torch.device("cpu"),
        envs,
        q,
        target,
        q,
        target,
        loop.make_optimizer(cfg, q.parameters()),
        replay,
        None,
        None,
        None,
        None,
        sample_gen=torch.Generator().manual_seed(0),
        act_gen=torch.Generator().manual_seed(1),
    )
    run.sums = {k: torch.zeros(()) for k in ("loss", "q", "ess")}
    return run


@pytest.mark.parametrize("loss", ["soft_linf", "huber"])
def test_dqn_update_has_no_flagged_op(loss):
    from trainers.dqn_softlinf import loop

    traced = host_flags(lambda: dqn_pieces(loss), lambda run: loop.learn(run, loop.sample_batch(run)))
    assert traced.syncs() == [], traced.flags


def test_dqn_acting_on_the_device_has_no_flagged_op_before_its_one_read():
    from trainers.dqn_softlinf import loop

    def build():
        run = dqn_pieces()
        return run, torch.zeros((), dtype=torch.float32).fill_(0.1), torch.zeros((1, 4, 84, 84), dtype=torch.uint8)

    traced = host_flags(build, lambda p: loop.act_on_device(p[0], p[1], p[2]))
    assert traced.syncs() == [], traced.flags


def test_dqn_evaluation_step_on_the_device_has_no_flagged_op_past_its_one_staged_copy():
    """Evaluation through the device path (evaluation.py): the observations and the host's
    epsilon-greedy draws arrive in one copy of the staging buffer, the step's one host tensor;
    choosing the actions reads nothing (the read of the actions comes after, for the emulators)."""
    from trainers.dqn_softlinf.evaluation import EvalStaging, eval_actions
    from trainers.dqn_softlinf.model import q_network

    gen = np.random.default_rng(0)
    obs, u, r = gen.integers(0, 255, (3, 4, 84, 84), np.uint8), gen.random(3), gen.integers(0, 6, 3)

    def build():
        staging = EvalStaging(3, (4, 84, 84), np.uint8, torch.device("cpu"))
        return q_network("atari", (4, 84, 84), 6), staging, torch.zeros((), dtype=torch.float64).fill_(0.05)

    def step(p):
        q, staging, epsilon = p
        return eval_actions(q, *staging.send(obs, u, r), epsilon)

    traced = host_flags(build, step)
    syncs = [(f.kind, f.op, f.where.rsplit("/", 1)[-1].split(":")[0]) for f in traced.syncs()]
    assert syncs == [("host", "lift_fresh", "evaluation.py")] * 2, traced.flags  # one per step


def test_fair_adv_training_step_has_no_flagged_op():
    from trainers.fair_adv import model as models
    from trainers.fair_adv import step as fair_step
    from trainers.fair_adv.config import Config

    cfg = Config(method="tri_regime", model="small_cnn", train_steps=2)

    def build():
        net = models.build_model("small_cnn", 10)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.rand(16, 3, 32, 32), torch.randint(0, 10, (16,))
        return net, opt, x, y, torch.arange(16), fair_step.History.empty(64)

    def run(p):
        net, opt, x, y, index, history = p
        fair_step.train_step(
            net, opt, x, y, index, cfg, epoch=5, history=history, loss_threshold=1.0, generator=torch.Generator()
        )

    traced = host_flags(build, run)
    assert traced.syncs() == [], traced.flags


def backdoor_pieces(amp: bool, size: int = 64):
    from types import SimpleNamespace

    from trainers.backdoor import loop as bd
    from trainers.backdoor.config import Config

    cfg = Config(amp_bf16=amp, channels_last=amp, batch_size=16)
    net = bd.MODELS[cfg.model](10, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), cfg.model_width)
    layout = torch.channels_last if amp else torch.contiguous_format  # the inputs' (the fake
    # parameters cannot be converted in place: Module._apply swaps a FakeTensor's)
    data = SimpleNamespace(
        train_x=torch.randint(0, 255, (size, 3, 32, 32), dtype=torch.uint8), train_y=torch.randint(0, 10, (size,))
    )
    t = SimpleNamespace(
        cfg=cfg, data=data, model=net, train_forward=net, layout=layout, device=torch.device("cpu"), rank=0, world=1
    )
    t.spec = None
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    st = SimpleNamespace(optimizer=opt, totals=bd.no_totals(), batch=0, epoch=0, step=0)
    running = {"loss": torch.zeros(()), "correct": torch.zeros(())}
    return t, st, torch.arange(size), running


@pytest.mark.parametrize("amp", [False, True])
def test_backdoor_training_step_has_no_flagged_op(amp):
    from trainers.backdoor import loop as bd

    traced = host_flags(lambda: backdoor_pieces(amp), lambda p: bd.train_step(*p))
    assert traced.syncs() == [], traced.flags


def test_backdoor_step_notes_the_dtype_its_forward_ran_in(one_thread):
    """What ``perf/autocast_bf16`` reports: bfloat16 under amp_bf16 (on the CPU too), else float32."""
    from trainers.backdoor import loop as bd

    for amp, dtype in ((True, torch.bfloat16), (False, torch.float32)):
        pieces = backdoor_pieces(amp, size=16)
        bd.train_step(*pieces)
        assert pieces[0].compute_dtype == dtype


def test_seagram_victim_step_has_no_flagged_op_past_its_one_index_copy():
    """The pairs are drawn on the host (numpy) and sent as one index array per step: that copy
    is the step's one host tensor; nothing is read back."""
    from types import SimpleNamespace

    from trainers.seagram import loop as sg
    from trainers.seagram.batches import TrainPairs
    from trainers.seagram.config import Config
    from trainers.seagram.model import build_victim

    cfg = Config(queries_per_step=4, pos_per_query=2, neg_per_query=2)
    gen = np.random.default_rng(0)

    def graph(n):
        a = np.triu((gen.random((n, n)) < 0.3).astype(np.float32), 1)
        return a + a.T

    def build():
        labels = np.tile(np.array([1, 0] * 5), (8, 1))
        data = SimpleNamespace(
            splits={"train": np.arange(8)},
            labels=labels,
            queries=[graph(10) for _ in range(8)],
            corpus=[graph(18) for _ in range(10)],
        )
        victim = build_victim(cfg.victim, cfg.hidden, cfg.layers, cfg.corpus_nodes[1], 60)
        opt = torch.optim.Adam(victim.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        return victim, opt, TrainPairs.of(data, cfg), np.random.default_rng(1)

    traced = host_flags(build, lambda p: sg.victim_step(p[0], p[1], p[2], cfg, p[3]))
    syncs = [(f.kind, f.op, "/".join(f.where.rsplit("/", 2)[-2:]).split(":")[0]) for f in traced.syncs()]
    assert syncs == [("host", "lift_fresh", "seagram/batches.py")] * 2, traced.flags  # one per step


def test_boltz_distill_training_step_has_no_flagged_op_past_its_one_index_copy():
    """The molecules of a step are chosen on the host and sent as one index array (the
    batch's atom and bond counts come from host-side counts): that copy is its one host tensor."""
    from types import SimpleNamespace

    from trainers.boltz_distill import loop as bz
    from trainers.boltz_distill.batches import GraphBank
    from trainers.boltz_distill.config import Config
    from trainers.boltz_distill.featurize import ATOM_DIM, BOND_DIM

    cfg = Config(width=32, depth=2)
    gen = np.random.default_rng(0)

    def molecule(n):
        src = np.arange(n - 1)
        edges = torch.from_numpy(np.stack([np.r_[src, src + 1], np.r_[src + 1, src]]))
        return SimpleNamespace(
            num_nodes=n,
            x=(torch.rand(n, ATOM_DIM) < 0.1).float(),
            edge_index=edges,
            edge_attr=(torch.rand(edges.shape[1], BOND_DIM) < 0.3).float(),
            y=torch.randn(n, 16),
        )

    bank = GraphBank([molecule(int(k)) for k in gen.integers(3, 12, 20)])  # packed on real tensors

    def build():
        bank.tensors = {k: v.clone() for k, v in bank.tensors.items()}  # their fakes
        model = bz.GINEStudent(cfg.width, cfg.depth, 16, cfg.dropout, cfg.head_layers, cfg.global_context)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)  # init_training's
        return model, opt, bank, torch.zeros(16), torch.ones(16)

    traced = host_flags(
        build, lambda p: bz.train_step(p[0], p[1], p[2], [1, 4, 7, 9], p[3], p[4], cfg, torch.device("cpu"))
    )
    syncs = [(f.kind, f.op, f.where.rsplit("/", 2)[-2]) for f in traced.syncs()]
    assert syncs == [("host", "lift_fresh", "boltz_distill")] * 2, traced.flags  # one per step
