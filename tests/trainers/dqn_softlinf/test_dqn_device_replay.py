"""The replay on the device (device_replay.py, here on host tensors: the same code) rebuilds what
FrameReplay rebuilds, draws uniformly among transitions without reading the device, and the loop
that uses it reads the device once per vector step."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainers.dqn_softlinf.config import Config
from trainers.dqn_softlinf.device_replay import CANDIDATES, DeviceFrameReplay
from trainers.dqn_softlinf.envs import AtariEnvs
from trainers.dqn_softlinf.replay import FrameReplay, start_range

REPO = Path(__file__).resolve().parents[3]


def record(replays, envs, steps: int, check=None) -> None:
    """Random play on real envs into every replay; ``check(obs)`` before each step."""
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(3)
    final_prev = np.zeros(envs.num_envs, bool)
    for r in replays:
        r.add_observation(envs.newest_frame(obs), np.ones(envs.num_envs, bool), final_prev)
    for _ in range(steps):
        if check is not None:
            check(obs)
        actions = rng.integers(0, envs.num_actions, envs.num_envs)
        envs.send(actions)
        obs, reward, term, trunc, _ = envs.recv()
        ended = term | trunc
        for r in replays:
            r.set_step(actions, reward, term)
            r.add_observation(envs.newest_frame(obs), first=final_prev, final=ended)
        final_prev = ended


def test_device_ring_rebuilds_what_the_host_ring_rebuilds(one_thread):
    capacity = 3 * 70  # 200 steps: the ring wraps twice
    cfg = Config(game="Pong", max_episode_frames=160, noop_max=5, env_threads=1)
    envs = AtariEnvs(cfg, num_envs=3)
    host = FrameReplay(capacity, 3, envs.frame_shape, np.uint8, 4)
    device = DeviceFrameReplay(capacity, 3, envs.frame_shape, np.uint8, 4)
    seen = []

    def newest_is_the_observation(obs):  # what acting reads from the ring
        seen.append(np.array_equal(device.newest_obs().numpy(), obs))

    record([host, device], envs, 200, newest_is_the_observation)
    envs.close()
    assert len(seen) == 200 and all(seen)
    assert host.final.any() and host.first[1:].any()  # resets and zero-padded stacks happened
    # every stored transition, gathered both ways
    row, env = host.transition_index()
    b_host = host.gather(row, env)
    b_dev = device.gather(torch.from_numpy(row), torch.from_numpy(env))
    for key in ("window", "obs", "next_obs", "action", "reward"):
        np.testing.assert_array_equal(b_dev[key].numpy(), b_host[key], err_msg=key)
    np.testing.assert_array_equal(b_dev["done"].numpy(), b_host["done"].astype(np.float32))
    # the probes' host draw is FrameReplay's draw
    for a, b in zip(
        device.sample_index(256, np.random.default_rng(4)), host.sample_index(256, np.random.default_rng(4))
    ):
        np.testing.assert_array_equal(a.numpy(), b)
    # one checkpoint format: each loads the other's
    back = FrameReplay(capacity, 3, envs.frame_shape, np.uint8, 4)
    back.load_state_dict(device.state_dict())
    again = DeviceFrameReplay(capacity, 3, envs.frame_shape, np.uint8, 4)
    again.load_state_dict(host.state_dict())
    for name in ("frame", "action", "reward", "done", "first", "final"):
        np.testing.assert_array_equal(getattr(back, name), getattr(host, name))
        np.testing.assert_array_equal(getattr(again, name).numpy(), getattr(host, name))
    assert again.count == host.count and int(again.count_dev) == host.count
    np.testing.assert_array_equal(again.newest_obs().numpy(), device.newest_obs().numpy())


def counts_over_transitions(replay: DeviceFrameReplay, draws: int, sampler) -> np.ndarray:
    row, env = sampler(draws)
    counts = np.zeros((replay.rows, replay.num_envs), np.int64)
    np.add.at(counts, (row.numpy(), env.numpy()), 1)
    return counts


def uniformity_z(counts: np.ndarray, support: np.ndarray) -> float:
    """The largest |count - mean| / sqrt(mean) over the support, and inf if a draw fell outside."""
    if counts[~support].any():
        return float("inf")
    expected = counts.sum() / support.sum()
    return float((np.abs(counts[support] - expected) / np.sqrt(expected)).max())


def test_device_draws_are_uniform_over_transitions_and_never_final():
    # a small ring, wrapped, with many final rows (a tenth): the redraw matters here
    replay = DeviceFrameReplay(2 * 40, 2, (3,), np.float32, stack=2)
    rng = np.random.default_rng(0)
    final_prev = np.zeros(2, bool)
    replay.add_observation(np.zeros((2, 3)), np.ones(2, bool), final_prev)
    for t in range(1, 70):
        ended = rng.random(2) < 0.1
        replay.set_step(np.array([0, 1]), np.zeros(2, np.float32), ended)
        replay.add_observation(np.full((2, 3), t, np.float32), first=final_prev, final=ended)
        final_prev = ended
    lo, hi = start_range(replay.count, replay.rows, replay.stack)
    support = np.zeros((replay.rows, 2), bool)
    for t in range(lo, hi + 1):
        support[t % replay.rows] = ~replay.final_host[t % replay.rows]
    assert replay.final_host.sum() >= 8 and support.sum() > 40
    gen = torch.Generator().manual_seed(1)
    z = uniformity_z(counts_over_transitions(replay, 200_000, lambda n: replay.sample_index_device(n, gen)), support)
    assert z < 5.0, z
    # positive control: the same check catches a draw that moves a final row to the next row
    # (a reset row then comes up twice as often) and one that keeps final rows

    def next_row_instead(n):
        row, env = replay.sample_index_device(n, gen)
        t = torch.randint(lo, hi + 1, (n,), generator=gen) % replay.rows
        e = torch.randint(0, 2, (n,), generator=gen)
        final = torch.from_numpy(replay.final_host)[t, e]
        return torch.where(final, (t + 1) % replay.rows, t), e

    def keeps_finals(n):
        return torch.randint(lo, hi + 1, (n,), generator=gen) % replay.rows, torch.randint(0, 2, (n,), generator=gen)

    assert uniformity_z(counts_over_transitions(replay, 200_000, next_row_instead), support) > 8
    assert uniformity_z(counts_over_transitions(replay, 200_000, keeps_finals), support) == float("inf")
    assert CANDIDATES >= 16  # 0.1^16: no draw in this test falls on a final row


def test_acting_on_the_device_is_the_host_policy(one_thread):
    """Device-side epsilon-greedy at epsilon 0 picks the host's greedy actions on the envs'
    observations, and the held-out game's, from the same forward pass; at epsilon 1 it runs
    no network; in between it explores an epsilon fraction."""
    from types import SimpleNamespace

    from trainers.dqn_softlinf import loop
    from trainers.dqn_softlinf.model import q_network

    cfg = Config(game="Pong", max_episode_frames=160, noop_max=5, env_threads=1, num_envs=3)
    envs = AtariEnvs(cfg, num_envs=3)
    device = DeviceFrameReplay(3 * 200, 3, envs.frame_shape, np.uint8, 4)
    torch.manual_seed(0)
    q = q_network("atari", envs.obs_shape, envs.num_actions)
    with torch.no_grad():  # spread the Q-values so that greedy actions differ between states
        q.head[-1].weight.mul_(50)
    run = loop.Run(
        cfg,
        torch.device("cpu"),
        SimpleNamespace(obs_shape=envs.obs_shape, num_actions=envs.num_actions),
        q,
        q,
        q,
        q,
        None,
        device,
        np.random.default_rng(0),
        np.random.default_rng(1),
        None,
        None,
        act_gen=torch.Generator().manual_seed(0),
    )
    checked, chosen = [], []

    def compare(obs):
        extra = obs[2:3].copy()  # a state of its own, as the held-out game's
        actions, held = loop.epsilon_greedy_on_device(run, 0.0, extra)
        expected = loop.greedy(run, np.concatenate([obs, extra]))
        checked.append(np.array_equal(actions, expected[:3]) and np.array_equal(held, expected[3:]))
        chosen.extend(actions)

    record([device], envs, 40, compare)
    envs.close()
    assert all(checked) and len(set(chosen)) > 1
    calls = []
    q.register_forward_hook(lambda *a: calls.append(1))
    actions, held = loop.epsilon_greedy_on_device(run, 1.0, np.zeros((1, 4, 84, 84), np.uint8))
    assert not calls and held is None and actions.shape == (3,) and (actions < envs.num_actions).all()
    best = loop.greedy(run, np.asarray(device.newest_obs()))
    explored = [loop.epsilon_greedy_on_device(run, 0.25)[0] != best for _ in range(400)]
    # exploring picks the greedy action 1 time in 6 by chance: 0.25 * 5/6 of actions differ
    assert abs(np.mean(explored) - 0.25 * 5 / 6) < 0.04


READS = ("item", "cpu", "tolist", "__float__")


def test_the_loop_reads_the_device_once_per_vector_step(monkeypatch, tmp_path, one_thread):
    """With the replay on the device, a vector step of the Pong loop (an update, the held-out
    game stepped alongside) reads the device once: the actions. Counted by line, as
    tests/trainers/test_host_sync.py counts them; the positive control is today's host path,
    whose held-out game reads in a forward pass of its own."""
    from raylab import session
    from trainers.dqn_softlinf import loop

    config = {
        "game": "Pong",
        "total_steps": 128,
        "learning_starts": 32,
        "buffer_size": 1000,
        "num_envs": 4,
        "batch_size": 8,
        "report_every": 320,
        "eval_episodes": 1,
        "eval_max_steps": 1,
        "eval_every": 10**6,
        "heldout_size": 32,
        "expected_states": 2,
        "expected_samples": 2,
        "probe_size": 32,
        "epsilon_fraction": 0.1,
        "max_episode_frames": 400,
    }

    def reads_per_line(extra: dict, patch=None) -> tuple[dict, dict]:
        counts: collections.Counter = collections.Counter()
        with monkeypatch.context() as m:
            for name in READS:
                original = getattr(torch.Tensor, name)

                def counted(self, *args, _original=original, **kwargs):
                    caller = sys._getframe(1)
                    path = Path(caller.f_code.co_filename)
                    if REPO in path.parents and "tests" not in path.parts:
                        counts[(str(path.relative_to(REPO)), caller.f_lineno)] += 1
                    return _original(self, *args, **kwargs)

                m.setattr(torch.Tensor, name, counted)
            if patch:
                m.setattr(loop, "choose_actions", patch)
            history = session.start(backend="local").history
            loop.train_loop(config | extra)
        return counts, history[-1]

    steps = config["total_steps"] // config["num_envs"]
    counts, row = reads_per_line({"replay_on_device": True})
    assert row["train/updates"] == (config["total_steps"] - config["learning_starts"]) // 4
    assert "bellman/residual_linf_heldout" in row
    frequent = {k: v for k, v in counts.items() if v >= 0.5 * steps}
    assert len(frequent) == 1 and sum(frequent.values()) <= steps, counts.most_common(5)
    (where,) = frequent
    assert where[0] == "trainers/dqn_softlinf/loop.py"

    def todays_choose_actions(run, epsilon):  # the held-out game's greedy in a forward of its own
        return loop.act(run, run.obs, epsilon, run.rng), lambda o: loop.greedy(run, o)

    counts, _ = reads_per_line({"replay_on_device": False}, todays_choose_actions)
    greedy_line = max(counts, key=counts.get)
    assert counts[greedy_line] > 1.5 * steps, counts.most_common(5)  # two reads per step: flagged


def test_the_switches_resolve_per_device_and_refuse_a_graph_without_the_replay(capsys):
    from raylab.config import from_dict
    from raylab.errors import UserError
    from trainers.dqn_softlinf import loop

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    default = Config()
    assert (loop.replay_on_device(default, cpu), loop.replay_on_device(default, cuda)) == (False, True)
    assert (loop.use_graph(default, cpu, False), loop.use_graph(default, cuda, True)) == (False, True)
    assert not loop.use_graph(default, cuda, False)  # the host replay is drawn on the host: no graph
    assert not loop.use_graph(Config(cuda_graph=False), cuda, True)
    assert capsys.readouterr().err == ""
    assert not loop.use_graph(Config(cuda_graph=True), cpu, True)  # nothing to capture: eager
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(UserError, match=r"exp.yaml: config.cuda_graph: true needs the replay on the device"):
        from_dict(Config, {"cuda_graph": True, "replay_on_device": False}, "exp.yaml", "config")


def test_acting_with_epsilon_as_a_device_scalar_picks_what_the_float_epsilon_picked(one_thread):
    """``act_on_device`` (epsilon a float32 device scalar, no branch on it) against the earlier
    code (epsilon a Python float, compared in the same kernel): the same actions, bit for bit,
    over the schedule's range, with the held-out game's greedy action; at epsilon 1 the same
    draws are made without a forward pass."""
    from types import SimpleNamespace

    from trainers.dqn_softlinf import loop
    from trainers.dqn_softlinf.model import q_network

    n, gen = 3, np.random.default_rng(0)
    replay = DeviceFrameReplay(3 * 40, n, (84, 84), np.uint8, 4)
    for _ in range(12):
        replay.add_observation(gen.integers(0, 255, (n, 84, 84), np.uint8), gen.random(n) < 0.1, np.zeros(n, bool))
    torch.manual_seed(0)
    q = q_network("atari", (4, 84, 84), 6)
    with torch.no_grad():
        q.head[-1].weight.mul_(50)
    cfg = Config(game="Pong", num_envs=n)
    envs = SimpleNamespace(obs_shape=(4, 84, 84), num_actions=6)
    args = (cfg, torch.device("cpu"), envs, q, q, q, q, None, replay, None, None, None, None)
    new, old = loop.Run(*args, act_gen=torch.Generator().manual_seed(5)), torch.Generator().manual_seed(5)

    def earlier(epsilon, extra):  # the code before: epsilon a Python float
        explore = torch.rand(n, generator=old) < epsilon
        actions = torch.randint(0, 6, (n,), generator=old)
        if epsilon >= 1.0:
            return actions.numpy(), None
        x = torch.cat([replay.newest_obs().reshape(n, 4, 84, 84), torch.from_numpy(extra)])
        best = q(x).argmax(1)
        chosen = torch.cat([torch.where(explore, actions, best[:n]), best[n:]]).numpy()
        return chosen[:n], chosen[n:]

    for epsilon in (1.0, 0.9999, 0.5, 0.1, 0.01, 0.001, 0.0, 1.0, 0.3):
        extra = gen.integers(0, 255, (1, 4, 84, 84), np.uint8)
        got, want = loop.epsilon_greedy_on_device(new, epsilon, extra), earlier(epsilon, extra)
        assert np.array_equal(got[0], want[0]), epsilon
        assert (got[1] is None) == (want[1] is None) and (got[1] is None or np.array_equal(got[1], want[1]))
    assert new.epsilon_dev.dtype == torch.float32 and new.epsilon_dev.dim() == 0


@pytest.mark.parametrize("frame_dtype", [np.uint8, np.float32])
def test_one_packed_copy_per_vector_step_writes_the_rows_six_copies_wrote(frame_dtype):
    """``add_step`` (the step's action, reward and done, the next row's frame and flags packed
    into one buffer, sent in one copy, alternating two staging buffers) leaves every array of
    the ring bit-equal to ``set_step`` + ``add_observation``, past a wrap of the ring."""
    n, shape, gen = 3, (6, 5) if frame_dtype == np.uint8 else (4,), np.random.default_rng(0)
    one, six = (DeviceFrameReplay(3 * 8, n, shape, frame_dtype, 4) for _ in range(2))
    host = FrameReplay(3 * 8, n, shape, frame_dtype, 4)

    def frame():
        return (gen.integers(0, 255, (n, *shape)) if frame_dtype == np.uint8 else gen.normal(size=(n, *shape))).astype(
            frame_dtype
        )

    start = frame()
    for r in (one, six, host):
        r.add_observation(start, np.ones(n, bool), np.zeros(n, bool))
    for _ in range(21):
        step = (gen.integers(0, 6, n), gen.normal(size=n), gen.random(n) < 0.2)
        obs = (frame(), gen.random(n) < 0.2, gen.random(n) < 0.2)
        one.add_step(*step, *obs)
        six.set_step(*step)
        six.add_observation(*obs)
        host.add_step(*step, *obs)
    for name in ("frame", "action", "reward", "done", "first", "final"):
        assert torch.equal(getattr(one, name), getattr(six, name)), name
        assert np.array_equal(getattr(one, name).numpy(), getattr(host, name)), name
    assert one.count == six.count == 22 and np.array_equal(one.final_host, six.final_host)
    assert int(one.count_dev) == 22 and one._slot == 1  # the two buffers taken in turn
