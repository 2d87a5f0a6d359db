"""The held-out probe: Bellman residuals on transitions the network never trains on.

A separate Atari game (``ale_probe.ALEProbeEnv``, the training preprocessing, its own seed
and its own random generator) is stepped once per vector step of the training envs by the
behaviour policy (epsilon-greedy on the current network at the current training epsilon,
FIRE after a lost life as in training). Its transitions go to a small replay of their own
(``heldout_size`` transitions, the newest kept) and never into the training replay, and its
emulator state is saved before every step. At each report, with the current network ``Q`` on
both sides and ``y = r + gamma (1 - done) max_a' Q(s', a')`` (rewards clipped and lives
counted as for the training targets):

- ``bellman/residual_{linf,p99,l2}_heldout``: max, 99th percentile and root mean square of
  ``|Q(s,a) - y|`` over every held-out transition, ``y`` from the one successor recorded:
  held-out, but still a one-sample estimate of ``|Q - TQ|``;
- on ``expected_states`` of them (drawn with the probe's generator), the emulator is put back
  to ``s`` and the step redrawn ``expected_samples`` = K times:
  ``bellman/residual_linf_expected = max |Q(s,a) - mean_k y_k|``, the sup-norm residual
  against a K-sample estimate of ``TQ(s,a) = E[y]``, next to
  ``bellman/residual_linf_sampled_subset`` (the one recorded successor, same states) and
  ``bellman/target_std_expected`` (mean over those states of the K targets' standard
  deviation: 0 exactly when the emulator is deterministic, as without sticky actions).

``|Q - mean_k y_k|`` still carries the noise of K draws, ``e = mean_k y_k - TQ`` with
standard deviation ``std(y) / sqrt(K)``. At one state its expectation exceeds ``|Q - TQ|`` by
at most ``std(y) / sqrt(K)``; the max over ``m`` states is biased upward (never downward:
``E max |d + e| >= max |d|``) by at most ``E max_i |e_i|``, which for m = 256 Gaussian errors
is about 2.8-3 ``std(y) / sqrt(K)`` (at most ``sqrt(2 ln 2m) = 3.5`` times the largest), not
one. Checked against the exact value on FeatureMDP (72 pairs, K = 8, a test): at Q = Q* the
estimate's bias is 3.2 mean ``std(y) / sqrt(K)``, within that bound. Still a floor K times smaller in variance than the one-sample figure's.

So the same states are also reported **debiased** (``expected_residuals``): per state,
``sqrt(max(0, (Q - ybar)^2 - s^2 / K))`` with ``s^2`` the K targets' sample variance, whose
square is unbiased for ``(Q - TQ)^2`` at that state (``E (Q - ybar)^2 = (Q - TQ)^2 + var(y) / K``,
``E s^2 = var(y)``), and the maximum over states of that as
``bellman/residual_linf_expected_debiased``; the bound ``sqrt(2 ln 2m) max_i s_i / sqrt(K)`` on
the plain figure's bias is reported beside it as ``bellman/residual_linf_expected_bias_bound``.
The debiased maximum is still a maximum of noisy numbers, so not unbiased for
``max |Q - TQ|``: on FeatureMDP at ``Q = Q*`` (72 pairs, K = 8) it averages 0.88 against the
plain figure's 1.21 (a test), lower but not 0. What is unbiased is the mean of the debiased
squares: ``bellman/residual_l2_expected_debiased = sqrt(max(0, mean_i (Q_i - ybar_i)^2 - s_i^2/K))``
estimates the root mean square residual over the states without the noise floor.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from trainers.dqn_softlinf.ale_probe import ALEProbeEnv, life_lost
from trainers.dqn_softlinf.replay import FrameReplay


def expected_residuals(q_sa: torch.Tensor, y_k: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per state ``i`` with the network's ``Q_i = Q(s_i, a_i)`` (shape ``(m,)``) and ``K`` sampled
    targets ``y_ik`` (shape ``(m, K)``):

    - ``expected_i = |Q_i - ybar_i|``, ``ybar_i = (1/K) sum_k y_ik``;
    - ``debiased_i = sqrt(max(0, (Q_i - ybar_i)^2 - s_i^2 / K))``,
      ``s_i^2 = 1/(K-1) sum_k (y_ik - ybar_i)^2`` (``E[(Q_i - ybar_i)^2 - s_i^2/K] = (Q_i - TQ_i)^2``);
      with ``K = 1`` no variance can be estimated and ``debiased = expected``;
    - ``target_std_i``: the K targets' standard deviation (``1/K`` normalization, 0 when all
      K successors are the same), and ``sample_std_i = s_i``.
    """
    k = y_k.shape[1]
    diff = q_sa - y_k.mean(1)
    sample_var = y_k.var(1, correction=1) if k > 1 else torch.zeros_like(diff)
    debiased = (diff.square() - sample_var / k).clamp_min(0).sqrt()
    return {
        "expected": diff.abs(),
        "debiased": debiased,
        "target_std": y_k.std(1, correction=0),
        "sample_std": sample_var.sqrt(),
        "sq_debiased": diff.square() - sample_var / k,
    }


def bias_bound(sample_std: torch.Tensor, k: int) -> float:
    """Bound on the upward bias of ``max_i |Q_i - ybar_i|`` over ``m`` states:
    ``E max_i |e_i| <= sqrt(2 ln 2m) max_i sigma_i / sqrt(K)`` for Gaussian errors ``e_i`` of
    standard deviations ``sigma_i / sqrt(K)`` (the sample standard deviations stand in for
    ``sigma_i``). NaN with ``K = 1``."""
    m = len(sample_std)
    if k < 2 or m == 0:
        return math.nan
    return float(math.sqrt(2 * math.log(2 * m)) * sample_std.max().item() / math.sqrt(k))


class HeldoutProbe:
    def __init__(self, cfg, seed: int):
        self.cfg = cfg
        self.env = ALEProbeEnv(cfg, seed)
        self.rng = np.random.default_rng([seed, 7])  # epsilon and the expected-residual states
        k = cfg.frame_stack
        self.replay = FrameReplay(cfg.heldout_size + k + 2, 1, (cfg.screen_size,) * 2, np.uint8, k)
        self.snaps: list = [None] * self.replay.rows
        self._start()

    def _start(self) -> None:
        self.obs, self.lives = self.env.reset()
        self.fire_next = False
        self.replay.add_observation(self.obs[-1][None], np.ones(1, bool), np.zeros(1, bool))

    def step(self, greedy, epsilon: float) -> None:
        """One behaviour-policy step; ``greedy(stacks) -> actions`` is the current network's."""
        self.advance(self.choose(greedy, epsilon))

    def choose(self, greedy, epsilon: float) -> int:
        """The behaviour policy's action at the current observation (the network, if it is
        needed, runs here: in the caller's thread)."""
        env = self.env
        if self.fire_next and env.fire_action is not None:
            return env.fire_action
        if self.rng.random() < epsilon:
            return int(self.rng.integers(env.num_actions))
        return int(greedy(self.obs[None])[0])

    def advance(self, action: int) -> None:
        """Save the emulator's state, step it with ``action`` and record the transition: no
        tensor, no network (the loop runs it in a thread of its own, beside the update)."""
        env = self.env
        self.snaps[(self.replay.count - 1) % self.replay.rows] = env.clone()
        obs, reward, terminated, truncated, lives = env.step(action)
        ended = terminated or truncated
        lost = bool(life_lost(self.lives, lives)) and not ended
        done = terminated or (self.cfg.episodic_life and lost)
        reward = float(np.clip(reward, -1, 1)) if self.cfg.reward_clip else reward
        self.replay.set_step(np.array([action]), np.array([reward], np.float32), np.array([done]))
        self.replay.add_observation(obs[-1][None], np.zeros(1, bool), np.array([ended]))
        self.obs, self.lives, self.fire_next = obs, lives, lost
        if ended:
            self._start()

    def __len__(self) -> int:
        return len(self.replay.transition_index()[0]) if self.replay.can_sample() else 0

    def residuals(self, forward, gamma: float, device) -> dict[str, torch.Tensor] | None:
        """Per-transition held-out residuals of the network ``forward`` (batched, no grad):
        ``sampled`` over every held-out transition; on the redrawn subset ``pick``,
        ``expected`` (against the K-sample mean target) and ``target_std``."""
        if not self.replay.can_sample():
            return None
        rows, envs = self.replay.transition_index()
        b = self.replay.gather(rows, envs)

        def q_values(stacks: np.ndarray) -> torch.Tensor:
            return forward(torch.from_numpy(np.ascontiguousarray(stacks)).to(device)).float()

        action = torch.from_numpy(b["action"]).to(device, torch.long)
        q_sa = q_values(b["obs"]).gather(1, action[:, None]).squeeze(1)
        reward = torch.from_numpy(b["reward"]).to(device)
        done = torch.from_numpy(b["done"]).to(device, torch.float32)
        y = reward + gamma * (1.0 - done) * q_values(b["next_obs"]).max(1).values
        out = {"sampled": (q_sa - y).abs()}
        m, k = min(self.cfg.expected_states, len(rows)), self.cfg.expected_samples
        if m == 0 or k == 0:
            return out
        pick = self.rng.choice(len(rows), size=m, replace=False)
        stacks, rewards, dones = [], [], []
        for i in pick:
            s, r, d = self.env.successors(
                self.snaps[rows[i]], int(b["action"][i]), k, self.cfg.episodic_life, self.cfg.reward_clip
            )
            stacks.append(s)
            rewards.append(r)
            dones.append(d)
        next_q = q_values(np.concatenate(stacks)).max(1).values.view(m, k)
        y_k = (
            torch.from_numpy(np.stack(rewards)).to(device)
            + gamma * (1.0 - torch.from_numpy(np.stack(dones)).to(device, torch.float32)) * next_q
        )
        pick_t = torch.from_numpy(pick).to(device)
        return out | {"pick": pick_t} | expected_residuals(q_sa[pick_t], y_k)

    def metrics(self, forward, gamma: float, device) -> dict[str, float]:
        """The reported held-out metrics (module docstring); empty before any transition."""
        r = self.residuals(forward, gamma, device)
        if r is None:
            return {}
        res = r["sampled"]
        out = {
            "bellman/residual_linf_heldout": res.max().item(),
            "bellman/residual_p99_heldout": torch.quantile(res, 0.99).item(),
            "bellman/residual_l2_heldout": res.square().mean().sqrt().item(),
            "bellman/heldout_transitions": float(len(res)),
        }
        if "expected" in r:
            out |= {
                "bellman/residual_linf_expected": r["expected"].max().item(),
                "bellman/residual_linf_sampled_subset": res[r["pick"]].max().item(),
                "bellman/target_std_expected": r["target_std"].mean().item(),
                "bellman/residual_linf_expected_debiased": r["debiased"].max().item(),
                "bellman/residual_linf_expected_bias_bound": bias_bound(r["sample_std"], self.cfg.expected_samples),
                "bellman/residual_l2_expected_debiased": r["sq_debiased"].mean().clamp_min(0).sqrt().item(),
            }
        return out
