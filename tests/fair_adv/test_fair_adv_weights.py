"""Losses, tri-regime and FRL weights, per-class metrics and loop helpers against hand values."""

import math

import pytest
import torch

from raylab.config import from_dict
from raylab.errors import UserError
from trainers.fair_adv import loss, metrics, reweight
from trainers.fair_adv.config import Config
from trainers.fair_adv.loop import lr_at, split_validation
from trainers.fair_adv.reweight import BOUNDARY, OUTLIER, SAFE


# ----------------------------------------------------------------------------- losses


def test_cross_entropy_and_kl_by_hand():
    logits_clean = torch.tensor([[math.log(3.0), 0.0]])  # p = (3/4, 1/4)
    logits_adv = torch.tensor([[0.0, 0.0]])  # q = (1/2, 1/2)
    y = torch.tensor([1])
    ce, kl = loss.trades_terms(logits_clean, logits_adv, y)
    assert torch.allclose(ce, torch.tensor([math.log(4.0)]))
    expected_kl = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert torch.allclose(kl, torch.tensor([expected_kl]), atol=1e-6)
    assert torch.allclose(loss.kl_clean_adv(logits_adv, logits_adv), torch.zeros(1))


def test_weighted_mean_by_hand():
    values = torch.tensor([1.0, 2.0, 4.0])
    assert loss.weighted_mean(values).item() == pytest.approx(7 / 3)
    w = torch.tensor([1.0, 0.0, 3.0])
    assert loss.weighted_mean(values, w).item() == pytest.approx(13 / 4)
    assert loss.weighted_mean(values, w, normalize=False).item() == pytest.approx(13 / 3)
    assert loss.weighted_mean(values, torch.zeros(3)).item() == 0.0


# ----------------------------------------------------------------------------- tri-regime

REGIME_ARGS = dict(loss_threshold=2.0, outlier_max_correct=0.1, min_history=3, safe_margin=0.3)
WEIGHT_ARGS = dict(warmup_epochs=2, outlier_weight=0.1, safe_weight=0.5, boundary_gain=1.0,
                   ramp_epochs=4, safe_margin=0.3)


def synthetic_samples():
    # sample:       0 outlier  1 too new  2 once right  3 low loss  4 clean right  5 safe  6 boundary  7 boundary-
    margin = torch.tensor([-0.9, -0.9, -0.9, -0.9, -0.5, 0.6, 0.1, -0.4])
    clean_ok = torch.tensor([False, False, False, False, True, True, True, False])
    ema_correct = torch.tensor([0.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0, 0.5])
    ema_loss = torch.tensor([3.0, 3.0, 3.0, 1.0, 3.0, 0.1, 0.5, 1.0])
    visits = torch.tensor([5, 2, 5, 5, 5, 5, 5, 5])
    return margin, clean_ok, ema_correct, ema_loss, visits


def test_regimes_on_synthetic_margins():
    regimes = reweight.assign_regimes(*synthetic_samples(), **REGIME_ARGS)
    assert regimes.tolist() == [OUTLIER, BOUNDARY, BOUNDARY, BOUNDARY, BOUNDARY, SAFE, BOUNDARY, BOUNDARY]
    assert reweight.regime_counts(regimes).tolist() == [1, 6, 1]


def test_tri_regime_weights_by_hand():
    margin = synthetic_samples()[0]
    regimes = reweight.assign_regimes(*synthetic_samples(), **REGIME_ARGS)
    # epoch 1 (< warm-up 2): all ones
    assert torch.equal(reweight.tri_regime_weights(margin, regimes, epoch=1, **WEIGHT_ARGS),
                       torch.ones(8))
    # epoch 2: gamma_t = 1 * min(1, 3/4) = 0.75; boundary w = 1 + 0.75 * clip((0.3 - m)/1.3, 0, 1)
    w = reweight.tri_regime_weights(margin, regimes, epoch=2, **WEIGHT_ARGS)
    gamma = 0.75
    expected = [0.1, 1 + gamma * 1.2 / 1.3, 1 + gamma * 1.2 / 1.3, 1 + gamma * 1.2 / 1.3,
                1 + gamma * 0.8 / 1.3, 0.5, 1 + gamma * 0.2 / 1.3, 1 + gamma * 0.7 / 1.3]
    assert torch.allclose(w, torch.tensor(expected))
    # after the ramp the gain is gamma itself; smaller margins weigh more
    w_late = reweight.tri_regime_weights(margin, regimes, epoch=10, **WEIGHT_ARGS)
    assert w_late[1].item() == pytest.approx(1 + 1.2 / 1.3)
    assert w_late[4] > w_late[7] > w_late[6] > 1.0 > w_late[5] > w_late[0]
    # no ramp: the gain applies at once
    no_ramp = reweight.tri_regime_weights(margin, regimes, epoch=2, **{**WEIGHT_ARGS, "ramp_epochs": 0})
    assert no_ramp[1].item() == pytest.approx(1 + 1.2 / 1.3)


def test_regime_weights_take_no_labels():
    import inspect

    for fn in (reweight.assign_regimes, reweight.tri_regime_weights):
        params = set(inspect.signature(fn).parameters)
        assert not params & {"y", "labels", "target", "classes", "num_classes"}


def test_history_update_and_loss_threshold():
    ema_c, ema_l = torch.zeros(4), torch.zeros(4)
    visits = torch.zeros(4, dtype=torch.long)
    assert reweight.loss_threshold(ema_l, visits, 0.9) == math.inf
    idx = torch.tensor([0, 2])
    reweight.update_history(ema_c, ema_l, visits, idx, torch.tensor([True, False]),
                            torch.tensor([1.0, 3.0]), momentum=0.8)
    assert ema_c.tolist() == [1.0, 0.0, 0.0, 0.0] and ema_l.tolist() == [1.0, 0.0, 3.0, 0.0]
    assert visits.tolist() == [1, 0, 1, 0]
    reweight.update_history(ema_c, ema_l, visits, torch.tensor([0, 1]), torch.tensor([False, True]),
                            torch.tensor([2.0, 5.0]), momentum=0.8)
    assert torch.allclose(ema_c, torch.tensor([0.8, 1.0, 0.0, 0.0]))
    assert torch.allclose(ema_l, torch.tensor([1.2, 5.0, 3.0, 0.0]))
    # quantile over seen samples only: {1.2, 5.0, 3.0}, the median is 3.0
    assert reweight.loss_threshold(ema_l, visits, 0.5) == pytest.approx(3.0)


# ----------------------------------------------------------------------------- FRL


def test_frl_dual_update_by_hand():
    phi_nat, phi_bndy = torch.zeros(3), torch.tensor([0.0, 0.5, 0.0])
    clean_err = torch.tensor([0.1, 0.2, 0.6])  # mean 0.3
    bndy_err = torch.tensor([0.3, 0.3, 0.0])  # mean 0.2
    nat, bndy = reweight.frl_update(phi_nat, phi_bndy, clean_err, bndy_err,
                                    tau_nat=0.05, tau_bndy=0.0, rate_nat=1.0, rate_bndy=0.5)
    assert torch.allclose(nat, torch.tensor([0.0, 0.0, 0.25]))
    assert torch.allclose(bndy, torch.tensor([0.05, 0.55, 0.0]))
    weights = reweight.frl_class_weights(torch.tensor([0.0, 0.0, 1.0]))
    assert torch.allclose(weights, torch.tensor([0.75, 0.75, 1.5]))


# ----------------------------------------------------------------------------- metrics


def test_per_class_and_worst_class_by_hand():
    y = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2, 2])
    pred = torch.tensor([0, 0, 0, 1, 1, 0, 2, 2, 2, 2])
    per_class = metrics.per_class_accuracy(pred, y, 4)
    assert per_class[:3].tolist() == [0.75, 0.5, 1.0] and math.isnan(per_class[3])
    assert metrics.worst_class(per_class) == 0.5
    out = metrics.summarize({"clean_pred": pred, "adv_pred": torch.zeros(10, dtype=torch.long)},
                            y, 3, "eval")
    assert out["eval/clean_acc"] == pytest.approx(0.8)
    assert out["eval/clean_acc_worst_class"] == 0.5
    assert out["eval/robust_acc_per_class"] == [1.0, 0.0, 0.0]
    assert out["eval/robust_acc"] == pytest.approx(0.4) and out["eval/robust_acc_worst_class"] == 0.0


def test_class_error_rates_by_hand():
    y = torch.tensor([0, 0, 1, 1])
    clean = torch.tensor([0, 1, 1, 1])
    adv = torch.tensor([1, 1, 1, 0])
    clean_err, bndy_err = metrics.class_error_rates(clean, adv, y, 2)
    assert clean_err.tolist() == [0.5, 0.0] and bndy_err.tolist() == [0.5, 0.5]


def test_evaluate_restores_mode_and_attacks():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(2))
        model[0].bias.zero_()
    model.train()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.4, 0.6]])
    y = torch.tensor([0, 1, 0])

    def flip(m, xb, yb):
        assert not m.training
        return xb.flip(1)

    out = metrics.evaluate(model, x, y, 2, flip, batch_size=2)
    assert out["clean_pred"].tolist() == [0, 1, 1] and out["adv_pred"].tolist() == [1, 0, 0]
    assert model.training


# ----------------------------------------------------------------------------- loop helpers


def test_split_validation_is_stratified_disjoint_and_fixed():
    y = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    train, val = split_validation(y, 10, seed=0)
    assert len(val) == 10 and len(train) == 90
    assert set(train.tolist()).isdisjoint(val.tolist())
    assert sorted(train.tolist() + val.tolist()) == list(range(100))
    assert torch.bincount(y[val], minlength=3).tolist() == [5, 3, 2]
    assert torch.equal(split_validation(y, 10, seed=0)[1], val)
    assert not torch.equal(split_validation(y, 10, seed=1)[1], val)


def test_step_decay_schedule():
    cfg = Config(lr=0.1, lr_milestones=(100, 105), lr_gamma=0.1)
    assert lr_at(cfg, 0) == pytest.approx(0.1) and lr_at(cfg, 99) == pytest.approx(0.1)
    assert lr_at(cfg, 100) == pytest.approx(0.01) and lr_at(cfg, 109) == pytest.approx(0.001)


def test_config_defaults_are_paper_scale_and_checked():
    cfg = Config()
    assert (cfg.epochs, cfg.batch_size, cfg.lr, cfg.momentum, cfg.weight_decay) == (110, 128, 0.1, 0.9, 5e-4)
    assert (cfg.eps, cfg.step_size, cfg.train_steps, cfg.eval_steps) == (8 / 255, 2 / 255, 10, 20)
    assert cfg.trades_beta == 6.0
    with pytest.raises(UserError, match="tri_safe_margin"):
        from_dict(Config, {"tri_safe_margin": -1.0}, "test.yaml")
    with pytest.raises(UserError, match="lr_milestones"):
        from_dict(Config, {"lr_milestones": [105, 100]}, "test.yaml")
    with pytest.raises(UserError, match="unknown key 'beta'"):
        from_dict(Config, {"beta": 6.0}, "test.yaml")
    with pytest.raises(UserError, match="method"):
        from_dict(Config, {"method": "mart"}, "test.yaml")


def test_every_config_field_has_a_docstring():
    import dataclasses

    from raylab.config import field_docs

    docs = field_docs(Config)
    assert [f.name for f in dataclasses.fields(Config) if not docs.get(f.name)] == []


# ----------------------------------------------------------------------------- one train step


def _step(method, **overrides):
    from trainers.fair_adv.step import History, train_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(12, 4, generator=g), torch.randint(0, 3, (12,), generator=g)
    cfg = Config(method=method, eps=0.1, step_size=0.05, train_steps=2, **overrides)
    history = History.empty(20)
    index = torch.arange(3, 15)
    stats = train_step(model, opt, x, y, index, cfg, epoch=0, history=history, loss_threshold=math.inf,
                       generator=torch.Generator().manual_seed(2))
    return model, history, stats


@pytest.mark.parametrize("method", ["standard", "pgd_at", "trades", "frl", "tri_regime"])
def test_train_step_of_every_method(method):
    model, history, stats = _step(method)
    assert math.isfinite(stats["loss"].item())
    assert stats["regimes"].sum().item() == 12
    assert history.visits[3:15].tolist() == [1] * 12 and history.visits[:3].sum() == 0
    assert all(p.grad is not None for p in model.parameters())


def test_tri_regime_in_warmup_is_exactly_pgd_at():
    pgd_model = _step("pgd_at")[0]
    tri_model = _step("tri_regime", tri_warmup_epochs=1)[0]
    for a, b in zip(pgd_model.state_dict().values(), tri_model.state_dict().values()):
        assert torch.equal(a, b)
    after_warmup = _step("tri_regime", tri_warmup_epochs=0, tri_safe_weight=0.0)[0]
    assert not torch.equal(pgd_model[0].weight, after_warmup[0].weight)
