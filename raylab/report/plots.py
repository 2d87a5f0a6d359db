"""Drawing a declared figure (Curve, Versus, Bars, Scatter) of a run as a PNG, and SVG and PDF
beside it on request (matplotlib, Agg).

Rows of panels are the values of the swept keys a figure does not use for its series; columns
are its metrics (unless drawn ``together``). Seed aggregates: mean line or marker, with a band
or error bar where there are two or more trials: one sample standard deviation, the standard
error or a 95% interval (``FigureStyle.uncertainty``, ``raylab.report.uncertainty``). Axes,
legends and titles show the workload's labels (``Report.labels``) instead of metric names;
every figure of a smoke run is watermarked SMOKE.

Paper rules (``raylab.report.style``): legends sit right of their axes, outside the data; each
series has its own colour however many there are; a log-spaced grid (``1e-4, 3e-4, 1e-3``)
gets a log x axis and a metric whose values span more than two decades a log y axis; on a log
axis a band or error bar that reaches zero or below is cut at the axis and its cut end marked
``v`` (the figure's note says so), never drawn to a made-up small value without a mark.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from raylab.report.aggregate import (
    aggregate,
    group,
    label_of,
    series_xy,
    split_keys,
    value_at,
)
from raylab.report.run_view import Run, Trial
from raylab.report.spec import Bars, Curve, Scatter, Versus
from raylab.report.style import LEGEND, WATERMARK, FigureStyle, legend_columns, log_spaced, series_colors, spans_decades
from raylab.report.uncertainty import curve_band, error_bars, point_interval
from raylab.report.values import format_value, is_number

PANEL_W, PANEL_H, MAX_PANELS = 5.0, 3.4, 36
LEGEND_CHARS = 48
"""A legend entry wraps onto a new line after this many characters."""


def draw(
    item, run: Run, seeds, path: Path, skip: tuple[str, ...] = (), style: FigureStyle | None = None
) -> tuple[bool, str]:
    """Draw ``item`` into ``path`` (and its other ``style.formats`` beside it); return whether
    it was drawn, and what is missing from it (not the ``skip`` metrics: reported under other
    configs only, ``Report.only``)."""
    style = style or FigureStyle()
    trials = [t for t in run.trials if t.rows]
    if not trials:
        return False, "no trial has reported results yet"
    absent = [m for m in item.plotted() if m not in skip and all(value_at(t, m) is None for t in trials)]
    note = f"no trial reported {', '.join(absent)}" if absent else ""
    exclude = (item.x,) if isinstance(item, Versus) else ()
    series_keys, panel_keys = split_keys(run, seeds, item.by, exclude)
    panels = list(group(run, trials, panel_keys).items())[:MAX_PANELS]
    colors = _colors(run, trials, series_keys)
    columns = _columns(item)
    width = PANEL_W * len(columns) * _bars_widening(item, run, trials)
    fig, axes = plt.subplots(len(panels), len(columns), figsize=(width, PANEL_H * len(panels)), squeeze=False)
    chars = int(width * 13)  # characters of a 9-point title across the figure
    drawn = 0
    notes: list[str] = []
    for row, (panel_values, members) in enumerate(panels):
        panel = _series_label(style, panel_keys, panel_values) if panel_keys else ""
        for col, metrics in enumerate(columns):
            ax = axes[row][col]
            drawn += _DRAW[type(item)](ax, item, run, members, metrics, series_keys, colors, style, notes)
            shown = "" if isinstance(item, Bars) else ", ".join(map(style.label, metrics))  # bars: on the ticks
            title = " | ".join(p for p in (shown, panel) if p)
            ax.set_title(textwrap.fill(title, max(20, chars // len(columns))), fontsize=8)
            ax.grid(alpha=0.3)
        _row_legend(axes[row])
    if not drawn:
        plt.close(fig)
        return False, note or f"no trial reported {', '.join(item.plotted())} as numbers"
    note = "; ".join(n for n in (note, *dict.fromkeys(notes)) if n)
    if isinstance(item, Versus) and item.baseline:
        borrowing = [
            _series_label(style, series_keys, values)
            for _, members in panels
            for values in _baseline_borrowers(item, run, members, series_keys)
        ]
        if borrowing:
            where = label_of(list(item.baseline), tuple(item.baseline.values()))
            note = "; ".join(
                n
                for n in (
                    note,
                    f"at {item.x}={format_value(item.baseline[item.x])}, "
                    f"{', '.join(dict.fromkeys(borrowing))} show the trials of "
                    f"{where} (one training for both)",
                )
                if n
            )
    _room_for_legends(fig, axes)
    fig.suptitle(textwrap.fill(item.heading(style.label), int(chars * 0.85)), fontsize=10)
    save_figure(fig, path, dpi=90, style=style)
    return True, note


def save_figure(fig, path: Path, dpi: int = 80, style: FigureStyle | None = None) -> list[Path]:
    """Lay out ``fig``, watermark it SMOKE for a smoke run, write it to ``path`` (PNG, white
    background) and, for each other format of ``style.formats``, beside it (``x.svg``,
    ``x.pdf``); close it and return the files written.

    Vector files keep their text as text (SVG ``<text>`` elements, TrueType fonts in PDF) so a
    paper's editor can restyle and search them; they carry no creation date, so the same run
    gives the same bytes."""
    style = style or FigureStyle()
    fit_canvas(fig)
    if style.smoke:
        width, height = fig.get_figwidth() * 72, fig.get_figheight() * 72  # points
        mark = fig.text(
            0.5,
            0.5,
            WATERMARK,
            ha="center",
            va="center",
            rotation=20,
            fontsize=max(18.0, min(120.0, 0.18 * width, 0.45 * height)),  # the word spans most of the width
            fontweight="bold",
            color="red",
            alpha=0.15,
            zorder=1000,
        )
        mark.set_gid("smoke-watermark")
    path.parent.mkdir(parents=True, exist_ok=True)
    written = []
    vector = {"svg.fonttype": "none", "pdf.fonttype": 42, "svg.hashsalt": "raylab"}
    with plt.rc_context(vector):
        for fmt in style.formats:
            target = path.with_suffix(f".{fmt}")
            metadata = {"Date": None} if fmt == "svg" else {"CreationDate": None} if fmt == "pdf" else None
            fig.savefig(target, dpi=dpi, facecolor="white", format=fmt, metadata=metadata)
            written.append(target)
    plt.close(fig)
    return written


def _row_legend(row_axes) -> None:
    """One legend per row of panels, right of its last panel: the series keep their colour (and
    a metric its dash) in every panel of the figure, so one key serves the row."""
    entries: dict[str, object] = {}
    for ax in row_axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(text, handle)
    if entries:
        wrapped = [textwrap.fill(text, LEGEND_CHARS) for text in entries]
        row_axes[-1].legend(list(entries.values()), wrapped, **LEGEND, ncol=legend_columns(len(entries)))


def _room_for_legends(fig, axes) -> None:
    """Widen the figure by its widest legend per column of panels, so that legends outside the
    axes take new room rather than the data's."""
    renderer = fig.canvas.get_renderer()
    extra = 0.0
    for column in np.asarray(axes).T:
        widths = [ax.get_legend().get_window_extent(renderer).width for ax in column if ax.get_legend()]
        extra += (max(widths) / fig.dpi + 0.15) if widths else 0.0
    if extra:
        fig.set_size_inches(fig.get_figwidth() + extra, fig.get_figheight())


def fit_canvas(fig, rounds: int = 4) -> None:
    """Lay ``fig`` out (``tight_layout``) and grow its canvas until every artist it draws lies
    inside it: titles, tick labels and legends outside the axes are never cut off at the edge.

    ``Figure.get_tightbbox`` (inches) is the union of what is drawn; where it sticks out of the
    canvas, the canvas grows by that much and the layout is made again."""
    import warnings

    for _ in range(rounds):
        with warnings.catch_warnings():  # a layout that cannot fit yet: the canvas grows below
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout()
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        width, height = fig.get_size_inches()
        over_w = max(0.0, box.x1 - width) + max(0.0, -box.x0)
        over_h = max(0.0, box.y1 - height) + max(0.0, -box.y0)
        if over_w < 0.01 and over_h < 0.01:
            return
        fig.set_size_inches(width + over_w + 0.15, height + over_h + 0.15)


def _series_label(style: FigureStyle, keys: list[str], values: tuple) -> str:
    """``label_of`` with each config key's declared label (``Learning rate=0.1``)."""
    return label_of(keys, values, style.label)


def _bars_widening(item, run: Run, trials: list[Trial]) -> float:
    """How much wider than one panel a bar chart is: room for its clusters of bars."""
    if not isinstance(item, Bars):
        return 1.0
    sizes = [len(v) for t in trials for m in item.y for v in [value_at(t, m)] if isinstance(v, list)]
    clusters = sum(1 for m in item.y if not any(isinstance(value_at(t, m), list) for t in trials))
    clusters += max(sizes, default=0)
    return max(1.0, min(4.0, clusters / 4))


def _columns(item) -> list[tuple[str, ...]]:
    if isinstance(item, Scatter):
        return [(item.y,)]
    if isinstance(item, Bars):
        return [tuple(item.y)]
    return [tuple(item.y)] if item.together else [(m,) for m in item.y]


def _colors(run: Run, trials: list[Trial], keys: list[str]) -> dict[tuple, tuple]:
    """One distinct colour per series (``style.series_colors``), the same in every panel."""
    series = list(group(run, trials, keys))
    return dict(zip(series, series_colors(len(series))))


CUT = "on the log axis, bands and error bars reaching zero or below are cut at the axis (cut ends marked v)"


def _log_floor(values) -> float:
    """Where a log axis's cut bands and error bars end: half the smallest positive value drawn."""
    positive = [v for v in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(v) and v > 0]
    return 0.5 * min(positive) if positive else 1e-12


def _cut_below(low: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """``low`` with every end at or below zero raised to ``floor``, and which ends were cut."""
    low = np.asarray(low, dtype=float)
    cut = np.isfinite(low) & (low <= 0)
    return np.where(cut, floor, low), cut


def _curve(ax, item: Curve, run, members, metrics, series_keys, colors, style: FigureStyle, notes=None) -> int:
    curves = []
    for values, trials in group(run, members, series_keys).items():
        for m_index, metric in enumerate(metrics):
            xs, mean, low, high = _mean_curve(
                [series_xy(t, item.x, metric, item.skip_repeats) for t in trials], style.uncertainty
            )
            if xs.size:
                curves.append((values, m_index, metric, xs, mean, low, high))
    means = np.concatenate([c[4] for c in curves]) if curves else np.empty(0)
    nonpositive = bool((means[np.isfinite(means)] <= 0).any())
    scale = ("symlog" if nonpositive else "log") if item.logy else "log" if spans_decades(means) else "linear"
    floor = _log_floor(means)
    for values, m_index, metric, xs, mean, low, high in curves:
        label = _series_label(style, series_keys, values) if series_keys else ""
        if len(metrics) > 1:
            label = f"{style.label(metric)} {label}".strip()
        dash = ("-", "--", ":", "-.")[m_index % 4]
        color = colors[values] if series_keys or len(metrics) == 1 else None
        (line,) = ax.plot(xs, mean, dash, color=color, label=label or None, marker="." if xs.size < 4 else None)
        band = np.isfinite(low) & np.isfinite(high)
        if scale == "log":
            low, cut = _cut_below(low, floor)
            if (cut & band).any():
                ax.plot(xs[cut & band], low[cut & band], "v", color=line.get_color(), markersize=4, linestyle="none")
                if notes is not None:
                    notes.append(CUT)
        if band.any():
            ax.fill_between(xs[band], low[band], high[band], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(style.label(item.x), fontsize=8)
    if len(metrics) == 1:
        ax.set_ylabel(style.label(metrics[0]), fontsize=8)
    if scale != "linear":
        ax.set_yscale(scale)
    return len(curves)


def _mean_curve(pairs: list[tuple[np.ndarray, np.ndarray]], uncertainty: str = "std"):
    """The x grid, mean and band (low, high: ``curve_band``) over trials on the union of their
    x values (each trial interpolated in its own range)."""
    pairs = [(x, y) for x, y in pairs if x.size]
    if not pairs:
        return np.empty(0), np.empty(0), np.empty(0), np.empty(0)
    grid = np.unique(np.concatenate([x for x, _ in pairs]))
    stacked = np.full((len(pairs), grid.size), np.nan)
    for i, (x, y) in enumerate(pairs):
        inside = (grid >= x[0]) & (grid <= x[-1])
        stacked[i, inside] = np.interp(grid[inside], x, y)
    return (grid, *curve_band(stacked, uncertainty))


def _baseline_trials(item: Versus, members: list[Trial]) -> list[Trial]:
    return [t for t in members if item.baseline and all(t.config.get(k) == v for k, v in item.baseline.items())]


def _baseline_borrowers(item: Versus, run, members, series_keys) -> dict[tuple, list[Trial]]:
    """The series without trials of their own at the baseline's x, and the baseline's trials."""
    base = _baseline_trials(item, members)
    if not base:
        return {}
    at = item.baseline[item.x]
    return {
        values: base
        for values, trials in group(run, members, series_keys).items()
        if not any(t.config.get(item.x) == at for t in trials)
    }


def _versus(ax, item: Versus, run, members, metrics, series_keys, colors, style: FigureStyle, notes=None) -> int:
    xs_all = [t.config.get(item.x) for t in members]
    numeric = all(is_number(x) for x in xs_all)
    categories = [] if numeric else list(dict.fromkeys(format_value(x) for x in xs_all))
    borrowed = _baseline_borrowers(item, run, members, series_keys)
    series = []
    for values, trials in group(run, members, series_keys).items():
        trials = [*trials, *borrowed.get(values, [])]
        for m_index, metric in enumerate(metrics):
            points = []
            for (x_value,), at_x in group(run, trials, [item.x]).items():
                agg = aggregate([value_at(t, metric, item.at) for t in at_x], [t.name for t in at_x])
                if agg is None or not is_number(agg.mean):
                    continue
                x = float(x_value) if numeric else categories.index(format_value(x_value))
                points.append((x, agg.mean, point_interval(agg.values, style.uncertainty)))
            if not points:
                continue
            points.sort(key=lambda p: p[0])
            series.append((values, m_index, metric, points))
    means = [p[1] for *_, points in series for p in points]
    logy = item.logy or spans_decades(means)
    floor = _log_floor(means)
    for values, m_index, metric, points in series:
        x, y = (np.asarray(v, dtype=float) for v in zip(*((p[0], p[1]) for p in points)))
        label = _series_label(style, series_keys, values) if series_keys else ""
        if len(metrics) > 1:
            label = f"{style.label(metric)} {label}".strip()
        yerr = error_bars(y, [p[2] for p in points])
        cut = np.zeros(len(y), dtype=bool)
        if logy:  # what reaches zero or below is cut at the axis; its cut end is marked below
            low, cut = _cut_below(y - yerr[0], floor)
            yerr[0] = y - low
        container = ax.errorbar(
            x,
            y,
            yerr=yerr,
            marker="osD^x"[m_index % 5],
            capsize=3,
            linestyle=("-", "--", ":", "-.")[m_index % 4],
            color=colors[values] if series_keys or len(metrics) == 1 else None,
            label=label or None,
        )
        if cut.any():
            color = container.lines[0].get_color()
            ax.plot(x[cut], (y - yerr[0])[cut], "v", color=color, markersize=5, linestyle="none")
            if notes is not None:
                notes.append(CUT)
    ax.set_xlabel(style.label(item.x), fontsize=8)
    if len(metrics) == 1:
        ax.set_ylabel(style.label(metrics[0]), fontsize=8)
    if categories:
        ax.set_xticks(range(len(categories)), categories, fontsize=7)
    logx = item.logx if item.logx is not None else numeric and log_spaced(xs_all)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    return len(series)


def _labels_from(item: Bars, members) -> tuple[str, ...]:
    """The entries' names from the workload's ``labels_from`` hook on the first trial's config
    (the trials of one figure share their dataset); () when there is no hook or it fails."""
    if item.labels_from is None or not members:
        return ()
    try:
        return tuple(str(name) for name in item.labels_from(members[0].config))
    except Exception:  # noqa: BLE001 - a figure still draws, with entry indices
        return ()


def _bars(ax, item: Bars, run, members, metrics, series_keys, colors, style: FigureStyle, notes=None) -> int:
    series = list(group(run, members, series_keys).items())
    clusters: list[str] = []
    nan = (float("nan"), float("nan"))
    heights: dict[tuple, list[tuple[float, tuple[float, float]]]] = {values: [] for values, _ in series}
    for metric in metrics:
        aggs = {
            values: aggregate([value_at(t, metric, item.at) for t in trials], [t.name for t in trials])
            for values, trials in series
        }
        sizes = [len(a.mean) for a in aggs.values() if a is not None and isinstance(a.mean, list)]
        if sizes:  # a vector: one cluster per entry
            size = max(sizes)
            names = item.labels or _labels_from(item, members)
            labels = list(names[:size]) + [str(i) for i in range(len(names), size)]
            clusters += [f"{lab}" if len(metrics) == 1 else f"{style.label(metric)}[{lab}]" for lab in labels]
            for values, agg in aggs.items():
                ok = agg is not None and isinstance(agg.mean, list) and len(agg.mean) == size
                heights[values] += (
                    [(agg.mean[i], point_interval([v[i] for v in agg.values], style.uncertainty)) for i in range(size)]
                    if ok
                    else [(np.nan, nan)] * size
                )
        else:
            clusters.append(style.label(metric))
            for values, agg in aggs.items():
                heights[values].append(
                    (agg.mean, point_interval(agg.values, style.uncertainty)) if agg is not None else (np.nan, nan)
                )
    if not clusters or all(np.isnan(h) for hs in heights.values() for h, _ in hs):
        return 0
    width = 0.8 / max(1, len(series))
    positions = np.arange(len(clusters))
    for i, (values, _) in enumerate(series):
        mean = np.asarray([h for h, _ in heights[values]], dtype=float)
        ax.bar(
            positions + (i - (len(series) - 1) / 2) * width,
            np.nan_to_num(mean),
            width,
            yerr=error_bars(mean, [interval for _, interval in heights[values]]),
            capsize=2,
            color=colors[values],
            label=_series_label(style, series_keys, values) if series_keys else None,
        )
    crowded = sum(len(c) for c in clusters) > 12 * ax.get_figure().get_figwidth()
    ax.set_xticks(positions, clusters, fontsize=7, rotation=25 if crowded else 0, ha="right" if crowded else "center")
    if len(metrics) == 1:
        ax.set_ylabel(style.label(metrics[0]), fontsize=8)
    return 1


def _scatter(ax, item: Scatter, run, members, metrics, series_keys, colors, style: FigureStyle, notes=None) -> int:
    points = 0
    everything = []
    for values, trials in group(run, members, series_keys).items():
        xy = [(value_at(t, item.x, item.at), value_at(t, item.y, item.at)) for t in trials]
        xy = [(x, y) for x, y in xy if is_number(x) and is_number(y)]
        if not xy:
            continue
        x, y = np.asarray(xy, dtype=float).T
        ax.scatter(
            x, y, s=25, color=colors[values], label=_series_label(style, series_keys, values) if series_keys else None
        )
        everything += xy
        points += len(xy)
    if item.diagonal and everything:
        low = float(np.nanmin(everything)), float(np.nanmax(everything))
        ax.plot(low, low, color="0.5", linestyle="--", linewidth=1)
    ax.set_xlabel(style.label(item.x), fontsize=8)
    ax.set_ylabel(style.label(item.y), fontsize=8)
    return points


_DRAW = {Curve: _curve, Versus: _versus, Bars: _bars, Scatter: _scatter}
