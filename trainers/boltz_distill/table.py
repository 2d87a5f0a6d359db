"""``python -m trainers.boltz_distill.table RUN_DIR``: the ADMET table of an admet_probe sweep.

Reads every trial folder of a Ray Tune run of ``admet_probe`` (its config and its last reported
row, through ``raylab.run_folder``) and prints one row per representation and probe, one column per task,
each cell ``mean ± std`` of the task's official metric over the split seeds (TDC's protocol:
seeds 1-5, population std as TDC's ``evaluate_many``), with the number of seeds and, where any
test molecule had no features, the imputed count. A representation is named by what made it
(``representation``): each distilled student by its teachers and Boltz-2 layer, each teacher by
its store. Below our rows, two published rows on the same tasks (``leaderboard.py``: the best
figure of a public compilation of TDC ADMET results, and Chemprop-RDKit's TDC leaderboard figure,
with their source, and which tasks are different data). ``--markdown`` prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from raylab.errors import UserError, exit_on_user_error
from raylab.run_folder import RunFolder
from trainers.boltz_distill import TASK_METRICS, leaderboard, metric_name

ROW_ORDER = (
    "chemprop",
    "chemprop_rdkit",
    "supervised_gine",
    "morgan",
    "descriptors",
    "morgan_descriptors",
    "random_student",
    "teacher",
    "student",
)
NAMES = {
    "chemprop": "Chemprop D-MPNN",
    "chemprop_rdkit": "Chemprop-RDKit D-MPNN",
    "supervised_gine": "GINE, supervised",
    "morgan": "Morgan (ECFP4)",
    "descriptors": "RDKit descriptors",
    "morgan_descriptors": "Morgan + descriptors",
    "random_student": "GINE, random init",
}
PROBES = {"gbm": "gbm (HistGBM)"}


def _teachers(teachers, layer: str) -> str:
    return "+".join(f"boltz2:{layer}" if t == "boltz2" else t for t in teachers)


def representation(params: dict) -> str:
    """The row name of a trial (its config, variant fields merged: ``Trial.config``):
    ``student <- boltz2:trunk_s``, ``teacher descriptors``, ..."""
    features = params.get("features", "student")
    if features == "student":
        teachers, layer = params.get("student_teachers") or (), params.get("student_layer", "trunk_s")
        if params.get("students_from"):
            from trainers.boltz_distill.loop import load_student, student_location

            path = student_location(params["students_from"], params.get("student_trial", ""))
            trained = load_student(path)[1]["config"]
            teachers, layer = trained.get("teachers", ()), trained.get("boltz2_layer", "trunk_s")
            return (
                f"student <- {_teachers(teachers, layer)} [run: width {trained.get('width')}, depth "
                f"{trained.get('depth')}, lr {trained.get('lr')}, seed {trained.get('seed')}]"
            )
        if params.get("student_checkpoint"):
            from trainers.boltz_distill.loop import load_student

            trained = load_student(params["student_checkpoint"])[1]["config"]
            teachers, layer = trained.get("teachers", ()), trained.get("boltz2_layer", "trunk_s")
        return f"student <- {_teachers(teachers, layer)}"
    if features == "teacher":
        if params.get("teacher"):
            return f"teacher {params['teacher']}"
        meta_path = Path(params.get("teacher_store", "")).expanduser() / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        layer = meta.get("settings", {}).get("layer", "")
        return f"teacher {_teachers([meta.get('teacher', '?')], layer)}"
    return NAMES.get(features, features)


def collect(run_dir: Path) -> dict[tuple[str, str], dict[str, list[tuple[float, int]]]]:
    """``{(representation, probe): {task: [(metric, imputed test molecules) per seed]}}``."""
    cells: dict[tuple[str, str], dict[str, list[tuple[float, int]]]] = defaultdict(lambda: defaultdict(list))
    order: dict[str, int] = {}
    for trial in RunFolder(run_dir).read_trials():
        params, last = trial.config, trial.last
        if not params or not last:
            continue
        task = params.get("task", "solubility")
        value = last.get(metric_name(task))
        if isinstance(value, (int, float)):
            name = representation(params)
            features = params.get("features", "student")
            order.setdefault(name, ROW_ORDER.index(features) if features in ROW_ORDER else 99)
            probe = params.get("probe", "mlp")
            cells[(name, probe)][task].append((float(value), int(last.get("probe/test/imputed", 0))))
    return dict(sorted(cells.items(), key=lambda kv: (order[kv[0][0]], kv[0])))


def format_table(cells, markdown: bool = False) -> str:
    tasks = [t for t in TASK_METRICS if any(t in row for row in cells.values())]
    rows = list(cells)
    header = ["representation", "probe"] + [f"{t} ({metric_name(t).rsplit('/', 1)[1]})" for t in tasks]
    body = []
    for key in rows:
        line = [key[0], PROBES.get(key[1], key[1])]
        for task in tasks:
            entries = cells[key].get(task, [])
            values = [v for v, _ in entries]
            if values:
                mean = sum(values) / len(values)
                std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
                imputed = max(i for _, i in entries)
                line.append(f"{mean:.3f} ± {std:.3f} (n={len(values)}" + (f", {imputed} imputed)" if imputed else ")"))
            else:
                line.append("-")
        body.append(line)
    for name, which in leaderboard.ROWS:
        body.append([name, "published"] + [leaderboard.cell(task, which) for task in tasks])
    note = f"published rows: {leaderboard.SOURCE}"
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(line) + " |" for line in body]
        return "\n".join(out + ["", note])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in body] + [note])


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    p = argparse.ArgumentParser(prog="python -m trainers.boltz_distill.table", description=__doc__.split("\n")[0])
    p.add_argument("run_dir", help="an admet_probe run folder (results/admet_probe-...)")
    p.add_argument("--markdown", action="store_true")
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    cells = collect(run_dir)
    if not cells:
        raise UserError(f"{run_dir}: no admet_probe trial results (trial folders with a config and reported rows)")
    print(format_table(cells, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
