"""Aggregate performance over a suite of tasks (``Aggregates``), as rliable reports it: per arm
the median, IQM, mean and optimality gap of the normalised scores with 95% stratified
bootstrap intervals, performance profiles with their bands, and the probability of improvement
over a reference arm (``raylab.report.estimators``). One figure, one table, the normalising
scores with their source.

An arm's score matrix is ``(seeds, tasks)``: every task the run has for every arm, and as many
seeds per task as the arm's task with the fewest (the rest are left out, and said so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from raylab.report import estimators
from raylab.report.aggregate import label_of
from raylab.report.evidence import RunTrials, metric_value, selects
from raylab.report.run_view import Run
from raylab.report.spec import Aggregates
from raylab.report.values import format_value

MIN_TASKS, MIN_SEEDS = 2, 3
"""Aggregates are shown for two or more tasks, or three or more seeds."""
AGGREGATES = ("median", "iqm", "mean", "optimality_gap")
NAMES = {"median": "Median", "iqm": "IQM", "mean": "Mean", "optimality_gap": "Optimality gap"}


def score_matrices(run: Run, agg: Aggregates, seeds, defaults: dict[str, Any]) -> dict[str, Any]:
    """``{"arms": {label: (seed labels, matrix)}, "tasks", "kind", "normalizers", "notes"}``."""
    ctx = RunTrials(run, seeds, defaults)
    notes: list[str] = []
    by = [k for k in agg.by if len({ctx.values(t, [k]) for t in ctx.trials}) > 1] or list(agg.by[:1])
    scores: dict[str, dict[str, dict[str, float]]] = {}  # arm -> task -> seed -> score
    arm_configs: dict[str, dict[str, Any]] = {}
    for trial in ctx.trials:
        value = metric_value(trial, agg.metric, agg.at)
        if value is None:
            continue
        config = ctx.configs[trial.name]
        arm = label_of(by, ctx.values(trial, by))
        arm_configs.setdefault(arm, config)
        scores.setdefault(arm, {}).setdefault(str(config.get(agg.task)), {})[ctx.seed(trial)] = value
    tasks = sorted({task for per_task in scores.values() for task in per_task})
    normalizers = {t: agg.normalize(t) for t in tasks} if agg.normalize else {t: None for t in tasks}
    kind = agg.normalized
    if len(tasks) > 1:
        unknown = [t for t in tasks if normalizers[t] is None]
        if unknown:
            notes.append(f"left out, no normalising scores: {', '.join(unknown)}")
        tasks = [t for t in tasks if normalizers[t] is not None]
    elif tasks and normalizers[tasks[0]] is None:
        kind = f"raw {agg.metric} (one {agg.task}: no normalising scores needed)"
    arms: dict[str, tuple[list[str], np.ndarray]] = {}
    for arm, per_task in scores.items():
        lacking = [t for t in tasks if t not in per_task]
        if lacking:
            notes.append(f"{arm} left out: no {', '.join(lacking)}")
            continue
        runs = min(len(per_task[t]) for t in tasks) if tasks else 0
        if any(len(per_task[t]) > runs for t in tasks):
            notes.append(f"{arm}: {runs} seeds per {agg.task} (the fewest any {agg.task} has); the others left out")
        seed_labels = sorted(per_task[tasks[0]])[:runs] if tasks else []
        columns = []
        for task in tasks:
            values = [per_task[task][s] for s in sorted(per_task[task])][:runs]
            low_high = normalizers[task]
            if low_high is not None and not kind.startswith("raw"):
                low, high = low_high
                values = [(v - low) / (high - low) for v in values]
            columns.append(values)
        if runs:
            arms[arm] = (seed_labels, np.asarray(columns, dtype=float).T)
    return {
        "arms": arms,
        "arm_configs": arm_configs,
        "tasks": tasks,
        "kind": kind,
        "notes": notes,
        "normalizers": {t: normalizers[t] for t in tasks if normalizers[t] is not None},
    }


def build_aggregates(
    run: Run, agg: Aggregates, seeds, defaults: dict[str, Any], out_dir: Path, stem: str, style=None
) -> dict[str, Any]:
    """The aggregates' numbers (JSON-able) and their figure ``figures/<stem>.png`` (and its
    other formats of ``style``, a ``raylab.report.style.FigureStyle``; its intervals are always
    the 95% stratified bootstrap, whatever ``style.uncertainty``)."""
    data = score_matrices(run, agg, seeds, defaults)
    arms, tasks = data["arms"], data["tasks"]
    runs = max((m.shape[0] for _, m in arms.values()), default=0)
    out: dict[str, Any] = {
        "name": stem,
        "title": agg.heading(),
        "metric": agg.metric,
        "task_key": agg.task,
        "kind": data["kind"],
        "tasks": tasks,
        "seeds": runs,
        "source": agg.source,
        "notes": data["notes"],
        "file": "",
        "normalizers": {t: list(v) for t, v in data["normalizers"].items()},
        "arms": [],
        "improvement": [],
        "reference": "",
        "shown": False,
    }
    if not arms:
        out["note"] = f"no trial reported {agg.metric}"
        return out
    if len(tasks) < MIN_TASKS and runs < MIN_SEEDS:
        out["note"] = (
            f"aggregates need {MIN_TASKS} or more {agg.task}s or {MIN_SEEDS} or more seeds: this run "
            f"has {len(tasks)} {agg.task} x {runs} seed{'s' * (runs != 1)}"
        )
        return out
    normalized = not data["kind"].startswith("raw")
    wide = f"wide: {runs} seeds < {estimators.WIDE_BELOW}" if runs < estimators.WIDE_BELOW else ""
    for label, (seed_labels, matrix) in arms.items():
        entry: dict[str, Any] = {"arm": label, "seeds": seed_labels, "runs": matrix.shape[0]}
        for fn in AGGREGATES:
            if fn == "optimality_gap" and not normalized:
                continue
            point = {
                "median": estimators.median_score,
                "iqm": estimators.iqm,
                "mean": estimators.mean_score,
                "optimality_gap": lambda m: estimators.optimality_gap(m, agg.gamma),
            }[fn](matrix)
            interval = (
                list(estimators.stratified_interval(fn, matrix, gamma=agg.gamma)) if matrix.shape[0] >= 2 else None
            )
            entry[fn] = {"estimate": point, "interval": interval}
        out["arms"].append(entry)
    reference = next(
        (label for label in arms if agg.reference and selects(agg.reference, data["arm_configs"][label])),
        next(iter(arms)),
    )
    out["reference"] = reference
    ref = arms[reference][1]
    for label, (_, matrix) in arms.items():
        if label == reference:
            continue
        interval = None
        if min(matrix.shape[0], ref.shape[0]) >= 2:
            interval = list(
                estimators.improvement_interval(
                    [matrix[:, j] for j in range(len(tasks))], [ref[:, j] for j in range(len(tasks))]
                )
            )
        out["improvement"].append(
            {
                "arm": label,
                "reference": reference,
                "interval": interval,
                "estimate": estimators.probability_of_improvement(matrix, ref),
            }
        )
    out.update(shown=True, note=wide, normalized=normalized)
    out["file"] = f"figures/{stem}.png"
    draw_aggregates(out, arms, agg, out_dir / out["file"], style)
    return out


def draw_aggregates(
    out: dict[str, Any], arms: dict[str, tuple[list[str], np.ndarray]], agg: Aggregates, path: Path, style=None
) -> None:
    """Interval estimates (one panel per aggregate), the performance profiles with their bands,
    and the probability of improvement over the reference arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from raylab.report.plots import save_figure

    labels = [a["arm"] for a in out["arms"]]
    colors = dict(zip(labels, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    fig, axes = plt.subplots(2, 3, figsize=(15, 3.2 + 2 * 0.35 * len(labels)))
    panels = [fn for fn in AGGREGATES if fn in out["arms"][0]]
    for ax, fn in zip(axes.ravel(), panels):
        for i, arm in enumerate(out["arms"]):
            estimate, interval = arm[fn]["estimate"], arm[fn]["interval"]
            if interval:
                ax.barh(
                    i, interval[1] - interval[0], left=interval[0], height=0.6, color=colors[arm["arm"]], alpha=0.45
                )
            ax.plot([estimate], [i], "|", color="black", markersize=14, markeredgewidth=2)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(NAMES[fn] + (" (lower is better)" if fn == "optimality_gap" else ""), fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    for ax in axes.ravel()[len(panels) : 4]:
        ax.axis("off")
    profile_ax, improve_ax = axes.ravel()[4], axes.ravel()[5]
    everything = np.concatenate([m.ravel() for _, m in arms.values()])
    low, high = float(everything.min()), float(everything.max())
    taus = np.linspace(min(low, 0.0) if out["normalized"] else low, high, 81)
    for label, (_, matrix) in arms.items():
        profile = estimators.score_distribution(matrix, taus)
        profile_ax.plot(taus, profile, color=colors[label], label=label)
        if matrix.shape[0] >= 2:
            band_low, band_high = estimators.profile_interval(matrix, taus)
            profile_ax.fill_between(taus, band_low, band_high, color=colors[label], alpha=0.2, linewidth=0)
    profile_ax.set_xlabel(f"{out['kind'] if not out['normalized'] else agg.normalized} tau", fontsize=8)
    profile_ax.set_ylabel("fraction of runs with score > tau", fontsize=8)
    profile_ax.set_title("performance profile (band: 95% interval)", fontsize=9)
    profile_ax.grid(alpha=0.3)
    profile_ax.legend(fontsize=7)
    for i, entry in enumerate(out["improvement"]):
        if entry["interval"]:
            lo, hi = entry["interval"]
            improve_ax.barh(i, hi - lo, left=lo, height=0.6, color=colors[entry["arm"]], alpha=0.45)
        improve_ax.plot([entry["estimate"]], [i], "|", color="black", markersize=14, markeredgewidth=2)
    improve_ax.axvline(0.5, color="0.4", linestyle="--", linewidth=1)
    improve_ax.set_xlim(0, 1)
    improve_ax.set_yticks(range(len(out["improvement"])), [e["arm"] for e in out["improvement"]], fontsize=7)
    improve_ax.invert_yaxis()
    improve_ax.set_title(f"P(arm > {out['reference']})", fontsize=9)
    improve_ax.grid(alpha=0.3, axis="x")
    tasks = len(out["tasks"])
    fig.suptitle(
        f"{out['title']}: n = {out['seeds']} seed{'s' * (out['seeds'] != 1)} x {tasks} "
        f"{agg.task}{'s' * (tasks != 1)}, {out['kind']}; bars: 95% stratified bootstrap intervals"
        + (f" ({out['note']})" if out["note"] else ""),
        fontsize=10,
    )
    save_figure(fig, path, style=style)


def interval_words(entry: dict[str, Any] | None) -> str:
    """``0.52 [0.31, 0.77]``."""
    if not entry:
        return "-"
    text = format_value(float(entry["estimate"]))
    if entry.get("interval"):
        text += f" [{format_value(entry['interval'][0])}, {format_value(entry['interval'][1])}]"
    return text
