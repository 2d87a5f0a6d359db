"""Figures a reviewer would put in a paper, read through matplotlib's artists on hand-written
run folders (no Ray): every text inside its canvas, legends outside the data, one colour per
series past ten, log axes for a log-spaced grid and a metric spanning decades, error bars cut
honestly on a log axis, titles and axes worded from one place; importance of a constant
metric, and the claims table's metric, control threshold and smoke note."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.text import Text

from raylab import report
from raylab.report import plots
from raylab.report.claims import Claim, Control, Value
from raylab.report.run_view import load_run
from raylab.report.spec import Curve, Report, Versus
from raylab.report.style import log_spaced, series_colors, spans_decades
from tests.raylab.report.test_report_units import write_run

LRS = [round(1e-4 * 1.5**i, 10) for i in range(12)]
"""Twelve learning rates a factor 1.5 apart: log-spaced, yet under two decades end to end."""
SEED_FACTORS = (0.01, 1.99)
"""Two seeds around each mean: one sample std 1.4 x the mean, so mean - std < 0."""

SPEC = Report(
    items=(
        Curve("train/loss", x="env/steps", title="training loss against {x}"),
        Versus("lr", "train/loss"),
    ),
    labels={"train/loss": "Training loss (MSE)", "env/steps": "Agent steps", "lr": "Learning rate"},
)


def _loss(i: int) -> float:
    return 10.0 ** (-5 * i / 11)  # five decades over the grid


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """The report of a 12 x 2 run, with every figure it saved (laid out as saved)."""
    tmp = tmp_path_factory.mktemp("paper")
    trials = [
        {
            "params": {"lr": lr, "seed": seed},
            "rows": [
                {"train/loss": _loss(i) * factor * (4 - step) / 3, "env/steps": 100 * step, "time_total_s": 2.0 * step}
                for step in (1, 2, 3)
            ],
        }
        for i, lr in enumerate(LRS)
        for seed, factor in enumerate(SEED_FACTORS)
    ]
    run = load_run(str(write_run(tmp, {"lr": LRS, "seed": [0, 1]}, trials, metric="train/loss", mode="min")))
    figures = {}
    original = plots.save_figure

    def keep(fig, path, *args, **kwargs):
        written = original(fig, path, *args, **kwargs)
        figures[Path(path).stem] = fig
        return written

    mp = pytest.MonkeyPatch()
    mp.setattr(plots, "save_figure", keep)
    try:
        content = report.build(run, SPEC, tmp / "out", style=report.figure_style(run, SPEC))
    finally:
        mp.undo()
    return content, figures


def _renderer(fig):
    """The figure drawn again on an Agg canvas (it was closed after saving), as it was saved."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _in_view(axis, loc) -> bool:
    low, high = sorted(axis.get_view_interval())
    return low - 1e-12 <= loc <= high + 1e-12


def _texts(fig) -> list[Text]:
    """Every text the figure draws: titles, axis labels, tick labels in view, legends, notes."""
    texts = [t for t in fig.texts if t.get_gid() != "smoke-watermark"]
    if fig._suptitle is not None:
        texts.append(fig._suptitle)
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            for tick, loc in zip(axis.get_major_ticks(), axis.get_majorticklocs()):
                if _in_view(axis, loc):
                    texts += [tick.label1, tick.label2]
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def test_every_text_of_every_figure_lies_inside_its_canvas(drawn):
    _, figures = drawn
    assert {"01_curve_train_loss", "02_versus_train_loss", "sweep_parallel", "sweep_curves"} <= set(figures)
    for name, fig in figures.items():
        renderer = _renderer(fig)
        canvas = fig.bbox
        texts = _texts(fig)
        assert texts, name
        for text in texts:
            box = text.get_window_extent(renderer)
            inside = (
                box.x0 >= canvas.x0 - 1
                and box.y0 >= canvas.y0 - 1
                and box.x1 <= canvas.x1 + 1
                and box.y1 <= canvas.y1 + 1
            )
            assert inside, (name, text.get_text()[:60], box.bounds, canvas.bounds)
        whole = fig.get_tightbbox(renderer)  # inches
        assert whole.x1 <= fig.get_figwidth() + 0.02 and whole.y1 <= fig.get_figheight() + 0.02, name


def test_legends_sit_outside_the_data_and_twelve_series_get_twelve_colours(drawn):
    _, figures = drawn
    for name in ("01_curve_train_loss", "sweep_curves"):
        fig = figures[name]
        renderer = _renderer(fig)
        legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
        assert legends, name
        for ax, legend in legends:
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)), name
    curve = figures["01_curve_train_loss"].axes[0]
    colours = {to_hex(line.get_color()) for line in curve.get_lines() if not line.get_label().startswith("_")}
    assert len(colours) == len(LRS) == 12
    assert len({to_hex(c) for c in series_colors(30)}) == 30


def test_log_axes_for_a_log_spaced_grid_and_a_metric_spanning_decades(drawn):
    _, figures = drawn
    versus = figures["02_versus_train_loss"].axes[0]
    assert versus.get_xscale() == "log"  # 1.5x steps: log-spaced though under two decades
    assert versus.get_yscale() == "log"  # five decades
    assert figures["01_curve_train_loss"].axes[0].get_yscale() == "log"
    assert all(ax.get_yscale() == "log" for ax in figures["sweep_curves"].axes[:2])
    assert log_spaced([1e-4, 3e-4, 1e-3]) and log_spaced([1, 2, 4, 8]) and log_spaced([1e-3, 1.0])
    assert not log_spaced([0.1, 0.2, 0.3]) and not log_spaced([1, 2, 3]) and not log_spaced([0, 1, 10])
    assert spans_decades([1e-3, 1.0]) and not spans_decades([1.0, 50.0]) and not spans_decades([-1.0, 1e3])


def test_error_bars_on_a_log_axis_are_cut_at_the_axis_and_marked(drawn):
    content, figures = drawn
    ax = figures["02_versus_train_loss"].axes[0]
    low_ends = []
    for collection in ax.collections:  # errorbar's vertical segments
        for segment in collection.get_segments():
            low_ends.append(min(segment[:, 1]))
    assert low_ends and min(low_ends) > 0  # every bar ends on the axis, none at 0 or below
    bottom = min(ax.get_ylim())
    assert min(low_ends) >= bottom * 0.999
    marks = [line for line in ax.get_lines() if line.get_marker() == "v"]
    assert sum(len(m.get_xdata()) for m in marks) == len(LRS)  # every cut end is marked
    figure = next(f for f in content["figures"] if f["name"] == "02_versus_train_loss")
    assert "cut at the axis" in figure["note"]


def test_titles_and_axes_use_the_same_words(drawn):
    content, figures = drawn
    curve = next(f for f in content["figures"] if f["name"] == "01_curve_train_loss")
    assert curve["title"] == "training loss against agent steps"
    assert figures["01_curve_train_loss"].axes[0].get_xlabel() == "Agent steps"
    suptitle = figures["sweep_curves"]._suptitle.get_text()
    assert "env/steps" not in suptitle and "Agent steps" in suptitle

    from raylab.report.style import label
    from trainers.dqn_softlinf.figures import REPORT

    headings = [
        item.heading(lambda name: label(REPORT.labels, name)) for item in REPORT.items if isinstance(item, Curve)
    ]
    assert any("against agent steps" in h for h in headings) and not any("env steps" in h for h in headings)


def test_importance_of_a_constant_metric_is_not_defined(tmp_path):
    trials = [{"params": {"lr": lr, "seed": s}, "rows": [{"score": 1.0}]} for lr in (0.1, 0.2, 0.3) for s in (0, 1)]
    run = write_run(tmp_path, {"lr": [0.1, 0.2, 0.3], "seed": [0, 1]}, trials)
    html = Path(report.write_report(str(run))).read_text()
    content = report.build(load_run(str(run)), Report(), tmp_path / "again")
    importance = content["sweep"]["importance"]
    assert importance["rows"] == [] and importance["note"].startswith("importance not defined")
    section = html[html.index("<h3>Hyperparameter importance</h3>") :].split("<h", 2)[1]
    assert "importance not defined" in section and "nan" not in section


def test_the_claims_table_names_its_metric_and_control_threshold_and_marks_smoke(tmp_path):
    trials = [{"params": {"seed": s}, "rows": [{"score": 0.2 + 0.01 * s, "learned": 0.1}]} for s in range(3)]
    spec = Report(
        claims=(
            Claim(
                "the score is above 0.1",
                Value("score"),
                expect=">",
                threshold=0.1,
                controls=(Control("the agent learns", Value("learned"), expect=">", threshold=0.5),),
            ),
        )
    )
    for smoke in (True, False):
        run = load_run(str(write_run(tmp_path / str(smoke), {"seed": [0, 1, 2]}, trials, smoke=smoke)))
        out = tmp_path / f"out{smoke}"
        out.mkdir()
        content = report.build(run, spec, out)
        (claim,) = content["claims"]
        assert claim["metric"] == "score" and claim["rows"][0]["measured_on"] == ["score"]
        control = claim["controls"][0]
        assert control["state"] == "failed" and control["threshold_words"] == "> 0.5 on every seed"
        html = report.render.to_html(content, out)
        markdown = report.render.to_markdown(content)
        for text in (html, markdown):
            assert "&gt; 0.5 on every seed" in text or "> 0.5 on every seed" in text
            assert ("expected at smoke size" in text) == smoke
        assert "<th>metric</th>" in html
