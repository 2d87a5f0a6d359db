"""Image batches on the training device: float conversion, normalization, crop-and-flip.

Everything works on a whole batch tensor where it lives (CPU or GPU), with no per-image Python
loop: the standard CIFAR augmentation (zero-pad by 4, random 32x32 crop, horizontal flip with
probability 1/2) is one gather with per-image offsets.
"""

from __future__ import annotations

from typing import Sequence

import torch


def to_float(x_uint8: torch.Tensor) -> torch.Tensor:
    """uint8 images in [0, 255] as float32 in [0, 1] (same shape, same device)."""
    return x_uint8.float().div_(255.0)


def normalize(
    x_uint8: torch.Tensor, mean: Sequence[float], std: Sequence[float]
) -> torch.Tensor:
    """``(x / 255 - mean) / std`` per channel, for uint8 ``[N, C, H, W]`` images.

    Float input is taken to be in [0, 1] already and is not divided by 255.
    """
    x = to_float(x_uint8) if x_uint8.dtype == torch.uint8 else x_uint8.float()
    mean_t = torch.as_tensor(mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    std_t = torch.as_tensor(std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return (x - mean_t) / std_t


def random_crop_flip(
    x: torch.Tensor,
    padding: int = 4,
    generator: torch.Generator | None = None,
    flip: bool = True,
    pad_mode: str = "constant",
) -> torch.Tensor:
    """Random crop after padding, and a random horizontal flip, per image of a batch.

    ``pad_mode`` is ``torch.nn.functional.pad``'s: ``constant`` (zeros) or ``reflect``.

    ``x`` is ``[N, C, H, W]`` of any dtype (uint8 or float). Image ``n`` of the output is
    ``pad(x[n])[:, i_n : i_n + H, j_n : j_n + W]``, mirrored left-right when ``f_n = 1``, with
    ``i_n, j_n ~ U{0..2*padding}`` and ``f_n ~ Bernoulli(1/2)`` drawn from ``generator`` (on
    the generator's device; default: torch's global RNG on ``x``'s device). The same generator
    state gives the same output.
    """
    n, c, h, w = x.shape
    draw_device = generator.device if generator is not None else x.device
    offsets = torch.randint(0, 2 * padding + 1, (n, 2), generator=generator, device=draw_device)
    flips = torch.randint(0, 2, (n,), generator=generator, device=draw_device)
    offsets, flips = offsets.to(x.device), flips.to(x.device).bool()
    if not flip:
        flips = torch.zeros_like(flips)
    padded = torch.nn.functional.pad(x, (padding,) * 4, mode=pad_mode) if padding else x
    rows = offsets[:, :1] + torch.arange(h, device=x.device)  # [N, H]
    cols_ahead = torch.arange(w, device=x.device).expand(n, w)
    cols = offsets[:, 1:] + torch.where(flips[:, None], w - 1 - cols_ahead, cols_ahead)  # [N, W]
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    channel = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]
