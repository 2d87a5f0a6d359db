"""The frame-deduplicated replay rebuilds exactly the observations the agent saw."""

import numpy as np
import pytest

from trainers.dqn_softlinf.config import Config
from trainers.dqn_softlinf.envs import AtariEnvs
from trainers.dqn_softlinf.replay import FrameReplay, bytes_per_transition


def test_bytes_per_transition_at_84x84():
    per = bytes_per_transition((84, 84), np.uint8)
    assert per == 84 * 84 + 4 + 4 + 3 == 7067
    assert per <= 7.5 * 1024  # the ceiling; 1M transitions are about 7 GB
    replay = FrameReplay(4000, 4, (84, 84), np.uint8, 4)
    assert replay.nbytes == 4000 * per


def _record(replay, envs, steps, rng):
    """Step real Atari envs with random actions, storing into replay; return every true step."""
    obs, lives = envs.reset(3)
    final_prev = np.zeros(envs.num_envs, bool)
    replay.add_observation(envs.newest_frame(obs), np.ones(envs.num_envs, bool), final_prev)
    truth = []  # (absolute row, obs, action, reward, terminated, next_obs, final_prev)
    for _ in range(steps):
        actions = rng.integers(0, envs.num_actions, envs.num_envs)
        envs.send(actions)
        next_obs, reward, term, trunc, _ = envs.recv()
        replay.set_step(actions, reward, term)
        truth.append((replay.count - 1, obs, actions, reward, term, next_obs, final_prev))
        ended = term | trunc
        replay.add_observation(envs.newest_frame(next_obs), first=final_prev, final=ended)
        final_prev, obs = ended, next_obs
    return truth


@pytest.mark.parametrize("capacity", [3 * 400, 3 * 90])  # no wrap / several wraps of the ring
def test_gathered_transitions_equal_the_env_observations(capacity):
    # short episodes (160 frames = 40 steps) so that many resets and zero-padded stacks occur
    cfg = Config(game="Pong", max_episode_frames=160, noop_max=5, env_threads=1)
    envs = AtariEnvs(cfg, num_envs=3)
    replay = FrameReplay(capacity, 3, envs.frame_shape, np.uint8, stack=4)
    truth = _record(replay, envs, 300, np.random.default_rng(0))
    lo, hi = replay._start_range()
    checked = 0
    for t_abs, obs, actions, reward, term, next_obs, final_prev in truth:
        if not lo <= t_abs <= hi:
            continue
        for e in range(3):
            if final_prev[e]:  # o_t was a final observation: not a transition, never sampled
                assert replay.final[t_abs % replay.rows, e]
                continue
            b = replay.gather(np.array([t_abs % replay.rows]), np.array([e]))
            np.testing.assert_array_equal(b["obs"][0], obs[e])
            np.testing.assert_array_equal(b["next_obs"][0], next_obs[e])
            assert b["action"][0] == actions[e] and b["reward"][0] == reward[e]
            assert b["done"][0] == term[e]
            checked += 1
    assert checked > 200
    assert replay.final.any() and replay.first[1:].any()  # episodes did end and restart
    # sampling never returns a final row, and returns the right shapes
    row, env = replay.sample_index(512, np.random.default_rng(1))
    assert not replay.final[row, env].any()
    batch = replay.sample(32, np.random.default_rng(2))
    assert batch["obs"].shape == (32, 4, 84, 84) and batch["next_obs"].shape == (32, 4, 84, 84)
    envs.close()


def test_flat_observations_and_checkpoint_round_trip():
    replay = FrameReplay(40, 2, (3,), np.float32, stack=1)
    assert not replay.can_sample()
    replay.add_observation(np.zeros((2, 3)), np.ones(2, bool), np.zeros(2, bool))
    assert not replay.can_sample()
    for t in range(1, 30):
        replay.set_step(np.array([t % 2, 1]), np.array([t, -t], np.float32), np.array([False, t == 5]))
        replay.add_observation(np.full((2, 3), t, np.float32), np.zeros(2, bool), np.zeros(2, bool))
    assert replay.can_sample() and len(replay) == 40  # 20 rows x 2 envs, the ring has wrapped
    b = replay.gather(np.array([(12 % 20)]), np.array([0]))
    np.testing.assert_array_equal(b["obs"][0, 0], [12, 12, 12])
    np.testing.assert_array_equal(b["next_obs"][0, 0], [13, 13, 13])
    assert b["reward"][0] == 13 and b["action"][0] == 1
    lo, hi = replay._start_range()
    assert (lo, hi) == (30 - 20, 28)

    copy = FrameReplay(40, 2, (3,), np.float32, stack=1)
    copy.load_state_dict(replay.state_dict())
    original, restored = replay.sample(16, np.random.default_rng(5)), copy.sample(16, np.random.default_rng(5))
    for key, value in original.items():
        np.testing.assert_array_equal(restored[key], value)
    with pytest.raises(ValueError, match="rows"):
        FrameReplay(80, 2, (3,), np.float32, stack=1).load_state_dict(replay.state_dict())
