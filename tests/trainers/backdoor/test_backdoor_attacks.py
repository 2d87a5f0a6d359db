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


def test_blended_noise_pattern_is_seeded():
    x = _images(2)
    noise = lambda seed: TriggerSpec(seed=seed, blend_trigger="noise")  # noqa: E731
    a = attack.blended(x, noise(1))
    assert torch.equal(a, attack.blended(x, noise(1)))
    assert not torch.equal(a, attack.blended(x, noise(2)))
    pattern = attack.blend_pattern(noise(1), (3, 32, 32))
    expected = (0.8 * x.float() + 0.2 * pattern.float()).round().to(torch.uint8)
    assert torch.equal(a, expected)


def test_blended_default_is_a_natural_photo_resized_with_pil_bilinear():
    import skimage.data
    from PIL import Image

    spec = TriggerSpec()
    assert spec.blend_trigger == "image" and spec.blend_image == "skimage:astronaut"
    pattern = attack.blend_pattern(spec, (3, 32, 32))
    expected = np.asarray(Image.fromarray(skimage.data.astronaut()).resize((32, 32), Image.BILINEAR))
    assert torch.equal(pattern, torch.from_numpy(expected.transpose(2, 0, 1).copy()))
    # A photo is smooth where noise is not: neighbouring pixels differ far less.
    noise = attack.blend_pattern(TriggerSpec(blend_trigger="noise"), (3, 32, 32))
    roughness = lambda t: (t[..., 1:].float() - t[..., :-1].float()).abs().mean()  # noqa: E731
    assert roughness(pattern) < 0.5 * roughness(noise)
    with pytest.raises(UserError, match="skimage.data has no image 'nothing'"):
        attack.load_trigger_image("skimage:nothing", (3, 32, 32))


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


def test_wanet_poisons_each_batch_afresh_as_backdoorbench():
    from trainers.backdoor import wanet

    x, y = _images(20), torch.arange(20) % 10
    spec = TriggerSpec(seed=0)
    out, labels, n_bd, n_cross = wanet.poison_batch(x, y, spec, 0.1, 2.0, 7, torch.Generator().manual_seed(0))
    assert (n_bd, n_cross) == (2, 4)  # floor(0.1 * 20), floor(2 * 2)
    assert out.dtype == torch.float32 and labels[:2].tolist() == [7, 7]  # any class -> target
    assert torch.equal(labels[2:], y[2:])
    warped = torch.nn.functional.grid_sample(
        x[:2].float() / 255, attack.wanet_grid(spec, 32).expand(2, -1, -1, -1), align_corners=True
    )
    assert torch.allclose(out[:2], warped)  # the fixed trigger warp, not rounded to uint8
    assert torch.equal(out[6:], x[6:].float() / 255)  # the rest is untouched
    fixed = torch.nn.functional.grid_sample(
        x[2:6].float() / 255, attack.wanet_grid(spec, 32).expand(4, -1, -1, -1), align_corners=True
    )
    assert (out[2:6] - fixed).abs().amax() > 0.01  # noise mode: the warp plus fresh noise
    again, _, _, _ = wanet.poison_batch(x, y, spec, 0.1, 2.0, 7, torch.Generator().manual_seed(1))
    assert torch.allclose(again[:2], out[:2]) and not torch.allclose(again[2:6], out[2:6])  # fresh grids
    # Below one image per batch: one image with probability p * B (BackdoorBench's rule).
    gen = torch.Generator().manual_seed(0)
    counts = [wanet.backdoor_count(0.005, 128, gen) for _ in range(2000)]
    assert set(counts) == {0, 1} and abs(np.mean(counts) - 0.64) < 0.04


def test_wanet_augmentation_is_one_draw_per_batch_with_mean_fill():
    from trainers.backdoor import wanet

    one = torch.rand(1, 3, 32, 32)
    batch = one.expand(6, -1, -1, -1).clone()
    mean = (0.4, 0.5, 0.6)
    outs = [wanet.augment(batch, mean, torch.Generator().manual_seed(s)) for s in range(12)]
    for out in outs:
        assert torch.equal(out, out[:1].expand_as(out))  # the same transform for every image
    changed = [not torch.allclose(o, batch) for o in outs]
    assert any(changed)
    # Padding and the rotation's fill are the channel mean (zero after normalization).
    flat = torch.zeros(2, 3, 32, 32)
    for s in range(12):
        out = wanet.augment(flat, mean, torch.Generator().manual_seed(s))
        values = {round(float(v), 4) for c in range(3) for v in out[:, c].unique()}
        assert values <= {0.0, 0.4, 0.5, 0.6}


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


def test_the_default_blended_trigger_has_backdoorbenchs_brightness():
    """BackdoorBench's hello_kitty.jpeg at 32x32: mean grey level 198.4, std 68.9. The config's
    default maps the photograph to it, so a poisoned image brightens as much as there."""
    from trainers.backdoor.config import Config
    from trainers.backdoor.loop import trigger_spec

    spec = trigger_spec(Config(attack="blended"))
    raw = attack.blend_pattern(TriggerSpec(), (3, 32, 32)).double()
    matched = attack.blend_pattern(spec, (3, 32, 32)).double()
    assert raw.mean() == pytest.approx(114.6, abs=0.1)
    assert matched.mean() == pytest.approx(198.4, abs=0.3)
    assert torch.corrcoef(torch.stack([raw.flatten(), matched.flatten()]))[0, 1] > 0.95  # the same picture
    x = torch.randint(0, 256, (64, 3, 32, 32), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    brighter = attack.blended(x, spec).double().mean() - x.double().mean()
    assert float(brighter) == pytest.approx(0.2 * (198.4 - float(x.double().mean())), abs=0.5)
