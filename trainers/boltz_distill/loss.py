"""Representation distillation: the student's per-atom output regresses the teacher's embedding.

For atoms ``i = 1..N`` (all atoms of a batch), student outputs ``p_i`` and teacher targets
``t_i`` (both D-dimensional, targets standardized per dimension with the corpus statistics)::

    L = w_mse * (1 / (N D)) * sum_i ||p_i - t_i||^2
      + w_cos * (1 / N) * sum_i (1 - <p_i, t_i> / (max(||p_i||, eps) * max(||t_i||, eps)))

The MSE term matches magnitudes, the cosine term matches directions (the geometry a linear probe
sees); their weights are config fields.
"""

from __future__ import annotations

import torch


def standardize(target: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``(target - mean) / std`` per dimension; dimensions with ``std == 0`` become 0."""
    safe = torch.where(std > 0, std, torch.ones_like(std))
    return torch.where(std > 0, (target - mean) / safe, torch.zeros_like(target))


def distill_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    mse_weight: float = 1.0,
    cosine_weight: float = 1.0,
    eps: float = 1e-8,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L`` above for [N, D] predictions and targets; returns ``(loss, {"mse", "cosine"})``."""
    if pred.shape != target.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} differ")
    mse = ((pred - target) ** 2).mean()
    norms = pred.norm(dim=-1).clamp_min(eps) * target.norm(dim=-1).clamp_min(eps)
    cosine = (1.0 - (pred * target).sum(dim=-1) / norms).mean()
    return mse_weight * mse + cosine_weight * cosine, {"mse": mse.detach(), "cosine": cosine.detach()}
