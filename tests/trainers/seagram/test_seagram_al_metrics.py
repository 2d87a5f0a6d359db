"""How active-learning arms are judged: AUROC, precision at recall, the attack's operating point,
calls-to-match-passive and the paired table, against hand-computed values; and the paper sweep's
dry run listing its three arms and its label-budget axis."""

import math
from pathlib import Path

import numpy as np
import pytest

from trainers.seagram import al_metrics, al_table


def test_auroc_counts_ties_half():
    # positives 0.9, 0.5; negatives 0.5, 0.1: pairs (0.9>0.5) (0.9>0.1) (0.5=0.5: half) (0.5>0.1) -> 3.5/4
    assert al_metrics.auroc(np.array([0.9, 0.5, 0.5, 0.1]), np.array([1, 1, 0, 0])) == 0.875
    assert al_metrics.auroc(np.array([0.1, 0.2]), np.array([1, 0])) == 0.0
    assert math.isnan(al_metrics.auroc(np.array([0.1, 0.2]), np.array([1, 1])))
    rng = np.random.default_rng(0)
    s, y = rng.random(200), rng.integers(0, 2, 200)
    pairs = [(a > b) + 0.5 * (a == b) for a in s[y == 1] for b in s[y == 0]]
    assert al_metrics.auroc(s, y) == pytest.approx(np.mean(pairs))


def test_precision_at_recall_cuts_between_distinct_scores():
    s = np.array([0.9, 0.8, 0.8, 0.4, 0.3])
    y = np.array([1, 0, 1, 1, 0])
    # recall 1/3 reached at the top score: precision 1/1
    assert al_metrics.precision_at_recall(s, y, 0.3) == 1.0
    # recall 2/3 needs the tied 0.8s together: 2 of 3 above the cut
    assert al_metrics.precision_at_recall(s, y, 0.5) == pytest.approx(2 / 3)
    assert al_metrics.precision_at_recall(s, y, 1.0) == pytest.approx(3 / 4)
    assert al_metrics.at_threshold(s, y, 0.8) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


def test_calls_to_match_interpolates_on_the_budget_axis():
    budgets = [100, 200, 400]
    assert al_metrics.calls_to_match(budgets, [0.6, 0.7, 0.8], 0.75) == pytest.approx(300)
    assert al_metrics.calls_to_match(budgets, [0.6, 0.7, 0.8], 0.5) == 100
    assert al_metrics.calls_to_match(budgets, [0.6, 0.7, 0.8], 0.9) == math.inf


def test_paired_table_reads_arms_and_matches_passive():
    records = []
    for seed in range(5):
        for budget, (passive, mixed) in {100: (0.60, 0.70), 200: (0.70, 0.80)}.items():
            for arm, value in (("passive", passive), ("mixed", mixed), ("uncertainty", passive - 0.05)):
                cfg = {"al_budget": budget, "seed": seed, "victim": "gmn", "budget": 2}
                cfg |= {"passive": {"al_strategy": "passive"}, "mixed": {"al_random_frac": 0.5}}.get(
                    arm, {"al_random_frac": 0.0}
                )
                metrics = {"clf/auroc": value + 0.01 * seed, "victim/map": 0.5, "attack/map_true_labels": 0.3}
                records.append(al_table.record(cfg, metrics))
    assert {r["arm"] for r in records} == {"passive", "mixed", "uncertainty"}
    assert al_table.paired(records, "mixed", "passive", "auroc", 100) == pytest.approx([0.1] * 5)
    # mixed reaches passive's AUROC at 200 (0.70) already at 100: half the calls
    assert al_table.match_ratios(records, "mixed", 200) == pytest.approx([0.5] * 5)
    assert (al_table.match_ratios(records, "uncertainty", 200) == math.inf).all()
    text = al_table.summary(records)
    assert "mixed - passive @ 100, auroc: +0.100 [+0.100, +0.100], 5/5" in text
    assert "mixed vs passive @ 200: 0.50 median, 5/5 seeds below 1" in text


def test_dry_run_lists_the_three_arms_and_the_budget_axis(capsys):
    from raylab import tune

    tune.main(["seagram", "--dry-run"])  # python -m raylab.tune seagram --dry-run, in this process
    text = capsys.readouterr().out
    search = text[text.index("\nsearch:") : text.index("\ndescription:")]
    for arm in (
        "{al_strategy: passive}",
        "{al_strategy: uncertainty, al_random_frac: 0.0}",
        "{al_strategy: uncertainty, al_random_frac: 0.5}",
    ):
        assert arm in search, search
    assert "al_budget:\n    grid: [500, 1000, 2000, 4000]" in search
    assert "seed:\n    grid: [0, 1, 2, 3, 4, 5]" in search
    # victim_from is a UserPath: shown resolved, from where the command ran
    victim_from = next(line for line in text.splitlines() if line.strip().startswith("victim_from:"))
    assert victim_from.split(": ", 1)[1] == str(Path.cwd() / "results" / "seagram_victims"), victim_from
    assert "metric: clf/auroc" in text
    assert "# trials: 648;" in text  # 3 arms x 4 label budgets x 3 victims x 3 flip budgets x 6 seeds
