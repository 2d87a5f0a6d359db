"""Batch augmentation on the device: crop offsets and flips are exact, seeded, and vectorized."""

import torch

from raylab.data.augment import normalize, random_crop_flip, to_float


def _reference(x, offsets, flips, padding):
    """The per-image definition, written as a loop."""
    padded = torch.nn.functional.pad(x, (padding,) * 4)
    out = []
    for n in range(len(x)):
        i, j = offsets[n]
        crop = padded[n, :, i:i + x.shape[2], j:j + x.shape[3]]
        out.append(crop.flip(-1) if flips[n] else crop)
    return torch.stack(out)


def test_crop_flip_matches_the_per_image_definition():
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    gen = torch.Generator().manual_seed(7)
    out = random_crop_flip(x, padding=4, generator=gen)
    gen.manual_seed(7)  # the same draws, in the same order
    offsets = torch.randint(0, 9, (16, 2), generator=gen)
    flips = torch.randint(0, 2, (16,), generator=gen)
    assert out.dtype == torch.uint8 and out.shape == x.shape
    assert torch.equal(out, _reference(x, offsets.tolist(), flips.tolist(), 4))
    assert 0 < int(flips.sum()) < 16  # both branches exercised


def test_crop_flip_is_deterministic_given_the_generator_and_varies_otherwise():
    x = torch.rand(8, 3, 32, 32)
    a = random_crop_flip(x, generator=torch.Generator().manual_seed(1))
    b = random_crop_flip(x, generator=torch.Generator().manual_seed(1))
    c = random_crop_flip(x, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_zero_padding_and_no_flip_is_identity_and_padding_fills_zeros():
    x = torch.randint(1, 256, (4, 3, 8, 8), dtype=torch.uint8)
    assert torch.equal(random_crop_flip(x, padding=0, flip=False), x)
    out = random_crop_flip(torch.ones(64, 1, 8, 8), padding=4, generator=torch.Generator().manual_seed(0))
    assert (out == 0).any() and set(out.unique().tolist()) <= {0.0, 1.0}


def test_to_float_and_normalize_by_hand():
    x = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1)
    assert torch.allclose(to_float(x).flatten(), torch.tensor([0.0, 0.2, 1.0]))
    out = normalize(x, mean=(0.5, 0.2, 0.5), std=(0.5, 0.1, 0.25)).flatten()
    assert torch.allclose(out, torch.tensor([-1.0, 0.0, 2.0]))
