"""From trials to numbers: a trial's value of a metric, series and panels, seed aggregates, tables.

Every aggregate is the mean and the sample standard deviation (ddof=1; undefined, NaN, for a
single trial) over the trials of one group, together with their count and names.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from raylab.report.run_view import Run, Trial
from raylab.report.spec import Table, is_seed_key
from raylab.report.values import format_value, is_number, is_vector

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


# ------------------------------------------------------------------------ one trial


def resolve_metric(pattern: str, trial: Trial) -> str | None:
    """The metric name ``pattern`` means for ``trial`` (``{key}`` filled, ``*`` matched)."""
    missing = [k for k in _PLACEHOLDER.findall(pattern) if k not in trial.config]
    if missing:
        return None
    name = _PLACEHOLDER.sub(lambda m: str(trial.config[m.group(1)]), pattern)
    if any(c in name for c in "*?["):
        matches = sorted(m for m in trial.reported() if fnmatch.fnmatchcase(m, name))
        return matches[0] if matches else None
    return name


def values_of(trial: Trial, metric: str) -> list[Any]:
    """Every reported value of ``metric`` (numbers or vectors), oldest first."""
    return [row[metric] for row in trial.rows if metric in row and (is_number(row[metric]) or is_vector(row[metric]))]


def step_before(trial: Trial, metric: str, reaches: float, step: str = "train/step") -> float | None:
    """The ``step`` of the trial's last report before ``metric`` first reaches ``reaches`` (a
    missing or NaN value counts as below); its last report's when it never does; None when its
    first report already has."""
    last = None
    for row in trial.rows:
        value = row.get(metric)
        if is_number(value) and value >= reaches:
            return last
        if is_number(row.get(step)):
            last = row[step]
    return last


def value_at_step(trial: Trial, pattern: str, at_step: float, step: str = "train/step") -> Any:
    """The trial's value of a metric at its last report with ``step`` at most ``at_step``; None
    when it has none."""
    metric = resolve_metric(pattern, trial)
    found = None
    for row in trial.rows:
        if is_number(row.get(step)) and row[step] > at_step:
            break
        if metric and metric in row and is_number(row.get(step)) and (is_number(row[metric]) or is_vector(row[metric])):
            found = row[metric]
    return found


def value_at(trial: Trial, pattern: str, at: str = "last") -> Any:
    """The trial's value of a metric: its last or first report, the max/min over reports, or
    ``last_half``: the mean of the last ``ceil(n/2)`` of its ``n`` reports (a time average that
    a single noisy report does not decide); or None."""
    metric = resolve_metric(pattern, trial)
    values = values_of(trial, metric) if metric else []
    if not values:
        return None
    if at == "last":
        return values[-1]
    if at == "first":
        return values[0]
    shape = len(values[-1]) if isinstance(values[-1], list) else 0
    values = [v for v in values if (len(v) if isinstance(v, list) else 0) == shape]
    array = np.asarray(values, dtype=float)
    with np.errstate(all="ignore"):
        if at == "last_half":
            picked = np.nanmean(array[len(array) // 2 :], axis=0)
        else:
            picked = np.nanmax(array, axis=0) if at == "max" else np.nanmin(array, axis=0)
    return picked.tolist()


def series_xy(trial: Trial, x: str, y_pattern: str, skip_repeats: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The trial's (x, y) pairs for a curve, from the rows that hold both as numbers.

    With ``skip_repeats``, a row whose y equals the previous row's y is left out (a value
    carried over from an earlier report, not measured again).
    """
    y = resolve_metric(y_pattern, trial)
    pairs, previous = [], None
    for row in trial.rows:
        if not (y and is_number(row.get(x)) and is_number(row.get(y))):
            continue
        if not (skip_repeats and row[y] == previous):
            pairs.append((row[x], row[y]))
        previous = row[y]
    if not pairs:
        return np.empty(0), np.empty(0)
    xs, ys = np.asarray(pairs, dtype=float).T
    order = np.argsort(xs, kind="stable")
    return xs[order], ys[order]


# ------------------------------------------------------------------------ groups


def conditions(run: Run, seeds: tuple[str, ...] | None) -> list[str]:
    """The swept keys that are conditions (not seeds): what groups trials."""
    return [k for k in run.swept if not is_seed_key(k, seeds)]


def split_keys(run: Run, seeds, by, exclude: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """``(series keys, panel keys)`` for an item's ``by`` (None: every condition)."""
    conds = [k for k in conditions(run, seeds) if k not in exclude]
    series = conds if by is None else [k for k in by if k in conds]
    return series, [k for k in conds if k not in series]


def key_of(trial: Trial, keys: list[str]) -> tuple:
    return tuple(_hashable(trial.config.get(k)) for k in keys)


def label_of(keys: list[str], values: tuple, name: Callable[[str], str] = str) -> str:
    """``loss=mse, lr=0.001`` (or ``all trials`` when there are no keys); each key shown as
    ``name(key)`` (a workload's label: ``Learning rate=0.001``).

    A key a trial does not set (``beta`` of an mse trial, where only soft_linf variants set it)
    is left out rather than shown as ``beta=None``.
    """
    if not keys:
        return "all trials"
    return (
        ", ".join(f"{name(k)}={format_value(_unhash(v))}" for k, v in zip(keys, values) if _unhash(v) is not None)
        or "all trials"
    )


def group(run: Run, trials: list[Trial], keys: list[str]) -> dict[tuple, list[Trial]]:
    """Trials by their values of ``keys``, in the search's order of those values."""
    groups: dict[tuple, list[Trial]] = {}
    for trial in trials:
        groups.setdefault(key_of(trial, keys), []).append(trial)
    return dict(sorted(groups.items(), key=lambda kv: _sort_key(run, keys, kv[0])))


def _sort_key(run: Run, keys: list[str], values: tuple) -> tuple:
    search = run.experiment.get("search") or {}
    out = []
    for key, value in zip(keys, values):
        grid = [_hashable(v) for v in (search.get(key) or {}).get("grid", [])]
        if value in grid:
            out.append((0, grid.index(value), ""))
        elif is_number(value):
            out.append((1, float(value), ""))
        else:
            out.append((2, 0.0, str(value)))
    return tuple(out)


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _unhash(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


# ------------------------------------------------------------------------ aggregates


@dataclass
class Agg:
    """Mean and sample std (NaN for one value) over ``n`` trials; vectors elementwise."""

    mean: float | list[float]
    std: float | list[float]
    n: int
    trials: list[str] = field(default_factory=list)
    values: list = field(default_factory=list, repr=False)
    """The trials' values (for the interval behind a "best" mark; not in report.json)."""

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "n": self.n, "trials": self.trials}


def aggregate(values: list[Any], trials: list[str]) -> Agg | None:
    """Aggregate trial values (all scalars, or vectors of one length; others dropped)."""
    pairs = [(v, t) for v, t in zip(values, trials) if v is not None]
    if not pairs:
        return None
    lengths = [len(v) if isinstance(v, list) else 0 for v, _ in pairs]
    common = max(set(lengths), key=lengths.count)
    pairs = [(v, t) for (v, t), n in zip(pairs, lengths) if n == common]
    array = np.asarray([v for v, _ in pairs], dtype=float)
    mean = array.mean(axis=0)
    std = array.std(axis=0, ddof=1) if len(array) > 1 else np.full_like(mean, np.nan)
    return Agg(mean=mean.tolist(), std=std.tolist(), n=len(array), trials=[t for _, t in pairs], values=array.tolist())


# ------------------------------------------------------------------------ tables


@dataclass
class TableBlock:
    """One rendered table: headers, and rows of (label, cells); a cell is an Agg or None."""

    title: str
    row_header: str
    columns: list[str]
    rows: list[tuple[str, dict[str, Any], list[Agg | None]]]
    column_values: list[dict[str, Any]] = field(default_factory=list)
    """The swept values each column stands for (pivot), or {} per metric column."""
    block_values: dict[str, Any] = field(default_factory=dict)
    """The leftover swept values this block of a pivot is for."""
    best: list[tuple[int, int]] = field(default_factory=list)
    """(row, column) of the cells marked best."""
    best_notes: list[str] = field(default_factory=list)
    """Why a row (pivot) or column has no best marked although it has a top mean."""
    metrics: list[list[str]] = field(default_factory=list)
    """The resolved metric names behind each cell (same shape as the cells)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "row_header": self.row_header,
            "columns": self.columns,
            "column_values": self.column_values,
            "block_values": self.block_values,
            "rows": [
                {
                    "label": label,
                    "values": values,
                    "cells": [c.to_json() if c else None for c in cells],
                    "metrics": self.metrics[i] if i < len(self.metrics) else [],
                }
                for i, (label, values, cells) in enumerate(self.rows)
            ],
            "best": [list(b) for b in self.best],
            "best_notes": self.best_notes,
        }


def table_blocks(run: Run, table: Table, seeds) -> list[TableBlock]:
    """The table's blocks: one, or (pivot) one per combination of the leftover swept keys."""
    trials = [t for t in run.trials if t.rows]
    conds = conditions(run, seeds)
    if not table.rows:
        return [_group_rows_block(run, table, trials, conds)]
    column_keys = [k for k in table.columns if k in conds]
    leftover = [k for k in conds if k != table.rows and k not in column_keys]
    blocks = []
    for values, members in group(run, trials, leftover).items():
        title = label_of(leftover, values) if leftover else ""
        block = _pivot_block(run, table, members, column_keys, title)
        block.block_values = _values_dict(leftover, values)
        blocks.append(block)
    return blocks


def _cell(table: Table, members: list[Trial], metric: str) -> tuple[Agg | None, str]:
    values = [value_at(t, metric, table.at) for t in members]
    resolved = sorted({m for m in (resolve_metric(metric, t) for t in members) if m})
    return aggregate(values, [t.name for t in members]), ", ".join(resolved)


def _group_rows_block(run: Run, table: Table, trials: list[Trial], conds: list[str]) -> TableBlock:
    rows, names = [], []
    for values, members in group(run, trials, conds).items():
        cells = [_cell(table, members, m) for m in table.metrics]
        rows.append((label_of(conds, values), _values_dict(conds, values), [c for c, _ in cells]))
        names.append([n for _, n in cells])
    block = TableBlock(
        title="",
        row_header=", ".join(conds) or "trials",
        columns=list(table.metrics),
        rows=rows,
        metrics=names,
        column_values=[{} for _ in table.metrics],
    )
    if table.best:
        for j, metric in enumerate(table.metrics):
            direction = _direction(table, metric)
            best, note = _best_index([cells[j] for _, _, cells in rows], direction)
            if best is not None:
                block.best.append((best, j))
            elif note:
                block.best_notes.append(f"{metric}: {note}")
    return block


def _pivot_block(run, table: Table, trials: list[Trial], column_keys: list[str], title: str) -> TableBlock:
    metric = table.metrics[0]
    by_row = group(run, trials, [table.rows])
    by_column = group(run, trials, column_keys)
    columns = list(by_column)
    rows, names = [], []
    for row_value, row_members in by_row.items():
        cells = []
        for column in columns:
            members = [t for t in row_members if key_of(t, column_keys) == column]
            cells.append(_cell(table, members, metric) if members else (None, ""))
        row_label = "-" if _unhash(row_value[0]) is None else format_value(_unhash(row_value[0]))
        rows.append(
            (
                row_label,
                {table.rows: _unhash(row_value[0])},  # "-": a trial without the key
                [c for c, _ in cells],
            )
        )
        names.append([n for _, n in cells])
    block = TableBlock(
        title=title,
        row_header=table.rows,
        columns=[label_of(column_keys, c) if column_keys else metric for c in columns],
        rows=rows,
        metrics=names,
        column_values=[_values_dict(column_keys, c) for c in columns],
    )
    if table.best:
        for i, (_, _, cells) in enumerate(rows):
            resolved = next((n for n in names[i] if n), metric)
            best, note = _best_index(cells, _direction(table, resolved))
            if best is not None:
                block.best.append((i, best))
            elif note:
                block.best_notes.append(f"{rows[i][0]}: {note}")
    return block


def _values_dict(keys: list[str], values: tuple) -> dict[str, Any]:
    return {k: _unhash(v) for k, v in zip(keys, values)}


def _direction(table: Table, metric: str) -> str:
    if any(fnmatch.fnmatchcase(metric, p) for p in table.lower_is_better):
        return "min"
    return table.best


def _best_index(cells: list[Agg | None], direction: str) -> tuple[int | None, str]:
    """The cell to mark best, or None and why not. A cell is best only when the 95% bootstrap
    interval of its mean minus every other cell's mean (seeds resampled in each cell) lies
    wholly on the better side of 0: a top mean inside the interval is not marked."""
    from raylab.report.estimators import difference_interval

    scored = [(c.mean, i) for i, c in enumerate(cells) if c is not None and is_number(c.mean) and np.isfinite(c.mean)]
    if len(scored) < 2:
        return None, ""
    top = (max if direction == "max" else min)(value for value, _ in scored)
    winners = [i for value, i in scored if value == top]
    if len(winners) > 1:
        return None, ""  # a tie has no best
    best = cells[winners[0]]
    for _, i in scored:
        other = cells[i]
        if i == winners[0]:
            continue
        if min(best.n, other.n) < 2:
            return None, "no best marked: a cell with one seed has no interval"
        low, high = difference_interval(best.values, other.values)
        if (low <= 0) if direction == "max" else (high >= 0):
            return None, (
                "no best marked: the 95% interval of the top mean minus another's (seeds "
                "resampled independently) "
                f"includes 0 ([{format_value(low)}, {format_value(high)}])"
            )
    return winners[0], ""
