"""The surrogates against hand-computed values, their limits, bounds, gradients, numerics."""

import math

import pytest
import torch

from trainers.dqn_softlinf.loss import (
    effective_beta,
    effective_sample_size,
    huber,
    l1,
    mse,
    soft_linf,
    soft_linf_weights,
    surrogate,
)

TD = torch.tensor([0.5, -2.0, 1.0, 0.0])


def test_mse_by_hand():
    assert mse(TD).item() == pytest.approx((0.25 + 4 + 1 + 0) / 4)
    w = torch.tensor([1.0, 0.0, 1.0, 2.0])
    assert mse(TD, w).item() == pytest.approx((0.25 + 1 + 0) / 4)


def test_huber_by_hand():
    # delta 1: 0.5*0.25, 1*(2-0.5), 0.5*1, 0
    assert huber(TD, 1.0).item() == pytest.approx((0.125 + 1.5 + 0.5 + 0) / 4)
    # delta 0.5: 0.5*0.25, 0.5*(2-0.25), 0.5*(1-0.25), 0
    assert huber(TD, 0.5).item() == pytest.approx((0.125 + 0.875 + 0.375) / 4)
    assert torch.allclose(huber(TD, 1.0), torch.nn.functional.huber_loss(TD, torch.zeros(4)))


def test_soft_linf_by_hand():
    beta = 2.0
    by_hand = math.log((math.exp(1.0) + math.exp(4.0) + math.exp(2.0) + 1.0) / 4) / beta
    assert soft_linf(TD, beta).item() == pytest.approx(by_hand, rel=1e-6)
    w = torch.tensor([1.0, 3.0, 0.0, 0.0])
    weighted = math.log((math.exp(1.0) + 3 * math.exp(4.0)) / 4) / beta
    assert soft_linf(TD, beta, w).item() == pytest.approx(weighted, rel=1e-6)


def test_soft_linf_limits_in_beta():
    a = TD.abs()
    assert soft_linf(TD, 1e3).item() == pytest.approx(a.max().item(), abs=2e-3)
    assert soft_linf(TD, 1e-6).item() == pytest.approx(a.mean().item(), rel=1e-5)
    # small-beta expansion: mean + beta var / 2
    beta = 1e-3
    expected = a.mean().item() + beta * a.var(unbiased=False).item() / 2
    assert soft_linf(TD, beta).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("beta", [1e-4, 0.1, 1.0, 10.0, 1e3])
def test_soft_linf_between_mean_and_max(beta):
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        td = torch.randn(64, generator=g) * 3
        w = torch.rand(64, generator=g)
        for weights in (None, w):
            value = soft_linf(td, beta, weights).item()
            a = td.abs()
            mean = a.mean().item() if weights is None else ((w * a).sum() / w.sum()).item()
            assert mean - 1e-5 <= value <= a.max().item() + 1e-5
    # monotone in beta
    td = torch.randn(32, generator=g)
    values = [soft_linf(td, b).item() for b in (0.01, 0.1, 1, 10, 100)]
    assert values == sorted(values)


def test_soft_linf_gradient_is_softmax_weighting():
    td = torch.tensor([0.3, -1.2, 0.7, 2.0, -0.1], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([1.0, 0.5, 2.0, 1.0, 1.0], dtype=torch.float64)
    beta = 1.7
    for weights in (None, w):
        (grad,) = torch.autograd.grad(soft_linf(td, beta, weights), td)
        ww = torch.ones(5, dtype=torch.float64) if weights is None else weights
        p = ww * torch.exp(beta * td.detach().abs())
        p = p / p.sum()
        assert torch.allclose(grad, p * td.detach().sign(), atol=1e-12)
        assert grad.abs().sum().item() == pytest.approx(1.0)


def test_soft_linf_stable_at_extremes():
    td = torch.tensor([1e6, -1e6 + 1, 3.0, 0.0], requires_grad=True)
    value = soft_linf(td, 1e3)
    value.backward()
    assert math.isfinite(value.item()) and value.item() == pytest.approx(1e6, rel=1e-6)
    assert torch.isfinite(td.grad).all()
    assert td.grad[0].item() == pytest.approx(1.0, abs=1e-6)  # all weight on the largest
    # tiny beta on huge errors: the mean, without overflow or cancellation
    td = torch.tensor([1e6, 2e6, 0.0])
    assert soft_linf(td, 1e-12).item() == pytest.approx(1e6, rel=1e-4)
    # all equal: exactly that value, gradient spread evenly
    td = torch.full((8,), -5.0, requires_grad=True)
    v = soft_linf(td, 1e3)
    v.backward()
    assert v.item() == pytest.approx(5.0)
    assert torch.allclose(td.grad, torch.full((8,), -1 / 8))


def test_weights_scale_free_and_zero_weight_ignored():
    w = torch.tensor([2.0, 1.0, 0.0, 1.0])
    for loss in (lambda t, w: mse(t, w), lambda t, w: huber(t, 1.0, w), lambda t, w: soft_linf(t, 3.0, w)):
        assert loss(TD, w).item() == pytest.approx(loss(TD, 5 * w).item(), rel=1e-6)
        moved = TD.clone()
        moved[2] = 100.0  # a zero-weight sample does not count
        assert loss(moved, w).item() == pytest.approx(loss(TD, w).item(), rel=1e-6)
    assert mse(TD, torch.ones(4)).item() == pytest.approx(mse(TD).item())


def test_beta_scale_and_dispatch():
    assert effective_beta(TD, 10.0, "reward") == 10.0
    assert effective_beta(TD, 10.0, "td_mean").item() == pytest.approx(10.0 / 0.875)
    # td_mean makes soft_linf scale-equivariant: errors 100x larger, loss 100x larger
    a = surrogate("soft_linf", TD, beta=3.0, beta_scale="td_mean").item()
    b = surrogate("soft_linf", 100 * TD, beta=3.0, beta_scale="td_mean").item()
    assert b == pytest.approx(100 * a, rel=1e-5)
    assert surrogate("mse", TD).item() == mse(TD).item()
    assert surrogate("huber", TD, huber_delta=0.5).item() == huber(TD, 0.5).item()
    with pytest.raises(ValueError, match="unknown loss"):
        surrogate("l3", TD)
    with pytest.raises(ValueError, match="beta"):
        soft_linf(TD, 0.0)


def test_l1_is_soft_linfs_small_beta_limit():
    assert l1(TD).item() == pytest.approx((0.5 + 2 + 1 + 0) / 4)
    w = torch.tensor([1.0, 0.0, 1.0, 2.0])
    assert l1(TD, w).item() == pytest.approx((0.5 + 1 + 0) / 4)
    assert surrogate("l1", TD, weights=w).item() == l1(TD, w).item()
    assert soft_linf(TD, 1e-4).item() == pytest.approx(l1(TD).item(), rel=1e-3)


def test_effective_sample_size_of_the_softmax_weights():
    # beta 2, |td| = [0.5, 2, 1, 0]: p proportional to e^1, e^4, e^2, e^0
    e = torch.tensor([math.e, math.e**4, math.e**2, 1.0], dtype=torch.float64)
    p = soft_linf_weights(TD.double(), 2.0)
    assert torch.allclose(p, e / e.sum())
    assert effective_sample_size(p).item() == pytest.approx((e.sum() ** 2 / e.square().sum()).item())
    assert effective_sample_size(soft_linf_weights(TD, 1e-6)).item() == pytest.approx(4.0, rel=1e-4)
    assert effective_sample_size(soft_linf_weights(TD, 1e3)).item() == pytest.approx(1.0)
    w = torch.tensor([1.0, 0.0, 1.0, 1.0])  # zero weight: the worst sample gets no gradient
    assert soft_linf_weights(TD, 2.0, w)[1].item() == 0.0
    # they are the gradient of soft_linf with respect to |td|
    td = TD.clone().requires_grad_(True)
    soft_linf(td, 2.0, torch.tensor([1.0, 0.5, 2.0, 1.0])).backward()
    assert torch.allclose(td.grad, soft_linf_weights(TD, 2.0, torch.tensor([1.0, 0.5, 2.0, 1.0])) * TD.sign())
