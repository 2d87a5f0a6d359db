"""``python -m raylab.runs [STORAGE]``: the runs in a storage, newest first.

    python -m raylab.runs                                   # under ./results
    python -m raylab.runs s3://bucket/runs --experiment toy
    python -m raylab.runs --tag baseline --format json      # for a script

One line per run folder (a sweep's or a ``python -m raylab.train`` run's): its name, experiment,
start time (UTC), status, trials done, best metric (its ``best.yaml``), the code's git commit
(``*``: uncommitted changes), smoke or not, and its tags. Status: ``finished`` (every trial
terminated), ``stopped`` (the command ended with trials unfinished or failed; ``--resume``
continues it), ``running`` (the command has not recorded its end: still running, or killed).
Reads only the run folders' own files, through ``raylab.run_folder``; imports no Ray.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from raylab.errors import UserError, exit_on_user_error
from raylab.run_folder import RunFolder, is_train_run, runs_under

COLUMNS = ("name", "experiment", "started", "status", "trials done", "best", "commit", "smoke", "tags")


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one ``UserError`` line (exit 2)."""

    def error(self, message: str):
        raise UserError(f"{message} (see {self.prog} --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m raylab.runs", description=__doc__.split("\n")[0].replace("``", ""), allow_abbrev=False)
    p.add_argument("storage", nargs="?", default="results", help="a storage: a folder or a URI (default: results)")
    p.add_argument("--experiment", metavar="NAME", help="only the runs of this experiment")
    p.add_argument("--tag", action="append", default=[], metavar="NAME", help="only runs with this tag (repeatable)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="a table (text) or JSON lines")
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    root = RunFolder(args.storage)
    if root.kind() != "dir":
        raise UserError(f"no runs: {root.location} is not a folder (name a --storage that sweeps wrote to)")
    rows = list_runs(args.storage, experiment=args.experiment, tags=tuple(args.tag))
    if args.format == "json":
        sys.stdout.write("".join(json.dumps(row, default=str) + "\n" for row in rows))
        return 0
    if not rows:
        wanted = " of experiment " + repr(args.experiment) if args.experiment else ""
        tagged = " tagged " + ", ".join(args.tag) if args.tag else ""
        print(f"no runs{wanted}{tagged} under {root.location}")
        return 0
    print(table(rows))
    return 0


def list_runs(storage: str, experiment: str | None = None, tags: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One dict per run under ``storage`` (``run_summary``), newest start first; only those of
    ``experiment`` and carrying every tag of ``tags`` when given."""
    out = []
    for run, saved, changed in runs_under(storage):
        if experiment and saved.get("name") != experiment:
            continue
        row = run_summary(run, saved)
        if any(tag not in row["tags"] for tag in tags):
            continue
        out.append((row["started"] or "", changed, row))
    return [row for *_, row in sorted(out, key=lambda item: item[:2], reverse=True)]


def run_summary(run: RunFolder, saved: dict[str, Any]) -> dict[str, Any]:
    """What the list shows of one run, from its ``experiment.yaml``, markers and ``best.yaml``."""
    record = saved.get("provenance") if isinstance(saved.get("provenance"), dict) else {}
    git = record.get("git") or {}
    trials = run.read_trials()
    finished = run.finished
    done = len(trials) if finished else sum(t.finished for t in trials)
    best = run.best()
    return {
        "name": run.name,
        "location": run.location,
        "experiment": saved.get("name"),
        "command": "raylab.train" if is_train_run(saved, run.name) else "raylab.tune",
        "started": record.get("started"),
        "ended": record.get("ended"),
        "status": "finished" if finished else "stopped" if record.get("ended") else "running",
        "trials": len(trials),
        "trials_done": len(trials) if finished else done,
        "metric": saved.get("metric"),
        "mode": saved.get("mode"),
        "best": best.get("value") if best else None,
        "best_trial": best.get("trial") if best else None,
        "commit": git.get("commit"),
        "dirty": bool(git.get("dirty")),
        "smoke": bool(saved.get("smoke")),
        "tags": list(record.get("tags") or []),
        "notes": record.get("notes") or "",
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned plain-text table (``COLUMNS``)."""
    cells = [
        [
            row["name"],
            str(row["experiment"]),
            (row["started"] or "?").replace("+00:00", "Z"),
            row["status"],
            f"{row['trials_done']}/{row['trials']}",
            _best(row),
            (row["commit"] or "-")[:12] + ("*" if row["dirty"] else ""),
            "yes" if row["smoke"] else "no",
            ", ".join(row["tags"]) or "-",
        ]
        for row in rows
    ]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(COLUMNS)]

    def line(values):
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    return "\n".join([line(COLUMNS), line(["-" * w for w in widths]), *map(line, cells)])


def _best(row: dict[str, Any]) -> str:
    if row["best"] is None:
        return "-"
    value = row["best"]
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{row['metric']}={shown} ({row['mode']})"


if __name__ == "__main__":
    sys.exit(main())
