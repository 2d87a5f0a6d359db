"""The one-hidden-layer ReLU theory: exact pieces by hand, and the paper's claims at small scale."""

import math

import pytest
import torch

from raylab import session
from trainers.backdoor import theory
from trainers.backdoor.theory_loop import train_loop


def test_directional_data_structure():
    gen = torch.Generator().manual_seed(0)
    x, y, poisoned = theory.directional_data(1000, 50, 0.5, 3.0, 1.0, 0.04, gen)
    assert x.shape == (1000, 50) and int(poisoned.sum()) == 40
    assert (y[poisoned] == 1).all()
    # Poisoned samples keep their class -1 semantic component and carry the trigger.
    assert x[poisoned, 0].mean() == pytest.approx(-0.5, abs=0.1)  # noise std 0.14 / sqrt(40)
    assert x[poisoned, 1].mean() == pytest.approx(3.0, abs=0.1)
    assert x[~poisoned, 1].abs().mean() < 0.2
    clean = ~poisoned
    assert (x[clean, 0] * y[clean]).mean() == pytest.approx(0.5, abs=0.02)
    noise = x[:, 2:]
    assert noise.pow(2).sum(1).mean() == pytest.approx(48 / 50, rel=0.05)  # sigma^2 (d-2)/d


def test_sgd_step_equals_autograd_for_both_networks():
    gen = torch.Generator().manual_seed(1)
    x, y, _ = theory.directional_data(40, 10, 0.5, 2.0, 1.0, 0.1, gen)
    w, a = theory.init_network(10, 16, 0.3, gen)
    g0 = theory.gates(w + 0.1, x)  # any fixed gate pattern
    for gates0 in (None, g0):
        wv = w.clone().requires_grad_(True)
        out = theory.relu_net(wv, a, x) if gates0 is None else theory.frozen_gate_net(wv, a, x, gates0)
        theory.logistic_loss(out, y).mean().backward()
        assert torch.allclose(theory.sgd_step(w, a, x, y, 0.7, gates0), w - 0.7 * wv.grad, atol=1e-6)


def test_frozen_gate_signal_is_the_initial_rate_of_group_loss_decrease():
    gen = torch.Generator().manual_seed(2)
    x, y, poisoned = theory.directional_data(200, 20, 0.5, 2.0, 1.0, 0.1, gen)
    w0, a = theory.init_network(20, 64, 0.2, gen)
    x, y, w0, a = x.double(), y.double(), w0.double(), a.double()
    d = theory.gates(w0, x)
    eta = 1e-5
    w1 = theory.sgd_step(w0, a, x, y, eta, d)  # one full-batch gradient step
    for group in (poisoned, ~poisoned):
        loss = lambda w: theory.logistic_loss(theory.frozen_gate_net(w, a, x, d), y)[group].mean()  # noqa: E731
        rate = (loss(w0) - loss(w1)) / eta
        assert theory.frozen_gate_signal(w0, a, x, y, group) == pytest.approx(float(rate), rel=1e-3)


def test_gate_flip_and_drift_fractions_by_hand():
    w0 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    w = torch.tensor([[-1.0, 0.0], [0.0, 0.5]])
    x = torch.tensor([[1.0, 1.0]])
    assert theory.gate_flip_fraction(w0, w, x) == 0.5  # unit 0 flips, unit 1 does not
    assert theory.gate_drift_fraction(w0, w, x) == 0.5  # |drift| 2 >= 1 and 0.5 < 1
    assert theory.gate_flip_fraction(w0, w, x) <= theory.gate_drift_fraction(w0, w, x)
    # The error term f - f~ at W: unit 0 (a = 1) flipped off, its pre-activation -1 was kept by
    # the frozen gate; unit 1 (a = 2) kept its gate and adds nothing: |0 - (1 * -1)| = 1.
    a = torch.tensor([1.0, 2.0])
    assert theory.gate_flip_error(w0, w, a, x) == pytest.approx(1.0)
    assert theory.gate_flip_error(w0, w0, a, x) == 0.0


def test_drop_ratio_floors_the_denominator():
    assert theory.drop_ratio(0.5, 0.25) == 2.0
    assert theory.drop_ratio(0.5, 0.0) == 500.0  # the floor keeps it finite
    assert theory.drop_ratio(0.5, -1e-5) == -500.0


def _summary(**config):
    s = session.start(backend="local")
    train_loop({"steps": 50, "early_steps": 50, "report_every": 50, **config})
    return s.history[-1]


def test_poisoned_group_fits_faster_more_so_with_more_poison_and_frozen_gates_predict_it(one_thread):
    """The paper's claims in the directional data model, over 4 seeds.

    Stated margins: the poisoned group's relative loss decrease over the first 50 steps is at
    least 1.5x the clean group's at 1% poisoning; the ratio grows with the poisoning ratio
    (1% < 5% < 10%, and 10% at least 3x 1%); the frozen-gate network predicts each group's
    decrease within 5% relative error.
    """
    for seed in range(4):
        ratios = {}
        for p in (0.01, 0.05, 0.1):
            row = _summary(poison_ratio=p, seed=seed)
            ratios[p] = row["theory/loss_drop_ratio"]
            assert row["theory/frozen_gate_rel_error"] < 0.05, (p, seed, row)
            assert abs(row["theory/predicted_drop_ratio"] - ratios[p]) < 0.1 * ratios[p]
            assert row["theory/rel_drop_clean"] > 0
        assert ratios[0.01] > 1.5, (seed, ratios)
        assert ratios[0.01] < ratios[0.05] < ratios[0.1], (seed, ratios)
        assert ratios[0.1] > 3 * ratios[0.01], (seed, ratios)


def test_a_weak_trigger_is_not_fitted_faster_as_the_signal_predicts(one_thread):
    """Control: with the trigger as weak as the semantic feature the poisoned group is slower,
    and the sign of the frozen-gate signal at initialization already says so."""
    for seed in range(2):
        row = _summary(poison_ratio=0.05, trigger_strength=0.2, seed=seed)
        assert row["theory/loss_drop_ratio"] < 0.5, row
        assert row["theory/signal_ratio"] < 0.5, row
        strong = _summary(poison_ratio=0.05, seed=seed)
        assert strong["theory/signal_ratio"] > 2 and strong["theory/loss_drop_ratio"] > 2


def test_theory_trial_resumes_exactly(local_trial, tmp_path, one_thread):
    full = local_trial("backdoor_theory")
    part = local_trial("backdoor_theory", trial_dir=tmp_path / "resumed", stop={"theory/step": 30})
    assert part[-1]["theory/step"] == 30
    rest = local_trial("backdoor_theory", trial_dir=tmp_path / "resumed")
    assert rest[0]["theory/step"] == 40
    assert rest[-1] | {"time_total_s": 0, "training_iteration": 0} == full[-1] | {
        "time_total_s": 0,
        "training_iteration": 0,
    }
    assert math.isfinite(full[-1]["theory/loss_drop_ratio"])


def test_drift_and_flip_loss_errors_split_the_frozen_gate_loss_error_exactly(one_thread):
    s = session.start(backend="local")
    train_loop({"steps": 40, "early_steps": 20, "report_every": 10, "poison_ratio": 0.1, "seed": 3})
    rows = [r for r in s.history if "theory/drift_error_poison" in r]
    assert len(rows) == 4
    for row in rows:
        for g in ("poison", "clean"):
            total = row[f"theory/loss_{g}"] - row[f"theory/frozen_loss_{g}"]
            parts = row[f"theory/drift_error_{g}"] + row[f"theory/flip_loss_error_{g}"]
            assert parts == pytest.approx(total, abs=1e-6), (row["theory/step"], g)
    # Both terms are there to see: gates flip, and the two weight trajectories part.
    last = rows[-1]
    assert last["theory/gate_flip_since_init_poison"] > 0
    assert abs(last["theory/drift_error_poison"]) > 1e-4 and abs(last["theory/flip_loss_error_poison"]) > 1e-4
    print({k: round(v, 4) for k, v in last.items() if "error" in k})


def test_loss_error_terms_vanish_where_their_cause_does():
    gen = torch.Generator().manual_seed(4)
    x, y, _ = theory.directional_data(50, 8, 0.5, 2.0, 1.0, 0.1, gen)
    w0, a = theory.init_network(8, 16, 0.3, gen)
    w = w0 + 0.05 * torch.randn(w0.shape, generator=gen)
    drift, flip = theory.loss_error_terms(w0, w, w, a, x, y)  # same weights: no drift term
    assert drift == 0.0
    drift, flip = theory.loss_error_terms(w0, w0, w, a, x, y)  # initial weights: no gate flipped
    assert flip == 0.0 and drift != 0.0


def test_signal_and_curvature_are_the_first_two_derivatives_of_the_group_loss(one_thread):
    """Frozen-gate gradient descent with a tiny step stands in for gradient flow: after time t the
    group loss is ``L(0) - t S + t^2 C / 2`` to third order (GD differs from the flow by a 1/k
    share of the second-order term after k steps)."""
    gen = torch.Generator().manual_seed(5)
    x, y, poisoned = theory.directional_data(300, 20, 0.5, 2.0, 1.0, 0.1, gen)
    w0, a = theory.init_network(20, 64, 0.3, gen)
    x, y, w0, a = x.double(), y.double(), w0.double(), a.double()
    d = theory.gates(w0, x)
    steps, eta = 400, 2.5e-3
    w = w0
    for _ in range(steps):
        w = theory.sgd_step(w, a, x, y, eta, d)
    t = steps * eta
    for group in (poisoned, ~poisoned):
        loss = lambda v: float(theory.logistic_loss(theory.frozen_gate_net(v, a, x, d), y)[group].mean())  # noqa: E731
        ((signal, curvature),) = theory.signal_and_curvature(w0, a, x, y, group)
        assert signal == pytest.approx(theory.frozen_gate_signal(w0, a, x, y, group), rel=1e-4)
        second = (loss(w) - loss(w0) + t * signal) / (t * t / 2)
        assert second == pytest.approx(curvature, rel=0.03), (second, curvature)


WINDOW = (1, 2, 5, 10, 20, 50)


def gd_drop_ratios(seed: int, p: float) -> dict:
    """Full-batch GD (the expected SGD step) on ``backdoor_theory``'s default data and network:
    per step T of ``WINDOW`` the measured poisoned/clean relative-drop ratio, the first-order
    (signal) ratio, the second-order ratio and the first-order predicted poisoned drop
    ``eps = eta T S_p / L_p(0)``."""
    from trainers.backdoor.config import TheoryConfig

    cfg = TheoryConfig(poison_ratio=p, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x, y, poisoned = theory.directional_data(
        cfg.n_train, cfg.dim, cfg.semantic_strength, cfg.trigger_strength, cfg.noise, p, gen
    )
    w, a = theory.init_network(cfg.dim, cfg.width, cfg.init_scale, gen)
    groups = {"poison": poisoned, "clean": ~poisoned}
    initial = theory.group_losses(theory.relu_net(w, a, x), y, poisoned)
    sc = dict(zip(groups, theory.signal_and_curvature(w, a, x, y, *groups.values())))
    rows = {}
    for step in range(1, max(WINDOW) + 1):
        w = theory.sgd_step(w, a, x, y, cfg.lr)
        if step in WINDOW:
            now = theory.group_losses(theory.relu_net(w, a, x), y, poisoned)
            t = cfg.lr * step
            drop = {g: (initial[g] - now[g]) / initial[g] for g in groups}
            first = {g: theory.predicted_rel_drop(t, sc[g][0], 0.0, initial[g]) for g in groups}
            second = {g: theory.predicted_rel_drop(t, *sc[g], initial[g]) for g in groups}
            rows[step] = {
                "measured": drop["poison"] / drop["clean"],
                "signal": first["poison"] / first["clean"],
                "second_order": second["poison"] / second["clean"],
                "eps": first["poison"],
                "drop_poison": drop["poison"],
            }
    return rows


def test_the_signal_ratio_holds_where_the_first_order_drop_is_small(one_thread):
    """Where the signal is claimed to hold: at the start of training. With full-batch GD on the
    defaults (seeds 0-1, 5% and 10%), the measured drop ratio is within 5% of the signal ratio
    while the first-order predicted poisoned drop ``eps`` is at most 0.07, and the second-order
    ratio (the error term ``C``) within 5% while ``eps`` is at most 0.2, where the signal ratio is
    already off by up to 10%. By T = 50 (``eps`` 1.6-3.3: a relative drop cannot exceed 1) the
    measured ratio is under 0.6x the signal ratio: the gap the workload page records."""
    print("\np     seed  T   eps    measured  signal  second_order  drop_poison")
    for p in (0.05, 0.1):
        for seed in range(2):
            rows = gd_drop_ratios(seed, p)
            for step, r in rows.items():
                print(
                    f"{p:.2f}  {seed}  {step:3d}  {r['eps']:.3f}  {r['measured']:8.2f}  {r['signal']:6.2f}  "
                    f"{r['second_order']:12.2f}  {r['drop_poison']:.3f}"
                )
                rel = lambda k: abs(r[k] - r["measured"]) / r["measured"]  # noqa: E731
                if r["eps"] <= 0.07:
                    assert rel("signal") < 0.05, (p, seed, step, r)
                if r["eps"] <= 0.2:
                    assert rel("second_order") < 0.05, (p, seed, step, r)
            assert rows[50]["measured"] < 0.6 * rows[50]["signal"], rows[50]
            assert rows[50]["eps"] > 1
