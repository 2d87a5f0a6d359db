"""Poisoning attacks as pure functions on uint8 image batches, and the all-to-one poisoning.

An attack is one function ``trigger(x, spec) -> x_triggered`` on uint8 ``[N, 3, H, W]`` images,
registered with ``@register("name")``; everything it draws at random comes from ``spec.seed``,
so the training set and the test set get the same trigger. Poisoning (``poison``) is the same
for all attacks: ``round(ratio * N)`` training images drawn from the non-target classes get the
trigger and the target label (all-to-one).

- BadNets (Gu et al. 2017): a 3x3 white patch in the bottom-right corner,
  ``x'[:, :, H-3:, W-3:] = 255``.
- Blended (Chen et al. 2017): ``x' = round((1 - alpha) x + alpha t)`` with a trigger image
  ``t``: by default a natural photograph that ships with scikit-image (``skimage.data``),
  resized to 32x32 as BackdoorBench resizes its image (PIL bilinear); or a user file; or
  (``blend_trigger: noise``) uniform noise drawn from ``spec.seed``. Alpha 0.2 by default.
- WaNet (Nguyen & Tran 2021): a fixed smooth warp. A ``k x k`` field ``P ~ U(-1, 1)``,
  normalized by its mean absolute value, upsampled bicubically to ``H x W``; the sampling grid
  is ``clamp(identity + s * rescale * P / H, -1, 1)`` and ``x' = grid_sample(x, grid)``. Its
  "noise mode" (``wanet_noise``) adds ``U(-1, 1) / H`` per image to that grid and keeps the
  true label: those cross samples teach the model that only the exact warp is the trigger.
  ``wanet`` trains as BackdoorBench does, warping each batch afresh (``wanet.py``);
  ``wanet_fixed`` is the same trigger as a data-poisoning attack (warped images fixed in the
  training set, like BadNets and Blended).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.nn import functional as F

from raylab.errors import UserError


@dataclass(frozen=True)
class TriggerSpec:
    """Everything that defines a trigger besides the attack's name."""

    seed: int = 0
    """Seed of anything random in the trigger (Blended's noise pattern, WaNet's warp field)."""
    blend_alpha: float = 0.2
    """Blended: weight of the trigger image."""
    blend_trigger: str = "image"
    """Blended: ``image`` (the picture ``blend_image``) or ``noise`` (uniform, from ``seed``)."""
    blend_image: str = "skimage:astronaut"
    """Blended: ``skimage:NAME`` (a photograph in ``skimage.data``) or the path of a trigger
    image (.npy uint8 HxWx3 or 3xHxW, or any PIL-readable file)."""
    blend_mean: float = 0.0
    """Blended: mean grey level the trigger image is mapped to (``match_brightness``; 0: the
    image as it is)."""
    blend_std: float = 0.0
    """Blended: its standard deviation before clipping (with ``blend_mean``)."""
    patch_size: int = 3
    """BadNets: side of the white square."""
    wanet_k: int = 4
    """WaNet: side of the random control grid."""
    wanet_s: float = 0.5
    """WaNet: warping strength."""
    wanet_rescale: float = 1.0
    """WaNet: grid rescale factor."""


Trigger = Callable[[torch.Tensor, TriggerSpec], torch.Tensor]
ATTACKS: dict[str, Trigger] = {}


def register(name: str) -> Callable[[Trigger], Trigger]:
    """Add a trigger function to ``ATTACKS`` under ``name``."""

    def add(fn: Trigger) -> Trigger:
        ATTACKS[name] = fn
        return fn

    return add


def get(name: str) -> Trigger:
    if name not in ATTACKS:
        raise UserError(f"attack: unknown attack '{name}'; available: {', '.join(sorted(ATTACKS))}")
    return ATTACKS[name]


# ----------------------------------------------------------------------------- triggers


@register("badnets")
def badnets(x: torch.Tensor, spec: TriggerSpec) -> torch.Tensor:
    """A white ``patch_size`` square in the bottom-right corner."""
    out = x.clone()
    out[..., -spec.patch_size :, -spec.patch_size :] = 255
    return out


@register("blended")
def blended(x: torch.Tensor, spec: TriggerSpec) -> torch.Tensor:
    """``round((1 - alpha) x + alpha t)`` with the trigger image ``t``."""
    t = blend_pattern(spec, tuple(x.shape[-3:])).to(x.device).float()
    mixed = (1 - spec.blend_alpha) * x.float() + spec.blend_alpha * t
    return mixed.round_().clamp_(0, 255).to(torch.uint8)


@register("wanet_fixed")
@register("wanet")
def wanet(x: torch.Tensor, spec: TriggerSpec) -> torch.Tensor:
    """Warp every image with the fixed grid drawn from ``spec.seed``."""
    grid = wanet_grid(spec, x.shape[-1]).to(x.device)
    return _warp(x, grid.expand(len(x), -1, -1, -1))


def wanet_noise(x: torch.Tensor, spec: TriggerSpec, generator: torch.Generator) -> torch.Tensor:
    """WaNet's noise mode: the trigger grid plus per-image ``U(-1, 1) / H`` (labels unchanged)."""
    size = x.shape[-1]
    grid = wanet_grid(spec, size).to(x.device)
    noise = torch.rand(len(x), size, size, 2, generator=generator).to(x.device) * 2 - 1
    return _warp(x, (grid + noise / size).clamp(-1, 1))


def _warp(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    warped = F.grid_sample(x.float() / 255, grid, align_corners=True)
    return (warped * 255).round_().clamp_(0, 255).to(torch.uint8)


@functools.lru_cache(maxsize=8)
def wanet_grid(spec: TriggerSpec, size: int) -> torch.Tensor:
    """The fixed WaNet sampling grid ``[1, size, size, 2]`` (x, y in [-1, 1])."""
    gen = torch.Generator().manual_seed(spec.seed)
    field = torch.rand(1, 2, spec.wanet_k, spec.wanet_k, generator=gen) * 2 - 1
    field = field / field.abs().mean()
    noise = F.interpolate(field, size=size, mode="bicubic", align_corners=True).permute(0, 2, 3, 1)
    line = torch.linspace(-1, 1, size)
    gy, gx = torch.meshgrid(line, line, indexing="ij")
    identity = torch.stack((gx, gy), dim=-1)[None]
    return (identity + spec.wanet_s * spec.wanet_rescale * noise / size).clamp(-1, 1)


@functools.lru_cache(maxsize=8)
def blend_pattern(spec: TriggerSpec, shape: tuple[int, int, int]) -> torch.Tensor:
    """The Blended trigger image, uint8 ``shape`` (C, H, W): the named photograph or file, or
    seeded noise."""
    if spec.blend_trigger == "noise":
        gen = torch.Generator().manual_seed(spec.seed)
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    image = load_trigger_image(spec.blend_image, shape)
    return match_brightness(image, spec.blend_mean, spec.blend_std) if spec.blend_mean else image


def match_brightness(image: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """uint8 ``round(clip((t - mean(t)) * std / std(t) + c, 0, 255))`` with the shift ``c`` found
    by bisection so that the result's mean is ``mean`` (clipping would lower it otherwise): the
    trigger image given another image's brightness and contrast."""
    t = image.double()
    scaled = (t - t.mean()) * (std / float(t.std().clamp_min(1e-12)))
    lo, hi = -255.0, 510.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if float((scaled + mid).clamp(0, 255).mean()) < mean:
            lo = mid
        else:
            hi = mid
    return (scaled + (lo + hi) / 2).clamp(0, 255).round().to(torch.uint8)


SKIMAGE_PREFIX = "skimage:"


def skimage_photo(name: str) -> np.ndarray:
    """A photograph shipped in scikit-image's ``skimage.data`` (uint8 HxWx3), by function name."""
    try:
        import skimage.data
    except ImportError:
        raise UserError("blend_image: scikit-image is not installed (pip install 'raylab[backdoor]')") from None
    photo = getattr(skimage.data, name, None)
    if name.startswith("_") or not callable(photo):
        raise UserError(f"blend_image: skimage.data has no image '{name}' (try astronaut, coffee, rocket)")
    array = np.asarray(photo())
    if array.ndim != 3 or array.shape[-1] != 3:
        raise UserError(f"blend_image: skimage.data.{name} is not an RGB image (shape {array.shape})")
    return array


def load_trigger_image(path: str, shape: tuple[int, int, int]) -> torch.Tensor:
    """Read a trigger image (``skimage:NAME`` or a file) as uint8 ``shape`` (C, H, W), resized if
    needed: PIL-readable images and ``skimage`` photographs with PIL's bilinear resize (what
    BackdoorBench's ``transforms.Resize`` does to its PIL image), .npy arrays bilinearly."""
    if path.startswith(SKIMAGE_PREFIX):
        from PIL import Image

        photo = Image.fromarray(skimage_photo(path[len(SKIMAGE_PREFIX) :]))
        array = np.asarray(photo.resize((shape[2], shape[1]), Image.BILINEAR)).transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(array))
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"blend_image: no such file '{file}'")
    if file.suffix == ".npy":
        array = np.load(file, allow_pickle=False)
    else:
        from PIL import Image

        try:
            with Image.open(file) as image:
                array = np.asarray(image.convert("RGB").resize((shape[2], shape[1]), Image.BILINEAR))
        except OSError as err:
            raise UserError(f"blend_image: cannot read '{file}' as an image ({err})") from None
    if array.ndim == 3 and array.shape[-1] == shape[0] and array.shape[0] != shape[0]:
        array = array.transpose(2, 0, 1)
    image = torch.from_numpy(np.ascontiguousarray(array)).to(torch.uint8)
    if tuple(image.shape) != shape:
        if image.ndim != 3 or image.shape[0] != shape[0]:
            raise UserError(
                f"blend_image: '{file}' has shape {tuple(array.shape)}; expected "
                f"{shape[1]}x{shape[2]}x{shape[0]} or {shape[0]}x{shape[1]}x{shape[2]}"
            )
        image = (
            F.interpolate(image[None].float(), size=shape[1:], mode="bilinear", align_corners=False)[0]
            .round()
            .clamp(0, 255)
            .to(torch.uint8)
        )
    return image


# ----------------------------------------------------------------------------- poisoning


def poison_indices(labels: torch.Tensor, ratio: float, target: int, generator: torch.Generator) -> torch.Tensor:
    """``round(ratio * N)`` distinct indices drawn uniformly from samples not of class ``target``."""
    candidates = torch.nonzero(labels != target).flatten()
    count = round(ratio * len(labels))
    if count > len(candidates):
        raise UserError(
            f"poison_ratio: {ratio} asks for {count} poisoned images but only "
            f"{len(candidates)} training images are outside the target class"
        )
    order = torch.randperm(len(candidates), generator=generator)
    return candidates[order[:count]].sort().values


def poison(
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor,
    trigger: Trigger,
    spec: TriggerSpec,
    target: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training set with ``trigger`` applied and label ``target`` set at ``indices``."""
    x, y = x.clone(), y.clone()
    if len(indices):
        x[indices] = trigger(x[indices], spec)
        y[indices] = target
    return x, y


def triggered_test_set(
    x: torch.Tensor, y: torch.Tensor, trigger: Trigger, spec: TriggerSpec, target: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Test images of the non-target classes: ``(triggered, clean, true labels)``."""
    keep = y != target
    clean = x[keep]
    return trigger(clean, spec), clean, y[keep]
