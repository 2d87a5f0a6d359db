"""Per-sample training losses of the five methods, and the weighted batch mean.

Every method's batch loss is ``L = sum_i w_i l_i / sum_i w_i`` over per-sample losses ``l_i``
with per-sample weights ``w_i`` (all 1 except for FRL and tri-regime):

- standard:   l_i = CE(f(x_i), y_i)
- PGD-AT:     l_i = CE(f(x'_i), y_i),  x'_i = PGD(x_i)                    (Madry et al. 2018)
- TRADES:     l_i = CE(f(x_i), y_i) + beta * KL(p(x_i) || p(x'_i)),
              x'_i = argmax_{|x' - x_i|_inf <= eps} KL(p(x_i) || p(x'))    (Zhang et al. 2019)
- FRL:        l_i = a_{y_i} CE(f(x_i), y_i) + beta * b_{y_i} KL(p(x_i) || p(x'_i)) (class weights)
- tri-regime: l_i = CE(f(x'_i), y_i) with the sample weight w_i of ``reweight.tri_regime_weights``

(With unit weights the weighted mean is the plain batch mean, i.e. TRADES's ``batchmean``.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``CE(f(x_i), y_i) = -log softmax(z_i)_{y_i}`` per sample."""
    return F.cross_entropy(logits, y, reduction="none")


def kl_clean_adv(logits_clean: torch.Tensor, logits_adv: torch.Tensor) -> torch.Tensor:
    """``KL(p(x_i) || p(x'_i)) = sum_k p_k(x_i) (log p_k(x_i) - log p_k(x'_i))`` per sample.

    Gradients flow through both arguments, as in TRADES.
    """
    log_p_clean = logits_clean.log_softmax(1)
    return (log_p_clean.exp() * (log_p_clean - logits_adv.log_softmax(1))).sum(1)


def trades_terms(
    logits_clean: torch.Tensor, logits_adv: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two per-sample TRADES terms: ``(CE(f(x), y), KL(p(x) || p(x')))``."""
    return cross_entropy(logits_clean, y), kl_clean_adv(logits_clean, logits_adv)


def weighted_mean(
    losses: torch.Tensor, weights: torch.Tensor | None = None, normalize: bool = True
) -> torch.Tensor:
    """``sum_i w_i l_i / sum_i w_i`` (``normalize``) or ``(1/B) sum_i w_i l_i``.

    Without weights: the plain mean. All weights 0 gives 0.
    """
    if weights is None:
        return losses.mean()
    weights = weights.to(losses.dtype)
    total = (weights * losses).sum()
    if not normalize:
        return total / len(losses)
    return total / weights.sum().clamp(min=torch.finfo(losses.dtype).tiny)
