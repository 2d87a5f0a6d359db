"""A large multi-objective sweep's report: the parallel coordinates stay readable (the best in
colour, the rest one grey layer) and the Pareto front of its two objectives is listed."""

from __future__ import annotations

import csv
import math
import xml.etree.ElementTree as ET

import numpy as np

from raylab import report
from raylab.report.run_view import load_run
from raylab.report.spec import Report
from raylab.report.sweep_view import PARALLEL_TOP
from tests.raylab.report.test_report_units import write_run

SVG = "{http://www.w3.org/2000/svg}"


def test_a_large_two_objective_sweep_shows_its_best_in_colour_and_lists_its_front(tmp_path):
    rng = np.random.default_rng(0)
    lrs = 10 ** rng.uniform(-4, -1, 300)
    # score peaks at lr 1e-2; clean falls with lr: the front trades them off for lr above 1e-2
    trials = [
        {
            "params": {"lr": float(lr)},
            "rows": [{"score": -((math.log10(lr) + 2) ** 2), "clean": -float(lr), "train/step": 1}],
        }
        for lr in lrs
    ]
    run_path = write_run(
        tmp_path,
        {"lr": [float(lr) for lr in lrs]},
        trials,
        search_alg={"type": "optuna", "objectives": {"clean": "max"}},
    )
    run = load_run(str(run_path))
    out = tmp_path / "report"
    content = report.build(run, Report(items=()), out, style=report.figure_style(run, Report(), formats=("png", "svg")))

    svg = out / content["sweep"]["parallel"]["file"].replace(".png", ".svg")
    texts = ["".join(t.itertext()) for t in ET.parse(svg).getroot().iter(f"{SVG}text")]
    assert any(f"the best {PARALLEL_TOP} in colour, the other {300 - PARALLEL_TOP} in grey" in t for t in texts)

    (note,) = [n for n in content["notes"] if n.startswith("Pareto front")]
    with open(out / "tables" / "pareto_front.csv") as f:
        front = list(csv.DictReader(f))
    # the front by its definition, directly: no other trial at least as good on both objectives
    points = [(-((math.log10(lr) + 2) ** 2), -lr) for lr in lrs]
    expected = {i for i, p in enumerate(points) if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points)}
    assert {int(row["trial"].split("_")[1]) for row in front} == expected
    assert f"{len(expected)} of 300 trials" in note
