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


# ----------------------------------------------------------------------------- tri-regime

REGIME_ARGS = dict(loss_threshold=2.0, outlier_max_correct=0.1, min_history=3, safe_margin=0.3)
WEIGHT_ARGS = dict(
    warmup_epochs=2, outlier_weight=0.1, safe_weight=0.5, boundary_gain=1.0, ramp_epochs=4, safe_margin=0.3
)


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
    assert torch.equal(reweight.tri_regime_weights(margin, regimes, epoch=1, **WEIGHT_ARGS), torch.ones(8))
    # epoch 2, the first weighted one: gamma_t = 1 * min(1, 1/4) = 0.25 (the ramp counts from
    # the end of the warm-up); boundary w = 1 + 0.25 * clip((0.3 - m)/1.3, 0, 1)
    w = reweight.tri_regime_weights(margin, regimes, epoch=2, **WEIGHT_ARGS)
    gamma = 0.25
    expected = [
        0.1,
        1 + gamma * 1.2 / 1.3,
        1 + gamma * 1.2 / 1.3,
        1 + gamma * 1.2 / 1.3,
        1 + gamma * 0.8 / 1.3,
        0.5,
        1 + gamma * 0.2 / 1.3,
        1 + gamma * 0.7 / 1.3,
    ]
    assert torch.allclose(w, torch.tensor(expected))
    # epoch 4 (third weighted epoch): 3/4; from epoch 5 on the gain is gamma itself
    w_mid = reweight.tri_regime_weights(margin, regimes, epoch=4, **WEIGHT_ARGS)
    assert w_mid[1].item() == pytest.approx(1 + 0.75 * 1.2 / 1.3)
    assert reweight.tri_regime_weights(margin, regimes, epoch=5, **WEIGHT_ARGS)[1].item() == pytest.approx(
        1 + 1.2 / 1.3
    )
    # smaller margins weigh more
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
    reweight.update_history(
        ema_c, ema_l, visits, idx, torch.tensor([True, False]), torch.tensor([1.0, 3.0]), momentum=0.8
    )
    assert ema_c.tolist() == [1.0, 0.0, 0.0, 0.0] and ema_l.tolist() == [1.0, 0.0, 3.0, 0.0]
    assert visits.tolist() == [1, 0, 1, 0]
    reweight.update_history(
        ema_c, ema_l, visits, torch.tensor([0, 1]), torch.tensor([False, True]), torch.tensor([2.0, 5.0]), momentum=0.8
    )
    assert torch.allclose(ema_c, torch.tensor([0.8, 1.0, 0.0, 0.0]))
    assert torch.allclose(ema_l, torch.tensor([1.2, 5.0, 3.0, 0.0]))
    # quantile over seen samples only: {1.2, 5.0, 3.0}, the median is 3.0
    assert reweight.loss_threshold(ema_l, visits, 0.5) == pytest.approx(3.0)


# ----------------------------------------------------------------------------- FRL


def test_frl_update_matches_the_published_rule_by_hand():
    """One update of utils_frl.frl_train / cost_sensitive / normalize_lambda, by hand.

    Three classes, multipliers lambda_nat = (0.1, 0, 0), lambda_bndy = (0, 0.2, 0.1), cap 0.5,
    tolerances 0.1, rate1 = 0.05 (boundary: 2 rate1 = 0.1). Validation errors per class and
    over all examples:
      clean: e = (0.1, 0.2, 0.6), E = 0.3  ->  e - E - tau = (-0.3, -0.2, 0.2)
      bndy:  e = (0.5, 0.1, 0.3), E = 0.3  ->  e - E - tau = ( 0.1, -0.3, -0.1)
    lambda_nat  + 0.05 (-0.3, -0.2, 0.2) = (0.085, -0.01, 0.01)  -> clip (0.085, 0, 0.01),
        sum 0.095 <= 0.5: kept.
    lambda_bndy + 0.1 (0.1, -0.3, -0.1) = (0.01, 0.17, 0.09), sum 0.27: kept.
    weights 1/Y + lambda_c - mean(lambda) (the reference's 1/10 + 9/10 l_i - 1/10 sum_{j!=i} l_j
    for Y = 10, here with Y = 3):
      a = 1/3 + (0.085, 0, 0.01) - 0.095/3,  b = 1/3 + (0.01, 0.17, 0.09) - 0.09.
    """
    clean_err, bndy_err = torch.tensor([0.1, 0.2, 0.6]), torch.tensor([0.5, 0.1, 0.3])
    nat = reweight.frl_multiplier_step(torch.tensor([0.1, 0.0, 0.0]), clean_err, 0.3, tolerance=0.1, rate=0.05, cap=0.5)
    bndy = reweight.frl_multiplier_step(
        torch.tensor([0.0, 0.2, 0.1]), bndy_err, 0.3, tolerance=0.1, rate=2 * 0.05, cap=0.5
    )
    assert torch.allclose(nat, torch.tensor([0.085, 0.0, 0.01]))
    assert torch.allclose(bndy, torch.tensor([0.01, 0.17, 0.09]))
    a, b = reweight.frl_class_weights(nat), reweight.frl_class_weights(bndy)
    assert torch.allclose(a, torch.tensor([1 / 3 + 0.085, 1 / 3, 1 / 3 + 0.01]) - 0.095 / 3)
    assert torch.allclose(b, torch.tensor([1 / 3 + 0.01, 1 / 3 + 0.17, 1 / 3 + 0.09]) - 0.09)
    assert a.sum().item() == pytest.approx(1.0) and b.sum().item() == pytest.approx(1.0)


def test_frl_weights_equal_the_references_cost_sensitive_loop():
    """The reference's double loop for Y = 10: diff_i = 1/10 + 9/10 l_i - 1/10 sum_{j != i} l_j."""
    lam = torch.tensor([0.0, 0.05, 0.2, 0.1, 0.0, 0.15, 0.0, 0.0, 0.0, 0.0])
    diff = torch.ones(10) / 10
    for i in range(10):
        for j in range(10):
            diff[i] += 9 / 10 * lam[i] if j == i else -1 / 10 * lam[j]
    assert torch.allclose(reweight.frl_class_weights(lam), diff, atol=1e-7)


def test_frl_cap_rescales_onto_the_simplex_and_rate_halves_every_40_epochs():
    # lambda + step = (0.4, 0.4, -0.2): clip (0.4, 0.4, 0), sum 0.8 > 0.5 -> (0.25, 0.25, 0)
    lam = reweight.frl_multiplier_step(
        torch.zeros(3), torch.tensor([0.9, 0.9, 0.3]), 0.5, tolerance=0.0, rate=1.0, cap=0.5
    )
    assert torch.allclose(lam, torch.tensor([0.25, 0.25, 0.0]))
    assert reweight.frl_multiplier_step(
        torch.zeros(2), torch.tensor([1.0, 0.0]), 0.0, tolerance=0.0, rate=1.0, cap=None
    ).tolist() == [1.0, 0.0]
    # frlrw.py: rate1 /= 2 at epochs 40, 80, ... (1-based) before that epoch's update
    rates = [reweight.frl_rate(0.05, k, 40) for k in (1, 39, 40, 79, 80)]
    assert rates == pytest.approx([0.05, 0.05, 0.025, 0.025, 0.0125])
    assert reweight.frl_rate(0.05, 80, 0) == 0.05
    # remargin: radius factor clip(exp(2 lambda), 0.98, 3)
    scale = reweight.frl_margin_scale(torch.tensor([-1.0, 0.0, 0.1, 2.0]))
    assert torch.allclose(scale, torch.tensor([0.98, 1.0, math.exp(0.2), 3.0]))


def test_frl_error_rates_follow_the_reference():
    # boundary error is acc_clean - acc_adv per class (utils_frl.evaluate), not P(clean right, adv wrong)
    y = torch.tensor([0, 0, 1, 1])
    clean = torch.tensor([0, 1, 1, 1])
    adv = torch.tensor([1, 0, 1, 0])  # sample 1: clean wrong, adversarially right
    clean_err, bndy_err, total_clean, total_bndy = metrics.frl_error_rates(clean, adv, y, 3)
    assert clean_err.tolist() == [0.5, 0.0, 0.0] and bndy_err.tolist() == [0.0, 0.5, 0.0]
    assert total_clean == pytest.approx(0.25) and total_bndy == pytest.approx(0.25)


def test_regime_counts_per_class():
    regimes = torch.tensor([OUTLIER, BOUNDARY, SAFE, OUTLIER, SAFE])
    y = torch.tensor([1, 1, 0, 1, 2])
    assert reweight.regime_counts_per_class(regimes, y, 3).tolist() == [[0, 0, 1], [2, 1, 0], [0, 0, 1]]


# ----------------------------------------------------------------------------- metrics


def test_per_class_and_worst_class_by_hand():
    y = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2, 2])
    pred = torch.tensor([0, 0, 0, 1, 1, 0, 2, 2, 2, 2])
    per_class = metrics.per_class_accuracy(pred, y, 4)
    assert per_class[:3].tolist() == [0.75, 0.5, 1.0] and math.isnan(per_class[3])
    assert metrics.worst_class(per_class) == 0.5
    out = metrics.summarize({"clean_pred": pred, "adv_pred": torch.zeros(10, dtype=torch.long)}, y, 3, "eval")
    assert out["eval/clean_acc"] == pytest.approx(0.8)
    assert out["eval/clean_acc_worst_class"] == 0.5
    assert out["eval/robust_acc_per_class"] == [1.0, 0.0, 0.0]
    assert out["eval/robust_acc"] == pytest.approx(0.4) and out["eval/robust_acc_worst_class"] == 0.0


def test_evaluate_restores_mode_and_attacks():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(2))
        model[0].bias.zero_()
    model.train()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.4, 0.6]])
    y = torch.tensor([0, 1, 0])

    def flip(m, xb, yb, share=None):
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
    assert cfg.trades_beta == 6.0 and cfg.val_size == 3000 and cfg.autoattack == "on"
    # FRL as frlrw.py runs it: 40 epochs at lr 1e-3, beta 1.5, bounds 0.1, rate1 0.05 (x2 for
    # the boundary), lim 0.5, halving every 40 epochs
    assert (cfg.frl_finetune_epochs, cfg.frl_lr, cfg.frl_beta) == (40, 1e-3, 1.5)
    assert (cfg.frl_tau_nat, cfg.frl_tau_bndy, cfg.frl_rate_nat, cfg.rate_bndy()) == (0.1, 0.1, 0.05, 0.1)
    assert Config(frl_rate_nat=0.02).rate_bndy() == 0.04 and Config(frl_rate_bndy=0.3).rate_bndy() == 0.3
    assert (cfg.frl_cap, cfg.frl_rate_halve_every) == (0.5, 40)
    assert Config(method="frl").base() == "trades" and Config(method="tri_regime").base() == "pgd_at"
    assert Config(method="frl", base_loss="pgd_at").base() == "pgd_at"
    assert Config(method="pgd_at", base_loss="trades").base() == "pgd_at"  # read by frl, tri only
    with pytest.raises(UserError, match="frl_finetune_epochs"):
        from_dict(Config, {"method": "frl", "epochs": 40}, "test.yaml")
    with pytest.raises(UserError, match="val_size"):
        from_dict(Config, {"val_size": 0}, "test.yaml")
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


def _step(method, frl=None, **overrides):
    from trainers.fair_adv.step import History, train_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(12, 4, generator=g), torch.randint(0, 3, (12,), generator=g)
    cfg = Config(method=method, eps=0.1, step_size=0.05, train_steps=2, **overrides)
    history = History.empty(20)
    index = torch.arange(3, 15)
    stats = train_step(
        model,
        opt,
        x,
        y,
        index,
        cfg,
        epoch=0,
        history=history,
        loss_threshold=math.inf,
        generator=torch.Generator().manual_seed(2),
        frl=frl,
    )
    return model, history, stats


ARMS = [
    ("standard", {}),
    ("pgd_at", {}),
    ("trades", {}),
    ("frl", {}),
    ("frl", {"base_loss": "pgd_at"}),
    ("tri_regime", {}),
    ("tri_regime", {"base_loss": "trades"}),
]


@pytest.mark.parametrize("method,extra", ARMS)
def test_train_step_of_every_method(method, extra):
    model, history, stats = _step(method, **extra)
    assert math.isfinite(stats["loss"].item())
    assert stats["regimes"].sum().item() == 12 and stats["regimes"].shape == (3, 3)
    assert history.visits[3:15].tolist() == [1] * 12 and history.visits[:3].sum() == 0
    assert all(p.grad is not None for p in model.parameters())


def test_tri_regime_in_warmup_is_exactly_pgd_at():
    pgd_model = _step("pgd_at")[0]
    tri_model = _step("tri_regime", tri_warmup_epochs=1)[0]
    for a, b in zip(pgd_model.state_dict().values(), tri_model.state_dict().values()):
        assert torch.equal(a, b)
    after_warmup = _step("tri_regime", tri_warmup_epochs=0, tri_safe_weight=0.0)[0]
    assert not torch.equal(pgd_model[0].weight, after_warmup[0].weight)


def _frl_weights(a, b, scale=None):
    from trainers.fair_adv.step import FrlWeights

    return FrlWeights(torch.tensor(a), torch.tensor(b), None if scale is None else torch.tensor(scale))


def test_frl_with_uniform_weights_is_its_base_loss_and_normalizes_each_term():
    uniform = _frl_weights([1 / 3] * 3, [1 / 3] * 3)
    trades = _step("trades", trades_beta=1.5)
    frl = _step("frl", frl=uniform, frl_beta=1.5, epochs=2, frl_finetune_epochs=1)
    assert frl[2]["loss"].item() == pytest.approx(trades[2]["loss"].item(), rel=1e-6)
    for a, b in zip(trades[0].parameters(), frl[0].parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    pgd = _step("pgd_at")
    frl_pgd = _step("frl", frl=uniform, base_loss="pgd_at", epochs=2, frl_finetune_epochs=1)
    assert frl_pgd[2]["loss"].item() == pytest.approx(pgd[2]["loss"].item(), rel=1e-6)
    # scaling every class weight by the same factor changes nothing (each term is normalized)
    doubled = _step("frl", frl=_frl_weights([2 / 3] * 3, [2 / 3] * 3), frl_beta=1.5, epochs=2, frl_finetune_epochs=1)
    assert doubled[2]["loss"].item() == pytest.approx(trades[2]["loss"].item(), rel=1e-6)
    skewed = _step("frl", frl=_frl_weights([0.6, 0.2, 0.2], [0.2, 0.2, 0.6]), epochs=2, frl_finetune_epochs=1)
    assert skewed[2]["loss"].item() != pytest.approx(frl[2]["loss"].item(), rel=1e-3)
    remargin = _step(
        "frl",
        frl=_frl_weights([1 / 3] * 3, [1 / 3] * 3, [1.0, 3.0, 0.98]),
        frl_remargin=True,
        epochs=2,
        frl_finetune_epochs=1,
    )
    assert math.isfinite(remargin[2]["loss"].item())


def test_regime_counts_are_bincounts_bit_for_bit_without_reading_the_keys_back():
    """The fixed-size index_add_ counts equal torch.bincount's on random batches (every class
    and regime, empty classes included), as long tensors."""
    gen = torch.Generator().manual_seed(0)
    for size, classes in ((1, 10), (7, 3), (128, 10), (1000, 100)):
        regimes = torch.randint(0, 3, (size,), generator=gen)
        y = torch.randint(0, classes, (size,), generator=gen)
        want = torch.bincount(y * 3 + regimes, minlength=3 * classes).view(classes, 3)
        got = reweight.regime_counts_per_class(regimes, y, classes)
        assert got.dtype == want.dtype == torch.long and torch.equal(got, want)
        assert torch.equal(reweight.regime_counts(regimes), torch.bincount(regimes, minlength=3))
