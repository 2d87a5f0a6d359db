"""Paper-ready figures, on hand-written run folders (no Ray): SVG and PDF beside
the PNG, the SMOKE watermark of a smoke run, the workload's labels instead of metric keys, and the
uncertainty option's band and error bars measured on the drawn figure for known values."""

from __future__ import annotations

import json
import math
import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats

from raylab import report, workloads
from raylab.report import plots
from raylab.report.estimators import strata_interval
from raylab.report.run_view import load_run
from raylab.report.spec import Bars, Curve, Report, Versus
from raylab.report.style import FigureStyle, label
from raylab.report.uncertainty import FIGURE_RESAMPLES, curve_band, point_interval
from tests.raylab.report.test_report_units import write_run

SVG = "{http://www.w3.org/2000/svg}"
VALUES = (1.0, 2.0, 3.0, 6.0)
"""The four seeds' values at every point: std = sqrt(14/3), sem = std / 2."""
STD = statistics.stdev(VALUES)


def _run(tmp_path: Path, smoke: bool, name: str = "asr-20260101-120000") -> Path:
    """Two poisoning ratios x four seeds; each seed's values are VALUES[seed] (+ ratio) at every
    step, so every point's seeds are VALUES shifted."""
    trials = [
        {
            "params": {"poison_ratio": ratio, "seed": seed},
            "rows": [
                {"eval/asr": value + ratio, "eval/clean_acc": 0.9 - ratio, "train/step": step} for step in (1, 2, 3)
            ],
        }
        for ratio in (0.1, 0.2)
        for seed, value in enumerate(VALUES)
    ]
    return write_run(
        tmp_path,
        {"poison_ratio": [0.1, 0.2], "seed": [0, 1, 2, 3]},
        trials,
        name=name,
        metric="eval/asr",
        smoke=smoke,
    )


SPEC = Report(
    items=(
        Curve("eval/asr", x="train/step", by=()),
        Versus("poison_ratio", "eval/asr"),
        Bars(("eval/asr", "eval/clean_acc"), by=()),
    ),
    labels={
        "eval/asr": "Attack success rate",
        "eval/clean_acc": "Clean accuracy",
        "poison_ratio": "Poisoning ratio",
        "train/step": "SGD step",
    },
)


def _texts(svg: Path) -> list[str]:
    """Every text element's string in an SVG (parsed as XML)."""
    root = ET.parse(svg).getroot()
    assert root.tag == f"{SVG}svg"
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def _pdf_objects(pdf: Path) -> int:
    """Parse a PDF's cross-reference table: every in-use entry's offset starts its object there."""
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    start = int(re.search(rb"startxref\s+(\d+)\s+%%EOF\s*$", data).group(1))
    assert data[start : start + 4] == b"xref"
    lines = data[start:].split(b"\n")
    first, count = map(int, lines[1].split())
    objects = 0
    for number, entry in enumerate(lines[2 : 2 + count], start=first):
        offset, _, kind = entry.split()
        if kind == b"n":
            assert data[int(offset) :].startswith(b"%d 0 obj" % number)
            objects += 1
    return objects


def _build(tmp_path: Path, smoke: bool, **style) -> tuple[dict, Path]:
    run = load_run(str(_run(tmp_path, smoke, name=f"asr-{'smoke' if smoke else 'full'}-20260101-120000")))
    out = tmp_path / ("smoke" if smoke else "full")
    content = report.build(run, SPEC, out, style=report.figure_style(run, SPEC, **style))
    return content, out


def test_svg_and_pdf_beside_png_parse_and_only_a_smoke_run_is_watermarked(tmp_path):
    smoke, smoke_out = _build(tmp_path, True, formats=("svg", "pdf"))
    full, full_out = _build(tmp_path, False, formats=("svg", "pdf"))
    for content, out, marked in ((smoke, smoke_out, True), (full, full_out, False)):
        drawn = [f for f in content["figures"] if f["file"]]
        assert len(drawn) == 3 and content["figure_style"]["smoke"] is marked
        sweep = [content["sweep"]["parallel"]["file"]]  # (no learning curves: no time_total_s here)
        for png in [f["file"] for f in drawn] + sweep:
            stem = out / png[: -len(".png")]
            assert (out / png).read_bytes().startswith(b"\x89PNG")
            texts = _texts(stem.with_suffix(".svg"))
            assert ("SMOKE" in texts) is marked, (png, marked)
            assert _pdf_objects(stem.with_suffix(".pdf")) > 5
        assert [f["files"] for f in drawn][0] == [
            drawn[0]["file"],
            *(drawn[0]["file"][:-3] + e for e in ("svg", "pdf")),
        ]


def test_labels_replace_metric_keys_on_axes_legends_and_titles(tmp_path):
    content, out = _build(tmp_path, False, formats=("svg",))
    texts = " | ".join(t for f in content["figures"] for t in _texts(out / f["file"].replace(".png", ".svg")))
    for shown in ("Attack success rate", "Clean accuracy", "Poisoning ratio", "SGD step"):
        assert shown in texts
    assert "eval/asr" not in texts and "eval/clean_acc" not in texts and "poison_ratio" not in texts
    assert [f["title"] for f in content["figures"]][:2] == [
        "Attack success rate vs SGD step",
        "Attack success rate vs Poisoning ratio",
    ]
    parallel = " | ".join(_texts(out / content["sweep"]["parallel"]["file"].replace(".png", ".svg")))
    assert "Attack success rate (max)" in parallel and "eval/asr" not in parallel
    # a pattern labels the names it matches; a name without a label is shown as it is
    assert label({"probe/*/mae": "Test MAE"}, "probe/caco2/mae") == "Test MAE"
    assert label({"probe/{task}/*": "Test metric"}, "probe/x/auroc") == "Test metric"
    assert label({"eval/asr": "ASR"}, "eval/ra") == "eval/ra"


def _drawn(monkeypatch, tmp_path: Path, item, uncertainty: str):
    """The axes of ``item`` as drawn with ``uncertainty`` (captured before it is saved)."""
    seen = []
    original = plots.save_figure

    def capture(fig, path, dpi=80, style=None):
        seen.append(fig.axes[0])
        return original(fig, path, dpi=dpi, style=style)

    monkeypatch.setattr(plots, "save_figure", capture)
    run = load_run(str(_run(tmp_path / uncertainty / item.kind, False)))
    assert plots.draw(item, run, None, tmp_path / "f.png", style=FigureStyle(uncertainty=uncertainty))[0]
    return seen[0]


def _errorbar_spans(container) -> list[tuple[float, float]]:
    """(low, high) of each error bar of a matplotlib errorbar or bar container."""
    bars = container.errorbar if hasattr(container, "errorbar") else container
    return [(float(s[0][1]), float(s[1][1])) for s in bars.lines[2][0].get_segments()]


def test_the_uncertainty_option_sets_the_drawn_band_and_error_bars(monkeypatch, tmp_path):
    n, mean = len(VALUES), statistics.fmean(VALUES)
    t_half = stats.t.ppf(0.975, n - 1) * STD / math.sqrt(n)
    boot = strata_interval([np.asarray(VALUES)], resamples=FIGURE_RESAMPLES)
    expected_half = {"std": STD, "sem": STD / math.sqrt(n), "ci95": t_half}
    for kind in ("std", "sem", "ci95"):
        # Curve: the band at every step is the mean +- the half-width of the option (t interval for ci95)
        ax = _drawn(monkeypatch, tmp_path, Curve("eval/asr", x="train/step", by=()), kind)
        heights = [np.ptp(p.vertices[:, 1]) for c in ax.collections for p in c.get_paths()]
        assert heights and all(h == pytest.approx(2 * expected_half[kind]) for h in heights), kind
        # Versus: one error bar per ratio; the bootstrap interval for ci95 (asymmetric)
        ax = _drawn(monkeypatch, tmp_path, Versus("poison_ratio", "eval/asr"), kind)
        spans = _errorbar_spans(ax.containers[0])
        assert len(spans) == 2
        for (low, high), ratio in zip(spans, (0.1, 0.2)):
            if kind == "ci95":
                assert (low, high) == pytest.approx((boot[0] + ratio, boot[1] + ratio))
            else:
                assert (low, high) == pytest.approx(
                    (mean + ratio - expected_half[kind], mean + ratio + expected_half[kind])
                )
        # Bars: the same rule per bar (the first panel: poison_ratio 0.1, values + 0.1)
        ax = _drawn(monkeypatch, tmp_path, Bars("eval/asr", by=()), kind)
        ((low, high),) = _errorbar_spans(ax.containers[0])
        wanted = boot if kind == "ci95" else (mean - expected_half[kind], mean + expected_half[kind])
        assert (low - 0.1, high - 0.1) == pytest.approx(wanted)
    assert STD / math.sqrt(n) < t_half < 2 * STD  # sem < t interval (3 d.f.) < two std: the widths differ


def test_band_functions_on_known_values():
    stacked = np.array([[1.0, 5.0, np.nan], [2.0, 5.0, 7.0], [3.0, 5.0, np.nan], [6.0, 5.0, np.nan]])
    mean, low, high = curve_band(stacked, "sem")
    assert mean[:2] == pytest.approx([3.0, 5.0]) and (high - mean)[0] == pytest.approx(STD / 2)
    assert (high - low)[1] == 0 and np.isnan(low[2]) and mean[2] == 7.0  # one trial: no band
    assert point_interval([4.0], "std") == pytest.approx((math.nan, math.nan), nan_ok=True)
    assert point_interval(VALUES, "sem") == pytest.approx((3.0 - STD / 2, 3.0 + STD / 2))


def test_the_command_line_picks_formats_and_uncertainty_and_refuses_bad_ones(tmp_path, capsys):
    run = _run(tmp_path, smoke=True)
    assert report.main([str(run), "--figure-formats", "svg,pdf", "--uncertainty", "sem"]) == 0
    content = json.loads((run / "report" / "report.json").read_text())
    assert content["figure_style"] == {"formats": ["png", "svg", "pdf"], "uncertainty": "sem", "smoke": True}
    assert all((run / "report" / f).is_file() for fig in content["figures"] for f in fig["files"])
    html = (run / "report" / "report.html").read_text()
    assert "mean ± standard error over seeds" in html and "(also .svg, .pdf)" in html
    assert report.main([str(run)]) == 0  # a report without SVGs removes the earlier ones
    assert not list((run / "report" / "figures").glob("*.svg"))
    capsys.readouterr()
    for argv, words in (
        (["--figure-formats", "svg,bmp"], "--figure-formats svg,bmp: expected a comma list of png, svg, pdf"),
        (["--uncertainty", "iqr"], "argument --uncertainty: invalid choice: 'iqr'"),
    ):
        assert report.main([str(run), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, err
    with pytest.raises(ValueError, match="uncertainty must be one of std, sem, ci95"):
        Report(uncertainty="iqr")


def test_the_reports_declared_uncertainty_is_the_default_and_the_command_line_overrides_it(tmp_path):
    run = load_run(str(_run(tmp_path, smoke=False)))
    declared = Report(items=SPEC.items, uncertainty="ci95")
    assert report.figure_style(run, declared).uncertainty == "ci95"
    assert report.figure_style(run, declared, uncertainty="std").uncertainty == "std"
    assert report.figure_style(run, Report()).uncertainty == "std"


def test_every_workloads_figure_names_and_declared_metrics_have_labels():
    """Every name a workload's figures show (metrics, x counters and swept keys) and every metric
    its registry entry declares reads as a label, not the key."""
    checked = 0
    for name, workload in workloads.registry().items():
        spec = workload.report_spec()
        if spec is None:
            continue
        names = [*workload.metrics, *spec.metric_names()]
        for item in spec.figures():
            names += [getattr(item, "x", ""), *(item.by or ())]
        missing = [n for n in dict.fromkeys(names) if n and label(spec.labels, n) == n]
        assert not missing, f"{name}: no label for {missing}"
        checked += 1
    assert checked >= 6  # the five paper workloads (and their second reports) and toy


def test_the_watermark_alone_is_not_drawn_data(tmp_path):
    """The report checks count saturated pixels as drawn data (``conftest.colored_pixels``): the
    pale watermark of an empty smoke figure must not pass for data."""
    import matplotlib.pyplot as plt

    from tests.raylab.report.conftest import colored_pixels

    pngs = []
    for smoke in (False, True):
        fig, ax = plt.subplots(figsize=(5, 3.4))
        ax.grid(alpha=0.3)
        pngs += plots.save_figure(fig, tmp_path / f"empty_{smoke}.png", style=FigureStyle(smoke=smoke))
    plain, marked = (np.asarray(Image.open(p).convert("L"), dtype=int) for p in pngs)
    assert (plain - marked > 20).sum() > 2000  # the watermark is drawn ...
    assert colored_pixels(pngs[1]) == 0  # ... too pale to count as data
