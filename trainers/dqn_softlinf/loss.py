"""The inner-loop surrogates of DQN as pure functions of a batch of TD errors.

Each takes ``td`` (a 1-D tensor of TD errors ``Q(s,a) - y`` with ``y`` the frozen target) and
optional importance weights ``weights`` (same shape, >= 0, e.g. prioritized-replay weights), and
returns a scalar to minimize. With weights, "mean" below means the weighted mean
``sum_i w_i x_i / sum_i w_i``; without, every ``w_i = 1``.

mse        L = mean_i w_i td_i^2 / mean_i w_i
l1         L = mean_i w_i |td_i| / mean_i w_i   (soft_linf's beta -> 0 limit: the control)
huber      L = mean_i w_i h_delta(td_i) / mean_i w_i,
           h_delta(x) = x^2 / 2 if |x| <= delta else delta (|x| - delta / 2)
soft_linf  L = (1 / beta) log( sum_i w_i exp(beta |td_i|) / sum_i w_i )

soft_linf is the temperature-``beta`` log-mean-exp of ``|td|``. By Jensen's inequality and
because a mean of exponentials is at most the largest one,

    mean_i |td_i|  <=  soft_linf(td, beta)  <=  max_i |td_i|,

it tends to the max (the sup-norm of the TD errors on the batch) as ``beta -> inf`` and to the
mean absolute TD error as ``beta -> 0``; for small beta it is ``mean + beta var(|td|) / 2 +
O(beta^2)``. Its gradient is a softmax weighting of the samples::

    d L / d td_i = p_i sign(td_i),   p_i = w_i exp(beta |td_i|) / sum_j w_j exp(beta |td_j|),

so the update is a convex combination of per-sample directions that concentrates on the
largest TD errors (all of it on the worst one as beta grows). The total gradient weight is 1,
as for the mean absolute error, not growing with the TD errors as for mse. How many samples
carry the update is the softmax's effective sample size ``ESS = 1 / sum_i p_i^2``: the batch
size (for equal weights) as beta -> 0, 1 when one sample takes all the weight.

``beta`` has the units of 1 / reward (``beta |td|`` must be dimensionless): with rewards
clipped to [-1, 1] TD errors are O(1) and ``beta`` of 1-30 moves from "mean" to "max". The
loop's ``beta_scale`` config field chooses between that absolute reading (``reward``) and a
scale-free one (``td_mean``: ``beta`` is divided by the batch's detached mean ``|td|``, so
``beta |td_i| / mean|td|`` compares each error with the typical one whatever the reward
scale); ``effective_beta`` implements both.

Numerics: soft_linf is computed as ``m + log1p(mean_w(expm1(beta (|td| - m)))) / beta`` with
``m = max |td|`` (over samples with weight > 0) held constant (detached; the expression does not depend on ``m``, so the
gradient is exactly the softmax above). Every exponent is <= 0, so nothing overflows for
``|td|`` up to 1e6 and ``beta`` up to 1e3 in float32, and ``log1p``/``expm1`` keep the small-beta
limit accurate instead of cancelling ``log(1 + tiny)``.
"""

from __future__ import annotations

import torch

LOSSES = ("mse", "huber", "l1", "soft_linf")


def mse(td: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared TD error ``mean_w(td^2)``."""
    return _mean(td.square(), weights)


def l1(td: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean absolute TD error ``mean_w |td|``: soft_linf's beta -> 0 limit."""
    return _mean(td.abs(), weights)


def huber(td: torch.Tensor, delta: float = 1.0, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean Huber loss ``mean_w(h_delta(td))``: quadratic within ``delta``, linear beyond."""
    if delta <= 0:
        raise ValueError(f"huber: delta must be > 0, got {delta}")
    a = td.abs()
    quadratic = torch.clamp(a, max=delta)
    per_sample = 0.5 * quadratic.square() + delta * (a - quadratic)
    return _mean(per_sample, weights)


def soft_linf(td: torch.Tensor, beta: float | torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Soft sup-norm ``(1/beta) log mean_w exp(beta |td|)``: between mean and max of ``|td|``.

    A number ``beta`` is checked (> 0); a tensor (``effective_beta``'s ``td_mean``, > 0 by
    construction) is not: checking it would read the device, which a CUDA graph cannot."""
    if not torch.is_tensor(beta) and beta <= 0:
        raise ValueError(f"soft_linf: beta must be > 0, got {beta}")
    a = td.abs()
    counted = a if weights is None else a.masked_fill(weights <= 0, float("-inf"))
    m = counted.max().detach()  # the largest |td| that has weight
    z = torch.expm1(torch.clamp(beta * (a - m), max=0.0))  # in (-1, 0]; zero-weight terms capped
    return m + torch.log1p(_mean(z, weights)) / beta


def soft_linf_weights(
    td: torch.Tensor, beta: float | torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``p_i = w_i exp(beta |td_i|) / sum_j w_j exp(beta |td_j|)``: soft_linf's gradient weights."""
    logits = beta * td.detach().abs()
    if weights is not None:
        logits = logits + torch.log(weights.detach().to(td.dtype))  # log 0 = -inf: no weight
    return torch.softmax(logits, dim=0)


def effective_sample_size(p: torch.Tensor) -> torch.Tensor:
    """``1 / sum_i p_i^2`` of a probability vector: n for uniform weights, 1 for one-hot."""
    return 1.0 / p.square().sum()


def effective_beta(td: torch.Tensor, beta: float, scale: str = "reward") -> torch.Tensor | float:
    """The temperature soft_linf uses: ``beta`` itself (``reward``) or ``beta / mean|td|``."""
    if scale == "reward":
        return beta
    if scale == "td_mean":
        return beta / td.detach().abs().mean().clamp_min(1e-8)
    raise ValueError(f"beta_scale must be 'reward' or 'td_mean', got {scale!r}")


def surrogate(
    name: str,
    td: torch.Tensor,
    *,
    beta: float = 10.0,
    beta_scale: str = "reward",
    huber_delta: float = 1.0,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dispatch to one of ``LOSSES`` by name (what the train loop and the RLlib learner call)."""
    if name == "mse":
        return mse(td, weights)
    if name == "huber":
        return huber(td, huber_delta, weights)
    if name == "l1":
        return l1(td, weights)
    if name == "soft_linf":
        return soft_linf(td, effective_beta(td, beta, beta_scale), weights)
    raise ValueError(f"unknown loss {name!r}; expected one of {', '.join(LOSSES)}")


def _mean(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    if weights is None:
        return x.mean()
    weights = weights.to(x.dtype)
    return (weights * x).sum() / weights.sum()
