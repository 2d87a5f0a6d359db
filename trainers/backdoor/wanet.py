"""WaNet as BackdoorBench trains it: every batch is poisoned afresh during training.

Per training batch of ``B`` clean images (BackdoorBench ``attack/wanet.py``, ``train_step``):

    n_bd    = floor(p B)          if p B >= 1
            = Bernoulli(p B)      otherwise            ("generalize_to_lower_pratio")
    n_cross = floor(n_bd * cross_ratio)
    x[:n_bd]                 <- grid_sample(x, G)                       label <- target
    x[n_bd:n_bd + n_cross]   <- grid_sample(x, clamp(G + U(-1, 1) / H, -1, 1))   label kept
    x                        <- augment(x)         (one draw for the whole batch, see below)

with ``G`` the fixed trigger grid (``attack.wanet_grid``) and fresh noise grids for every
batch. The first images of a shuffled batch are of any class, the target class included. The
warp is applied to float images (no rounding to uint8), as in the reference.

Augmentation (BackdoorBench's ``PostTensorTransform``, torchvision transforms called on the
whole batch tensor, so one random draw per batch): random crop 32x32 after padding by 5 with
probability 0.8; rotation by ``U(-10, 10)`` degrees (nearest neighbour) with probability 0.5;
horizontal flip with probability 0.5. The reference runs them on normalized tensors, so the
zero padding and the rotation's fill are zero in normalized space: the channel mean here.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch.nn import functional as F

from trainers.backdoor.attack import TriggerSpec, wanet_grid

CROP_PADDING, CROP_P = 5, 0.8
ROTATION_DEGREES, ROTATION_P = 10.0, 0.5
FLIP_P = 0.5


def backdoor_count(pratio: float, batch: int, generator: torch.Generator) -> int:
    """Images of a batch of ``batch`` to poison: ``floor(pratio * batch)``, or, below one, one
    image with probability ``pratio * batch``."""
    expected = pratio * batch
    if expected >= 1:
        return int(expected)
    return int(float(torch.rand((), generator=generator)) < expected)


def poison_batch(
    x: torch.Tensor,
    y: torch.Tensor,
    spec: TriggerSpec,
    pratio: float,
    cross_ratio: float,
    target: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """One training batch warped as above: ``(float images in [0, 1], labels, n_bd, n_cross)``.

    ``x`` is uint8 ``[B, 3, H, W]`` (or float in [0, 1]); ``generator`` is a CPU generator, so
    the same seed gives the same batch on every device.
    """
    size, batch = x.shape[-1], len(x)
    n_bd = backdoor_count(pratio, batch, generator)
    n_cross = min(int(n_bd * cross_ratio), batch - n_bd)
    noise = torch.rand(n_cross, size, size, 2, generator=generator).to(x.device) * 2 - 1
    x = x.float().div(255) if x.dtype == torch.uint8 else x.float()
    grid = wanet_grid(spec, size).to(x.device)
    out = x.clone()
    if n_bd:
        out[:n_bd] = F.grid_sample(x[:n_bd], grid.expand(n_bd, -1, -1, -1), align_corners=True)
    if n_cross:
        cross_grid = (grid + noise / size).clamp(-1, 1)
        out[n_bd : n_bd + n_cross] = F.grid_sample(x[n_bd : n_bd + n_cross], cross_grid, align_corners=True)
    labels = y.clone()
    labels[:n_bd] = target
    return out, labels, n_bd, n_cross


def augment(x: torch.Tensor, mean: Sequence[float], generator: torch.Generator) -> torch.Tensor:
    """BackdoorBench's WaNet augmentation on float images ``[B, C, H, W]`` in [0, 1]: one crop,
    one rotation and one flip decision for the whole batch, drawn from the CPU ``generator``."""

    def draw() -> float:
        return float(torch.rand((), generator=generator))

    n, _, h, w = x.shape
    mean_t = torch.as_tensor(mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    z = x - mean_t  # zero here is zero in normalized space
    if draw() < CROP_P:
        i = int(torch.randint(0, 2 * CROP_PADDING + 1, (), generator=generator))
        j = int(torch.randint(0, 2 * CROP_PADDING + 1, (), generator=generator))
        z = F.pad(z, (CROP_PADDING,) * 4)[:, :, i : i + h, j : j + w]
    if draw() < ROTATION_P:
        angle = math.radians((2 * draw() - 1) * ROTATION_DEGREES)
        cos, sin = math.cos(angle), math.sin(angle)
        theta = torch.tensor([[cos, -sin, 0.0], [sin, cos, 0.0]], dtype=z.dtype, device=z.device)
        grid = F.affine_grid(theta.expand(n, 2, 3), list(z.shape), align_corners=False)
        z = F.grid_sample(z, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    if draw() < FLIP_P:
        z = z.flip(-1)
    return z + mean_t
