"""The shared held-out state set: one set of Atari states on which every arm of a sweep is scored.

The held-out probe (heldout.py) plays each trial's own behaviour policy, so two arms' worst
cases come from different states. This set is the same in every trial of a sweep on the same
game and environment settings, without any communication between trials: it is built
deterministically at the start of each trial by a fixed policy, from a seed that depends only
on ``shared_seed``:

- a game of its own (``ale_probe.ALEProbeEnv``, the training preprocessing) is played by
  uniformly random actions (FIRE after a lost life where ``fire_reset`` presses it, as in
  training), every ``shared_stride``-th state is kept with the action the policy takes there,
  until ``shared_states`` are kept (new games as games end);
- at each kept state the emulator is restored and the step redrawn ``expected_samples`` = K
  times (sticky actions drawn with the set's own generator), and the K successors' newest
  frames, clipped rewards and done flags (lost lives as for training) are kept.

Every trial therefore sees the same states, actions and successor draws (common random
numbers): differences between arms are differences between networks, not between the states
or draws they were scored on. At each report, with the current network ``Q`` and
``y_ik = r_ik + gamma (1 - d_ik) max_a' Q(s'_ik, a')``:

- ``bellman/residual_linf_shared`` = ``max_i |Q(s_i, a_i) - ybar_i|`` (the K-sample figure,
  biased upward as heldout.py derives);
- ``bellman/residual_linf_shared_debiased`` = ``max_i sqrt(max(0, (Q_i - ybar_i)^2 - s_i^2/K))``
  (heldout.expected_residuals) and ``bellman/residual_linf_shared_bias_bound`` beside it;
- ``bellman/residual_l2_shared_debiased`` = ``sqrt(max(0, mean_i (Q_i - ybar_i)^2 - s_i^2/K))``,
  the root of an unbiased estimate of the mean squared residual over the set;
- ``bellman/target_std_shared``: mean over the states of the K targets' standard deviation;
- ``bellman/shared_set_id``: a checksum of the set (states, actions, successors, rewards,
  dones), equal in every trial that scored the same set; a comparison across arms checks it.

What it is not: the states of a random policy are early-game states for most games (a random
policy rarely gets far), so the set measures the residual where every arm starts, not where a
trained policy plays; the per-trial held-out probe measures the latter, on each arm's own
states. Memory: ``shared_states x (frame_stack + K)`` frames of 84x84 bytes (256 x 12: 22 MB).
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from trainers.dqn_softlinf.ale_probe import ALEProbeEnv, life_lost
from trainers.dqn_softlinf.heldout import bias_bound, expected_residuals

SHARED_STREAM = 5
"""The env-seed stream of the shared set (loop.py's streams are 0-4)."""


class SharedStates:
    def __init__(self, cfg):
        from trainers.dqn_softlinf.envs import env_seed

        self.k = cfg.expected_samples
        seed = env_seed(cfg.shared_seed, SHARED_STREAM)  # not the trial's seed: the same in every trial
        env = ALEProbeEnv(cfg, seed)
        rng = np.random.default_rng([seed, 1])
        obs, lives = env.reset()
        fire_next, step, kept = False, 0, []
        while len(kept) < cfg.shared_states:
            if fire_next and env.fire_action is not None:
                action = env.fire_action
            else:
                action = int(rng.integers(env.num_actions))
            if step % cfg.shared_stride == 0:
                kept.append((obs, action, env.clone()))
            obs, _, terminated, truncated, next_lives = env.step(action)
            ended = terminated or truncated
            fire_next = bool(life_lost(lives, next_lives)) and not ended
            lives = next_lives
            if ended:
                obs, lives = env.reset()
                fire_next = False
            step += 1
        frames, rewards, dones = [], [], []
        for _, action, snap in kept:
            stacks, r, d = env.successors(snap, action, self.k, cfg.episodic_life, cfg.reward_clip)
            frames.append(stacks[:, -1])  # a successor's stack is the state's stack shifted by this frame
            rewards.append(r)
            dones.append(d)
        self.obs = np.stack([o for o, _, _ in kept])  # (N, stack, h, w) uint8
        self.action = np.array([a for _, a, _ in kept], np.int64)
        self.next_frame = np.stack(frames)  # (N, K, h, w) uint8
        self.reward = np.stack(rewards).astype(np.float32)  # (N, K)
        self.done = np.stack(dones)  # (N, K) bool
        self.set_id = checksum(self.obs, self.action, self.next_frame, self.reward, self.done)

    def __len__(self) -> int:
        return len(self.obs)

    def next_stacks(self, i: int, j: int) -> np.ndarray:
        """The K successor stacks of states ``i .. j-1``: ``((j - i) K, stack, h, w)``."""
        obs, nxt = self.obs[i:j], self.next_frame[i:j]
        n, k = nxt.shape[:2]
        head = np.broadcast_to(obs[:, None, 1:], (n, k, obs.shape[1] - 1, *obs.shape[2:]))
        return np.concatenate([head, nxt[:, :, None]], axis=2).reshape(n * k, *obs.shape[1:])

    @torch.no_grad()
    def targets(self, forward, gamma: float, device, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q(s_i, a_i), y_ik)`` of the network ``forward`` (stacks in, Q-values out) on the set."""
        q = forward(torch.from_numpy(self.obs).to(device)).float()
        q_sa = q.gather(1, torch.from_numpy(self.action).to(device)[:, None]).squeeze(1)
        next_max = torch.cat(
            [
                forward(torch.from_numpy(self.next_stacks(i, i + chunk)).to(device)).float().max(1).values
                for i in range(0, len(self), chunk)
            ]
        ).view(len(self), self.k)
        reward = torch.from_numpy(self.reward).to(device)
        done = torch.from_numpy(self.done).to(device, torch.float32)
        return q_sa, reward + gamma * (1.0 - done) * next_max

    def metrics(self, forward, gamma: float, device) -> dict[str, float]:
        """The reported shared-set metrics (module docstring)."""
        q_sa, y_k = self.targets(forward, gamma, device)
        r = expected_residuals(q_sa, y_k)
        return {
            "bellman/residual_linf_shared": r["expected"].max().item(),
            "bellman/residual_linf_shared_debiased": r["debiased"].max().item(),
            "bellman/residual_linf_shared_bias_bound": bias_bound(r["sample_std"], self.k),
            "bellman/residual_l2_shared_debiased": r["sq_debiased"].mean().clamp_min(0).sqrt().item(),
            "bellman/target_std_shared": r["target_std"].mean().item(),
            "bellman/shared_set_id": float(self.set_id),
        }


def checksum(*arrays: np.ndarray) -> int:
    """CRC-32 of the arrays' bytes, in order (an integer below 2^32, exact as a float)."""
    crc = 0
    for a in arrays:
        crc = zlib.crc32(np.ascontiguousarray(a).tobytes(), crc)
    return crc
