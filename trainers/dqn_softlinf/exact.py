"""Exact Bellman quantities where the model is known (FeatureMDP): pure numpy functions.

With ``P[s, a, s']`` the next-state probabilities, ``R[s, a]`` the reward, ``c`` the
probability that a step does not end the episode and ``gamma`` the discount, the Bellman
optimality operator is

    (T Q)(s, a) = R(s, a) + gamma c sum_s' P(s' | s, a) max_a' Q(s', a'),

the expectation over the successor that a sampled TD target ``r + gamma (1 - d) max Q(s')``
estimates with one draw. From these:

- ``residual_linf_exact = max_{s,a} |Q(s,a) - (T Q)(s,a)|``: the sup-norm Bellman residual
  itself, every state and action, no sampling;
- ``qstar_dist_linf = max_{s,a} |Q(s,a) - Q*(s,a)|`` with ``Q* = T Q*`` by value iteration;
- the greedy policy's value ``V^pi = (I - gamma c P_pi)^-1 R_pi``, ``pi(s) = argmax_a Q(s,a)``,
  averaged over the uniform start distribution (FeatureMDP's reset), and its gap to ``V*``.

The three are linked by ``||Q - Q*|| <= ||Q - TQ|| / (1 - gamma c)`` (T is a ``gamma c``
contraction) and ``||V* - V^pi|| <= 2 ||Q - Q*|| / (1 - gamma c)`` (Singh and Yee, 1994), all
sup norms: a smaller residual is a guarantee only through these bounds, which is why all three
are reported.
"""

from __future__ import annotations

import numpy as np


def bellman_operator(q: np.ndarray, P: np.ndarray, R: np.ndarray, gamma: float, c: float) -> np.ndarray:
    """``(T Q)(s,a) = R(s,a) + gamma c sum_s' P(s'|s,a) max_a' Q(s',a')``; q is ``(S, A)``."""
    return R + gamma * c * P @ q.max(1)


def optimal_q(P: np.ndarray, R: np.ndarray, gamma: float, c: float, tol: float = 1e-12) -> np.ndarray:
    """``Q*`` by value iteration, to sup-norm change ``tol`` (contraction ``gamma c`` < 1)."""
    q = np.zeros_like(R)
    while True:
        new = bellman_operator(q, P, R, gamma, c)
        if np.abs(new - q).max() < tol:
            return new
        q = new


def policy_value(policy: np.ndarray, P: np.ndarray, R: np.ndarray, gamma: float, c: float) -> np.ndarray:
    """``V^pi = (I - gamma c P_pi)^-1 R_pi`` for a deterministic policy ``pi(s)``: ``(S,)``."""
    s = np.arange(len(policy))
    return np.linalg.solve(np.eye(len(policy)) - gamma * c * P[s, policy], R[s, policy])


def exact_metrics(
    q: np.ndarray, P: np.ndarray, R: np.ndarray, gamma: float, c: float, q_star: np.ndarray | None = None
) -> dict[str, float]:
    """The exact residual, the distance to ``Q*`` and the greedy policy's value for ``q``."""
    q = np.asarray(q, np.float64)
    q_star = optimal_q(P, R, gamma, c) if q_star is None else q_star
    v_pi = policy_value(q.argmax(1), P, R, gamma, c)
    v_star = q_star.max(1)
    return {
        "bellman/residual_linf_exact": float(np.abs(q - bellman_operator(q, P, R, gamma, c)).max()),
        "bellman/residual_l2_exact": float(np.sqrt(np.square(q - bellman_operator(q, P, R, gamma, c)).mean())),
        "bellman/qstar_dist_linf": float(np.abs(q - q_star).max()),
        "bellman/greedy_value_exact": float(v_pi.mean()),
        "bellman/greedy_value_gap_exact": float((v_star - v_pi).mean()),
    }
