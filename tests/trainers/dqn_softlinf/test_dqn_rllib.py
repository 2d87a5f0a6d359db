"""The RLlib path: the DQNTorchLearner subclass applies our losses; backend rllib trains CartPole;
each setting that makes its numbers mean what the raylab backend's mean."""

from types import SimpleNamespace

import pytest
import torch
from conftest import assert_finite_metrics

from trainers.dqn_softlinf.loss import huber, mse, soft_linf


def _learner_loss(loss: str, double_q: bool, reward_clip: bool = False, rewards=(1.0, 0.0, -1.0)):
    from ray.rllib.algorithms.dqn.dqn_learner import QF_NEXT_PREDS, QF_PREDS, QF_TARGET_NEXT_PREDS
    from ray.rllib.core.columns import Columns
    from ray.rllib.utils.metrics import TD_ERROR_KEY
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from trainers.dqn_softlinf.rllib_learner import TD_ERROR_MAX_KEY, SurrogateDQNLearner

    batch = {
        Columns.ACTIONS: torch.tensor([0, 1, 1]),
        Columns.REWARDS: torch.tensor(rewards),
        Columns.TERMINATEDS: torch.tensor([False, False, True]),
        "n_step": torch.tensor([1, 1, 1]),
        "weights": torch.tensor([1.0, 0.5, 2.0]),
    }
    fwd_out = {
        QF_PREDS: torch.tensor([[2.0, 0.0], [0.5, 1.5], [0.0, 3.0]]),
        QF_NEXT_PREDS: torch.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]]),
        QF_TARGET_NEXT_PREDS: torch.tensor([[3.0, 1.0], [1.0, 4.0], [5.0, 5.0]]),
    }
    config = SimpleNamespace(
        num_atoms=1,
        double_q=double_q,
        gamma=0.5,
        learner_config_dict={
            "loss": loss,
            "beta": 2.0,
            "beta_scale": "reward",
            "huber_delta": 1.0,
            "reward_clip": reward_clip,
        },
    )
    stub = SimpleNamespace(metrics=MetricsLogger())
    value = SurrogateDQNLearner.compute_loss_for_module(
        stub, module_id="p", config=config, batch=batch, fwd_out=fwd_out
    )
    logged = stub.metrics.peek(("p", TD_ERROR_KEY))
    return value, torch.as_tensor(logged), stub.metrics.peek(("p", TD_ERROR_MAX_KEY)), batch["weights"]


@pytest.mark.parametrize("double_q", [False, True])
def test_learner_applies_our_losses_by_hand(double_q):
    # q(s,a) = [2.0, 1.5, 3.0]
    # targets: r + 0.5 * (1 - done) * Q_target(s', a*)
    #   plain max:  a* = argmax Q_target -> [3, 4, (terminal)] -> y = [2.5, 2.0, -1.0]
    #   double:     a* = argmax Q_online -> [1, 0, (terminal)] -> Q_target = [1, 1] -> y = [1.5, 0.5, -1.0]
    y = torch.tensor([1.5, 0.5, -1.0]) if double_q else torch.tensor([2.5, 2.0, -1.0])
    td = torch.tensor([2.0, 1.5, 3.0]) - y
    w = torch.tensor([1.0, 0.5, 2.0])
    for loss, expected in [("mse", mse(td, w)), ("huber", huber(td, 1.0, w)), ("soft_linf", soft_linf(td, 2.0, w))]:
        value, logged, td_max, _ = _learner_loss(loss, double_q)
        assert value.item() == pytest.approx(expected.item(), rel=1e-6)
        # RLlib's per-sample TD-error log, read by prioritized replay, is kept
        assert torch.allclose(logged.flatten(), td.abs())
        assert td_max == pytest.approx(td.abs().max().item())


def test_learner_clips_rewards_for_the_targets_only():
    # RLlib's clip_rewards does nothing on the new API stack: the learner clips instead.
    # Rewards 5, 0, -3 clip to 1, 0, -1: the same targets as the by-hand test above.
    clipped, *_ = _learner_loss("mse", False, reward_clip=True, rewards=(5.0, 0.0, -3.0))
    plain, *_ = _learner_loss("mse", False, reward_clip=False, rewards=(1.0, 0.0, -1.0))
    raw, *_ = _learner_loss("mse", False, reward_clip=False, rewards=(5.0, 0.0, -3.0))
    assert clipped.item() == pytest.approx(plain.item()) and raw.item() != pytest.approx(plain.item())


def test_nature_cnn_encoder_has_3136_features():
    import gymnasium
    import numpy as np

    from trainers.dqn_softlinf.config import RLLIB_OFF, Config
    from trainers.dqn_softlinf.rllib_learner import dqn_config

    config = dqn_config(Config(**RLLIB_OFF, backend="rllib"))
    spec = config.get_default_rl_module_spec()
    spec.observation_space = gymnasium.spaces.Box(-1, 1, (84, 84, 4), np.float32)
    spec.action_space = gymnasium.spaces.Discrete(6)
    spec.model_config = config.model_config
    module = spec.build()
    assert module.encoder({"obs": torch.zeros(2, 84, 84, 4)})["encoder_out"].shape == (2, 7 * 7 * 64)
    linear = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(3136, 512), (512, 6)]
    # the raylab backend's Nature CNN has the same shapes
    from trainers.dqn_softlinf.model import NatureCNN

    assert NatureCNN(4, 6).head[0].in_features == 3136


def test_rllib_replay_memory_estimate_counts_float32_stacks():
    from raylab.errors import UserError
    from trainers.dqn_softlinf.config import RLLIB_OFF, Config
    from trainers.dqn_softlinf.preflight import preflight, replay_bytes

    total, per = replay_bytes(Config(**RLLIB_OFF, backend="rllib", buffer_size=1_000_000))
    assert per == 84 * 84 * 4 * 4 + 16 == 112_912  # one float32 4-frame observation per step
    assert 112e9 < total < 114e9
    with pytest.raises(UserError, match="112,912 bytes per transition"):
        preflight(Config(**RLLIB_OFF, backend="rllib"), available=64 * 10**9)


def test_evaluation_runs_whole_games_one_after_another_and_learner_takes_the_gpu(monkeypatch):
    from trainers.dqn_softlinf.config import RLLIB_OFF, Config
    from trainers.dqn_softlinf.rllib_learner import dqn_config

    config = dqn_config(Config(**RLLIB_OFF, backend="rllib", eval_episodes=10, eval_epsilon=0.01))
    assert (config.evaluation_duration, config.evaluation_duration_unit) == (10, "episodes")
    overrides = config.evaluation_config
    assert overrides["num_envs_per_env_runner"] == 1  # no bias toward short episodes
    assert overrides["env_config"]["episodic_life"] is False and config.env_config["episodic_life"] is True
    assert overrides["epsilon"] == [(0, 0.01)] and overrides["explore"] is True
    assert config.num_gpus_per_learner == (1 if torch.cuda.is_available() else 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert dqn_config(Config(**RLLIB_OFF, backend="rllib")).num_gpus_per_learner == 1


def test_training_env_reports_whole_game_returns_across_lives():
    pytest.importorskip("cv2")
    import numpy as np

    from trainers.dqn_softlinf.rllib_learner import GAME_RETURN_KEY, _env_creator

    env = _env_creator(
        {
            "suite": "atari",
            "game": "Breakout",
            "sticky_action_prob": 0.0,
            "screen_size": 84,
            "frame_skip": 4,
            "frame_stack": 4,
            "max_episode_frames": 108_000,
            "noop_max": 30,
            "fire_reset": True,
            "episodic_life": True,
            "full_action_space": False,
        }
    )
    assert env.observation_space.shape == (84, 84, 4) and env.observation_space.dtype == np.float32
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    games = []  # (RLlib episodes' returns, the game's reported return)
    life_returns, current = [], 0.0
    while len(games) < 3:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        current += reward
        if terminated or truncated:
            life_returns.append(current)
            current = 0.0
            if GAME_RETURN_KEY in info:
                games.append((life_returns, info[GAME_RETURN_KEY]))
                life_returns = []
            env.reset()
    for lives, game_return in games:
        assert len(lives) == 5  # Breakout's 5 lives: 5 RLlib episodes, one game
        assert game_return == pytest.approx(sum(lives))
    assert sum(g for _, g in games) > 0, games  # some game scored: the sum is not vacuous
    env.close()


@pytest.mark.slow
def test_rllib_backend_trains_cartpole_and_resumes(ray_session, local_trial, tmp_path):
    rows = local_trial("dqn_softlinf_rllib", trial_dir=tmp_path / "t", stop={"env/steps": 1000})
    assert rows and rows[-1]["env/steps"] >= 1000
    rest = local_trial("dqn_softlinf_rllib", trial_dir=tmp_path / "t")
    assert rest[0]["env/steps"] > rows[-1]["env/steps"]  # continued RLlib's own step counter
    last = rest[-1]
    assert last["env/steps"] >= 1500
    assert_finite_metrics(
        last,
        [
            "env/steps",
            "perf/env_steps_per_s",
            "train/loss",
            "train/q_mean",
            "episode/return_mean",
            "eval/return_mean",
            "bellman/td_error_max_batch",
        ],
    )


@pytest.mark.slow
def test_both_backends_report_returns_that_mean_the_same(ray_session, local_trial, tmp_path):
    """Uniformly random play (epsilon 1) on CartPole: both backends' training and evaluation
    returns are whole-episode, unclipped returns of the same policy (random: about 22)."""
    random_play = [
        "config.epsilon_start=1.0",
        "config.epsilon_end=1.0",
        "config.eval_epsilon=1.0",
        "config.total_steps=2500",
        "stop.env/steps=2500",
        "config.report_every=2500",
        "config.eval_every=2500",
        "config.eval_episodes=10",
    ]
    rllib = local_trial("dqn_softlinf_rllib", *random_play, trial_dir=tmp_path / "rllib")[-1]
    ours = local_trial("dqn_softlinf_rllib", "config.backend=raylab", *random_play, trial_dir=tmp_path / "raylab")[-1]
    for row in (rllib, ours):
        assert 16 < row["episode/return_mean"] < 30, row  # mean of about 100 random episodes
        assert 10 < row["eval/return_mean"] < 40, row  # mean of 10
    assert abs(rllib["episode/return_mean"] - ours["episode/return_mean"]) < 6, (rllib, ours)


def test_rllib_env_seeds_come_from_disjoint_blocks():
    from trainers.dqn_softlinf.config import RLLIB_OFF, Config
    from trainers.dqn_softlinf.envs import env_seed
    from trainers.dqn_softlinf.rllib_learner import dqn_config

    seeds = [dqn_config(Config(**RLLIB_OFF, backend="rllib", seed=s)).seed for s in range(4)]
    assert seeds == [env_seed(s, 0) for s in range(4)] and len(set(seeds)) == 4
    assert min(abs(a - b) for i, a in enumerate(seeds) for b in seeds[i + 1 :]) >= 4096
