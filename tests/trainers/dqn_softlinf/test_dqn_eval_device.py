"""Evaluation through the device path (evaluation.py, here on host tensors: the same code) plays
the games the host path plays: the same actions at every step, the same returns, bit for bit."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from trainers.dqn_softlinf import loop
from trainers.dqn_softlinf.config import Config
from trainers.dqn_softlinf.evaluation import DeviceEvalActor, EvalStaging

CASES = {
    # CartPole: a game's length, so its return, follows every action
    "gymnasium": {"suite": "gymnasium", "game": "CartPole-v1", "eval_episodes": 4, "eval_max_steps": 300},
    # Pong: uint8 frame stacks staged, the FIRE rule applied after the actions
    "atari": {"game": "Pong", "eval_episodes": 2, "eval_max_steps": 60, "max_episode_frames": 400, "env_threads": 1},
}


def run_with(overrides: dict, on_device: bool) -> loop.Run:
    cfg = Config(**overrides, replay_on_device=on_device, num_envs=2, buffer_size=200, eval_epsilon=0.3, seed=3)
    return loop.build_run(cfg, torch.device("cpu"))


def played(run: loop.Run, evals: int) -> tuple[np.ndarray, np.ndarray, list]:
    cfg = run.cfg
    envs = loop.make_envs(cfg, cfg.eval_episodes)
    gen = np.random.default_rng([cfg.seed, loop.EVAL_STREAM, evals])
    choose, actions = loop.eval_chooser(run, gen), []

    def recorded(obs):
        a = choose(obs)
        actions.append(a.copy())
        return a

    returns, lengths = loop.play_games(cfg, envs, recorded, loop.env_seed(cfg.seed, loop.EVAL_STREAM, evals))
    envs.close()
    return returns, lengths, actions


@pytest.mark.parametrize("suite", sorted(CASES))
def test_device_evaluation_plays_the_host_paths_games_bit_for_bit(suite, one_thread):
    host, device = run_with(CASES[suite], False), run_with(CASES[suite], True)
    assert not isinstance(loop.eval_chooser(host, None), DeviceEvalActor)
    assert isinstance(loop.eval_chooser(device, None), DeviceEvalActor)
    for evals in (0, 1):
        r_host, len_host, a_host = played(host, evals)
        r_dev, len_dev, a_dev = played(device, evals)
        assert len(a_host) == len(a_dev) >= 8
        assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(a_host, a_dev))
        assert np.array_equal(r_host, r_dev) and np.array_equal(len_host, len_dev), (r_host, r_dev)
        chosen = np.concatenate(a_host)
        assert len(np.unique(chosen)) > 1  # not one action throughout: the draws and the network both count
    # and through the loop's evaluate, the reported figure
    s = types.SimpleNamespace(evals=2)  # the loop state's evaluation counter
    assert loop.evaluate(host, s) == loop.evaluate(device, s)
    for run in (host, device):
        run.eval_envs.close()
        run.envs.close()


def test_staging_sends_every_array_exactly_in_one_buffer():
    gen = np.random.default_rng(0)
    for dtype, shape in ((np.uint8, (3, 4, 84, 84)), (np.float32, (3, 4))):
        obs = (gen.random(shape) * 255).astype(dtype)
        u, r = gen.random(3), gen.integers(0, 6, 3)
        staging = EvalStaging(3, shape[1:], dtype, torch.device("cpu"))
        x, u_dev, r_dev = staging.send(obs, u, r)
        assert x.dtype == torch.from_numpy(obs).dtype and np.array_equal(x.numpy(), obs)
        assert u_dev.dtype == torch.float64 and np.array_equal(u_dev.numpy(), u)
        assert r_dev.dtype == torch.int64 and np.array_equal(r_dev.numpy(), r)
        base = staging.dev.untyped_storage().data_ptr()
        assert {t.untyped_storage().data_ptr() for t in (x, u_dev, r_dev)} == {base}  # views of the one copy


def test_epsilon_as_a_float64_device_scalar_decides_as_numpys_comparison():
    """u < epsilon in float64 on the device, as numpy compares; in float32 a draw just below
    epsilon can round up to it and explore no more."""
    from trainers.dqn_softlinf.evaluation import eval_actions

    epsilon = 0.3
    u = np.array([np.nextafter(epsilon, 0.0), epsilon, 0.1, 0.9])
    forward = lambda x: torch.tensor([[0.0, 1.0]]).expand(len(x), 2)  # noqa: E731 greedy: action 1
    eps_dev = torch.zeros((), dtype=torch.float64).fill_(epsilon)
    got = eval_actions(forward, torch.zeros(4, 1), torch.from_numpy(u), torch.zeros(4, dtype=torch.long), eps_dev)
    assert got.tolist() == np.where(u < epsilon, 0, 1).tolist() == [0, 1, 0, 1]
    in_float32 = (torch.from_numpy(u).float() < torch.tensor(epsilon, dtype=torch.float32)).tolist()
    assert in_float32[0] is False  # the rounding a float32 scalar would bring
