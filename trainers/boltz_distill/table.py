"""``python -m trainers.boltz_distill.table RUN_DIR``: the ADMET table of an admet_probe sweep.

Reads every trial folder of a Ray Tune run of ``admet_probe`` (its ``params.json`` and the last
row of ``result.json``) and prints one row per representation and probe, one column per task,
each cell ``mean ± std`` of the task's official metric over the split seeds (TDC's protocol:
seeds 1-5, population std as TDC's ``evaluate_many``). ``--markdown`` prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from raylab.errors import UserError, exit_on_user_error
from trainers.boltz_distill import TASK_METRICS, metric_name

ROW_ORDER = ("student", "teacher", "random_student", "morgan", "descriptors")


def collect(run_dir: Path) -> dict[tuple[str, str], dict[str, list[float]]]:
    """``{(features, probe): {task: [metric per seed]}}`` from the trial folders of a run."""
    cells: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for params_path in sorted(run_dir.glob("*/params.json")):
        result_path = params_path.with_name("result.json")
        if not result_path.is_file():
            continue
        params = json.loads(params_path.read_text())
        lines = [l for l in result_path.read_text().splitlines() if l.strip()]
        if not lines:
            continue
        last = json.loads(lines[-1])
        task = params.get("task", "solubility")
        value = last.get(metric_name(task))
        if isinstance(value, (int, float)):
            cells[(params.get("features", "student"), params.get("probe", "mlp"))][task].append(float(value))
    return cells


def format_table(cells, markdown: bool = False) -> str:
    tasks = [t for t in TASK_METRICS if any(t in row for row in cells.values())]
    rows = sorted(cells, key=lambda k: (ROW_ORDER.index(k[0]) if k[0] in ROW_ORDER else 99, k[1]))
    header = ["representation", "probe"] + [f"{t} ({metric_name(t).rsplit('/', 1)[1]})" for t in tasks]
    body = []
    for key in rows:
        line = [key[0], key[1]]
        for task in tasks:
            values = cells[key].get(task, [])
            if values:
                mean = sum(values) / len(values)
                std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
                line.append(f"{mean:.3f} ± {std:.3f} (n={len(values)})")
            else:
                line.append("-")
        body.append(line)
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(line) + " |" for line in body]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainers.boltz_distill.table", description=__doc__.split("\n")[0])
    p.add_argument("run_dir", help="an admet_probe run folder (results/admet_probe-...)")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    cells = collect(run_dir)
    if not cells:
        raise UserError(f"{run_dir}: no admet_probe trial results (trial folders with params.json and result.json)")
    print(format_table(cells, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
