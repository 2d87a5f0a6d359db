"""The Pareto front of a multi-objective sweep (``search_alg.objectives``): the trials no other
trial beats on every objective at once."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Sequence


def pareto_front(points: Sequence[Sequence[float]], modes: Sequence[str]) -> list[int]:
    """The indices of the non-dominated points, in input order.

    With each objective signed to be maximized (``s_k = +1`` for max, ``-1`` for min), point
    ``a`` dominates ``b`` when ``s_k a_k >= s_k b_k`` for every objective ``k`` and
    ``s_k a_k > s_k b_k`` for at least one; the front is every point no other point dominates.
    A point with a non-finite value is left out. O(n^2) in the number of points.
    """
    signs = [1.0 if mode == "max" else -1.0 for mode in modes]
    signed = [
        tuple(s * v for s, v in zip(signs, point)) if all(math.isfinite(v) for v in point) else None for point in points
    ]

    def dominates(a: tuple, b: tuple) -> bool:
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return [
        i
        for i, a in enumerate(signed)
        if a is not None and not any(b is not None and dominates(b, a) for j, b in enumerate(signed) if j != i)
    ]


def objectives(experiment: dict[str, Any]) -> list[tuple[str, str]]:
    """A saved experiment's objectives with their modes: its metric, then
    ``search_alg.objectives``; [] when it has no further objective."""
    further = (experiment.get("search_alg") or {}).get("objectives") or {}
    if not further or not experiment.get("metric"):
        return []
    return [(experiment["metric"], experiment.get("mode", "max")), *further.items()]


def last_values(rows: list[dict[str, Any]], metrics: list[str]) -> list[float]:
    """Each metric's value at the trial's last report that carries it (NaN when none does)."""
    out = []
    for metric in metrics:
        values = [row[metric] for row in rows if isinstance(row.get(metric), (int, float))]
        out.append(float(values[-1]) if values else math.nan)
    return out


def front_note(run, out_dir: Path) -> str:
    """A report note listing the sweep's Pareto front over its objectives (trial, values, swept
    values), with the front written to ``tables/pareto_front.csv``; "" for a single objective."""
    pairs = objectives(run.experiment)
    if not pairs:
        return ""
    metrics, modes = [m for m, _ in pairs], [mode for _, mode in pairs]
    trials = [t for t in run.trials if t.rows]
    points = [last_values(t.rows, metrics) for t in trials]
    front = sorted(pareto_front(points, modes), key=lambda i: points[i][0], reverse=modes[0] == "max")
    (out_dir / "tables").mkdir(parents=True, exist_ok=True)
    shown = []
    with open(out_dir / "tables" / "pareto_front.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial", *metrics, *run.swept])
        for i in front:
            swept = [trials[i].config.get(key, "") for key in run.swept]
            writer.writerow([trials[i].name, *(f"{v:.6g}" for v in points[i]), *swept])
            shown.append(f"{trials[i].name} ({', '.join(f'{v:.4g}' for v in points[i])})")
    goal = " and ".join(f"{mode} {metric}" for metric, mode in pairs)
    return (
        f"Pareto front ({goal}, each trial's last report): {len(front)} of {len(trials)} trials, "
        f"none beaten on every objective: {'; '.join(shown) or '(none)'} (tables/pareto_front.csv)"
    )
