"""Every registered workload declares its figures and tables, and the declarations name real things."""

from __future__ import annotations

import dataclasses
import fnmatch
import re

import pytest

from raylab import workloads
from raylab.report.run_view import TUNE_COUNTERS
from raylab.report.spec import Bars, Curve, Report, Scatter, Table, Versus

NAMES = sorted(workloads.registry())


@pytest.mark.parametrize("name", NAMES)
def test_workload_declares_a_report_of_its_own_metrics_and_config_keys(name):
    workload = workloads.get(name)
    assert workload.figures, f"{name}: no figures= in its registry entry"
    spec = workload.report_spec()
    assert isinstance(spec, Report) and spec.figures() and spec.tables()
    reported = set(workload.metrics) | set(TUNE_COUNTERS)
    for metric in spec.metric_names():
        pattern = re.sub(r"\{\w+\}", "*", metric)
        assert any(fnmatch.fnmatchcase(m, pattern) for m in reported), f"{name}: {metric} is never reported"
    fields = {f.name for f in dataclasses.fields(workload.config_class())}
    for item in spec.items:
        keys = [*(getattr(item, "by", None) or ()), *([item.x] if isinstance(item, Versus) else [])]
        if isinstance(item, Table):
            keys += [k for k in (item.rows, *item.columns) if k]
        for key in keys:
            assert key in fields, f"{name}: {type(item).__name__} uses '{key}', not a config field"
        for placeholder in re.findall(r"\{(\w+)\}", " ".join(item.metric_names())):
            assert placeholder in fields, f"{name}: metric placeholder {{{placeholder}}} is not a config field"


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda: Curve(()), "needs at least one y metric"),
        (lambda: Versus("lr", "m", at="best"), "at must be one of"),
        (lambda: Table(("a", "b"), rows="task"), "a pivot (rows=...) shows one metric"),
        (lambda: Table("a", columns=("method",)), "columns=... needs rows=..."),
        (lambda: Table("a", best="high"), "best must be"),
        (lambda: Report(items=("train/loss",)), "not a figure or table"),
    ],
)
def test_bad_declarations_fail_when_written(bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        bad()


def test_strings_become_tuples_and_files_get_names():
    curve = Curve("train/loss", by="lr")
    assert curve.y == ("train/loss",) and curve.by == ("lr",)
    assert curve.file_stem(3) == "03_curve_train_loss" and curve.heading() == "train/loss vs training_iteration"
    assert Bars("acc", name="per_class").file_stem(1) == "per_class"
    assert Scatter("p", "m").plotted() == ["p", "m"]
