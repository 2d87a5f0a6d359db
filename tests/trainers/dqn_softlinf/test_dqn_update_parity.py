"""The new DQN update paths give today's losses and parameters on the same draws, and checkpoints
move between them.

Today's update (``todays_update`` below: loop.py's ``update``, ``to_batch`` and loss.py's
``soft_linf`` as they were before the replay moved to the device, with the draw passed in) is
run side by side with

- the host path now (``to_batch``: one contiguous window and one scalar array sent per batch),
- the device path (``DeviceFrameReplay.gather`` and ``learn``, the body a CUDA graph captures,
  run eagerly on host tensors),

on the same 100 index draws from the same replay contents, float32, and must agree within
1e-5 relative: each update's loss and every parameter at the end.
"""

from __future__ import annotations

import copy
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainers.dqn_softlinf import loop
from trainers.dqn_softlinf.config import Config
from trainers.dqn_softlinf.device_replay import DeviceFrameReplay
from trainers.dqn_softlinf.envs import AtariEnvs
from trainers.dqn_softlinf.loss import _mean, effective_beta, effective_sample_size, soft_linf_weights, surrogate
from trainers.dqn_softlinf.model import q_network
from trainers.dqn_softlinf.replay import FrameReplay

UPDATES, RTOL = 100, 1e-5


# ------------------------------------------------------------------ today's update, as it was
def todays_soft_linf(td, beta, weights=None):
    beta = torch.as_tensor(beta, dtype=td.dtype, device=td.device)
    if bool((beta <= 0).any()):
        raise ValueError(f"soft_linf: beta must be > 0, got {beta}")
    a = td.abs()
    counted = a if weights is None else a.masked_fill(weights <= 0, float("-inf"))
    m = counted.max().detach()
    z = torch.expm1(torch.clamp(beta * (a - m), max=0.0))
    return m + torch.log1p(_mean(z, weights)) / beta


def todays_batch_loss(cfg, td):
    if cfg.loss == "soft_linf":
        loss = todays_soft_linf(td, effective_beta(td, cfg.beta, cfg.beta_scale))
    else:
        loss = surrogate(cfg.loss, td, huber_delta=cfg.huber_delta)
    return loss * len(td) if cfg.loss_reduction == "sum" else loss


def todays_to_batch(run, b):
    def to_obs(frames):
        return loop.to_device(torch.from_numpy(frames.reshape(len(frames), *run.envs.obs_shape)), run.device)

    device = run.device
    return {
        "obs": to_obs(b["obs"]),
        "next_obs": to_obs(b["next_obs"]),
        "action": loop.to_device(torch.from_numpy(b["action"]), device, torch.long),
        "reward": loop.to_device(torch.from_numpy(b["reward"]), device),
        "done": loop.to_device(torch.from_numpy(b["done"]), device, torch.float32),
    }


def todays_update(run, b):
    cfg, sums = run.cfg, run.sums
    b = todays_to_batch(run, b)
    with torch.no_grad(), loop.autocast(run):
        target_next = run.target_fwd(b["next_obs"]).float()
        net_next = run.q_fwd(b["next_obs"]).float() if cfg.double_dqn else None
    y = loop.targets(cfg, net_next, target_next, b)
    with loop.autocast(run):
        q_sa = run.q_fwd(b["obs"]).float().gather(1, b["action"][:, None]).squeeze(1)
    td = q_sa - y
    loss = todays_batch_loss(cfg, td)
    if cfg.loss == "soft_linf":
        with torch.no_grad():
            sums["ess"] += effective_sample_size(soft_linf_weights(td, effective_beta(td, cfg.beta, cfg.beta_scale)))
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(run.q.parameters(), cfg.max_grad_norm)
    run.optimizer.step()
    sums["loss"] += loss.detach() / (len(td) if cfg.loss_reduction == "sum" else 1)
    sums["q"] += q_sa.detach().mean()


# ------------------------------------------------------------------ the setting
def make_run(cfg: Config, replay, obs_shape, num_actions) -> loop.Run:
    torch.manual_seed(cfg.seed)
    q = q_network(cfg.suite, obs_shape, num_actions, cfg.mlp_hidden, cfg.channels_last)
    target = copy.deepcopy(q).requires_grad_(False)
    envs = SimpleNamespace(obs_shape=obs_shape, num_actions=num_actions)
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
        np.random.default_rng(0),
        np.random.default_rng(1),
        None,
        None,
    )
    run.sums = {k: torch.zeros(()) for k in ("loss", "q", "ess")}
    return run


def fill_from_pong(replays, steps: int = 120, num_envs: int = 4) -> int:
    """Real Pong frames (short episodes: resets and zero-padded stacks) into every replay."""
    envs = AtariEnvs(Config(game="Pong", max_episode_frames=200, noop_max=5, env_threads=1), num_envs)
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(11)
    final_prev = np.zeros(num_envs, bool)
    for r in replays:
        r.add_observation(envs.newest_frame(obs), np.ones(num_envs, bool), final_prev)
    for _ in range(steps):
        actions = rng.integers(0, envs.num_actions, num_envs)
        envs.send(actions)
        obs, reward, term, trunc, _ = envs.recv()
        ended = term | trunc
        for r in replays:
            r.set_step(actions, np.clip(reward, -1, 1), term)
            r.add_observation(envs.newest_frame(obs), first=final_prev, final=ended)
        final_prev = ended
    envs.close()
    return envs.num_actions


def fill_random(replays, steps: int = 150, num_envs: int = 4, dim: int = 4) -> int:
    rng = np.random.default_rng(0)
    final_prev = np.zeros(num_envs, bool)
    frame = rng.normal(size=(num_envs, dim)).astype(np.float32)
    for r in replays:
        r.add_observation(frame, np.ones(num_envs, bool), final_prev)
    for _ in range(steps):
        actions, reward = rng.integers(0, 2, num_envs), rng.normal(size=num_envs).astype(np.float32)
        term, ended = rng.random(num_envs) < 0.05, rng.random(num_envs) < 0.08
        frame = rng.normal(size=(num_envs, dim)).astype(np.float32)
        for r in replays:
            r.set_step(actions, reward, term)
            r.add_observation(frame, first=final_prev, final=ended | term)
        final_prev = ended | term
    return 2


CASES = {
    # the default: Nature CNN on real Pong frames, soft-linf at beta 10, Adam (batches of 8: the
    # same arithmetic per sample as 32, a quarter of the time)
    "atari_soft_linf": dict(loss="soft_linf", batch_size=8),
    # the other branches of the update, on flat observations and an MLP
    "mlp_mse_double_clip_rmsprop_sum": dict(
        suite="gymnasium",
        game="CartPole-v1",
        loss="mse",
        double_dqn=True,
        max_grad_norm=0.5,
        optimizer="rmsprop",
        loss_reduction="sum",
        mlp_hidden=(32,),
    ),
    "mlp_soft_linf_td_mean": dict(
        suite="gymnasium", game="CartPole-v1", loss="soft_linf", beta_scale="td_mean", mlp_hidden=(32,)
    ),
}


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@pytest.mark.parametrize("case", sorted(CASES))
def test_new_updates_give_todays_losses_and_parameters_on_the_same_draws(case, one_thread):
    cfg = Config(**{"batch_size": 32, **CASES[case]}, buffer_size=4000, learning_starts=0)
    atari = cfg.suite == "atari"
    shape = ((84, 84), np.uint8, 4) if atari else ((4,), np.float32, 1)
    host = FrameReplay(4000, 4, *shape)
    device = DeviceFrameReplay(4000, 4, *shape, device="cpu")
    num_actions = (fill_from_pong if atari else fill_random)([host, device])
    obs_shape = (4, 84, 84) if atari else (4,)
    # on Atari the host path is left out: its batches equal today's exactly (the test below),
    # and the CNN's updates are what this test's time goes to
    paths = ("today", "device") if atari else ("today", "host", "device")
    runs = {name: make_run(cfg, device if name == "device" else host, obs_shape, num_actions) for name in paths}
    draws = np.random.default_rng(7)
    losses = {name: [] for name in runs}
    for i in range(UPDATES):
        row, env = host.sample_index(cfg.batch_size, draws)
        for name, run in runs.items():
            run.sums["loss"].zero_()
            if name == "today":
                todays_update(run, host.gather(row, env))
            elif name == "host":
                loop.learn(run, loop.to_batch(run, host.gather(row, env)))
            else:
                loop.learn(run, loop.device_gather(run, torch.from_numpy(row), torch.from_numpy(env)))
            losses[name].append(run.sums["loss"].item())
            if i == UPDATES // 2:  # one target update on the way
                run.target.load_state_dict(run.q.state_dict())
    today = torch.tensor(losses["today"])
    assert today.abs().min() > 0 and len(set(losses["today"])) > UPDATES // 2  # it did learn something
    for name in paths[1:]:
        gap = relative(torch.tensor(losses[name]), today)
        print(f"{case} {name}: largest relative loss difference {gap:.2e}")
        assert gap <= RTOL, name
        for (key, p), p0 in zip(runs[name].q.state_dict().items(), runs["today"].q.state_dict().values()):
            assert relative(p, p0) <= RTOL, (name, key)
        moved = max(
            relative(p, p0)
            for p, p0 in zip(runs["today"].q.parameters(), make_run(cfg, host, obs_shape, num_actions).q.parameters())
        )
        assert moved > 100 * RTOL  # the parameters did move: the comparison can fail


def test_a_host_batch_is_sent_as_two_contiguous_arrays(one_thread, monkeypatch):
    """The cheap fix on real FrameReplay output: what to_batch hands to_device (and so pins on
    CUDA) is contiguous, two arrays per batch, and the device batch equals today's."""
    host = FrameReplay(2000, 4, (84, 84), np.uint8, 4)
    num_actions = fill_from_pong([host], steps=60)
    run = make_run(Config(), host, (4, 84, 84), num_actions)
    b = host.sample(32, np.random.default_rng(3))
    assert not b["obs"].flags.c_contiguous  # the slices today's to_batch pinned: with gaps
    sent = []

    def recording(x, device, dtype=None):
        sent.append(x)
        return x.to(device) if dtype is None else x.to(device, dtype)

    monkeypatch.setattr(loop, "to_device", recording)
    new = loop.to_batch(run, b)
    assert len(sent) == 2 and all(t.is_contiguous() for t in sent), [t.stride() for t in sent]
    assert sent[0].shape == (32, 5, 84, 84) and sent[0].dtype == torch.uint8
    sent.clear()
    old = todays_to_batch(run, b)
    assert len(sent) == 5 and not sent[0].is_contiguous()  # today: five copies, two with gaps
    for key in old:
        assert torch.equal(new[key], old[key]) and new[key].dtype == old[key].dtype, key


def test_optimizer_state_loads_across_capturable():
    """A CUDA-graph trial's Adam is capturable; an eager trial's is not. Either loads the other's
    state and keeps its own flag, and the next steps are the same."""
    cfg = Config()
    out = {}
    for first, second in ((False, True), (True, False)):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(5))
        a = loop.make_optimizer(cfg, [w], capturable=first)
        for _ in range(3):
            a.zero_grad()
            (w**2).sum().backward()
            a.step()
        w2 = torch.nn.Parameter(w.detach().clone())
        b = loop.make_optimizer(cfg, [w2], capturable=second)
        loop.load_optimizer(b, a.state_dict())
        assert b.param_groups[0]["capturable"] is second
        for opt, p in ((a, w), (b, w2)):
            opt.zero_grad()
            (p**2).sum().backward()
            opt.step()
        assert torch.equal(w, w2)
        out[first] = w2.detach().clone()
    assert torch.equal(out[False], out[True])


def test_checkpoints_resume_across_the_replays(local_trial, tmp_path):
    """A checkpoint of the host replay resumes with the replay on the device and the other way
    round (same format, the replay's rows and every generator carried); device to device the
    resumed trial equals the uninterrupted one."""
    on, off = "config.replay_on_device=true", "config.replay_on_device=false"
    full = local_trial("dqn_softlinf_small", on, trial_dir=tmp_path / "full")
    for mode, folder in ((on, "device"), (off, "host")):
        local_trial("dqn_softlinf_small", mode, trial_dir=tmp_path / folder, stop={"env/steps": 1000})
    shutil.copytree(tmp_path / "device", tmp_path / "device_copy")
    exact = local_trial("dqn_softlinf_small", on, trial_dir=tmp_path / "device")
    to_device = local_trial("dqn_softlinf_small", on, trial_dir=tmp_path / "host")
    to_host = local_trial("dqn_softlinf_small", off, trial_dir=tmp_path / "device_copy")

    def timeless(row):
        return {
            k: v
            for k, v in row.items()
            if not k.startswith("perf/") and k not in {"time_total_s", "training_iteration"}
        }

    assert timeless(exact[-1]) == timeless(full[-1])
    for rest in (to_device, to_host):
        assert rest[0]["env/steps"] > 1000 and rest[-1]["env/steps"] == 2000  # went on from 1,000
        # the replay came along: updates went on from the first step (no refill)
        assert rest[-1]["train/updates"] == full[-1]["train/updates"]
        assert np.isfinite(rest[-1]["train/loss"]) and np.isfinite(rest[-1]["bellman/residual_linf_exact"])
