"""Attacks: PGD, CW-inf and the TRADES inner maximization on tiny models."""

import pytest
import torch
import torch.nn.functional as F

from trainers.fair_adv import attack


def tiny_cnn(seed=0, classes=4):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, padding=1),
        torch.nn.BatchNorm2d(6),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(24, classes),
    )


def batch(n=16, seed=1, classes=4):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, 8, 8, generator=g), torch.randint(0, classes, (n,), generator=g)


def reference_pgd(model, x, y, eps, alpha, steps):
    """Madry et al.'s L-inf PGD written independently (delta parameterization, .backward()).

    delta_0 ~ U(-eps, eps) with x + delta_0 kept in [0, 1]; then
    delta <- clip(delta + alpha sign(grad_delta CE(f(x + delta), y)), -eps, eps), x + delta in [0, 1].
    """
    delta = torch.empty_like(x).uniform_(-eps, eps)
    delta = (x + delta).clamp(0, 1) - x
    for _ in range(steps):
        delta.requires_grad_(True)
        F.cross_entropy(model(x + delta), y, reduction="sum").backward()
        with torch.no_grad():
            delta = (delta + alpha * delta.grad.sign()).clamp(-eps, eps)
            delta = (x + delta).clamp(0, 1) - x
        model.zero_grad()
    return (x + delta).detach()


def test_pgd_stays_in_ball_and_box_and_raises_loss():
    model, (x, y) = tiny_cnn().eval(), batch()
    eps = 8 / 255
    x_adv = attack.pgd(model, x, y, eps=eps, step_size=2 / 255, steps=10, generator=torch.Generator().manual_seed(0))
    assert (x_adv - x).abs().max() <= eps + 1e-6
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    with torch.no_grad():
        clean = F.cross_entropy(model(x), y, reduction="none")
        adv = F.cross_entropy(model(x_adv), y, reduction="none")
        noise = (x + torch.empty_like(x).uniform_(-eps, eps)).clamp(0, 1)
        random = F.cross_entropy(model(noise), y, reduction="none")
    assert (adv >= clean - 1e-6).all()
    assert adv.mean() > clean.mean() and adv.mean() > random.mean()


def test_pgd_at_box_edges_keeps_pixels_in_range():
    model = tiny_cnn().eval()
    x = torch.zeros(4, 3, 8, 8)
    x[:2] = 1.0
    y = torch.tensor([0, 1, 2, 3])
    x_adv = attack.pgd(model, x, y, eps=0.3, step_size=0.1, steps=5)
    assert x_adv.min() >= 0 and x_adv.max() <= 1 and (x_adv - x).abs().max() <= 0.3 + 1e-6


def test_pgd_agrees_with_independent_reference():
    model, (x, y) = tiny_cnn().eval(), batch(32)
    torch.manual_seed(123)
    ours = attack.pgd(model, x, y, eps=8 / 255, step_size=2 / 255, steps=10)
    torch.manual_seed(123)
    ref = reference_pgd(model, x, y, 8 / 255, 2 / 255, 10)
    assert (ours - ref).abs().max() < 1e-5
    with torch.no_grad():
        assert torch.equal(model(ours).argmax(1), model(ref).argmax(1))


def test_pgd_agrees_with_torchattacks_when_installed():
    torchattacks = pytest.importorskip("torchattacks")  # make test installs it (--no-deps)
    model, (x, y) = tiny_cnn().eval(), batch(32)
    torch.manual_seed(7)
    ours = attack.pgd(model, x, y, eps=8 / 255, step_size=2 / 255, steps=10)
    torch.manual_seed(7)
    theirs = torchattacks.PGD(model, eps=8 / 255, alpha=2 / 255, steps=10, random_start=True)(x, y)
    assert (ours - theirs).abs().max() < 1e-5


def test_attack_leaves_parameter_grads_and_modes_alone():
    model, (x, y) = tiny_cnn(), batch()
    model.train()
    model[3].eval()  # a non-BN layer in eval mode must stay so
    bn = model[1]
    mean_before = bn.running_mean.clone()
    attack.pgd(model, x, y, eps=0.03, step_size=0.01, steps=3, bn="eval")
    assert torch.equal(bn.running_mean, mean_before)  # eval: running statistics untouched
    assert model.training and bn.training and not model[3].training
    assert all(p.grad is None for p in model.parameters())
    attack.pgd(model, x, y, eps=0.03, step_size=0.01, steps=3, bn="train")
    assert not torch.equal(bn.running_mean, mean_before)  # train: batch statistics, moved
    model.eval()
    attack.pgd(model, x, y, eps=0.03, step_size=0.01, steps=1, bn="train")
    assert not model.training and not bn.training


def test_bn_mode_rejects_unknown_mode():
    with pytest.raises(ValueError):
        with attack.bn_mode(tiny_cnn(), "frozen"):
            pass


def test_margins_and_cw_loss_by_hand():
    logits = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, 1.0]])
    y = torch.tensor([0, 2])
    assert torch.allclose(attack.logit_margin(logits, y), torch.tensor([1.0, -2.0]))
    p = logits.softmax(1)
    expected = torch.tensor([p[0, 0] - p[0, 1], p[1, 2] - p[1, 1]])
    assert torch.allclose(attack.prob_margin(logits, y), expected)
    # min(max_{j != y} z_j - z_y, kappa): [-1, 2] uncapped, [-1, 1] with kappa 1
    assert torch.allclose(attack.cw_loss(50.0)(logits, y), torch.tensor([-1.0, 2.0]))
    assert torch.allclose(attack.cw_loss(1.0)(logits, y), torch.tensor([-1.0, 1.0]))


def test_cw_lowers_the_margin_within_the_ball():
    model, (x, y) = tiny_cnn().eval(), batch()
    eps = 8 / 255
    x_adv = attack.cw_linf(
        model, x, y, eps=eps, step_size=2 / 255, steps=10, generator=torch.Generator().manual_seed(0)
    )
    assert (x_adv - x).abs().max() <= eps + 1e-6 and x_adv.min() >= 0 and x_adv.max() <= 1
    with torch.no_grad():
        before, after = attack.logit_margin(model(x), y), attack.logit_margin(model(x_adv), y)
    assert (after <= before + 1e-5).all() and after.mean() < before.mean()


def test_trades_attack_raises_kl_within_the_ball():
    model, (x, _) = tiny_cnn().eval(), batch()
    eps = 8 / 255
    gen = torch.Generator().manual_seed(0)
    x_adv = attack.trades_attack(model, x, eps=eps, step_size=2 / 255, steps=10, generator=gen)
    assert (x_adv - x).abs().max() <= eps + 1e-6 and x_adv.min() >= 0 and x_adv.max() <= 1
    with torch.no_grad():
        p = model(x).softmax(1)

        def kl(z):
            return F.kl_div(model(z).log_softmax(1), p, reduction="none").sum(1)

        start = (x + 0.001 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
        assert kl(x_adv).mean() > 10 * kl(start).mean()


def test_pgd_runs_on_the_shared_preact_resnet():
    from trainers.fair_adv.model import build_model

    torch.manual_seed(0)
    model = build_model("preact_resnet18", 10).eval()
    x, y = torch.rand(2, 3, 32, 32), torch.tensor([3, 7])
    x_adv = attack.pgd(model, x, y, eps=8 / 255, step_size=2 / 255, steps=2)
    assert x_adv.shape == x.shape and (x_adv - x).abs().max() <= 8 / 255 + 1e-6
    with torch.no_grad():
        assert F.cross_entropy(model(x_adv), y) > F.cross_entropy(model(x), y)
