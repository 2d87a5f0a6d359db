"""Config of the dqn_softlinf workload: DQN with an MSE, Huber or soft-linf inner-loop surrogate.

Defaults are CleanRL's ``dqn_atari.py`` settings (the Nature CNN and preprocessing, with
CleanRL's schedule and optimizer): 10M agent steps, 1M replay, Adam lr 1e-4, target period
1000 agent steps, one update every 4 steps from 80k steps on, epsilon 1 -> 0.01 over the first
10%, evaluation at epsilon 0.01, batch 32, gamma 0.99. Nature's own settings (RMSProp 2.5e-4,
target period 10,000, learning from 50k, epsilon to 0.1 over 1M steps, 50M steps) are the
experiment file ``dqn_softlinf_nature``; the workload page's protocol table lists them side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from raylab.config import check, require_at_least

RLLIB_USES = {
    "optimizer": "adam",
    "adam_eps": 1e-8,
    "rmsprop_alpha": 0.95,
    "rmsprop_eps": 0.01,
    "rmsprop_centered": True,
    "loss_reduction": "mean",
    "amp_bf16": False,
    "compile": False,
    "checkpoint_replay": False,
    "probe_size": 0,
    "heldout_size": 0,
    "expected_states": 0,
    "shared_states": 0,
    "frame_marks": (),
}
"""What backend rllib runs for these fields whatever they say: RLlib's DQN learner builds
``torch.optim.Adam(params)`` (eps 1e-8: ``DQNConfig.adam_epsilon`` is not read by the new API
stack's learner) in float32, uncompiled, and this workload's learner reduces the surrogate by
the mean; RLlib's checkpoints hold no replay; the probes (in-sample, held-out, expected,
shared) and the frame marks are the raylab loop's. A config that asks for anything else with
backend rllib is refused, not run as something it did not ask for."""

RLLIB_OFF = {
    k: v
    for k, v in RLLIB_USES.items()
    if k in ("checkpoint_replay", "probe_size", "heldout_size", "expected_states", "shared_states", "frame_marks")
}
"""What an experiment with backend rllib sets, the raylab loop's defaults being on."""

RAYLAB_ONLY = (
    "expected_samples",
    "shared_seed",
    "shared_stride",
    "channels_last",
    "overlap_env",
    "env_threads",
    "replay_on_device",
    "cuda_graph",
)
"""Fields only the raylab loop reads (probe sizes that matter only with a probe on, and the
loop's own speed settings): with backend rllib they must stay at their defaults."""


def rllib_ignored(cfg) -> list[str]:
    """The fields backend rllib would drop or run differently from what ``cfg`` asks, in field
    order: ``RLLIB_USES`` fields off RLlib's value, ``RAYLAB_ONLY`` fields off their default."""
    defaults = {f.name: f.default for f in fields(cfg)}
    return [
        f.name
        for f in fields(cfg)
        if (f.name in RLLIB_USES and _differs(getattr(cfg, f.name), RLLIB_USES[f.name]))
        or (f.name in RAYLAB_ONLY and _differs(getattr(cfg, f.name), defaults[f.name]))
    ]


def _differs(value, used) -> bool:
    return tuple(value) != tuple(used) if isinstance(used, tuple) else value != used


@dataclass(frozen=True)
class Config:
    # ------------------------------------------------------------------ what is trained
    backend: Literal["raylab", "rllib"] = "raylab"
    """raylab: this workload's own loop (loop.py). rllib: RLlib's DQN with this workload's
    losses through a DQNTorchLearner subclass (rllib_learner.py), for users who run RLlib."""
    suite: Literal["atari", "gymnasium"] = "atari"
    """atari: an ALE game through ale_py's AtariVectorEnv (Nature CNN on 84x84x4 frames).
    gymnasium: a gymnasium environment with a flat observation (CartPole-v1...) and an MLP."""
    game: str = "Pong"
    """The ALE game (Pong, Breakout, MsPacman or ms_pacman...) or, with suite gymnasium, the
    gymnasium id (CartPole-v1)."""
    loss: Literal["mse", "huber", "l1", "soft_linf"] = "soft_linf"
    """The inner-loop surrogate minimized on the TD errors against the frozen target."""
    beta: float = 10.0
    """soft_linf temperature: larger is closer to the max of |TD| over the batch, smaller to
    the mean. Units: 1/reward with beta_scale reward."""
    beta_scale: Literal["reward", "td_mean"] = "reward"
    """How beta relates to the reward scale. reward: beta is used as given (rewards clipped
    to [-1, 1], so |TD| is O(1)). td_mean: beta is divided by the batch's mean |TD|, a
    scale-free temperature."""
    huber_delta: float = 1.0
    """Where the Huber loss turns from quadratic to linear."""
    double_dqn: bool = False
    """Double DQN targets: the online network picks the next action, the target network
    values it. Off in Nature DQN."""
    seed: int = 0
    """Seeds the networks, exploration, replay sampling and the environments."""

    # ------------------------------------------------------------------ DQN schedule
    total_steps: int = 10_000_000
    """Agent steps (each is frame_skip emulator frames on Atari) summed over all envs."""
    num_envs: int = 8
    """Environments stepped together; actions for all are chosen in one forward pass."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (split evenly among the envs)."""
    learning_starts: int = 80_000
    """Agent steps of experience collected before the first update."""
    train_every: int = 4
    """Agent steps per gradient update (summed over envs)."""
    batch_size: int = 32
    """Transitions per gradient update."""
    gamma: float = 0.99
    """Discount factor."""
    optimizer: Literal["adam", "rmsprop"] = "adam"
    """adam (CleanRL, torch.optim.Adam) or rmsprop (Nature: RMSProp with its epsilon inside
    the square root, optim.CenteredRMSprop; torch's RMSprop adds it outside)."""
    lr: float = 1e-4
    """Learning rate of the optimizer."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    rmsprop_alpha: float = 0.95
    """RMSProp's squared-gradient decay (Nature and Dopamine: 0.95)."""
    rmsprop_eps: float = 0.01
    """RMSProp epsilon, inside the square root: ``g / sqrt(v - m^2 + eps)``. Nature: 0.01 on the
    summed batch gradient (``loss_reduction: sum``); the same step on a mean loss is
    0.01 / batch_size^2 (Dopamine: 1e-5)."""
    rmsprop_centered: bool = True
    """Centered RMSProp (divide by the gradient's standard deviation, as Nature and Dopamine)."""
    loss_reduction: Literal["mean", "sum"] = "mean"
    """How the surrogate reduces the batch. mean: as loss.py defines it. sum: batch_size times
    that, the per-sample losses summed for mse, huber and l1 (Nature's Lua DQN: ``nn``'s
    backward sums the batch gradient; soft_linf is scaled by the same factor). Only the
    gradient's scale changes, which RMSProp's epsilon and Adam's are measured against."""
    max_grad_norm: float = 0.0
    """Clip the global gradient norm to this value; 0 turns clipping off (Nature DQN)."""
    target_period: int = 1000
    """Agent steps between hard target-network updates: one inner regression loop each."""
    epsilon_start: float = 1.0
    """Exploration epsilon at the first step."""
    epsilon_end: float = 0.01
    """Exploration epsilon after the linear decay."""
    epsilon_fraction: float = 0.10
    """Fraction of total_steps over which epsilon decays linearly."""
    epsilon_decay_start: int = 0
    """Agent steps at epsilon_start before the linear decay begins (CleanRL: 0; Nature's Lua
    DQN and Dopamine: learning_starts, so the 50k warm-up steps are uniformly random)."""
    reward_clip: bool = True
    """Clip training rewards to [-1, 1] (returns are always reported unclipped)."""

    # ------------------------------------------------------------------ networks
    mlp_hidden: tuple[int, ...] = (120, 84)
    """Hidden layer widths of the MLP Q-network (suite gymnasium only)."""
    channels_last: bool = True
    """Run the Nature CNN's convolutions in NHWC layout: same results, faster (Atari only)."""
    amp_bf16: bool = False
    """Run acting and the updates' forward/backward passes under bfloat16 autocast (weights,
    optimizer, losses and all probe measurements stay float32). For GPUs and for CPUs with
    AVX512-BF16 or AMX only: on such a CPU the update ran at 1.3x float32's, and with those
    kernels off (a CPU without bfloat16 instructions) at 0.12x, i.e. much slower
    (benchmarks/bf16_update.py). It changes the arithmetic, so off by default."""
    compile: bool = False
    """torch.compile the Q-network (helps on GPU; on CPU it mostly adds compile time); if
    compilation fails (no C compiler, an unsupported op) one warning line and eager mode."""
    torch_threads: int = 0
    """torch intra-op threads; 0 leaves torch's default (one per core)."""
    replay_on_device: bool | Literal["auto"] = "auto"
    """Keep the replay on the trial's device and draw, gather and act there (device_replay.py):
    per update nothing is copied and nothing read back; per vector step one read, the actions.
    auto: on a CUDA device only. false: a numpy ring on the host, each batch sent in two copies.
    true on a CPU device runs the device code on host tensors (numpy's draws are replaced by
    torch's: other batches, the same distribution)."""
    cuda_graph: bool | Literal["auto"] = "auto"
    """Capture the update (batch draw and gather, forward, backward, optimizer step) as one CUDA
    graph after 3 eager updates, and replay it (cuda_graph.py); needs the replay on the device.
    auto: on a CUDA device with the replay there. On a CPU device there is nothing to capture:
    true warns once and the update runs eagerly."""

    # ------------------------------------------------------------------ Atari preprocessing
    frame_skip: int = 4
    """Emulator frames per agent step (max-pooled over the last two)."""
    frame_stack: int = 4
    """Frames stacked into one observation."""
    screen_size: int = 84
    """Observation frames are screen_size x screen_size grayscale."""
    noop_max: int = 30
    """A reset plays a uniform draw from 0 .. noop_max - 1 emulator frames of no-op, FIRE
    counting as the first where fire_reset presses it (ALE's AtariVectorEnv); 0 turns no-op
    starts off."""
    episodic_life: bool = True
    """A lost life ends the TD target's bootstrap (terminal for learning) while the game goes
    on; returns are counted over whole games."""
    fire_reset: bool = True
    """Press FIRE after a reset and after a lost life in games that need it."""
    sticky_action_prob: float = 0.0
    """Probability that the emulator repeats the previous action (0.25 per Machado et al.)."""
    full_action_space: bool = False
    """All 18 ALE actions (Machado et al.'s recommendation) instead of the game's minimal set."""
    max_episode_frames: int = 108_000
    """Emulator frames after which an episode is truncated (30 minutes of play)."""
    env_threads: int = 0
    """Threads stepping the Atari emulators; 0 chooses one per env up to the core count."""
    overlap_env: bool = True
    """Step the Atari emulators (in their own threads) while the network update runs."""

    # ------------------------------------------------------------------ measurements
    report_every: int = 50_000
    """Agent steps between metric reports (and checkpoints, at the experiment's cadence)."""
    probe_size: int = 512
    """Replay transitions in the in-sample probe set (``*_insample`` metrics and ``inner/*``),
    drawn with the probe's own generator (training is the same whatever its size) and redrawn
    at every target-network update; 0 turns it off."""
    heldout_size: int = 4096
    """Transitions of the held-out probe (Atari only; 0 turns it off): a separate game played
    by the behaviour policy whose transitions are never trained on (heldout.py)."""
    expected_states: int = 256
    """Held-out states at which TQ is estimated from ``expected_samples`` redrawn successors
    (emulator state restored), for ``bellman/residual_linf_expected``; 0 turns it off."""
    expected_samples: int = 8
    """K: successors drawn per state for ``bellman/residual_linf_expected`` and the shared set."""
    shared_states: int = 256
    """States of the shared held-out set (Atari only; 0 turns it off): played by a fixed policy
    (uniformly random actions) from a seed that depends on ``shared_seed`` only, so every trial
    of a sweep on the same game and environment settings scores its network on the same states,
    actions and K redrawn successors (shared_states.py): ``bellman/residual_linf_shared*``."""
    shared_stride: int = 4
    """The fixed policy's agent steps between two states it keeps for the shared set."""
    shared_seed: int = 0
    """Seeds the shared set's game, policy and redraws; the same in every trial of a sweep."""
    frame_marks: tuple[int, ...] = ()
    """Emulator frames (agent steps x frame_skip) at which ``episode/return_mean`` (the last 100
    training games) is also kept as ``episode/return_mean_at_<N>M_frames``, repeated in every
    later row: Machado et al.'s statistic at their budgets (10M and 50M frames). Each mark must
    fall on a report (a multiple of frame_skip x report_every) within total_steps."""
    eval_every: int = 250_000
    """Agent steps between evaluations (at least one per trial: the first report)."""
    eval_episodes: int = 10
    """Episodes per evaluation, run in parallel, one per environment."""
    eval_epsilon: float = 0.01
    """Exploration epsilon during evaluation (CleanRL evaluates at its final training epsilon,
    0.01; Nature at 0.05; Dopamine's sticky-action runs at 0.001)."""
    eval_max_steps: int = 27_000
    """Agent steps after which an evaluation episode is cut off and counted as it stands."""

    # ------------------------------------------------------------------ checkpoints
    checkpoint_replay: bool = True
    """Save the replay contents in checkpoints, so a resumed trial continues with its data.
    Turn off for huge buffers: a resumed trial then refills the replay from scratch."""

    # ------------------------------------------------------------------ rllib backend
    rllib_iterations_per_report: int = 1
    """backend rllib: Algorithm.train() calls between reports."""

    def __post_init__(self):
        positive = (
            "total_steps",
            "num_envs",
            "buffer_size",
            "train_every",
            "batch_size",
            "target_period",
            "frame_skip",
            "frame_stack",
            "screen_size",
            "max_episode_frames",
            "report_every",
            "eval_every",
            "shared_stride",
            "eval_episodes",
            "eval_max_steps",
            "rllib_iterations_per_report",
        )
        require_at_least(self, 1, *positive)
        check(self.learning_starts >= 0, "learning_starts", f"must be >= 0, got {self.learning_starts}")
        check(
            self.learning_starts < self.total_steps,
            "learning_starts",
            f"({self.learning_starts}) is beyond total_steps ({self.total_steps}): nothing would train",
        )
        ignored = rllib_ignored(self) if self.backend == "rllib" else []
        check(
            not ignored,
            ignored[0] if ignored else "",
            f"backend rllib would ignore {', '.join(f'{k}={_show(getattr(self, k))}' for k in ignored)} "
            f"(RLlib's DQN learner runs torch Adam, eps 1e-8, on the mean loss, in float32; its "
            f"checkpoints hold no replay; the probes and frame marks are the raylab loop's); use "
            f"backend raylab, or set {', '.join(f'{k}: {_show(_rllib_value(k))}' for k in ignored)}",
        )
        check(
            not (self.optimizer == "rmsprop" and self.loss_reduction == "mean" and self.rmsprop_eps == 0.01),
            "rmsprop_eps",
            f"0.01 is Nature's epsilon for the summed batch gradient; with loss_reduction: mean the "
            f"gradient is {self.batch_size}x smaller and the epsilon is not, so the step is a fraction of "
            f"Nature's: set loss_reduction: sum (the Lua DQN's rule) or rmsprop_eps: "
            f"{0.01 / self.batch_size**2:.3g} (0.01 / batch_size^2; Dopamine: 1e-05)",
        )
        check(self.beta > 0, "beta", f"must be > 0, got {self.beta}")
        check(self.huber_delta > 0, "huber_delta", f"must be > 0, got {self.huber_delta}")
        check(0 < self.gamma < 1, "gamma", f"must be in (0, 1), got {self.gamma}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(self.adam_eps > 0, "adam_eps", f"must be > 0, got {self.adam_eps}")
        check(self.rmsprop_eps > 0, "rmsprop_eps", f"must be > 0, got {self.rmsprop_eps}")
        check(0 < self.rmsprop_alpha < 1, "rmsprop_alpha", f"must be in (0, 1), got {self.rmsprop_alpha}")
        for key in (
            "probe_size",
            "heldout_size",
            "expected_states",
            "expected_samples",
            "shared_states",
            "shared_seed",
            "epsilon_decay_start",
        ):
            check(getattr(self, key) >= 0, key, f"must be >= 0, got {getattr(self, key)}")
        check(self.max_grad_norm >= 0, "max_grad_norm", f"must be >= 0, got {self.max_grad_norm}")
        for key in ("epsilon_start", "epsilon_end", "eval_epsilon", "sticky_action_prob"):
            value = getattr(self, key)
            check(0 <= value <= 1, key, f"must be in [0, 1], got {value}")
        check(0 < self.epsilon_fraction <= 1, "epsilon_fraction", f"must be in (0, 1], got {self.epsilon_fraction}")
        check(self.noop_max >= 0, "noop_max", f"must be >= 0, got {self.noop_max}")
        check(self.env_threads >= 0, "env_threads", f"must be >= 0, got {self.env_threads}")
        check(self.torch_threads >= 0, "torch_threads", f"must be >= 0, got {self.torch_threads}")
        check(all(h >= 1 for h in self.mlp_hidden), "mlp_hidden", f"widths must be >= 1, got {self.mlp_hidden}")
        check(
            self.buffer_size >= self.num_envs * (self.frame_stack + 2),
            "buffer_size",
            f"({self.buffer_size}) must hold at least frame_stack + 2 = {self.frame_stack + 2} "
            f"steps of each of the {self.num_envs} envs",
        )
        check(
            self.batch_size <= self.buffer_size,
            "batch_size",
            f"({self.batch_size}) must be <= buffer_size ({self.buffer_size})",
        )
        check(
            not (self.cuda_graph is True and self.replay_on_device is False),
            "cuda_graph",
            "true needs the replay on the device (replay_on_device: false draws each batch on the host)",
        )
        per_mark = frames_per_step(self) * self.report_every
        for mark in self.frame_marks:
            check(
                mark > 0 and mark % per_mark == 0,
                "frame_marks",
                f"{mark:,} frames is not on a report: use multiples of frames per step x report_every = {per_mark:,}",
            )
            check(
                mark <= frames_per_step(self) * self.total_steps,
                "frame_marks",
                f"{mark:,} frames is beyond total_steps x frames per step = "
                f"{frames_per_step(self) * self.total_steps:,}",
            )


def frames_per_step(cfg) -> int:
    """Emulator frames per agent step: ``frame_skip`` on Atari, 1 on gymnasium envs."""
    return cfg.frame_skip if cfg.suite == "atari" else 1


def frame_mark_metric(frames: int) -> str:
    """``episode/return_mean_at_10M_frames`` for 10,000,000 frames (``_at_2500000_frames`` off the millions)."""
    label = f"{frames // 1_000_000}M" if frames % 1_000_000 == 0 else str(frames)
    return f"episode/return_mean_at_{label}_frames"


def _rllib_value(key: str):
    return RLLIB_USES[key] if key in RLLIB_USES else {f.name: f.default for f in fields(Config)}[key]


def _show(value):
    """A value as YAML writes it (``true``, ``[10000000]``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return list(value) if isinstance(value, tuple) else value
