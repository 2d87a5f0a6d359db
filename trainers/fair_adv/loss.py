"""Per-sample training losses of the methods (the batch losses are assembled in ``step.py``).

- standard:   l_i = CE(f(x_i), y_i)
- PGD-AT:     l_i = CE(f(x'_i), y_i),  x'_i = PGD(x_i)                    (Madry et al. 2018)
- TRADES:     l_i = CE(f(x_i), y_i) + beta * KL(p(x_i) || p(x'_i)),
              x'_i = argmax_{|x' - x_i|_inf <= eps} KL(p(x_i) || p(x'))    (Zhang et al. 2019)

A plain method's batch loss is the batch mean (TRADES's ``batchmean``); tri-regime divides
``sum_i w_i l_i`` by ``sum_i w_i``; FRL divides each TRADES term by its own class-weight sum
(``reweight.py``).
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
