"""fair_adv's WideResNet-34-10 (TRADES's, FRL's and Rice et al.'s network): its size, counted by
hand from the architecture, its output shape on CIFAR-sized images, and how a config picks it."""

import pytest
import torch

from raylab.config import from_dict
from trainers.fair_adv.config import Config
from trainers.fair_adv.model import WideResNet, build_model


def wrn_parameters(depth: int, widen: int, classes: int = 10, channels: int = 3) -> int:
    """WRN-depth-widen's parameter count from the architecture: a 3x3 stem of 16 channels; per
    group (widths 16k, 32k, 64k) (depth - 4) / 6 blocks of BN, 3x3 conv, BN, 3x3 conv, the first
    block of a group with a 1x1 projection when its width changes; a last BN and the linear
    layer (BatchNorm: a weight and a bias per channel)."""
    n = (depth - 4) // 6
    widths = [16, 16 * widen, 32 * widen, 64 * widen]
    total = channels * 16 * 9
    for g in range(3):
        for i in range(n):
            cin, cout = (widths[g] if i == 0 else widths[g + 1]), widths[g + 1]
            total += 2 * cin + cin * cout * 9 + 2 * cout + cout * cout * 9 + (cin * cout if cin != cout else 0)
    return total + 2 * widths[3] + widths[3] * classes + classes


def test_wrn34_10_has_46m_parameters_and_cifar_logits():
    model = build_model("wrn34_10", 10, "cifar10")
    count = sum(p.numel() for p in model.parameters())
    assert count == wrn_parameters(34, 10) == 46_160_474  # the 46.16M TRADES and FRL report
    groups = [[(b.conv1.in_channels, b.conv2.out_channels, b.conv1.stride[0]) for b in g] for g in model.groups]
    assert [len(g) for g in groups] == [5, 5, 5]
    assert [g[0] for g in groups] == [(16, 160, 1), (160, 320, 2), (320, 640, 2)]
    model.eval()
    with torch.no_grad():
        logits = model(torch.rand(1, 3, 32, 32))
    assert logits.shape == (1, 10) and torch.isfinite(logits).all()


def test_small_wide_resnet_trains_and_keeps_the_shape_rule():
    """A WRN-10-1 (one block a group) takes a gradient step; depth must be 6 n + 4."""
    model = WideResNet(10, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), depth=10, widen=1)
    assert sum(p.numel() for p in model.parameters()) == wrn_parameters(10, 1)
    x, y = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with pytest.raises(ValueError, match="6 n \\+ 4"):
        WideResNet(10, (0.5,) * 3, (0.25,) * 3, depth=33)


def test_config_selects_wrn34_10():
    assert from_dict(Config, {"model": "wrn34_10"}, "test config").model == "wrn34_10"
    with pytest.raises(Exception, match="model"):
        from_dict(Config, {"model": "wrn34_10", "dataset": "digits8x8", "augment": False}, "test config")
