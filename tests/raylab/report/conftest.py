"""Checks of a written report against the run folder's own files, computed here independently.

The oracle below reads ``params.json`` and ``result.json`` with plain ``json`` and recomputes
every table cell with ``statistics``; it shares no code with the ``raylab.report`` package.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from raylab.run_folder import RunFolder

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_trials(run: Path) -> list[dict]:
    """Every trial folder that has at least one reported row."""
    trials = []
    for folder in RunFolder(run).trials():
        rows = folder.rows()
        if rows:
            params = folder.params()
            if isinstance(params.get("variant"), dict):  # a search.variant group sets these fields
                params = {**params, **params["variant"]}
            trials.append({"name": folder.name, "params": params, "rows": rows})
    return trials


def oracle_value(trial: dict, pattern: str, at: str):
    """The trial's value of a metric pattern at 'last'/'max'/'min'."""
    name = re.sub(r"\{(\w+)\}", lambda m: str(trial["params"][m.group(1)]), pattern)
    if "*" in name:
        keys = sorted({k for row in trial["rows"] for k in row if fnmatch.fnmatchcase(k, name)})
        if not keys:
            return None
        name = keys[0]
    values = [
        row[name]
        for row in trial["rows"]
        if isinstance(row.get(name), (int, float, list)) and not isinstance(row.get(name), bool)
    ]
    if not values:
        return None
    if at == "last":
        return values[-1]
    pick = max if at == "max" else min
    if isinstance(values[-1], list):
        return [pick(v[i] for v in values) for i in range(len(values[-1]))]
    return pick(values)


def oracle_stats(values: list):
    if isinstance(values[0], list):
        columns = list(zip(*values))
        return (
            [statistics.fmean(c) for c in columns],
            [statistics.stdev(c) if len(c) > 1 else math.nan for c in columns],
        )
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def close(a, b) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def is_seed(key: str, seeds) -> bool:
    return key in seeds if seeds is not None else key == "seed" or key.endswith("_seed")


def searched_fields(search: dict) -> list[str]:
    """The config fields a saved search sets: its keys, with ``variant`` replaced by the fields
    its groups set (the report shows those, once each)."""
    fields: dict[str, None] = {}
    for key, spec in search.items():
        if key == "variant":
            groups = spec.get("grid", []) if isinstance(spec, dict) else spec
            fields.update(dict.fromkeys(k for group in groups for k in group))
        else:
            fields[key] = None
    return list(fields)


def check_tables(run: Path, report: dict, seeds=None) -> int:
    """Every table cell equals the oracle's aggregate; every oracle group has its cell."""
    experiment = yaml.safe_load((run / "experiment.yaml").read_text())
    trials = read_trials(run)
    conditions = [k for k in searched_fields(experiment.get("search", {})) if not is_seed(k, seeds)]
    html = (run / "report" / "report.html").read_text() if (run / "report" / "report.html").exists() else ""
    checked = 0
    for table in report["tables"]:
        metric_cells = 0
        for block in table["blocks"]:
            for row in block["rows"]:
                for j, cell in enumerate(row["cells"]):
                    wanted = {**block["block_values"], **row["values"], **block["column_values"][j]}
                    members = [t for t in trials if all(t["params"].get(k) == v for k, v in wanted.items())]
                    if table["rows_key"]:  # a pivot: row key, column keys, leftover keys
                        assert set(row["values"]) == {table["rows_key"]}
                        assert set(block["column_values"][j]) <= set(table["columns_keys"])
                        assert set(block["block_values"]) <= set(conditions)
                    else:  # a row is one group: a value of every condition key
                        assert set(row["values"]) == set(conditions), (table["name"], row)
                    metric = table["metrics"][0] if table["rows_key"] else table["metrics"][j]
                    pairs = [(oracle_value(t, metric, table["at"]), t["name"]) for t in members]
                    pairs = [(v, n) for v, n in pairs if v is not None]
                    if not pairs:
                        assert cell is None, (table["name"], row["label"], cell)
                        continue
                    mean, std = oracle_stats([v for v, _ in pairs])
                    assert cell is not None, (table["name"], row["label"], metric)
                    assert cell["n"] == len(pairs) and sorted(cell["trials"]) == sorted(n for _, n in pairs)
                    assert close(cell["mean"], mean) and close(cell["std"], std), (table["name"], cell, mean, std)
                    if html and not isinstance(mean, list):
                        assert f"{mean:.4g}" in html, (table["name"], mean)
                    metric_cells += 1
        # completeness: every group of trials with a value has a cell
        keys = [table["rows_key"], *table["columns_keys"]] if table["rows_key"] else conditions
        leftover = [k for k in conditions if k not in keys] if table["rows_key"] else []
        expected = set()
        for t in trials:
            for j, metric in enumerate(table["metrics"]):
                if oracle_value(t, metric, table["at"]) is not None:
                    expected.add((tuple(json.dumps(t["params"].get(k)) for k in [*keys, *leftover]), j))
        assert metric_cells == len(expected), (table["name"], metric_cells, len(expected))
        checked += metric_cells
    return checked


def colored_pixels(path: Path) -> int:
    """Pixels of a saturated colour: data (lines, bars, points), not the white/grey/black frame."""
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    spread = image.max(axis=2) - image.min(axis=2)
    return int((spread > 60).sum())


def missing(value) -> bool:
    """No value to draw: not reported, or reported as NaN (a withheld measurement, a backdoor's ASR at chance)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def check_figures(run: Path, out: Path, report: dict) -> int:
    """Every drawn figure is a valid, non-blank PNG; an undrawn one has no data in any trial."""
    trials = read_trials(run)
    drawn = 0
    for figure in report["figures"]:
        if not figure["file"]:
            assert figure["note"], figure
            assert all(missing(oracle_value(t, m, "last")) for t in trials for m in figure["y"]), (
                f"figure {figure['name']} not drawn although its metrics were reported: {figure['note']}"
            )
            continue
        path = out / figure["file"]
        assert path.read_bytes()[:8] == PNG_SIGNATURE, path
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.width >= 200 and image.height >= 150, image.size
        assert colored_pixels(path) > 100, f"{path.name} has no drawn data"
        drawn += 1
    return drawn


@pytest.fixture
def report_checks():
    """The checks, as a namespace: ``report_checks.tables(run, report)`` etc."""

    class Checks:
        tables = staticmethod(check_tables)
        figures = staticmethod(check_figures)
        trials = staticmethod(read_trials)
        value = staticmethod(oracle_value)
        colored = staticmethod(colored_pixels)

    return Checks
