"""The sweep view of a run with a search space: the view W&B, MLflow and TensorBoard's HParams
give a sweep, from the run folder alone.

- Parallel coordinates: one line per configuration (its seeds averaged), an axis per swept
  key and one for the experiment's metric (with each configuration's 95% interval over
  seeds), coloured by the metric, best configurations on top.
- Hyperparameter importance, two ways: each swept key's main-effect share of the metric's
  variance over trials, ``sum_v n_v (mean_v - mean)^2 / sum_i (y_i - mean)^2`` (fANOVA's first
  order term, exact on a full grid), and a random forest's permutation importance
  (scikit-learn: ``RandomForestRegressor`` and ``sklearn.inspection.permutation_importance``,
  the drop in R^2 when a key's column is shuffled; in-sample, so an upper bound). The seed
  is a column too: a key whose importance does not beat the seed's is within the noise.
- Learning curves of the metric against the workload's step counter and against wall-clock
  time side by side: the best configurations' means with a band of one standard deviation
  over seeds.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from raylab.report import estimators
from raylab.report.aggregate import _hashable, _unhash, conditions, group, label_of, value_at
from raylab.report.run_view import Run
from raylab.report.spec import Curve, Report, is_seed_key
from raylab.report.values import format_value, is_number

MIN_TRIALS_IMPORTANCE = 6
CURVES_SHOWN = 8
PARALLEL_TOP = 40
"""Configurations the parallel coordinates draw in colour (the best); a larger sweep's others are
one faint grey layer beneath them, so the view stays readable at thousands of trials."""


def choose_step(run: Run, spec: Report, metric: str) -> str:
    """The step counter of the learning curves: the x of the declared curve of ``metric`` (else
    of the first declared curve) when the trials report it; else ``training_iteration``."""
    curves = [i for i in spec.items if isinstance(i, Curve)]
    reported = set().union(*(t.reported() for t in run.trials)) if run.trials else set()
    for curve in sorted(curves, key=lambda c: metric not in c.y):
        if curve.x in reported:
            return curve.x
    return "training_iteration"


def _groups(run: Run, seeds, defaults: dict[str, Any], metric: str):
    """The condition keys, the trials with a number for ``metric``, and their configs. A swept
    key a trial's variant does not set (``beta`` of an MSE trial) stays unset (shown ``-``): the
    trial does not use it, whatever its Config default is."""
    keys = conditions(run, seeds)
    trials = [t for t in run.trials if t.rows and is_number(value_at(t, metric))]
    unswept = {k: v for k, v in defaults.items() if k not in keys}
    return keys, trials, {t.name: {**unswept, **t.config} for t in trials}


def _mode_sign(mode: str) -> float:
    return -1.0 if mode == "min" else 1.0


def build_sweep_view(run: Run, spec: Report, defaults: dict[str, Any], out_dir: Path, style=None) -> dict[str, Any]:
    """The sweep view's numbers (JSON-able) and figures under ``out_dir/figures`` (in the
    formats of ``style``, a ``raylab.report.style.FigureStyle``, with its watermark and labels;
    the learning curves' band stays one std: the view compares configurations, not seeds)."""
    exp = run.experiment
    metric, mode = exp.get("metric"), exp.get("mode", "max")
    out: dict[str, Any] = {"shown": False, "metric": metric, "mode": mode}
    if not exp.get("search") or not metric:
        out["note"] = "no search space" if metric else "the experiment names no metric"
        return out
    keys, trials, configs = _groups(run, spec.seeds, defaults, metric)
    if not trials:
        out["note"] = f"no trial reported {metric} yet"
        return out
    out["shown"] = True
    out["parallel"] = parallel_coordinates(
        run, keys, trials, configs, metric, mode, out_dir / "figures" / "sweep_parallel.png", style
    )
    seed_keys = [k for k in run.swept if is_seed_key(k, spec.seeds)]
    out["importance"] = importance(keys, seed_keys, trials, configs, metric)
    step = choose_step(run, spec, metric)
    out["curves"] = learning_curves(
        run, keys, trials, metric, mode, step, out_dir / "figures" / "sweep_curves.png", style
    )
    return out


# ------------------------------------------------------------------------ parallel coordinates


def _axis(values: list[Any]) -> tuple[list[float], list[float], list[str], str]:
    """Positions in [0, 1] of one axis's values, its ticks and tick labels, and its scale."""
    numeric = all(is_number(v) for v in values)
    if numeric:
        from raylab.report.style import log_spaced

        array = np.asarray(values, dtype=float)
        log = log_spaced(values)
        scaled = np.log10(array) if log else array
        low, high = float(scaled.min()), float(scaled.max())
        span = (high - low) or 1.0
        positions = ((scaled - low) / span).tolist() if high > low else [0.5] * len(values)
        ticks = sorted(set(scaled.tolist()))
        if len(ticks) > 6:
            ticks = np.linspace(low, high, 5).tolist()
        labels = [format_value(10**t if log else t) for t in ticks]
        tick_positions = [((t - low) / span) if high > low else 0.5 for t in ticks]
        return positions, tick_positions, labels, "log" if log else "linear"
    categories = list(dict.fromkeys(format_value(v) if v is not None else "-" for v in values))
    where = {c: (i / (len(categories) - 1) if len(categories) > 1 else 0.5) for i, c in enumerate(categories)}
    return (
        [where[format_value(v) if v is not None else "-"] for v in values],
        list(where.values()),
        categories,
        "categories",
    )


def parallel_coordinates(
    run: Run, keys: list[str], trials, configs, metric: str, mode: str, path: Path, style=None
) -> dict[str, Any]:
    """One line per configuration (seeds averaged) across an axis per swept key and the metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from raylab.report.plots import save_figure

    groups = []
    for values, members in group(run, trials, keys).items():
        scores = np.array([value_at(t, metric) for t in members], dtype=float)
        interval = list(estimators.strata_interval([scores])) if len(scores) >= 2 else None
        config = configs[members[0].name]
        groups.append(
            {
                "values": {k: _unhash(config.get(k)) for k in keys},
                "label": label_of(keys, values),
                "mean": float(scores.mean()),
                "n": len(scores),
                "interval": interval,
            }
        )
    out: dict[str, Any] = {
        "file": "",
        "configurations": len(groups),
        "keys": keys,
        "rows": sorted(groups, key=lambda g: _mode_sign(mode) * -g["mean"]),
    }
    if not keys or len(groups) < 2:
        out["note"] = ("nothing swept but the seed" if not keys else "one configuration") + ": no parallel coordinates"
        return out
    from raylab.report.style import spans_decades

    means = np.array([g["mean"] for g in groups])
    # a metric spanning decades reads on a log axis; an interval reaching zero is cut at its floor
    log = spans_decades(means)
    floor = 0.5 * float(means.min()) if log else -np.inf
    scale = (lambda v: np.log10(np.maximum(v, floor))) if log else (lambda v: np.asarray(v, dtype=float))
    low, high = float(scale(means.min())), float(scale(means.max()))
    lows = [float(scale(g["interval"][0] if g["interval"] else g["mean"])) for g in groups]
    highs = [float(scale(g["interval"][1] if g["interval"] else g["mean"])) for g in groups]
    metric_low, metric_high = min(low, *lows), max(high, *highs)
    span = (metric_high - metric_low) or 1.0
    axes_values = [_axis([g["values"][k] for g in groups]) for k in keys]
    fig, ax = plt.subplots(figsize=(max(9.0, 2.4 * (len(keys) + 1)), 4.4))
    cmap = plt.get_cmap("viridis" if mode != "min" else "viridis_r")
    order = np.argsort(_mode_sign(mode) * means)  # the best drawn last, on top
    xs = list(range(len(keys) + 1))
    rest, order = order[:-PARALLEL_TOP], order[-PARALLEL_TOP:]
    if len(rest):  # a large sweep: the others as one faint grey layer under the best, in colour
        from matplotlib.collections import LineCollection

        lines = [
            list(zip(xs, [axes_values[j][0][i] for j in range(len(keys))] + [(means[i] - metric_low) / span]))
            for i in rest
        ]
        ax.add_collection(LineCollection(lines, colors="0.55", alpha=min(0.5, 20 / len(rest)), linewidths=0.6))
    for index in order:
        g = groups[index]
        ys = [axes_values[j][0][index] for j in range(len(keys))] + [(float(scale(g["mean"])) - metric_low) / span]
        color = cmap((float(scale(g["mean"])) - low) / ((high - low) or 1.0))
        ax.plot(xs, ys, color=color, alpha=0.85, linewidth=1.6)
        if g["interval"]:
            offset = xs[-1] - 0.02 - 0.05 * (list(order).index(index) / max(1, len(groups) - 1))
            ax.plot(
                [offset] * 2,
                [(float(scale(g["interval"][i])) - metric_low) / span for i in (0, 1)],
                color=color,
                linewidth=3,
                alpha=0.7,
                solid_capstyle="butt",
            )
    for j, (_, ticks, labels, _kind) in enumerate(axes_values):
        ax.axvline(j, color="0.3", linewidth=1)
        for t, lab in zip(ticks, labels):
            ax.text(j + 0.03, t, lab, fontsize=7, va="center")
    ax.axvline(len(keys), color="0.3", linewidth=1)
    for t in np.linspace(0, 1, 5):
        value = metric_low + t * span
        ax.text(len(keys) + 0.03, t, format_value(float(10**value if log else value)), fontsize=7, va="center")
    name_of = style.label if style else str
    names = [f"{name_of(k)}{' (log)' if a[3] == 'log' else ''}" for k, a in zip(keys, axes_values)]
    ax.set_xticks(xs, [*names, f"{name_of(metric)} ({mode}{', log' if log else ''})"], fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.1, len(keys) + 0.45)
    ax.set_ylim(-0.05, 1.05)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    seeds = sorted({g["n"] for g in groups})
    top = f"the best {len(order)} in colour, the other {len(rest)} in grey; " if len(rest) else ""
    ax.set_title(
        f"parallel coordinates: {len(groups)} configurations ({top}each the mean over its seeds "
        f"(n = {', '.join(map(str, seeds))}));\nbars left of the metric axis: each coloured one's 95% interval over seeds",
        fontsize=9,
    )
    norm = matplotlib.colors.LogNorm(10**low, 10**high) if log and high > low else plt.Normalize(low, high)
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.01, label=name_of(metric)).ax.tick_params(
        labelsize=7
    )
    out["log_metric"] = log
    save_figure(fig, path, style=style)
    out["file"] = f"figures/{path.name}"
    return out


# ------------------------------------------------------------------------ importance


def variance_share(values: list[Any], y: np.ndarray) -> float:
    """Main-effect share of ``y``'s variance of one key: ``sum_v n_v (mean_v - mean)^2 /
    sum_i (y_i - mean)^2`` over the key's values ``v`` (0 when ``y`` does not vary)."""
    total = float(((y - y.mean()) ** 2).sum())
    if total == 0:
        return 0.0
    labels = [json_key(v) for v in values]
    share = 0.0
    for label in set(labels):
        members = y[[i for i, lab in enumerate(labels) if lab == label]]
        share += len(members) * (members.mean() - y.mean()) ** 2
    return float(share / total)


def json_key(value: Any) -> str:
    return str(_hashable(value))


def _encode(values: list[Any]) -> np.ndarray:
    """A column for the forest: numbers as they are (log10 across decades), others as codes."""
    if all(is_number(v) for v in values):
        array = np.asarray(values, dtype=float)
        if (array > 0).all() and array.max() / array.min() > 100:
            return np.log10(array)
        return array
    codes = {c: i for i, c in enumerate(dict.fromkeys(json_key(v) for v in values))}
    return np.asarray([codes[json_key(v)] for v in values], dtype=float)


def importance(keys: list[str], seed_keys: list[str], trials, configs, metric: str) -> dict[str, Any]:
    """Each swept key's (and the seed's) main-effect variance share and permutation importance."""
    columns = [k for k in [*keys, *seed_keys] if len({json_key(configs[t.name].get(k)) for t in trials}) > 1]
    out: dict[str, Any] = {
        "rows": [],
        "trials": len(trials),
        "method": (
            "main-effect variance share (fANOVA first order); random forest (50 trees) permutation "
            "importance: mean drop in R^2 over 10 shuffles, in-sample"
        ),
    }
    if len(trials) < MIN_TRIALS_IMPORTANCE or not [k for k in columns if k in keys]:
        out["note"] = (
            f"importance needs {MIN_TRIALS_IMPORTANCE} or more trials with {metric} and a swept key "
            f"with two or more values: this run has {len(trials)} trial{'s' * (len(trials) != 1)}"
        )
        return out
    y = np.array([value_at(t, metric) for t in trials], dtype=float)
    if float(y.std()) == 0:
        out["note"] = (
            f"importance not defined: {metric} is {format_value(float(y[0]))} in all {len(trials)} trials, "
            "so no key explains any of its variance"
        )
        out["constant"] = True
        return out
    values = {k: [configs[t.name].get(k) for t in trials] for k in columns}
    X = np.column_stack([_encode(values[k]) for k in columns])
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.inspection import permutation_importance

    forest = RandomForestRegressor(n_estimators=50, random_state=0).fit(X, y)
    result = permutation_importance(forest, X, y, n_repeats=10, random_state=0)
    permutation = {k: (float(m), float(s)) for k, m, s in zip(columns, result.importances_mean, result.importances_std)}
    for key in columns:
        out["rows"].append(
            {
                "key": key,
                "seed": key in seed_keys,
                "values": len({json_key(v) for v in values[key]}),
                "variance_share": variance_share(values[key], y),
                "permutation": permutation[key][0],
                "permutation_std": permutation[key][1],
            }
        )
    out["rows"].sort(key=lambda r: -r["variance_share"])
    return out


# ------------------------------------------------------------------------ curves


def learning_curves(
    run: Run, keys: list[str], trials, metric: str, mode: str, step: str, path: Path, style=None
) -> dict[str, Any]:
    """The metric against ``step`` and against wall-clock seconds, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from raylab.report.plots import _cut_below, _log_floor, save_figure
    from raylab.report.style import LEGEND, legend_columns, series_colors, spans_decades

    name_of = style.label if style else str
    groups = list(group(run, trials, keys).items())
    groups.sort(key=lambda kv: _mode_sign(mode) * -np.mean([value_at(t, metric) for t in kv[1]]))
    shown = groups[:CURVES_SHOWN]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    drawn = 0
    curves = [(values, members, step_means(members, step, metric)) for values, members in shown]
    curves = [c for c in curves if c[2][0].size]
    means = np.concatenate([c[2][2] for c in curves]) if curves else np.empty(0)
    log = spans_decades(means)
    floor = _log_floor(means)
    for (values, members, (steps, seconds, mean, std)), color in zip(curves, series_colors(len(curves))):
        label = f"{label_of(keys, values, name_of) if keys else 'all trials'} (n={len(members)})"
        low, high = mean - std, mean + std
        if log:
            low, _ = _cut_below(low, floor)
        for ax, xs in zip(axes, (steps, seconds)):
            ax.plot(xs, mean, color=color, label=label, marker="." if xs.size < 4 else None)
            band = np.isfinite(std)
            if band.any():
                ax.fill_between(xs[band], low[band], high[band], color=color, alpha=0.2, linewidth=0)
        drawn += 1
    out: dict[str, Any] = {"file": "", "x": [step, "time_total_s"], "configurations": len(groups), "shown": len(shown)}
    if not drawn:
        plt.close(fig)
        out["note"] = f"no trial reported {metric} against {step} or time_total_s"
        return out
    for ax, x in zip(axes, (name_of(step), "wall-clock seconds (time_total_s)")):
        ax.set_xlabel(x, fontsize=8)
        ax.set_ylabel(name_of(metric), fontsize=8)
        ax.grid(alpha=0.3)
        if log:
            ax.set_yscale("log")
    axes[1].legend(**LEGEND, ncol=legend_columns(drawn))
    more = f"the best {len(shown)} of {len(groups)} configurations; " if len(groups) > len(shown) else ""
    title = (
        f"{name_of(metric)} against {name_of(step)} and against wall-clock time: {more}mean over seeds at each "
        f"{name_of(step)} (wall-clock: the seeds' mean time there), band ± one std"
        + (" (cut at the log axis where it reaches zero)" if log else "")
    )
    fig.suptitle(textwrap.fill(title, 140), fontsize=10)
    save_figure(fig, path, style=style)
    out["file"] = f"figures/{path.name}"
    return out


def step_means(trials, step: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """At each value of the step counter the trials reported ``metric`` at: the step, the
    seeds' mean wall-clock seconds there, and the mean and sample std (NaN for one) of the
    metric. Seeds of one configuration report at the same steps, so this aligns them on the
    step rather than interpolating each seed's clock."""
    at: dict[float, list[tuple[float, float]]] = {}
    for trial in trials:
        for row in trial.rows:
            x, t, y = row.get(step), row.get("time_total_s"), row.get(metric)
            if is_number(x) and is_number(t) and is_number(y) and math.isfinite(y):
                at.setdefault(float(x), []).append((float(t), float(y)))
    steps = np.array(sorted(at))
    seconds = np.array([np.mean([t for t, _ in at[x]]) for x in steps])
    mean = np.array([np.mean([y for _, y in at[x]]) for x in steps])
    std = np.array([np.std([y for _, y in at[x]], ddof=1) if len(at[x]) > 1 else np.nan for x in steps])
    return steps, seconds, mean, std
