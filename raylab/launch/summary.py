"""The end-of-sweep table: one row per trial, printed and written as ``summary.csv``."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from raylab.run_folder import trial_status


def rows(
    result_grid,
    metric: str,
    mode: str,
    swept: list[str],
    ended: frozenset[str] = frozenset(),
    reported: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """One dict per trial: name, status, swept values, iterations, last and best metric.

    The status is ``raylab.run_folder.trial_status``'s: TERMINATED when the last result says
    ``done`` or the id is in ``ended`` (the trials whose loop returned: ``RunFolder.ended``).
    With ``reported`` (the workload's metric names) every reported metric gets its last value
    (``train/loss (last)``): ``summary.csv`` has them, the printed table only the sweep's metric
    (``format_table(..., metric)``)."""
    out = []
    for result in result_grid:
        metrics = result.metrics or {}
        history = result.metrics_dataframe
        values = (
            [v for v in history[metric].tolist() if _finite(v)] if history is not None and metric in history else []
        )
        best = (max if mode == "max" else min)(values) if values else None
        status = trial_status(
            bool(metrics), bool(metrics.get("done")), result.error is not None, metrics.get("trial_id") in ended
        )
        swept_values = {key: (result.config or {}).get(key) for key in swept}
        row = {
            "trial": metrics.get("trial_id") or _dirname(result.path),
            "status": status,
            **swept_values,
            "iterations": metrics.get("training_iteration"),
            f"{metric} (last)": metrics.get(metric),
            f"{metric} ({mode})": best,
        }
        for name in reported or ():
            if name != metric:
                row[f"{name} (last)"] = _last(history, name, metrics)
        out.append({**row, "failed by": error_kind(result.error), "path": _dirname(result.path)})
    if not any(row["failed by"] for row in out):  # the column only when a trial failed
        for row in out:
            del row["failed by"]
    return sorted(out, key=lambda row: row["trial"])


RECLAIM = "reclaim"
CODE = "code error"


def error_kind(error: BaseException | None) -> str | None:
    """Why a trial failed: ``RECLAIM`` when its node went away under it (a spot reclaim or
    another node loss: Ray's ``NodeDiedError``, or a ``RayActorError`` that Ray marks
    ``preempted`` or whose message says its node died), ``CODE`` for anything else (an exception
    of the trial's own code, Ray's ``RayTaskError``); None without an error. Tune counts both
    against ``failure.max_failures``; the summary tells them apart."""
    if error is None:
        return None
    from ray.exceptions import NodeDiedError, RayActorError

    seen, todo = set(), [error]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, NodeDiedError):
            return RECLAIM
        if isinstance(err, RayActorError):
            text = str(err).lower()
            if err.preempted or ("node" in text and any(w in text for w in ("died", "dead", "terminated", "preempt"))):
                return RECLAIM
        todo += [getattr(err, "cause", None), err.__cause__, err.__context__]
    return CODE


def _flat(values: dict[str, Any]) -> dict[str, Any]:
    """A variant group's fields as their own columns: ``{"variant": {"beta": 1}}`` becomes
    ``{"variant.beta": 1}``."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update({f"{key}.{field}": inner for field, inner in _flat(value).items()})
        else:
            out[key] = value
    return out


def _last(history, name: str, metrics: dict[str, Any]) -> Any:
    """The last value a trial reported for ``name`` (workloads report some metrics only at
    their own cadence, so the last row may lack it)."""
    if name in metrics:
        return metrics[name]
    if history is None or name not in history:
        return None
    values = history[name].dropna()
    return (
        values.iloc[-1].item()
        if len(values) and hasattr(values.iloc[-1], "item")
        else (values.iloc[-1] if len(values) else None)
    )


def to_csv(table: list[dict[str, Any]]) -> str:
    """The rows as CSV text with a header (every row's columns, in first-seen order); a variant
    group's fields get one column each (``variant.beta``)."""
    if not table:
        return ""
    table = [_flat(row) for row in table]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(dict.fromkeys(k for row in table for k in row)))
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def format_table(table: list[dict[str, Any]], metric: str | None = None) -> str:
    """The rows as an aligned plain-text table; with ``metric``, of the reported metrics only
    that one's columns (the others are in ``summary.csv``)."""
    if not table:
        return "(no trials)"
    headers = [
        h for h in table[0] if h != "path" and not (metric and h.endswith(" (last)") and h != f"{metric} (last)")
    ]
    cells = [[_cell(row[h]) for h in headers] for row in table]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])


def _dirname(path: str | None) -> str:
    return (path or "").rstrip("/").rsplit("/", 1)[-1]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):  # a variant group
        return " ".join(f"{k}={_cell(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def best_trial(result_grid, table: list[dict[str, Any]], metric: str, mode: str, run) -> dict[str, Any] | None:
    """The sweep's best trial (``best.yaml``, ``raylab.run_folder.BEST_FILE``): the trial whose
    best reported ``metric`` is best by ``mode`` (the table's ``metric (mode)`` column, finite
    values only), with its config and its checkpoint: the kept checkpoint whose metrics are best
    by ``metric``, else its latest. ``run`` is the ``RunFolder``; None when no trial reported a
    finite ``metric``."""
    column = f"{metric} ({mode})"
    reported = [row for row in table if _finite(row.get(column))]
    if not reported:
        return None
    row = (max if mode == "max" else min)(reported, key=lambda r: r[column])
    result = next((r for r in result_grid if _dirname(r.path) == row["path"]), None)
    checkpoint = _best_checkpoint(result, metric, mode) if result is not None else None
    trial = run.trial(row["path"])
    return {
        "trial": row["trial"],
        "metric": metric,
        "mode": mode,
        "value": row[column],
        "last": row.get(f"{metric} (last)"),
        "status": row["status"],
        "iterations": row.get("iterations"),
        "config": dict(result.config or {}) if result is not None else {},
        "checkpoint": trial.join(_dirname(checkpoint.path)) if checkpoint is not None else None,
        "folder": trial.location,
    }


def _best_checkpoint(result, metric: str, mode: str):
    """The kept checkpoint whose reported ``metric`` is best (``Result.best_checkpoints`` pairs
    each with its metrics), else the trial's latest (``Result.checkpoint``), else None."""
    scored = [(c, m.get(metric)) for c, m in (result.best_checkpoints or []) if _finite((m or {}).get(metric))]
    if scored:
        return (max if mode == "max" else min)(scored, key=lambda pair: pair[1])[0]
    return result.checkpoint


def best_text(best: dict[str, Any] | None, swept: list[str], where: str = "") -> str:
    """The best trial in three lines (the end of a sweep's output), or why there is none."""
    if best is None:
        return "best trial: none (no trial reported a finite value of the metric)"
    config = best.get("config") or {}
    shown = " ".join(f"{key}={_cell(config.get(key))}" for key in swept) or "(nothing swept)"
    lines = [
        f"best trial: {best['trial']}  {best['metric']} ({best['mode']}) = {_cell(best['value'])}",
        f"  config: {shown}",
        f"  checkpoint: {best.get('checkpoint') or '(none kept)'}",
    ]
    if where:
        lines.append(f"  saved in: {where}")
    return "\n".join(lines)
