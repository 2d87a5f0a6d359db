"""The measurements of the backdoor study, as pure functions of tensors.

Attack metrics (over test images whose true class is not the target):

    clean_acc = mean[argmax f(x) == y]                      over all clean test images
    asr       = mean[argmax f(T(x)) == target]              over y != target
    ra        = mean[argmax f(T(x)) == y]                   over y != target

Early-stage signatures, per group G (poisoned or clean training images, a fixed sample):

    loss_G         = mean_{i in G} CE(f(x_i), y_i)
    rel_drop_G(t)  = (loss_G(0) - loss_G(t)) / loss_G(0)
    coherence_G    = mean_{i != j in G} cos(g_i, g_j),  g_i = grad_theta CE(f(x_i), y_i)
                   = (||sum_i g_i / ||g_i|| ||^2 - n) / (n (n - 1))
    gate_flip_G    = mean over i in G and units u of [h_u(x_i; t) > 0] != [h_u(x_i; t') > 0]
    margin_G       = mean_{i in G} (z_{y_i}(x_i) - max_{k != y_i} z_k(x_i))

Trigger-dominant neurons, for penultimate features ``phi`` on paired inputs (each test image
with and without the trigger), the standardized mean difference (Cohen's d) per neuron:

    selectivity_k = (mean phi_k(T(x)) - mean phi_k(x)) / sqrt((var phi_k(T(x)) + var phi_k(x)) / 2)
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch.nn import functional as F

EPS = 1e-12


# ----------------------------------------------------------------------------- attack metrics


def accuracy(pred: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of ``pred == y`` (0 for an empty set)."""
    return float((pred == y).float().mean()) if len(y) else 0.0


def attack_success_rate(pred_triggered: torch.Tensor, y_true: torch.Tensor, target: int) -> float:
    """Fraction of triggered images of non-target classes classified as ``target``.

    Images whose true class is ``target`` are left out (their "success" would be free).
    """
    keep = y_true != target
    return float((pred_triggered[keep] == target).float().mean()) if keep.any() else 0.0


def robust_accuracy(pred_triggered: torch.Tensor, y_true: torch.Tensor, target: int) -> float:
    """Fraction of triggered images of non-target classes still classified as their true class."""
    keep = y_true != target
    return float((pred_triggered[keep] == y_true[keep]).float().mean()) if keep.any() else 0.0


# ----------------------------------------------------------------------------- signatures


def logit_margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample ``z_y - max_{k != y} z_k``."""
    true = logits.gather(1, y[:, None]).squeeze(1)
    others = logits.scatter(1, y[:, None], float("-inf"))
    return true - others.max(1).values


def relative_drop(initial: float, now: float) -> float:
    """``(initial - now) / initial``."""
    return (initial - now) / max(abs(initial), EPS)


def drop_ratio(drop_poison: float, drop_clean: float, floor: float = 1e-3) -> float:
    """``drop_poison / drop_clean`` with the denominator's magnitude floored at ``floor``
    (keeping its sign), so a clean group that has not moved yet gives a large finite ratio."""
    denom = drop_clean if abs(drop_clean) >= floor else math.copysign(floor, drop_clean or 1.0)
    return drop_poison / denom


def mean_pairwise_cosine_from_unit_sum(unit_sum: torch.Tensor, n: int) -> float:
    """Mean of ``cos(g_i, g_j)`` over ordered pairs ``i != j`` from ``sum_i g_i / ||g_i||``.

    ``||sum_i u_i||^2 = n + sum_{i != j} u_i . u_j`` for unit vectors ``u_i``.
    """
    if n < 2:
        return 0.0
    return float((unit_sum.double().pow(2).sum() - n) / (n * (n - 1)))


def mean_pairwise_cosine(vectors: torch.Tensor) -> float:
    """Mean pairwise cosine of the rows of ``vectors`` (``[n, P]``), via the unit sum."""
    units = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(EPS)
    return mean_pairwise_cosine_from_unit_sum(units.sum(0), len(vectors))


def gradient_coherence(
    loss_of: Callable[[int], torch.Tensor], params: list[torch.Tensor], n: int
) -> float:
    """Mean pairwise cosine of the per-sample gradients ``grad_params loss_of(i)``, i < n.

    One backward pass per sample; only the running sum of unit gradients is kept, so memory is
    two parameter copies whatever ``n`` is.
    """
    unit_sum = None
    for i in range(n):
        grads = torch.autograd.grad(loss_of(i), params)
        flat = torch.cat([g.flatten() for g in grads])
        unit = flat / flat.norm().clamp_min(EPS)
        unit_sum = unit if unit_sum is None else unit_sum + unit
    return mean_pairwise_cosine_from_unit_sum(unit_sum, n)


def gate_flip_fraction(before: torch.Tensor, after: torch.Tensor) -> float:
    """Fraction of ReLU gates (booleans, any shape) that differ between two logging points."""
    return float((before != after).float().mean())


# ----------------------------------------------------------------------------- neurons


def selectivity(features_triggered: torch.Tensor, features_clean: torch.Tensor) -> torch.Tensor:
    """Per-neuron standardized mean difference (Cohen's d) of triggered over clean features.

    Inputs ``[n, K]``; output ``[K]``. Variances are the biased (1/n) ones.
    """
    mean_t, mean_c = features_triggered.mean(0), features_clean.mean(0)
    var_t, var_c = features_triggered.var(0, unbiased=False), features_clean.var(0, unbiased=False)
    return (mean_t - mean_c) / torch.sqrt((var_t + var_c) / 2 + EPS)


def top_neurons(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest scores, largest first."""
    return scores.topk(min(k, len(scores))).indices


def ablate(features: torch.Tensor, neurons: torch.Tensor) -> torch.Tensor:
    """``features`` with the given columns set to zero (ReLU features: "never fire")."""
    out = features.clone()
    out[:, neurons] = 0
    return out


def cross_entropy_per_sample(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")
