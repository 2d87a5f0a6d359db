"""A small random MDP seen through a few random features: the science-at-small-scale setting.

Registered with gymnasium as ``raylab/FeatureMDP-v0`` (when trainers.dqn_softlinf.envs is
imported). ``num_states`` states and ``num_actions`` actions; each (state, action) moves to
one of ``branching`` random next states with random probabilities and pays a fixed random
reward in [-1, 1]; every step ends the episode with probability ``end_prob`` (a real terminal)
and episodes are cut at ``max_steps``. The agent observes ``phi(s)``, a fixed Gaussian feature
vector of ``feature_dim`` < ``num_states`` dimensions, so a small Q-network cannot represent
Q* exactly: the inner regression loop has to trade errors between states, which is where the
geometry of the surrogate (l2 for MSE, sup-norm for soft-linf) shows. Visitation is uneven
(some states are rarely reached), so an averaged loss neglects exactly the states that decide
the worst-case Bellman residual.

The MDP itself (transitions, rewards, features) is fixed by ``mdp_seed``; the agent's seed
only drives the start states and the transitions sampled, through the env's ``np_random``.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces


class FeatureMDP(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        num_states: int = 24,
        num_actions: int = 3,
        feature_dim: int = 4,
        branching: int = 2,
        end_prob: float = 0.05,
        max_steps: int = 100,
        mdp_seed: int = 0,
    ):
        g = np.random.default_rng(mdp_seed)
        self.num_states = num_states
        self.next_states = g.integers(0, num_states, size=(num_states, num_actions, branching))
        probs = g.dirichlet(np.ones(branching), size=(num_states, num_actions))
        self.cum_probs = np.cumsum(probs, axis=-1)
        self.rewards = g.uniform(-1, 1, size=(num_states, num_actions)).astype(np.float32)
        self.features = g.normal(size=(num_states, feature_dim)).astype(np.float32)
        self.end_prob, self.max_steps = end_prob, max_steps
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(feature_dim,), dtype=np.float32)
        self.action_space = spaces.Discrete(num_actions)
        self.state, self.steps = 0, 0

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.state, self.steps = int(self.np_random.integers(self.num_states)), 0
        return self.features[self.state].copy(), {}

    def step(self, action):
        s, a = self.state, int(action)
        reward = float(self.rewards[s, a])
        branch = int(np.searchsorted(self.cum_probs[s, a], self.np_random.random()))
        self.state = int(self.next_states[s, a, min(branch, self.next_states.shape[-1] - 1)])
        self.steps += 1
        terminated = bool(self.np_random.random() < self.end_prob)
        truncated = self.steps >= self.max_steps
        return self.features[self.state].copy(), reward, terminated, truncated, {}

    def exact_model(self) -> tuple[np.ndarray, np.ndarray, float]:
        """``(P, R, continue_prob)``: ``P[s, a, s']`` the next-state probabilities, ``R[s, a]``
        the reward, and the probability that a step does not end the episode (``1 - end_prob``;
        the ``max_steps`` cut is a time limit the loop bootstraps through, so it is not part of
        the model)."""
        branching = self.next_states.shape[-1]
        probs = np.diff(self.cum_probs, axis=-1, prepend=0.0)
        P = np.zeros(self.next_states.shape[:2] + (self.num_states,))
        s_idx, a_idx = np.indices(self.next_states.shape[:2])
        for b in range(branching):  # branches may share a next state: add their probabilities
            np.add.at(P, (s_idx, a_idx, self.next_states[..., b]), probs[..., b])
        return P, self.rewards.astype(np.float64), 1.0 - self.end_prob


def register() -> None:
    if "raylab/FeatureMDP-v0" not in gymnasium.envs.registry:
        gymnasium.register("raylab/FeatureMDP-v0", entry_point=FeatureMDP)
