"""``python -m trainers.seagram.al_table RUN``: does active learning save solver calls?

Reads a finished ``seagram`` run (passive, pure-uncertainty and mixed arms over the label-budget
axis ``al_budget``) and prints, per arm and budget, the classifier's threshold-free scores on the
held-out candidate flips (``clf/auroc``, ``clf/precision_at_recall``) and what its attack did
(labels kept, true-label MAP drop); the paired differences between arms with 95% t
intervals over seeds (each seed's difference averaged over the victim x flip-budget cells first);
and calls-to-match-passive: the label budget an active arm needs for the AUROC passive labelling
reaches at budget B, as a share of B (below 1: active learning saves solver calls).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict

import numpy as np

from raylab.errors import UserError, exit_on_user_error
from raylab.run_folder import RunFolder
from trainers.seagram.al_metrics import calls_to_match, paired_interval

ARMS = ("passive", "uncertainty", "mixed")
PAIRS = (("mixed", "passive"), ("uncertainty", "passive"), ("mixed", "uncertainty"))
SCORES = {
    "auroc": "clf/auroc",
    "prec@recall": "clf/precision_at_recall",
    "kept": "attack/label_preserved",
    "true_drop": None,  # victim/map - attack/map_true_labels
}


def arm_of(config: dict) -> str | None:
    """``passive``, ``uncertainty`` (al_random_frac 0), ``mixed`` (0 < al_random_frac < 1) or None."""
    strategy = config.get("al_strategy", "uncertainty")
    if strategy == "passive":
        return "passive"
    if strategy != "uncertainty":
        return None
    frac = float(config.get("al_random_frac", 0.5))
    return "uncertainty" if frac == 0 else "mixed" if frac < 1 else None


def record(config: dict, metrics: dict) -> dict | None:
    """One trial as ``{arm, al_budget, cell, seed, auroc, ...}``; None when not an AL arm."""
    arm = arm_of(config)
    if arm is None:
        return None
    out = {
        "arm": arm,
        "al_budget": int(config.get("al_budget", 2000)),
        "cell": (config.get("victim", "gmn"), int(config.get("budget", 3))),
        "seed": int(config.get("seed", 0)),
    }
    for name, metric in SCORES.items():
        if metric is None:
            out[name] = float(metrics["victim/map"]) - float(metrics["attack/map_true_labels"])
        else:
            out[name] = float(metrics.get(metric, math.nan))
    return out


def run_records(run: str) -> list[dict]:
    """The finished AL trials of a seagram run."""
    folder = RunFolder(run)
    if folder.kind() != "dir":
        raise UserError(f"{run}: not a run folder")
    found = []
    for trial in folder.read_trials():
        if not trial.finished:
            continue
        r = record(trial.config, trial.last)
        if r is not None:
            found.append(r)
    return found


def _mean(values) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _table(records: list[dict]) -> dict:
    """``{(arm, al_budget, cell, seed): record}``."""
    return {(r["arm"], r["al_budget"], r["cell"], r["seed"]): r for r in records}


def paired(records: list[dict], a: str, b: str, score: str, al_budget: int) -> np.ndarray:
    """Per seed: mean over cells of ``a - b`` at ``al_budget`` (cells where both arms ran)."""
    table = _table(records)
    by_seed = defaultdict(list)
    for (arm, budget, cell, seed), r in table.items():
        if arm == a and budget == al_budget and (b, budget, cell, seed) in table:
            by_seed[seed].append(r[score] - table[b, budget, cell, seed][score])
    return np.array([np.mean(v) for _, v in sorted(by_seed.items())])


def match_ratios(records: list[dict], arm: str, al_budget: int, score: str = "auroc") -> np.ndarray:
    """Per seed: mean over cells of calls-to-match-passive / ``al_budget`` (``inf`` where the arm's
    curve never reaches passive's score at ``al_budget``)."""
    table = _table(records)
    budgets = sorted({r["al_budget"] for r in records})
    by_seed = defaultdict(list)
    for (a, budget, cell, seed), r in table.items():
        if a != "passive" or budget != al_budget:
            continue
        curve = [table.get((arm, x, cell, seed), {}).get(score, math.nan) for x in budgets]
        if any(math.isnan(v) for v in curve):
            continue
        by_seed[seed].append(calls_to_match(budgets, curve, r[score]) / al_budget)
    return np.array([np.mean(v) for _, v in sorted(by_seed.items())])


def summary(records: list[dict]) -> str:
    """The printed tables (see the module docstring)."""
    budgets = sorted({r["al_budget"] for r in records})
    lines = [f"{'arm':12s} {'al_budget':>9s} " + " ".join(f"{s:>11s}" for s in SCORES) + "  trials"]
    for arm in ARMS:
        for budget in budgets:
            rs = [r for r in records if r["arm"] == arm and r["al_budget"] == budget]
            if rs:
                means = " ".join(f"{_mean([r[s] for r in rs]):11.3f}" for s in SCORES)
                lines.append(f"{arm:12s} {budget:9d} {means}  {len(rs)}")
    lines.append("\npaired differences over seeds: mean [95% t interval], seeds > 0 / seeds")
    for a, b in PAIRS:
        for budget in budgets:
            for score in SCORES:
                d = paired(records, a, b, score, budget)
                if len(d):
                    mean, lo, hi = paired_interval(d)
                    lines.append(
                        f"{a} - {b} @ {budget}, {score}: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}], {int((d > 0).sum())}/{len(d)}"
                    )
    lines.append("\ncalls-to-match-passive (AUROC): label budget an arm needs for passive's AUROC at B, / B")
    for arm in ("uncertainty", "mixed"):
        for budget in budgets:
            ratio = match_ratios(records, arm, budget)
            if len(ratio):
                finite = ratio[np.isfinite(ratio)]
                text = f"{np.median(ratio):.2f} median" if len(finite) else "never"
                lines.append(
                    f"{arm} vs passive @ {budget}: {text}, {int((ratio < 1).sum())}/{len(ratio)} seeds below 1, "
                    f"{len(ratio) - len(finite)} never reach it on the axis"
                )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    p = argparse.ArgumentParser(prog="python -m trainers.seagram.al_table", description=__doc__.split("\n")[0])
    p.add_argument("run", help="a finished seagram run folder (a path or a URI)")
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    records = run_records(args.run)
    if not records:
        raise UserError(f"{args.run}: no finished active-learning trial (passive, uncertainty or mixed)")
    print(summary(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
