"""Triggers are pixel-exact; poisoning draws from non-target classes and sets the target label."""

import numpy as np
import pytest
import torch

from raylab.errors import UserError
from trainers.backdoor import attack
from trainers.backdoor.attack import TriggerSpec


def _images(n=6, seed=0):
    return torch.randint(0, 200, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_badnets_sets_exactly_the_bottom_right_3x3_to_white():
    x = _images()
    out = attack.badnets(x, TriggerSpec())
    assert (out[:, :, 29:, 29:] == 255).all()
    mask = torch.zeros(32, 32, dtype=torch.bool)
    mask[29:, 29:] = True
    assert torch.equal(out[:, :, ~mask], x[:, :, ~mask])  # nothing else changes
    assert torch.equal(x, _images())  # the input is not modified


def test_blended_is_the_rounded_convex_mix_by_hand(tmp_path):
    x = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
    x[0, 0, 0, 0], x[0, 1, 5, 7] = 100, 255
    pattern = np.full((32, 32, 3), 10, dtype=np.uint8)  # HxWxC as images are stored
    pattern[0, 0, 0] = 250
    np.save(tmp_path / "t.npy", pattern)
    out = attack.blended(x, TriggerSpec(blend_alpha=0.2, blend_image=str(tmp_path / "t.npy")))
    assert out[0, 0, 0, 0] == 130  # 0.8 * 100 + 0.2 * 250
    assert out[0, 1, 5, 7] == 206  # 0.8 * 255 + 0.2 * 10 = 206
    assert out[0, 2, 9, 9] == 2  # 0.8 * 0 + 0.2 * 10
    assert out.dtype == torch.uint8


def test_blended_default_pattern_is_seeded_noise():
    x = _images(2)
    a = attack.blended(x, TriggerSpec(seed=1))
    assert torch.equal(a, attack.blended(x, TriggerSpec(seed=1)))
    assert not torch.equal(a, attack.blended(x, TriggerSpec(seed=2)))
    pattern = attack.blend_pattern(TriggerSpec(seed=1), (3, 32, 32))
    expected = (0.8 * x.float() + 0.2 * pattern.float()).round().to(torch.uint8)
    assert torch.equal(a, expected)


def test_blended_reads_a_png_and_resizes_it(tmp_path):
    from PIL import Image

    Image.fromarray(np.full((64, 64, 3), 200, dtype=np.uint8)).save(tmp_path / "kitty.png")
    t = attack.load_trigger_image(str(tmp_path / "kitty.png"), (3, 32, 32))
    assert t.shape == (3, 32, 32) and (t == 200).all()
    with pytest.raises(UserError, match="no such file"):
        attack.load_trigger_image(str(tmp_path / "missing.png"), (3, 32, 32))


def test_wanet_warp_is_fixed_small_and_identity_when_the_field_vanishes():
    x = _images(4)
    spec = TriggerSpec(seed=3)
    out = attack.wanet(x, spec)
    assert torch.equal(out, attack.wanet(x, spec)) and not torch.equal(out, x)
    grid = attack.wanet_grid(spec, 32)
    line = torch.linspace(-1, 1, 32)
    gy, gx = torch.meshgrid(line, line, indexing="ij")
    pixels = (grid[0] - torch.stack((gx, gy), -1)).abs() * 31 / 2  # grid units to pixels
    assert 0.05 < pixels.max() < 2.0  # a subtle warp: at most a pixel or two anywhere
    # A nearly vanishing warp reproduces the image up to rounding.
    tiny = attack.wanet(x, TriggerSpec(seed=3, wanet_s=1e-6))
    assert (tiny.int() - x.int()).abs().max() <= 1


def test_wanet_noise_mode_differs_per_image_from_the_trigger():
    x = _images(8)
    spec = TriggerSpec(seed=0)
    noisy = attack.wanet_noise(x, spec, torch.Generator().manual_seed(0))
    assert not torch.equal(noisy, attack.wanet(x, spec))


def test_poison_indices_come_from_non_target_classes_and_get_the_target_label():
    y = torch.arange(100) % 10
    x = torch.zeros(100, 3, 32, 32, dtype=torch.uint8)
    idx = attack.poison_indices(y, 0.05, target=3, generator=torch.Generator().manual_seed(0))
    assert len(idx) == 5 == len(set(idx.tolist()))
    assert (y[idx] != 3).all()
    px, py = attack.poison(x, y, idx, attack.badnets, TriggerSpec(), target=3)
    assert (py[idx] == 3).all() and (px[idx][:, :, 29:, 29:] == 255).all()
    rest = torch.ones(100, dtype=torch.bool)
    rest[idx] = False
    assert torch.equal(py[rest], y[rest]) and (px[rest] == 0).all()


def test_too_many_poisoned_images_is_a_user_error():
    y = torch.zeros(10, dtype=torch.long)
    y[:2] = 1
    with pytest.raises(UserError, match="outside the target class"):
        attack.poison_indices(y, 0.5, target=0, generator=torch.Generator())


def test_triggered_test_set_leaves_out_the_target_class():
    x, y = _images(10), torch.tensor([0, 1, 2, 0, 3, 0, 4, 5, 0, 6])
    trig, clean, y_true = attack.triggered_test_set(x, y, attack.badnets, TriggerSpec(), target=0)
    assert y_true.tolist() == [1, 2, 3, 4, 5, 6]
    assert torch.equal(clean, x[y != 0]) and torch.equal(trig, attack.badnets(x[y != 0], TriggerSpec()))


def test_a_new_attack_is_one_registered_function():
    @attack.register("invert_test_only")
    def invert(x, spec):
        return 255 - x

    try:
        x = _images(2)
        assert torch.equal(attack.get("invert_test_only")(x, TriggerSpec()), 255 - x)
    finally:
        attack.ATTACKS.pop("invert_test_only")
    with pytest.raises(UserError, match="available: badnets, blended, wanet"):
        attack.get("invert_test_only")
