"""FRL's protocol (fine-tune start, controls, the update from Config defaults) and Rice et al.'s
attack protocol in fair_adv_long, each checked by its effect."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from conftest import assert_finite_metrics

from raylab import experiment as experiments
from raylab.config import from_dict
from raylab.data import augment
from trainers.fair_adv import LAST_METRICS, METRICS, metrics, step
from trainers.fair_adv import loop as fair_loop
from trainers.fair_adv.config import Config
from trainers.fair_adv.loop import frl_state, frl_step

# ----------------------------------------------------------------------------- FRL's start


def _force_selection(monkeypatch, forced: dict[int, float]) -> list:
    """Make the loop's selection key of epoch ``e`` (1-based, in call order) ``(forced[e], 0)``;
    returns the list of (labels, rule) each call saw."""
    seen = []

    def forced_key(adv_pred, y, num_classes, rule):
        seen.append((y.clone(), rule))
        return forced[len(seen)], 0.0

    monkeypatch.setattr(metrics, "selection_key", forced_key)
    return seen


def _spy_epochs(monkeypatch) -> dict:
    """Record each epoch's start and end weights, optimizer state size and FRL weights, and the
    weights of every model the final evaluation sees (``("final", prefix)``)."""
    seen = {}
    train_epoch = fair_loop.train_epoch
    final_evaluation = fair_loop.final_evaluation

    def spy(model, optimizer, *args, epoch, frl, **kwargs):
        seen[("start", epoch)] = {k: v.clone() for k, v in model.state_dict().items()}
        seen[("momentum", epoch)] = len(optimizer.state)
        seen[("frl", epoch)] = frl
        out = train_epoch(model, optimizer, *args, epoch=epoch, frl=frl, **kwargs)
        seen[("end", epoch)] = {k: v.clone() for k, v in model.state_dict().items()}
        return out

    def spy_final(model, *args, prefix="final", **kwargs):
        seen[("final", prefix)] = {k: v.clone() for k, v in model.state_dict().items()}
        return final_evaluation(model, *args, prefix=prefix, **kwargs)

    monkeypatch.setattr(fair_loop, "train_epoch", spy)
    monkeypatch.setattr(fair_loop, "final_evaluation", spy_final)
    return seen


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


FRL_4_EPOCHS = (
    "config.method=frl",
    "config.epochs=4",
    "config.frl_finetune_epochs=2",
    "config.lr_milestones=[1]",
)  # final_eval_last: fair_adv.yaml's own (true): the main experiment evaluates the last model too


def test_frl_finetune_starts_from_the_best_stage_one_model(local_trial, tmp_path, monkeypatch):
    """Stage 1 (epochs 1-2) is forced to have its best validation score at epoch 1: the
    fine-tune's first epoch must start from the epoch-1 model (not the last stage-1 model), in a
    fresh optimizer; the best model is then the best of the fine-tuning epochs."""
    _force_selection(monkeypatch, {1: 0.9, 2: 0.1, 3: 0.95, 4: 0.2})
    seen = _spy_epochs(monkeypatch)
    rows = local_trial("fair_adv", f"config.data_dir={tmp_path / 'data'}", *FRL_4_EPOCHS, stop={"train/epoch": 4})
    assert [r["train/epoch"] for r in rows] == [1, 2, 3, 4]
    assert seen[("frl", 1)] is None and seen[("frl", 2)] is not None  # stage 2 from epoch index 2
    start, best1, last1 = seen[("start", 2)], seen[("end", 0)], seen[("end", 1)]
    assert _same(start, best1)
    assert any(not torch.equal(start[k], last1[k]) for k in start if start[k].is_floating_point())
    assert seen[("momentum", 1)] > 0 and seen[("momentum", 2)] == 0  # a fresh SGD for the fine-tune
    assert [r["best/epoch"] for r in rows] == [1, 1, 3, 3]
    assert [r["best/val_score"] for r in rows] == [0.9, 0.9, 0.95, 0.95]
    assert rows[1]["best/robust_acc"] == rows[0]["eval/robust_acc"]
    assert rows[-1]["best/robust_acc_gap"] == pytest.approx(rows[2]["eval/robust_acc"] - rows[3]["eval/robust_acc"])
    # AutoAttack and CW on the best and the last model, and their gaps
    last = rows[-1]
    assert_finite_metrics(last, [m for m in METRICS + LAST_METRICS if m.startswith("final")])
    for name in ("cw_acc", "autoattack_acc_worst_class", "clean_acc"):
        assert last[f"final/{name}_gap"] == pytest.approx(last[f"final/{name}"] - last[f"final_last/{name}"])


def test_frl_reports_its_own_finetuned_model_when_stage_one_scores_higher(local_trial, tmp_path, monkeypatch):
    """No fine-tuning epoch beats stage 1's best on validation (0.9 at epoch 1 against 0.3 and
    0.2): FRL's best/* and final/* are still its own fine-tuned model (its best fine-tuning
    epoch, 3), never the stage-1 model; final_last/* is the last model (epoch 4), which the main
    experiment (fair_adv.yaml, final_eval_last) evaluates too."""
    _force_selection(monkeypatch, {1: 0.9, 2: 0.1, 3: 0.3, 4: 0.2})
    seen = _spy_epochs(monkeypatch)
    # AutoAttack off (time): the test above runs it on the best and the last model
    rows = local_trial(
        "fair_adv",
        f"config.data_dir={tmp_path / 'data'}",
        *FRL_4_EPOCHS,
        "config.autoattack='off'",
        stop={"train/epoch": 4},
    )
    assert [r["best/epoch"] for r in rows] == [1, 1, 3, 3]
    assert [r["best/val_score"] for r in rows] == [0.9, 0.9, 0.3, 0.3]
    assert _same(seen[("start", 2)], seen[("end", 0)])  # the fine-tune still starts from stage 1's best
    for name in ("clean_acc", "robust_acc", "robust_acc_worst_class"):
        assert rows[-1][f"best/{name}"] == rows[2][f"eval/{name}"], name
    assert rows[-1]["best/val_robust_acc_worst_class"] == rows[2]["val/robust_acc_worst_class"]
    assert _same(seen[("final", "final")], seen[("end", 2)])  # final/*: the best fine-tuned model
    assert not _same(seen[("final", "final")], seen[("end", 0)])  # not the stage-1 model
    assert _same(seen[("final", "final_last")], seen[("end", 3)])  # final_last/*: the last model
    last = rows[-1]
    assert_finite_metrics(last, [m for m in METRICS + LAST_METRICS if m.startswith("final") and "autoattack" not in m])
    assert last["final/robust_acc_gap"] == pytest.approx(last["final/robust_acc"] - last["final_last/robust_acc"])


def test_selection_rule_reads_its_stratified_validation_subset(local_trial, tmp_path, monkeypatch, rule="average"):
    """select_by and select_size reach the loop: the key is computed on a fixed class-stratified
    select_size-image subset of the validation split, with the configured rule, and the best
    checkpoint follows the key (here forced: epoch 2 wins)."""
    calls = _force_selection(monkeypatch, {1: 0.2, 2: 0.6, 3: 0.4})
    rows = local_trial(
        "fair_adv",
        f"config.data_dir={tmp_path / 'data'}",
        "config.method=pgd_at",
        "config.epochs=3",
        f"config.select_by={rule}",
        "config.select_size=30",
        "config.autoattack='off'",
        stop={"train/epoch": 3},
    )
    assert [r["best/epoch"] for r in rows] == [1, 2, 2]
    assert [rule_seen for _, rule_seen in calls] == [rule] * 3
    labels = [y for y, _ in calls]
    assert [len(y) for y in labels] == [30] * 3 and all(torch.equal(y, labels[0]) for y in labels)
    counts = torch.bincount(labels[0], minlength=10)
    assert int(counts.max() - counts.min()) <= 1  # class-stratified (the smoke split: 6 per class)


def test_selection_keys_by_hand():
    """Classes 0, 1, 2 with 4, 2, 2 images: robust correct 4/4, 1/2, 0/2: average 5/8, worst 0.
    Rice et al.'s rule ranks by the average first, the workload's default by the worst class."""
    y = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2])
    adv = torch.tensor([0, 0, 0, 0, 1, 0, 0, 1])
    assert metrics.selection_key(adv, y, 3, "worst_class") == (0.0, 0.625)
    assert metrics.selection_key(adv, y, 3, "average") == (0.625, 0.0)
    # a model with a better worst class and a worse average: the two rules disagree
    other = torch.tensor([0, 1, 1, 1, 1, 1, 2, 0])
    assert metrics.selection_key(other, y, 3, "worst_class") > metrics.selection_key(adv, y, 3, "worst_class")
    assert metrics.selection_key(other, y, 3, "average") < metrics.selection_key(adv, y, 3, "average")


def test_presets_name_their_selection_rule():
    """Each preset's rule as the workload page's table states it; Rice's rule needs its 1,000 images."""
    rules = {
        name: (c["select_by"], c["select_size"])
        for name in ("fair_adv", "fair_adv_long", "fair_adv_tri", "fair_adv_digits")
        for c in [experiments.load(name).resolved_config()]
    }
    assert rules == {
        "fair_adv": ("worst_class", None),
        "fair_adv_long": ("average", 1000),
        "fair_adv_tri": ("worst_class", None),
        "fair_adv_digits": ("worst_class", None),
    }
    with pytest.raises(Exception, match="select_size"):
        from_dict(Config, {"val_size": 100, "select_size": 1000}, "test config")


# ----------------------------------------------------------------------------- FRL's update


def _reference_frl_weights(errors, rate1=0.05, delta0=0.1, delta1=0.1, lim=0.5, epochs=80):
    """An independent transcription of frlrw.py's loop and utils_frl.frl_train / evaluate /
    normalize_lambda / cost_sensitive (float32 tensors, the per-class loops as written there).

    ``errors(k)`` returns epoch k's (y, clean_pred, adv_pred) on the validation split.
    Returns per epoch (lambda0, lambda1, diff0, diff1)."""

    def in_class(predict, label):
        probs = torch.zeros(10)
        for i in range(10):
            in_class_id = (label == i).float()
            correct = (predict == label).float()
            probs[i] = torch.sum(correct * in_class_id).item() / torch.sum(in_class_id).item()
        return probs

    def normalize_lambda(lmb, lim):
        lmb = torch.clamp(lmb, min=0)
        return lim * lmb / torch.sum(lmb) if torch.sum(lmb) > lim else lmb

    def cost_sensitive(l0, l1):
        out = []
        for ll in (torch.clone(l0), torch.clone(l1)):
            diff = torch.ones(10) * 1 / 10
            for i in range(10):
                for j in range(10):
                    diff[i] = diff[i] + 9 / 10 * ll[i] if j == i else diff[i] - 1 / 10 * ll[j]
            out.append(diff)
        return out

    lmbda = torch.zeros(30)
    trace = []
    for now_epoch in range(1, epochs + 1):
        if now_epoch % 40 == 0:
            rate1 = rate1 / 2
        y, clean, adv = errors(now_epoch)
        acc, acc_adv = in_class(clean, y), in_class(adv, y)
        correct, correct_adv = (clean == y).sum().item(), (adv == y).sum().item()
        total_clean_error = 1 - correct / len(y)
        total_bndy_error = correct / len(y) - correct_adv / len(y)
        gamma0 = (1 - acc) - total_clean_error - delta0 * torch.ones(10)
        gamma1 = (acc - acc_adv) - total_bndy_error - delta1 * torch.ones(10)
        lmbda0 = normalize_lambda(lmbda[0:10] + rate1 * torch.clamp(gamma0, min=-1000), lim)
        lmbda1 = normalize_lambda(lmbda[10:20] + rate1 * 2 * torch.clamp(gamma1, min=-1000), lim)
        lmbda = torch.cat([lmbda0, lmbda1, lmbda[20:30]])
        diff0, diff1 = cost_sensitive(lmbda0, lmbda1)
        trace.append((lmbda0, lmbda1, diff0, diff1))
    return trace


def _validation_predictions(seed):
    """Epoch k's validation predictions: 300 per class, class c's clean error ~ 0.05 + 0.04 c
    and boundary error ~ 0.05 + 0.06 (9 - c), drifting with k, so the constraints bind and the cap
    engages."""
    y = torch.arange(10).repeat_interleave(300)

    def errors(k):
        g = torch.Generator().manual_seed(seed * 1000 + k)
        c = y.double()
        p_clean = (0.05 + 0.04 * c) * (1 - 0.004 * k)
        p_bndy = (0.05 + 0.06 * (9 - c)) * (1 - 0.003 * k)
        u = torch.rand(len(y), generator=g, dtype=torch.float64)
        wrong = torch.randint(1, 10, (len(y),), generator=g)
        clean = torch.where(u < p_clean, (y + wrong) % 10, y)
        adv = torch.where(u < p_clean + p_bndy, (y + wrong) % 10, y)
        return y, clean, adv

    return errors


def _max_difference(cfg, seed):
    """Max |ours - reference| over the multipliers and weights of 80 updates, and how many
    epochs had the boundary cap reached / both multipliers nonzero."""
    errors = _validation_predictions(seed)
    reference = _reference_frl_weights(errors)
    lam = {k: torch.zeros(10, dtype=torch.float64) for k in ("nat", "bndy", "margin")}
    worst, capped, binding = 0.0, 0, 0
    for k in range(1, 81):
        y, clean, adv = errors(k)
        lam = frl_step(lam, {"clean_pred": clean, "adv_pred": adv}, y, 10, cfg, k)
        weights = frl_state(lam, cfg)
        l0, l1, d0, d1 = reference[k - 1]
        for ours, theirs in ((lam["nat"], l0), (lam["bndy"], l1), (weights.nat, d0), (weights.bndy, d1)):
            worst = max(worst, (ours.double() - theirs.double()).abs().max().item())
        capped += int(math.isclose(lam["bndy"].sum().item(), cfg.frl_cap, rel_tol=1e-9))
        binding += int((lam["nat"] > 0).any() and (lam["bndy"] > 0).any())
    return worst, capped, binding


@pytest.mark.parametrize("seed", [0, 1])
def test_frl_update_from_config_defaults_equals_the_reference_for_80_epochs(seed):
    """frl_step / frl_state driven by Config() alone (rates, tolerances, cap, halving every 40,
    boundary rate derived as 2 x the natural rate) against the transcription: max |diff| < 1e-6
    over 80 updates (two halvings). Positive control: a boundary rate equal to the natural one
    (not derived) is seen."""
    worst, capped, binding = _max_difference(Config(method="frl"), seed)
    print(
        f"seed {seed}: max |ours - reference| {worst:.1e}; bndy cap reached in {capped} of 80 "
        f"epochs; both multipliers nonzero in {binding}"
    )
    assert worst < 1e-6, worst
    assert capped > 10 and binding > 40  # the instrument moved: constraints bound, the cap engaged
    wrong, _, _ = _max_difference(Config(method="frl", frl_rate_bndy=0.05), seed)
    assert wrong > 1e-3, wrong


def test_control_arms_keep_uniform_weights_and_train_like_their_base():
    """fair_adv.yaml's control arms (zero multiplier rates): their class weights stay 1/Y over 80
    fine-tuning epochs, and a step of the TRADES control equals TRADES at FRL's beta 1.5."""
    experiment = experiments.load("fair_adv")
    config = experiment.resolved_config()
    controls = [
        arm
        for arm in experiment.search["variant"]["grid"]
        if arm.get("method") == "frl" and arm.get("frl_rate_nat") == 0.0
    ]
    assert {arm["base_loss"] for arm in controls} == {"trades", "pgd_at"}
    errors = _validation_predictions(0)
    for arm in controls:
        cfg = from_dict(Config, {**config, **arm}, "fair_adv.yaml")
        lam = {k: torch.zeros(10, dtype=torch.float64) for k in ("nat", "bndy", "margin")}
        for k in range(1, 81):
            y, clean, adv = errors(k)
            lam = frl_step(lam, {"clean_pred": clean, "adv_pred": adv}, y, 10, cfg, k)
        weights = frl_state(lam, cfg)
        assert torch.equal(weights.nat, torch.full((10,), 0.1)) and torch.equal(weights.bndy, weights.nat)
        # the same arm with FRL's rates moves the weights (the instrument sees reweighting)
        moving = from_dict(Config, {**config, **arm, "frl_rate_nat": 0.05, "frl_rate_bndy": None}, "t")
        lam = frl_step(
            {k: torch.zeros(10, dtype=torch.float64) for k in lam},
            {"clean_pred": clean, "adv_pred": adv},
            y,
            10,
            moving,
            1,
        )
        assert not torch.equal(frl_state(lam, moving).bndy, weights.bndy)
    arm = next(arm for arm in controls if arm["base_loss"] == "trades")
    trades_control = from_dict(Config, {**config, **arm}, "fair_adv.yaml")
    model_frl, loss_frl = _one_step(
        trades_control,
        frl_state({k: torch.zeros(3, dtype=torch.float64) for k in ("nat", "bndy", "margin")}, trades_control),
    )
    trades = from_dict(Config, {**config, "method": "trades", "trades_beta": trades_control.frl_beta}, "t")
    model_trades, loss_trades = _one_step(trades, None)
    assert loss_frl == pytest.approx(loss_trades, rel=1e-6)
    for a, b in zip(model_frl.parameters(), model_trades.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def _one_step(cfg, frl):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(12, 3, 2, 2, generator=g), torch.randint(0, 3, (12,), generator=g)
    stats = step.train_step(
        model,
        opt,
        x,
        y,
        torch.arange(12),
        cfg,
        epoch=0,
        history=step.History.empty(12),
        loss_threshold=math.inf,
        generator=torch.Generator().manual_seed(2),
        frl=frl,
    )
    return model, stats["loss"].item()


# ----------------------------------------------------------------------------- Rice et al.


def _bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


def test_fair_adv_long_attacks_in_train_mode_with_reflect_padding():
    """fair_adv_long's config (read through its YAML) crafts training attacks with BatchNorm in
    train mode (the running statistics move during the attack) and pads by reflection (an
    all-white image stays all white after crop); fair_adv's config, the control, does neither."""
    long = from_dict(
        Config, {**experiments.load("fair_adv_long").resolved_config(), "method": "pgd_at"}, "fair_adv_long.yaml"
    )
    main = from_dict(Config, {**experiments.load("fair_adv").resolved_config(), "method": "pgd_at"}, "fair_adv.yaml")
    x, y = torch.rand(16, 3, 8, 8), torch.randint(0, 3, (16,))
    moved = {}
    for name, cfg in (("long", long), ("main", main)):
        model = _bn_model()
        model.train()
        before = model[1].running_mean.clone()
        step.training_adversary(model, x, y, cfg, torch.Generator().manual_seed(0))
        moved[name] = (model[1].running_mean - before).abs().max().item()
        # what the model sees in one epoch of all-white images: reflect keeps them white
        seen = []
        model.register_forward_pre_hook(lambda m, inputs: seen.append(inputs[0].min().item()))
        white = torch.full((32, 3, 8, 8), 255, dtype=torch.uint8)
        step.train_epoch(
            model,
            torch.optim.SGD(model.parameters(), lr=0.0),
            white,
            y.repeat(2),
            dataclasses.replace(cfg, batch_size=16),
            epoch=0,
            history=step.History.empty(32),
            frl=None,
            order_gen=torch.Generator().manual_seed(0),
            aug_gen=torch.Generator().manual_seed(1),
            attack_gen=torch.Generator().manual_seed(2),
            num_classes=3,
            to_input=augment.to_float,
        )
        moved[name + "_min_input"] = min(seen)
    assert moved["long"] > 1e-3 and moved["main"] == 0.0, moved
    assert moved["long_min_input"] >= 1 - long.eps - 1e-6, moved
    assert moved["main_min_input"] <= main.eps + 1e-6, moved  # zero padding shows black borders


def test_reflect_padding_matches_numpy_reflect_then_crop():
    """Rice et al. pad the whole set with np.pad(mode='reflect') and crop at random offsets."""
    x = torch.randint(0, 256, (5, 3, 8, 8), dtype=torch.uint8)
    g = torch.Generator().manual_seed(3)
    out = augment.random_crop_flip(x, padding=4, generator=g, flip=False, pad_mode="reflect")
    g = torch.Generator().manual_seed(3)
    offsets = torch.randint(0, 9, (5, 2), generator=g)
    padded = np.pad(x.numpy(), [(0, 0), (0, 0), (4, 4), (4, 4)], mode="reflect")
    for n, (i, j) in enumerate(offsets.tolist()):
        assert np.array_equal(out[n].numpy(), padded[n, :, i : i + 8, j : j + 8])
