"""The same three surrogates inside RLlib's DQN, for users who already run RLlib.

``SurrogateDQNLearner`` subclasses RLlib's ``DQNTorchLearner`` (its public extension point,
passed as ``learner_class``) and replaces only the regression loss on the TD errors: the
Q-values, the (double-)DQN targets, the importance weights of prioritized replay and the
per-sample TD-error logging that prioritized replay reads back are computed as RLlib does.
The loss, beta, beta_scale, huber_delta and reward_clip travel in ``learner_config_dict``.

What it sets so that its numbers mean what the raylab backend's mean:

- rewards are clipped to [-1, 1] for the TD targets *in the learner* (``reward_clip``):
  RLlib's ``clip_rewards`` belongs to the old API stack and does nothing on the new one, and
  clipping in the env would clip the reported returns too;
- reported returns are whole games: the env records the game score across lives
  (``GameReturn``, below the episodic-life wrapper) and a callback logs it as
  ``game_return`` when the game really ends; evaluation runs without episodic life;
- the Nature CNN's shapes: "valid" padding, so 84x84x4 -> 20x20x32 -> 9x9x64 -> 7x7x64 =
  3,136 features before the 512-unit layer (RLlib's default "same" padding gives 7,744);
- evaluation by whole episodes on one env (``num_envs_per_env_runner=1``): with several envs
  RLlib stops at the first ``eval_episodes`` that finish, a sample biased to short episodes;
  at ``eval_epsilon`` as in the raylab loop;
- the learner on the GPU the trial reserved (``num_gpus_per_learner=1`` when CUDA is visible).

``train_rllib`` is what ``backend: rllib`` runs: it maps this workload's Config onto a
``DQNConfig`` (same network shapes, schedule and replay size), builds the Algorithm in the
trial's process (no extra Ray actors: one trial stays one CPU bundle) and reports the metrics
RLlib measures under this workload's names.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from raylab import session
from trainers.dqn_softlinf.ale_probe import life_lost
from trainers.dqn_softlinf.loss import surrogate

try:  # RLlib is a dependency of raylab; importing it costs seconds, so only here
    from ray.rllib.algorithms.dqn.dqn_learner import (
        QF_LOSS_KEY,
        QF_MAX_KEY,
        QF_MEAN_KEY,
        QF_MIN_KEY,
        QF_NEXT_PREDS,
        QF_PREDS,
        QF_TARGET_NEXT_PREDS,
        TD_ERROR_MEAN_KEY,
    )
    from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
    from ray.rllib.callbacks.callbacks import RLlibCallback
    from ray.rllib.core.columns import Columns
    from ray.rllib.env.wrappers.atari_wrappers import EpisodicLifeEnv
    from ray.rllib.utils.metrics import TD_ERROR_KEY
except ImportError as err:  # pragma: no cover - a broken install
    raise ImportError(f"backend rllib needs ray[rllib]: {err}") from err

import gymnasium
import torch

TD_ERROR_MAX_KEY = "td_error_max"


class SurrogateDQNLearner(DQNTorchLearner):
    """RLlib's DQN learner with the regression loss chosen by ``learner_config_dict['loss']``."""

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        if config.num_atoms > 1:  # distributional DQN has its own loss; leave it to RLlib
            return super().compute_loss_for_module(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        settings = config.learner_config_dict
        q_selected = torch.gather(fwd_out[QF_PREDS], -1, batch[Columns.ACTIONS].view(-1, 1).long()).squeeze(-1)
        q_target_next = fwd_out[QF_TARGET_NEXT_PREDS]
        if config.double_q:
            best = fwd_out[QF_NEXT_PREDS].argmax(-1, keepdim=True)
        else:
            best = q_target_next.argmax(-1, keepdim=True)
        q_next = torch.gather(q_target_next, -1, best).squeeze(-1)
        q_next = torch.nan_to_num(q_next, neginf=0.0)
        reward = batch[Columns.REWARDS]
        if settings.get("reward_clip", False):
            reward = reward.clamp(-1.0, 1.0)
        y = (reward + config.gamma ** batch["n_step"] * (1.0 - batch[Columns.TERMINATEDS].float()) * q_next).detach()
        td = q_selected - y
        weights = batch.get("weights")
        if Columns.LOSS_MASK in batch:
            mask = batch[Columns.LOSS_MASK]
            td_used, weights = td[mask], (weights[mask] if weights is not None else None)
        else:
            td_used = td
        loss = surrogate(
            settings.get("loss", "huber"),
            td_used,
            beta=settings.get("beta", 10.0),
            beta_scale=settings.get("beta_scale", "reward"),
            huber_delta=settings.get("huber_delta", 1.0),
            weights=weights,
        )
        td_error = td.abs()
        # Per-sample |TD| as RLlib logs it: prioritized replay updates its priorities from it.
        self.metrics.log_value(key=(module_id, TD_ERROR_KEY), value=td_error, reduce="item_series")
        self.metrics.log_dict(
            {
                QF_LOSS_KEY: loss,
                QF_MEAN_KEY: q_selected.mean(),
                QF_MAX_KEY: q_selected.max(),
                QF_MIN_KEY: q_selected.min(),
                TD_ERROR_MEAN_KEY: td_error.mean(),
                TD_ERROR_MAX_KEY: td_error.max(),
            },
            key=module_id,
            window=1,
        )
        return loss


GAME_RETURN_KEY = "game_return"


class GameReturn(gymnasium.Wrapper):
    """Adds ``info['game_return']``, the unclipped score of the whole game, at its last step.

    Wrapped *inside* the episodic-life wrapper, it sees the game go on across lives (a lost
    life's "reset" is a no-op step there, not a reset here)."""

    def __init__(self, env):
        super().__init__(env)
        self.total = 0.0

    def reset(self, **kwargs):
        self.total = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total += float(reward)
        if terminated or truncated:
            info = {**info, GAME_RETURN_KEY: self.total}
        return obs, reward, terminated, truncated, info


class GameReturnCallback(RLlibCallback):
    """Logs each finished game's whole score as the env runner's ``game_return`` (mean of the
    last 100)."""

    def on_episode_end(self, *, episode, metrics_logger=None, **kwargs):
        info = episode.get_infos(-1)
        if metrics_logger is not None and isinstance(info, dict) and GAME_RETURN_KEY in info:
            metrics_logger.log_value(GAME_RETURN_KEY, info[GAME_RETURN_KEY], reduce="mean", window=100)


def _env_creator(env_config: dict):
    """An RLlib env: an Atari game with the DQN preprocessing, or a gymnasium id.

    Atari: RLlib's own wrappers (``wrap_atari_for_new_api_stack``'s chain: time limit, 84x84
    grayscale, [-1, 1] floats, frame skip with max-pool, no-op starts, FIRE at reset, frame
    stack), with ``GameReturn`` below the episodic-life wrapper and that wrapper only where
    ``episodic_life`` (training) is on.
    """
    if env_config["suite"] != "atari":
        from trainers.dqn_softlinf import envs  # noqa: F401 - registers raylab/FeatureMDP-v0

        return GameReturn(_agent_step_limit(gymnasium.make(env_config["game"]), env_config))
    import ale_py
    from ray.rllib.env.wrappers import atari_wrappers as aw

    from trainers.dqn_softlinf.envs import ale_rom_name

    gymnasium.register_envs(ale_py)
    env = gymnasium.make(
        f"ALE/{_ale_env_name(ale_rom_name(env_config['game']))}-v5",
        frameskip=1,
        repeat_action_probability=env_config["sticky_action_prob"],
        full_action_space=env_config["full_action_space"],
    )
    env = gymnasium.wrappers.TimeLimit(env, max_episode_steps=env_config["max_episode_frames"])
    env = aw.NormalizedImageEnv(aw.WarpFrame(env, dim=env_config["screen_size"], grayscale=True))
    if env_config["frame_skip"] > 1:
        env = aw.MaxAndSkipEnv(env, skip=env_config["frame_skip"])
    if env_config["noop_max"]:  # RLlib's NoopResetEnv plays 1..noop_max agent steps: none at 0
        env = aw.NoopResetEnv(env, noop_max=env_config["noop_max"])
    env = GameReturn(_agent_step_limit(env, env_config))
    fire = env_config["fire_reset"] and "FIRE" in env.unwrapped.get_action_meanings()
    if env_config["episodic_life"]:
        env = EpisodicLife(env)  # a lost life ends the episode; FireResetEnv presses FIRE after it
    elif fire:
        env = FireAfterLifeLoss(env)  # the game goes on: FIRE is the next action, as in the raylab loop
    if fire:
        env = aw.FireResetEnv(env)
    return aw.FrameStack(env, k=env_config["frame_stack"])


def _agent_step_limit(env, env_config: dict):
    """Evaluation: cut an episode after ``eval_max_steps`` agent steps (counted as it stands)."""
    limit = env_config.get("max_agent_steps")
    return gymnasium.wrappers.TimeLimit(env, max_episode_steps=limit) if limit else env


class FireAfterLifeLoss(gymnasium.Wrapper):
    """After a lost life (``0 < lives' < lives``) the next action is FIRE, the game going on:
    what the raylab loop does in evaluation, and in training without episodic life. Without it
    Breakout's evaluation stalls after the first lost life (no new ball until FIRE)."""

    def __init__(self, env):
        super().__init__(env)
        self.fire = env.unwrapped.get_action_meanings().index("FIRE")
        self.lives, self.fire_next = 0, False

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.lives, self.fire_next = self.env.unwrapped.ale.lives(), False
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(self.fire if self.fire_next else action)
        lives = self.env.unwrapped.ale.lives()
        self.fire_next = bool(life_lost(self.lives, lives)) and not (terminated or truncated)
        self.lives = lives
        return obs, reward, terminated, truncated, info


class EpisodicLife(EpisodicLifeEnv):
    """RLlib's EpisodicLifeEnv, also really resetting after a time-limit truncation (RLlib's
    resets only after ``terminated``, so a truncated game would go on past its limit)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.was_real_terminated = self.was_real_terminated or truncated
        return obs, reward, terminated, truncated, info


def nature_cnn_filters() -> list:
    """The Nature CNN's conv stack in RLlib's format, with "valid" padding (3,136 features)."""
    return [[32, [8, 8], 4, "valid"], [64, [4, 4], 2, "valid"], [64, [3, 3], 1, "valid"]]


def learner_gpus() -> int:
    """GPUs for the (local) learner: the trial's GPU where CUDA is visible, else none."""
    return 1 if torch.cuda.is_available() else 0


def _ale_env_name(rom: str) -> str:
    return "".join(part.capitalize() for part in rom.split("_"))


def dqn_config(cfg):
    """This workload's Config as an RLlib ``DQNConfig`` (one process: no remote env runners)."""
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    from trainers.dqn_softlinf.envs import env_seed

    register_env("raylab_dqn_env", _env_creator)
    atari = cfg.suite == "atari"
    if atari:
        model = DefaultModelConfig(
            conv_filters=nature_cnn_filters(),
            conv_activation="relu",
            head_fcnet_hiddens=[512],
            head_fcnet_activation="relu",
        )
    else:
        model = DefaultModelConfig(fcnet_hiddens=list(cfg.mlp_hidden), fcnet_activation="relu", head_fcnet_hiddens=[])
    eps_steps = max(1, int(cfg.epsilon_fraction * cfg.total_steps))
    env_config = {
        "suite": cfg.suite,
        "game": cfg.game,
        "sticky_action_prob": cfg.sticky_action_prob,
        "screen_size": cfg.screen_size,
        "frame_skip": cfg.frame_skip,
        "frame_stack": cfg.frame_stack,
        "max_episode_frames": cfg.max_episode_frames,
        "noop_max": cfg.noop_max,
        "fire_reset": cfg.fire_reset,
        "episodic_life": cfg.episodic_life,
        "full_action_space": cfg.full_action_space,
    }
    config = (
        DQNConfig()
        .environment("raylab_dqn_env", env_config=env_config)
        .callbacks(GameReturnCallback)
        .framework("torch")
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=cfg.num_envs,
            rollout_fragment_length=max(1, cfg.train_every // cfg.num_envs) if cfg.train_every >= cfg.num_envs else 1,
        )
        .learners(
            num_learners=0,
            learner_class=SurrogateDQNLearner,
            num_gpus_per_learner=learner_gpus(),
            learner_config_dict={
                "loss": cfg.loss,
                "beta": cfg.beta,
                "beta_scale": cfg.beta_scale,
                "huber_delta": cfg.huber_delta,
                "reward_clip": cfg.reward_clip,
            },
        )
        .rl_module(model_config=model)
        .training(
            gamma=cfg.gamma,
            lr=cfg.lr,
            adam_epsilon=cfg.adam_eps,
            train_batch_size_per_learner=cfg.batch_size,
            grad_clip=cfg.max_grad_norm or None,
            target_network_update_freq=cfg.target_period,
            num_steps_sampled_before_learning_starts=cfg.learning_starts,
            double_q=cfg.double_dqn,
            dueling=False,
            n_step=1,
            noisy=False,
            num_atoms=1,
            epsilon=[(0, cfg.epsilon_start)]
            + ([(h, cfg.epsilon_start)] if (h := cfg.epsilon_decay_start) else [])
            + [(h + eps_steps, cfg.epsilon_end)],
            replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": cfg.buffer_size},
            training_intensity=cfg.batch_size / cfg.train_every,
        )
        .reporting(min_sample_timesteps_per_iteration=cfg.report_every, min_time_s_per_iteration=0)
        .evaluation(
            evaluation_interval=max(1, cfg.eval_every // cfg.report_every),
            evaluation_duration=cfg.eval_episodes,
            evaluation_duration_unit="episodes",
            evaluation_num_env_runners=0,
            evaluation_config=DQNConfig.overrides(
                explore=True,
                epsilon=[(0, cfg.eval_epsilon)],
                num_envs_per_env_runner=1,
                env_config={**env_config, "episodic_life": False, "max_agent_steps": cfg.eval_max_steps},
            ),
        )
        # RLlib seeds env j of a runner with seed + j: a hashed block keeps trial seeds apart
        .debugging(seed=env_seed(cfg.seed, 0))
    )
    return config


def train_rllib(cfg, raw_config: dict) -> None:
    """Run RLlib's DQN with the chosen surrogate, reporting under this workload's metric names.

    Reported: env/steps, perf/env_steps_per_s, episode/return_mean (whole-game scores of the
    last 100 training games), eval/return_mean (``eval_episodes`` whole games at
    ``eval_epsilon``, one after another, every ``eval_every // report_every`` iterations on a
    local evaluation env runner; rows in between repeat the latest), train/loss, train/q_mean,
    bellman/td_error_max_batch (the largest |TD| of the last training batch: in-sample, one
    sample, one batch).
    Checkpoints hold RLlib's full Algorithm state (networks, optimizer, counters); the replay
    buffer is not included (RLlib's default), so a resumed trial refills it.
    """
    from trainers.dqn_softlinf.preflight import preflight

    preflight(cfg)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    algo = dqn_config(cfg).build_algo()
    state = session.restore()
    last_eval = None
    if state is not None:
        algo.set_state(_from_checkpoint(state["algorithm"]))
        last_eval = state.get("last_eval")
    steps, clock = 0, time.perf_counter()
    try:
        while steps < cfg.total_steps:
            for _ in range(cfg.rllib_iterations_per_report):
                result = algo.train()
            runners = result.get("env_runners", {})
            learner = result.get("learners", {}).get("default_policy", {})
            before, steps = steps, int(runners.get("num_env_steps_sampled_lifetime", 0))
            elapsed, clock = time.perf_counter() - clock, time.perf_counter()
            metrics = {"env/steps": steps, "perf/env_steps_per_s": (steps - before) / max(elapsed, 1e-9)}
            if np.isfinite(runners.get(GAME_RETURN_KEY, np.nan)):
                metrics["episode/return_mean"] = float(runners[GAME_RETURN_KEY])
            evaluation = result.get("evaluation", {}).get("env_runners", {})
            if np.isfinite(evaluation.get(GAME_RETURN_KEY, np.nan)):
                last_eval = float(evaluation[GAME_RETURN_KEY])
            if last_eval is not None:
                metrics["eval/return_mean"] = last_eval
            if "qf_loss" in learner:
                metrics["train/loss"] = float(learner["qf_loss"])
                metrics["train/q_mean"] = float(learner["qf_mean"])
                metrics["bellman/td_error_max_batch"] = float(learner.get(TD_ERROR_MAX_KEY, np.nan))
            last = steps >= cfg.total_steps
            session.report(
                metrics,
                state=lambda: {
                    "algorithm": _to_checkpoint(algo.get_state()),
                    "last_eval": last_eval,
                    "config": raw_config,
                },
                checkpoint=True if last else None,
            )
    finally:
        algo.stop()


def _to_checkpoint(value: Any) -> Any:
    """RLlib state as checkpoint-safe values: numpy arrays become tensors (tagged)."""
    if isinstance(value, dict):
        return {k: _to_checkpoint(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [_to_checkpoint(v) for v in value]
        return {"__tuple__": out} if isinstance(value, tuple) else out
    if isinstance(value, np.ndarray):
        return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(value).copy()), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_checkpoint(value: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return value["__ndarray__"].numpy().astype(value["dtype"])
        if "__tuple__" in value:
            return tuple(_from_checkpoint(v) for v in value["__tuple__"])
        return {k: _from_checkpoint(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_checkpoint(v) for v in value]
    return value
