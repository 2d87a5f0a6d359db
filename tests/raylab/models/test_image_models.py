"""The CIFAR ResNet-18 variants: shapes, activations, normalization inside, no max-pool."""

import pytest
import torch

from raylab.models import preact_resnet18, resnet18


@pytest.mark.parametrize("make", [resnet18, preact_resnet18])
def test_shapes_features_and_activations(make):
    torch.manual_seed(0)
    model = make(num_classes=7).eval()
    x = torch.rand(2, 3, 32, 32)
    logits = model(x)
    assert logits.shape == (2, 7)
    features = model.features(x)
    assert features.shape == (2, 512)
    assert torch.allclose(model.classify(features), logits, atol=1e-5)
    out, acts = model.forward_with_activations(x)
    assert torch.allclose(out, logits, atol=1e-5)
    assert acts["stem"].shape == (2, 64, 32, 32)  # 3x3 stride-1 stem, no max-pool
    assert acts["layer1.1"].shape == (2, 64, 32, 32)
    assert acts["layer2.0"].shape == (2, 128, 16, 16)
    assert acts["layer4.1"].shape == (2, 512, 4, 4)
    assert torch.allclose(acts["features"], features, atol=1e-5)
    assert model.last_relu in acts and (acts[model.last_relu] >= 0).all()
    assert 11.0e6 < sum(p.numel() for p in model.parameters()) < 11.3e6


def test_normalization_is_a_buffer_applied_inside():
    torch.manual_seed(0)
    model = resnet18(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)).eval()
    assert "mean" in dict(model.named_buffers()) and "std" in model.state_dict()
    assert not any(name in ("mean", "std") for name, _ in model.named_parameters())
    x = torch.rand(2, 3, 32, 32)
    stem = torch.relu(model.bn1(model.conv1((x - 0.5) / 0.25)))
    _, acts = model.forward_with_activations(x)
    assert torch.allclose(acts["stem"], stem, atol=1e-6)


def test_gradients_reach_the_input_pixels():
    model = preact_resnet18()
    x = torch.rand(2, 3, 32, 32, requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize("make", [resnet18, preact_resnet18])
def test_width_scales_channels(make):
    model = make(num_classes=3, width=8).eval()
    out, acts = model.forward_with_activations(torch.rand(2, 3, 32, 32))
    assert out.shape == (2, 3) and model.feature_dim == 64
    assert acts["stem"].shape == (2, 8, 32, 32) and acts["layer4.1"].shape == (2, 64, 4, 4)
    assert acts["features"].shape == (2, 64)
