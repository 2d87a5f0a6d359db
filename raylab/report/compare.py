"""``python -m raylab.report RUN_A RUN_B``: two runs side by side.

One self-contained HTML page (or Markdown beside its PNG, or ``comparison.json`` alone): the
two runs' facts and best trials in two columns; the first run's metric against its step
counter with both runs' curves overlaid (one colour per configuration, shared by both runs; a
solid line for A and a dashed one for B; each curve the mean over its seeds at each step, the
best ``CURVES_SHOWN`` configurations of each run); and each declared claim of the first run's
workload evaluated on both runs, A's estimate and verdict beside B's.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np

from raylab.report.aggregate import conditions, group, label_of, value_at
from raylab.report.render import PAGE_END, VERDICT_CLASS, figure_html, fmt_number, page_start
from raylab.report.run_view import Run
from raylab.report.style import FigureStyle
from raylab.report.values import is_number
from raylab.run_folder import RunFolder

CURVES_SHOWN = 8
SIDES = ("A", "B")
DASHES = {"A": "-", "B": "--"}


def build_comparison(
    runs: dict[str, Run],
    spec,
    out_dir: Path,
    style: FigureStyle,
    facts: dict[str, list[tuple[str, Any]]],
    defaults: dict[str, dict[str, Any]],
    spec_note: str = "",
) -> dict:
    """The comparison's content (JSON-able): ``facts`` (each run's facts box), best trials, the
    overlaid curves, the claims of ``spec`` on each run (a field a trial does not set reads at
    the run's Config ``defaults``)."""
    from raylab.report.evidence import estimate_words, evaluate_claims, measured_words

    metric = runs["A"].experiment.get("metric")
    mode = runs["A"].experiment.get("mode", "max")
    notes = [spec_note] if spec_note else []
    if runs["B"].experiment.get("workload") != runs["A"].experiment.get("workload"):
        notes.append(
            f"the runs are of different workloads ({runs['A'].experiment.get('workload')}, "
            f"{runs['B'].experiment.get('workload')}): claims are those of A's"
        )
    if runs["B"].experiment.get("metric") != metric:
        notes.append(f"B's experiment optimises {runs['B'].experiment.get('metric')}; both are drawn with A's {metric}")
    facts = {side: dict(facts[side]) for side in SIDES}
    keys = list(dict.fromkeys(k for side in SIDES for k in facts[side]))
    best = {side: RunFolder(run.path).best() for side, run in runs.items()}
    curves = overlaid_curves(runs, spec, metric, mode, out_dir / "figures" / "compare_curves.png", style)
    claims = {side: evaluate_claims(run, spec, defaults[side]) for side, run in runs.items()}
    rows = []
    for claim_a, claim_b in zip(claims["A"], claims["B"]):
        variants = list(dict.fromkeys(r["variant"] for r in (*claim_a["rows"], *claim_b["rows"])))
        for variant in variants:
            row = {"claim": claim_a["name"], "statement": claim_a["statement"], "variant": variant}
            for side, claim in (("A", claim_a), ("B", claim_b)):
                found = next((r for r in claim["rows"] if r["variant"] == variant), None)
                row[side] = (
                    {
                        "estimate": estimate_words(found),
                        "n": found["n_seeds"],
                        "verdict": found["verdict"],
                        "verdict_words": found["verdict_words"],
                        "metric": measured_words(claim, found),
                    }
                    if found
                    else None
                )
            rows.append(row)
    return {
        "title": f"{runs['A'].name} (A) against {runs['B'].name} (B)",
        "runs": {side: run.path for side, run in runs.items()},
        "metric": metric,
        "mode": mode,
        "notes": notes,
        "facts": [[k, *(str(facts[side].get(k, "-")) for side in SIDES)] for k in keys],
        "best": best,
        "curves": curves,
        "claims": rows,
    }


def overlaid_curves(runs: dict[str, Run], spec, metric: str | None, mode: str, path: Path, style) -> dict[str, Any]:
    """``metric`` against A's step counter: each run's best configurations, mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from raylab.report.plots import _cut_below, _log_floor, save_figure
    from raylab.report.style import LEGEND, legend_columns, series_colors, spans_decades
    from raylab.report.sweep_view import choose_step, step_means

    if not metric:
        return {"file": "", "note": "run A's experiment names no metric"}
    step = choose_step(runs["A"], spec, metric)
    drawn = []
    for side, run in runs.items():
        keys = conditions(run, spec.seeds)
        trials = [t for t in run.trials if t.rows and is_number(value_at(t, metric))]
        groups = list(group(run, trials, keys).items())
        sign = -1.0 if mode == "min" else 1.0
        groups.sort(key=lambda kv: -sign * float(np.mean([value_at(t, metric) for t in kv[1]])))
        for values, members in groups[:CURVES_SHOWN]:
            steps, _, mean, std = step_means(members, step, metric)
            if steps.size:
                label = label_of(keys, values, style.label) if keys else "all trials"
                drawn.append((side, label, len(members), steps, mean, std))
    if not drawn:
        return {"file": "", "x": step, "note": f"neither run reported {metric} against {step}"}
    labels = list(dict.fromkeys(d[1] for d in drawn))
    colors = dict(zip(labels, series_colors(len(labels))))
    means = np.concatenate([d[4] for d in drawn])
    log = spans_decades(means)
    floor = _log_floor(means)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for side, label, n, steps, mean, std in drawn:
        ax.plot(steps, mean, DASHES[side], color=colors[label], label=f"{side}: {label} (n={n})")
        band = np.isfinite(std)
        if band.any():
            low = _cut_below(mean - std, floor)[0] if log else mean - std
            ax.fill_between(steps[band], low[band], (mean + std)[band], color=colors[label], alpha=0.12, linewidth=0)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(style.label(step), fontsize=8)
    ax.set_ylabel(style.label(metric), fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(**LEGEND, ncol=legend_columns(len(drawn)))
    ax.set_title(
        f"{style.label(metric)} against {style.label(step)}: A solid, B dashed; mean over seeds, band ± one std",
        fontsize=9,
    )
    files = save_figure(fig, path, style=style)
    return {
        "file": f"figures/{path.name}",
        "files": [f"figures/{f.name}" for f in files],
        "x": step,
        "lines": [{"run": d[0], "configuration": d[1], "n": d[2]} for d in drawn],
        "log_y": log,
    }


# ------------------------------------------------------------------------ rendering


def _best_words(best: dict[str, Any] | None) -> str:
    if not best:
        return "no best.yaml (the sweep has not ended, or no trial reported the metric)"
    return (
        f"{best.get('trial')}: {best.get('metric')} ({best.get('mode')}) = {fmt_number(best.get('value'))}; "
        f"checkpoint {best.get('checkpoint') or '(none kept)'}"
    )


def to_html(content: dict[str, Any], out_dir: Path) -> str:
    e = html.escape
    parts = [
        *page_start(content["title"]),
        *(f'<div class="note">{e(n)}</div>' for n in content["notes"]),
        '<div class="scroll"><table><thead><tr><th></th><th>A</th><th>B</th></tr></thead><tbody>',
        *(f"<tr><th>{e(k)}</th><td>{e(a)}</td><td>{e(b)}</td></tr>" for k, a, b in content["facts"]),
        "<tr><th>best trial</th>" + "".join(f"<td>{e(_best_words(content['best'][s]))}</td>" for s in SIDES) + "</tr>",
        "</tbody></table></div>",
        "<h2>Curves</h2>",
    ]
    curves = content["curves"]
    if curves.get("file"):
        parts.append(figure_html(out_dir, curves["file"], "curves of both runs"))
    else:
        parts.append(f'<div class="note">{e(curves.get("note", ""))}</div>')
    parts.append("<h2>Claims</h2>")
    if not content["claims"]:
        parts.append('<div class="note">the workload declares no claims</div>')
    else:
        head = "".join(
            f"<th>{h}</th>"
            for h in (
                "claim",
                "variant",
                "metric",
                "A: estimate [95% interval]",
                "A: verdict",
                "B: estimate",
                "B: verdict",
            )
        )
        body = []
        for row in content["claims"]:
            cells = [f"<td>{e(row['statement'])}</td>", f"<td>{e(row['variant'] or '-')}</td>"]
            metric = next((row[s]["metric"] for s in SIDES if row[s]), "")
            cells.append(f'<td class="small">{e(metric)}</td>')
            for side in SIDES:
                found = row[side]
                if found is None:
                    cells += ["<td>-</td>", "<td>not in this run</td>"]
                    continue
                verdict = VERDICT_CLASS.get(found["verdict"], "")
                cells += [
                    f'<td class="num">{e(found["estimate"])} <span class="n">n={found["n"]}</span></td>',
                    f'<td class="{verdict}">{e(found["verdict_words"])}</td>',
                ]
            body.append(f"<tr>{''.join(cells)}</tr>")
        parts.append(
            f'<div class="scroll"><table class="claims"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
    parts.append(PAGE_END)
    return "\n".join(parts)


def to_markdown(content: dict[str, Any]) -> str:
    from raylab.report.render import _md_table

    lines = [f"# {content['title']}", ""] + [f"- {n}" for n in content["notes"]] + [""]
    lines += _md_table(
        ["", "A", "B"], [*content["facts"], ["best trial", *(_best_words(content["best"][s]) for s in SIDES)]]
    )
    lines += ["", "## Curves", ""]
    curves = content["curves"]
    lines += [f"![curves of both runs]({curves['file']})" if curves.get("file") else curves.get("note", ""), ""]
    lines += ["## Claims", ""]
    rows = [
        [
            row["statement"],
            row["variant"] or "-",
            *(
                item
                for side in SIDES
                for item in (
                    (row[side]["estimate"], row[side]["verdict_words"]) if row[side] else ("-", "not in this run")
                )
            ),
        ]
        for row in content["claims"]
    ]
    lines += _md_table(["claim", "variant", "A: estimate", "A: verdict", "B: estimate", "B: verdict"], rows)
    return "\n".join(lines) + "\n"
