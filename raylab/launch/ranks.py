"""Metrics of one report from every Ray Train worker, reduced to the trial's one row.

Each worker reports its own numbers (its shard's loss, its images per second); the trial's row
holds their reduction: the mean by default, so ``train/loss`` is the loss over the global
batch when shards are equal. A loop declares another reduction per metric with
``session.report(..., reduce={"train/images_per_s": "sum"})``. Runs on the Ray Train
controller (``raylab.launch.train_path.ForwardToTrial``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from raylab.session import REDUCE_KEY


def reduce_across_ranks(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One row from the rows of all ranks (rank 0 first).

    For a metric present as a number on every rank: ``mean`` (default) ``= sum_r x_r / R``,
    or the declared ``sum``, ``max`` or ``min`` over ranks; equal-length lists of numbers
    reduce element by element. Anything else (strings, node ids, a metric only some ranks
    report) is rank 0's value, or the first rank's that has it.
    """
    declared: dict[str, str] = {}
    for row in rows:
        declared.update(row.get(REDUCE_KEY) or {})
    out: dict[str, Any] = {}
    keys = [k for row in rows for k in row if k != REDUCE_KEY]
    for key in dict.fromkeys(keys):
        values = [row[key] for row in rows if key in row]
        how = declared.get(key, "mean")
        if len(values) == len(rows) and all(_is_number(v) for v in values):
            out[key] = _reduce(values, how)
        elif (
            len(values) == len(rows) and all(_is_number_list(v) for v in values) and len({len(v) for v in values}) == 1
        ):
            out[key] = [_reduce(list(column), how) for column in zip(*values)]
        else:
            out[key] = values[0]
    return out


def _reduce(values: list[float], how: str) -> float:
    if how == "sum":
        return sum(values)
    if how == "max":
        return max(values)
    if how == "min":
        return min(values)
    total = math.fsum(values) / len(values)
    return int(total) if all(isinstance(v, int) for v in values) and total == int(total) else total


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_number_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_number(v) for v in value)
