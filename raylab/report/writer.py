"""The report's build: ``python -m raylab.report``'s command line, a run's report (figures,
tables, claims, aggregates, the sweep view) and the comparison of two runs. The package's face,
``raylab.report``, says what the report is; this module makes it."""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import math
from pathlib import Path
from typing import Any

from raylab import provenance, workloads
from raylab.errors import UserError, exit_on_user_error, filesystem_refusal
from raylab.files import refuse_credentials
from raylab.report.aggregate import conditions, resolve_metric, table_blocks
from raylab.report.evidence import claims_text, evaluate_claims
from raylab.report.render import to_html, to_markdown
from raylab.report.run_view import TUNE_COUNTERS, Run, find_run, load_run
from raylab.report.spec import Curve, Report, Table
from raylab.report.style import FigureStyle, parse_formats
from raylab.report.uncertainty import UNCERTAINTIES, describe
from raylab.report.values import format_value
from raylab.run_folder import ERROR_FILE, RunFolder

DESCRIPTION = "python -m raylab.report RUN_DIR_OR_EXPERIMENT: a sweep's figures and tables in one report."
"""The command's one-line description (``raylab.report``'s docstring's first line)."""
FORMATS = ("html", "md", "json")
LISTED = 8  # names listed in a status line before "and N more"


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one ``UserError`` line (as ``raylab.launch.cli``'s, without importing Ray)."""

    def error(self, message: str):
        raise UserError(f"{message} (see {self.prog} --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m raylab.report", description=DESCRIPTION, allow_abbrev=False)
    p.add_argument(
        "run",
        nargs="+",
        metavar="RUN",
        help="a run folder (path or URI), or an experiment name (its newest run); two of them: compare the two",
    )
    p.add_argument(
        "--out",
        help="report folder (default: RUN/report, or reports/RUN_NAME for a URI; two runs: reports/compare-A-vs-B)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="html",
        help="html (self-contained), md, or json (report.json only; with --claims, printed)",
    )
    p.add_argument(
        "--claims",
        action="store_true",
        help="print the claims table (estimates, intervals, controls, verdicts) and write nothing",
    )
    p.add_argument(
        "--figure-formats",
        default="png",
        metavar="LIST",
        help="figure files to write, a comma list of png, svg, pdf (default png; png is always written: "
        "the HTML report embeds it)",
    )
    p.add_argument(
        "--uncertainty",
        choices=UNCERTAINTIES,
        help="band of curves and error bars of points and bars: std (one sample std over seeds), sem "
        "(standard error), ci95 (95%% interval: t interval on curves, bootstrap over seeds on points and bars); "
        "default: the workload's Report.uncertainty, std unless it says otherwise",
    )
    p.add_argument("--storage", default="results", help="where to look for runs of an experiment name")
    p.add_argument(
        "--train-runs", action="store_true", help="an experiment name may also pick a python -m raylab.train debug run"
    )
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    refuse_credentials(args.storage)
    for name in args.run:
        refuse_credentials(name, "RUN")
    if len(args.run) > 2:
        raise UserError(f"name one run for its report or two to compare, not {len(args.run)}: {' '.join(args.run)}")
    run_paths = [find_run(name, args.storage, train_runs=args.train_runs) for name in args.run]
    run_path = run_paths[0]
    if args.claims and len(run_paths) == 2:
        raise UserError("--claims prints one run's claims; two runs compare without it (their claims side by side)")
    if args.claims:
        print(claims_report(run_path, args.format), end="")
        return 0
    try:
        formats = parse_formats(args.figure_formats)
    except ValueError as err:
        raise UserError(str(err)) from None
    if len(run_paths) == 2:
        written = write_comparison(
            *run_paths, out=args.out, fmt=args.format, figure_formats=formats, uncertainty=args.uncertainty
        )
        print(f"comparison: {written}")
        return 0
    report = write_report(run_path, out=args.out, fmt=args.format, figure_formats=formats, uncertainty=args.uncertainty)
    print(f"report: {report}")
    return 0


def claims_report(run_path: str, fmt: str = "html") -> str:
    """The claims of the run at ``run_path``: a plain-text table, or JSON with ``fmt="json"``."""
    run = load_run(str(run_path))
    spec, spec_note = declared_report(run)
    claims = evaluate_claims(run, spec, config_defaults(run))
    if fmt == "json":
        return (
            json.dumps(
                {"run": run.path, "workload": run.experiment.get("workload"), "note": spec_note, "claims": claims},
                indent=1,
                default=str,
            )
            + "\n"
        )
    title = f"claims of {run.experiment.get('workload') or 'an unknown workload'}, run {run.path}"
    return claims_text(claims, title + (f"\n{spec_note}" if spec_note else ""))


def write_report(
    run_path: str,
    out: str | Path | None = None,
    fmt: str = "html",
    figure_formats: tuple[str, ...] = ("png",),
    uncertainty: str | None = None,
) -> str:
    """Write the report of the run at ``run_path``; return the report file's path. Figures
    are written in ``figure_formats`` (PNG always) with ``uncertainty`` bands (None: the
    workload's ``Report.uncertainty``)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    if uncertainty is not None and uncertainty not in UNCERTAINTIES:
        raise UserError(f"--uncertainty {uncertainty}: expected one of {', '.join(UNCERTAINTIES)}")
    run = load_run(str(run_path))
    out_dir = Path(out) if out else default_out(run)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: a file is there; name a folder for the report")
    try:
        return _write(run, out_dir, fmt, figure_formats, uncertainty)
    except OSError as err:
        if filesystem_refusal(err) is None:
            raise
        raise UserError(
            f"cannot write the report in {out_dir} ({filesystem_refusal(err)}); pass --out a folder you can write"
        ) from None


def _write(run: Run, out_dir: Path, fmt: str, figure_formats: tuple[str, ...], uncertainty: str | None) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = [*out_dir.glob("figures/*.png"), *out_dir.glob("figures/*.svg"), *out_dir.glob("figures/*.pdf")]
    for old in [*stale, *out_dir.glob("tables/*.csv")]:
        old.unlink()  # from an earlier report of this run
    spec, spec_note = declared_report(run)
    style = figure_style(run, spec, figure_formats, uncertainty)
    content = build(run, spec, out_dir, spec_note, style)
    (out_dir / "report.json").write_text(json.dumps(content, indent=1, default=str))
    if fmt == "json":
        return str(out_dir / "report.json")
    if fmt == "html":
        target = out_dir / "report.html"
        target.write_text(to_html(content, out_dir))
    else:
        target = out_dir / "report.md"
        target.write_text(to_markdown(content))
    return str(target)


def write_comparison(
    path_a: str,
    path_b: str,
    out: str | Path | None = None,
    fmt: str = "html",
    figure_formats: tuple[str, ...] = ("png",),
    uncertainty: str | None = None,
) -> str:
    """Write the comparison of the runs at ``path_a`` (A) and ``path_b`` (B): their curves
    overlaid and their claims side by side (``raylab.report.compare``); return the file
    written (``comparison.html``, ``.md`` or ``.json``). The figures and claims are those of A's
    workload; the SMOKE watermark is drawn when either run is a smoke run."""
    from raylab.report import compare

    runs = {"A": load_run(str(path_a)), "B": load_run(str(path_b))}
    if runs["A"].path == runs["B"].path:
        raise UserError(f"both runs are {runs['A'].path}: name two different runs to compare")
    out_dir = Path(out) if out else Path("reports") / f"compare-{runs['A'].name}-vs-{runs['B'].name}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out {out_dir}: cannot make the folder: {err.strerror or err}") from None
    spec, spec_note = declared_report(runs["A"])
    style = figure_style(runs["A"], spec, figure_formats, uncertainty)
    style = FigureStyle(
        formats=style.formats,
        uncertainty=style.uncertainty,
        smoke=any(bool(run.experiment.get("smoke")) for run in runs.values()),
        labels=style.labels,
    )
    facts = {side: _facts(run) for side, run in runs.items()}
    defaults = {side: config_defaults(run) for side, run in runs.items()}
    content = compare.build_comparison(runs, spec, out_dir, style, facts, defaults, spec_note)
    (out_dir / "comparison.json").write_text(json.dumps(content, indent=1, default=str))
    if fmt == "json":
        return str(out_dir / "comparison.json")
    target = out_dir / ("comparison.md" if fmt == "md" else "comparison.html")
    target.write_text(compare.to_markdown(content) if fmt == "md" else compare.to_html(content, out_dir))
    return str(target)


def default_out(run: Run) -> Path:
    """``RUN/report`` for a local run; ``reports/RUN_NAME`` here for a run on cloud storage."""
    folder = RunFolder(run.path)
    return Path("reports") / folder.name if folder.is_uri else Path(folder.location) / "report"


def declared_report(run: Run) -> tuple[Report, str]:
    """The workload's declared Report, else a default one; and a note when it could not load."""
    name = run.experiment.get("workload")
    metric = run.experiment.get("metric")
    default = Report(items=(Curve(metric),) if metric else ())
    try:
        workload = workloads.registry().get(name) if name else None
    except Exception as err:  # noqa: BLE001 - a workload package that fails to import must not cost the report
        return default, f"could not read the workload registry: {type(err).__name__}: {err}"
    if workload is None:
        return default, f"workload '{name}' is not registered here: default figures only" if name else ""
    try:
        spec = workload.report_spec()
    except Exception as err:  # noqa: BLE001 - a broken declaration must not cost the report
        return default, f"could not load {workload.figures}: {type(err).__name__}: {err}"
    if spec is None:
        return default, ""
    return (spec if isinstance(spec, Report) else Report(items=tuple(spec))), ""


def figure_style(
    run: Run, spec: Report, formats: tuple[str, ...] = ("png",), uncertainty: str | None = None
) -> FigureStyle:
    """The run's figures' style: ``formats``, ``uncertainty`` (else the Report's), the SMOKE
    watermark when the run's experiment.yaml says ``smoke: true`` (``python -m raylab.tune
    --smoke`` and ``raylab.train --smoke`` save it), the Report's labels."""
    return FigureStyle(
        formats=tuple(formats),
        uncertainty=uncertainty or spec.uncertainty,
        smoke=bool(run.experiment.get("smoke")),
        labels=spec.labels,
    )


def build(
    run: Run, spec: Report, out_dir: Path, spec_note: str = "", style: FigureStyle | None = None
) -> dict[str, Any]:
    """Draw the figures and compute the tables; return the report's content (JSON-able)."""
    from raylab.report.suite import build_aggregates
    from raylab.report.sweep_view import build_sweep_view

    style = style or figure_style(run, spec)
    exp = run.experiment
    metric = exp.get("metric")
    stems: set[str] = set()
    figures, tables = draw_items(run, spec, report_items(run, spec), out_dir, style, stems)
    notes = report_notes(run, spec, figures, spec_note, out_dir)
    defaults = config_defaults(run)
    claims = evaluate_claims(run, spec, defaults)
    aggregates = [
        build_aggregates(run, agg, spec.seeds, defaults, out_dir, _unique(agg.name, stems), style)
        for agg in spec.aggregates
    ]
    trial_columns, trial_rows = trial_table(run, metric)
    return {
        "title": f"{exp.get('name') or run.name}: {run.name}",
        "run": run.path,
        "generated": datetime.datetime.now().isoformat(timespec="seconds"),
        "facts": _facts(run),
        "swept": run.swept,
        "conditions": conditions(run, spec.seeds),
        "status_counts": _counts(run),
        "expected_trials": run.expected,
        "not_started": run.not_started,
        "failed": [{"trial": t.name, "error": t.error} for t in run.trials if t.status == "ERROR" or t.error],
        "unreported_metrics": unreported_metrics(run, spec),
        "notes": notes,
        "claims": claims,
        "aggregates": aggregates,
        "figures": figures,
        "tables": tables,
        "sweep": build_sweep_view(run, spec, defaults, out_dir, style),
        "figure_style": {"formats": list(style.formats), "uncertainty": style.uncertainty, "smoke": style.smoke},
        "trial_columns": trial_columns,
        "trial_rows": trial_rows,
    }


def report_items(run: Run, spec: Report) -> list[tuple[str, Any]]:
    """``(file stem, item)`` of every figure and table the report draws: the Report's items, and
    first the sweep metric's table at each trial's last report unless the Report has one."""
    exp = run.experiment
    metric, mode = exp.get("metric"), exp.get("mode", "max")
    items = [(item.file_stem(index), item) for index, item in enumerate(spec.items, start=1)]
    if metric and not any(
        isinstance(i, Table) and metric in i.metrics and not i.rows and i.at == "last" for _, i in items
    ):
        title = f"{metric} at each trial's last report (mean ± std over seeds)"
        items.insert(0, ("00_sweep_metric", Table((metric,), best=mode if mode in ("max", "min") else "", title=title)))
    return items


def draw_items(
    run: Run, spec: Report, items: list[tuple[str, Any]], out_dir: Path, style: FigureStyle, stems: set[str]
) -> tuple[list[dict], list[dict]]:
    """Draw each figure and write each table (CSV) into ``out_dir``; return the report's
    ``figures`` and ``tables`` entries. An item whose metrics are reported under other configs
    only gets an entry that says so, and no file."""
    figures, tables = [], []
    skip = spec.not_applicable([t.config for t in run.trials if t.rows])
    for stem, item in items:
        stem = _unique(stem, stems)
        shown = item.plotted() if not isinstance(item, Table) else list(item.metrics)
        if skip and all(m in skip for m in shown):  # reported under other configs only
            note = (
                f"not applicable: {', '.join(shown)} are reported on "
                f"{' and '.join(dict.fromkeys(skip[m] for m in shown))} only, and no trial here is one"
            )
            if isinstance(item, Table):
                tables.append({**_table_entry(item, stem, style), "csv": "", "blocks": [], "note": note})
            else:
                figures.append({**_figure_entry(item, stem, style), "file": "", "note": note, "applicable": False})
        elif isinstance(item, Table):
            blocks = table_blocks(run, item, spec.seeds)
            csv_file = f"tables/{stem}.csv"
            (out_dir / "tables").mkdir(parents=True, exist_ok=True)
            (out_dir / csv_file).write_text(_table_csv(blocks))
            tables.append({**_table_entry(item, stem, style), "csv": csv_file, "blocks": [b.to_json() for b in blocks]})
        else:
            from raylab.report.plots import draw  # matplotlib only when drawing

            file = f"figures/{stem}.png"
            drawn, note = draw(item, run, spec.seeds, out_dir / file, skip=tuple(skip), style=style)
            figures.append(
                {
                    **_figure_entry(item, stem, style),
                    "file": file if drawn else "",
                    "files": [f"figures/{stem}.{f}" for f in style.formats] if drawn else [],
                    "band": "" if item.kind == "Scatter" else describe(style.uncertainty, item.kind),
                    "note": note,
                }
            )
    return figures, tables


def _table_entry(item: Table, stem: str, style: FigureStyle) -> dict[str, Any]:
    """A table's entry in the report, before its file and blocks."""
    return {
        "name": stem,
        "title": item.heading(style.label) + _at_note(item),
        "kind": "Table",
        "metrics": list(item.metrics),
        "at": item.at,
        "rows_key": item.rows,
        "columns_keys": list(item.columns),
    }


def _figure_entry(item: Any, stem: str, style: FigureStyle) -> dict[str, Any]:
    """A figure's entry in the report, before its file."""
    return {
        "name": stem,
        "kind": item.kind,
        "title": item.heading(style.label),
        "metrics": list(item.metric_names()),
        "y": item.plotted(),
    }


def report_notes(run: Run, spec: Report, figures: list[dict], spec_note: str, out_dir: Path) -> list[str]:
    """The report's notes: the declaration's own note first, the run's status, the Pareto front."""
    from raylab.report.pareto import front_note

    notes = status_notes(run, spec, figures)
    if spec_note:
        notes.insert(0, spec_note)
    if front := front_note(run, out_dir):
        notes.append(front)
    return notes


def workloads_metrics(run: Run) -> tuple[str, ...]:
    """The metrics the run's workload registers (none when it is unknown here)."""
    try:
        workload = workloads.registry().get(run.experiment.get("workload"))
    except Exception:  # noqa: BLE001 - reported once, by declared_report
        return ()
    return tuple(workload.metrics) if workload else ()


def unreported_metrics(run: Run, spec: Report) -> list[str]:
    """Declared metrics (registry entry and report items) that no trial reported.

    Patterns (``{key}``, ``*``) count as reported when they resolve for at least one trial.
    """
    reported = set().union(*(t.reported() for t in run.trials)) if run.trials else set()
    with_rows = [t for t in run.trials if t.rows]
    missing = []
    skip = spec.not_applicable([t.config for t in with_rows])
    for name in dict.fromkeys((*workloads_metrics(run), *spec.metric_names())):
        if name in TUNE_COUNTERS or name in skip:
            continue
        if any(c in name for c in "{*?["):
            if not any((resolve_metric(name, t) or "") in t.reported() for t in with_rows):
                missing.append(name)
        elif name not in reported:
            missing.append(name)
    return missing


def status_notes(run: Run, spec: Report, figures: list[dict]) -> list[str]:
    """One line per thing a reader must know: missing, failed, unreported, not drawn."""
    notes = []
    with_rows = [t for t in run.trials if t.rows]
    known = len(run.trials)
    if run.expected is not None and known < run.expected:
        notes.append(
            f"{run.expected - known} of {run.expected} trials have not started (no trial folder yet)"
            + (f": {'; '.join(run.not_started)}" if run.not_started else "")
        )
    running = [t for t in run.trials if t.status in ("RUNNING", "PENDING", "PAUSED")]
    if running:
        notes.append(
            f"sweep still running: {len(running)} trial(s) not finished when Tune last saved "
            f"its state ({', '.join(f'{t.name} {t.status}' for t in running)}); their values are partial"
        )
    silent = [t for t in run.trials if not t.rows and t.status != "ERROR"]
    if silent:
        notes.append(f"{len(silent)} trial(s) without any result yet: {', '.join(t.name for t in silent)}")
    for trial in run.trials:
        if trial.status == "ERROR" or trial.error:
            kind = "failed" if trial.status == "ERROR" else f"{trial.status}, after a failure"
            notes.append(f"trial {trial.name} {kind}: {trial.error or f'(no {ERROR_FILE})'}")
    if not with_rows:
        notes.append("no trial has reported results yet")
    else:
        missing = unreported_metrics(run, spec)
        if missing:
            shown = ", ".join(missing[:LISTED])
            more = f" and {len(missing) - LISTED} more (report.json lists them)" if len(missing) > LISTED else ""
            notes.append(f"declared metrics no trial reported: {shown}{more}")
    for trial in with_rows:
        last = trial.rows[-1]
        for withheld in spec.withheld:
            value = last.get(withheld.metric)
            if isinstance(value, float) and math.isnan(value):
                notes.append(f"trial {trial.name}: {withheld.metric} withheld (NaN): {withheld.why(last)}")
    for figure in figures:
        if figure["note"] and not figure["file"] and figure.get("applicable", True):
            notes.append(f"figure '{figure['title']}' not drawn: {figure['note']}")
    return notes


def trial_table(run: Run, metric: str | None) -> tuple[list[str], list[list[Any]]]:
    columns = ["trial", "status", *run.swept, "reports", "training_iteration"]
    if metric:
        columns.append(f"{metric} (last)")
    columns.append("error")
    defaults = config_defaults(run)
    rows = []
    for t in run.trials:
        last = next((r[metric] for r in reversed(t.rows) if metric in r), None) if metric else None
        rows.append(
            [
                t.name,
                t.status,
                *(swept_value(t.config, k, defaults) for k in run.swept),
                len(t.rows),
                t.rows[-1].get("training_iteration") if t.rows else None,
                *([last] if metric else []),
                t.error,
            ]
        )
    return columns, rows


def swept_value(params: dict[str, Any], key: str, defaults: dict[str, Any]) -> str:
    """A trial's value of a swept key as a cell; ``-`` for a key its ``variant`` group does not
    set (``beta`` of an MSE trial: its loss does not use it, whatever the Config's default);
    never ``None``. ``defaults`` is kept for callers; a swept key never reads at its default."""
    if key in params and params[key] is not None:
        return format_value(params[key])
    return "-"


def config_defaults(run: Run) -> dict[str, Any]:
    """The run's workload Config defaults by field (empty when the workload is unknown here)."""
    import dataclasses

    try:
        workload = workloads.registry().get(run.experiment.get("workload"))
        fields = dataclasses.fields(workload.config_class()) if workload else ()
    except Exception:  # noqa: BLE001 - reported once, by declared_report
        return {}
    return {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}


def _facts(run: Run) -> list[tuple[str, Any]]:
    exp = run.experiment
    facts = [("run", run.path)]
    for key in ("workload", "description"):
        if exp.get(key):
            facts.append((key, exp[key]))
    if exp.get("metric"):
        facts.append(("metric", f"{exp['metric']} ({exp.get('mode', '?')})"))
    facts.append(("smoke", bool(exp.get("smoke"))))
    facts.append(("swept", ", ".join(run.swept) or "(nothing)"))
    counts = _counts(run)
    facts.append(
        (
            "trials",
            ", ".join(f"{v} {k}" for k, v in counts.items())
            + (f" (of {run.expected} expected)" if run.expected is not None else ""),
        )
    )
    facts.append(
        (
            "aggregate",
            "tables: mean ± sample std (n = trials) over seeds and repeats; claims and "
            "aggregates: estimate over seeds with a 95% interval (claims: t interval, "
            "stratified; aggregates: percentile bootstrap stratified by task), labelled wide below 5 seeds",
        )
    )
    return facts + provenance.facts(exp.get("provenance"))


def _counts(run: Run) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in run.trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    return counts


def _at_note(table: Table) -> str:
    return "" if table.title or table.at == "last" else f" ({table.at} over reports)"


def _unique(stem: str, seen: set[str]) -> str:
    candidate, n = stem, 2
    while candidate in seen:
        candidate, n = f"{stem}_{n}", n + 1
    seen.add(candidate)
    return candidate


def _table_csv(blocks) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for block in blocks:
        header = [f"{c} {s}" for c in block.columns for s in ("mean", "std", "n")]
        writer.writerow(["block", block.row_header, *header])
        for label, _, cells in block.rows:
            values = []
            for cell in cells:
                values += [json.dumps(cell.mean), json.dumps(cell.std), cell.n] if cell else ["", "", 0]
            writer.writerow([block.title, label, *values])
    return buffer.getvalue()
