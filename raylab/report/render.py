"""Rendering a report's content (a JSON-able dict built by ``raylab.report``) as HTML or Markdown.

HTML is one self-contained file: figures embedded as base64 PNG (the SVG and PDF files, when
written, sit beside it under ``figures/``), inline CSS, no scripts and no external resources.
Markdown refers to the PNGs beside it (``figures/*.png``).
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222}
body{max-width:1400px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}h3{font-size:1em}
table{border-collapse:collapse;margin:8px 0 16px;font-size:0.85em}
.scroll{overflow-x:auto;max-width:100%}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
td.num{text-align:right;white-space:nowrap}th{background:#f3f3f3}
td.best{background:#e3f4e3;font-weight:bold}.n{color:#888;font-size:0.85em}
.note{background:#fff6e0;border-left:4px solid #e0a800;padding:6px 10px;margin:6px 0}
.ok{background:#eef7ee;border-left:4px solid #3a3;padding:6px 10px;margin:6px 0}
figure{margin:12px 0 24px}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:0.9em;color:#555}code{background:#f4f4f4;padding:0 3px}
td.v-supported{background:#dff2df;font-weight:bold}td.v-not-supported{background:#f8dcdc;font-weight:bold}
td.v-inconclusive{background:#eeeeee}td.v-control{background:#fff0c8}td.v-not-measured{color:#777}
.small{font-size:0.85em;color:#555}.wide{color:#a05a00}
"""

VERDICT_CLASS = {
    "supported": "v-supported",
    "not supported": "v-not-supported",
    "inconclusive": "v-inconclusive",
    "control failed": "v-control",
    "control not measured": "v-control",
    "control not met": "v-control",
    "not measured": "v-not-measured",
}


def fmt_number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(fmt_number(v, 3) for v in value) + "]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


def fmt_cell(cell: dict | None) -> tuple[str, str]:
    """``(value text, count text)`` of an aggregate cell: ``mean ± std`` and ``n=K``."""
    if cell is None:
        return "-", ""
    mean, std = cell["mean"], cell["std"]
    has_std = std is not None and (isinstance(std, list) or (isinstance(std, float) and math.isfinite(std)))
    text = fmt_number(mean) + (f" ± {fmt_number(std, 2)}" if has_std else "")
    return text, f"n={cell['n']}"


# ------------------------------------------------------------------------ HTML


def page_start(title: str) -> list[str]:
    """The opening lines of a self-contained report page (its style inlined) up to its heading;
    ``PAGE_END`` closes it."""
    e = html.escape
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]


PAGE_END = "</body></html>"


def to_html(report: dict[str, Any], out_dir: Path) -> str:
    e = html.escape
    parts = [
        *page_start(report["title"]),
        '<table class="facts">'
        + "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in report["facts"])
        + "</table>",
        "<h2>Status</h2>",
    ]
    notes = report["notes"]
    parts += [f'<div class="note">{e(n)}</div>' for n in notes] or [
        '<div class="ok">every expected trial reported; nothing is missing</div>'
    ]
    parts += _html_claims(report.get("claims", []))
    for agg in report.get("aggregates", []):
        parts += _html_aggregates(agg, out_dir)
    parts.append("<h2>Figures</h2>")
    for figure in report["figures"]:
        if not figure["file"]:
            parts.append(f'<div class="note">figure <b>{e(figure["title"])}</b> not drawn: {e(figure["note"])}</div>')
            continue
        data = base64.b64encode((out_dir / figure["file"]).read_bytes()).decode("ascii")
        parts.append(
            f'<figure id="{e(figure["name"])}"><img alt="{e(figure["title"])}" '
            f'src="data:image/png;base64,{data}"><figcaption>{e(_files(figure))}'
            + (f" · {e(figure['band'])}" if figure.get("band") else "")
            + (f" ({e(figure['note'])})" if figure["note"] else "")
            + "</figcaption></figure>"
        )
    parts.append("<h2>Tables</h2>")
    for table in report["tables"]:
        parts.append(f'<h3 id="{e(table["name"])}">{e(table["title"])}</h3>')
        if not table["blocks"] or not any(b["rows"] for b in table["blocks"]):
            parts.append(f'<div class="note">{e(table.get("note") or "no values yet")}</div>')
        for block in table["blocks"]:
            parts.append(_html_block(block))
    parts += _html_sweep(report.get("sweep") or {}, out_dir)
    parts.append("<h2>Trials</h2>")
    parts.append(_html_plain_table(report["trial_columns"], report["trial_rows"]))
    parts.append("</body></html>")
    return "\n".join(parts)


def _files(figure: dict[str, Any]) -> str:
    """``figures/x.png`` or ``figures/x.png (also .svg, .pdf)``."""
    others = [f.rsplit(".", 1)[-1] for f in figure.get("files", [])[1:]]
    return figure["file"] + (f" (also .{', .'.join(others)})" if others else "")


def _html_block(block: dict[str, Any]) -> str:
    e = html.escape
    best = {tuple(b) for b in block["best"]}
    head = "".join(f"<th>{e(c)}</th>" for c in [block["row_header"], *block["columns"]])
    rows = []
    for i, row in enumerate(block["rows"]):
        cells = []
        for j, cell in enumerate(row["cells"]):
            text, count = fmt_cell(cell)
            cls = ' class="num best"' if (i, j) in best else ' class="num"'
            suffix = f' <span class="n">{e(count)}</span>' if count else ""
            cells.append(f"<td{cls}>{e(text)}{suffix}</td>")
        rows.append(f"<tr><td>{e(row['label'])}</td>{''.join(cells)}</tr>")
    title = f"<p><b>{e(block['title'])}</b></p>" if block["title"] else ""
    notes = "".join(f'<div class="small">{e(n)}</div>' for n in block.get("best_notes", []))
    return (
        f'{title}<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
        f"</table></div>{notes}"
    )


def figure_html(out_dir: Path, file: str, alt: str, caption: str = "") -> str:
    """A PNG of ``out_dir`` as an inline ``<figure>`` (base64, so the page is one file)."""
    e = html.escape
    data = base64.b64encode((out_dir / file).read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{e(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{e(file)}{(' (' + e(caption) + ')') if caption else ''}</figcaption></figure>"
    )


def _html_claims(claims: list[dict[str, Any]]) -> list[str]:
    from raylab.report.evidence import estimate_words, measured_words

    e = html.escape
    parts = ['<h2 id="claims">Claims</h2>']
    if not claims:
        return parts + ['<div class="note">this workload declares no claims</div>']
    parts.append(
        '<p class="small">Each claim of the paper, the statistic that tests it (per seed), its estimate over '
        "seeds with a 95% t interval (a stratified one across strata; a probability of improvement: the "
        "percentile bootstrap, seeds resampled within each stratum), the seeds "
        "that agree, the positive control it rests on, and a verdict. A claim whose control did not pass "
        "gets no verdict; intervals from fewer than 5 seeds are labelled wide.</p>"
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "#",
            "claim",
            "statistic; claimed side",
            "metric",
            "variant",
            "estimate [95% interval]",
            "n",
            "seeds agree",
            "positive control",
            "verdict",
        )
    )
    body = []
    for i, claim in enumerate(claims, start=1):
        rows = claim["rows"]
        control = (
            "<br>".join(
                f"<b>{e(c['state'])}</b>: {e(c['statement'])} "
                f'<span class="small">({e(c.get("threshold_words", ""))}{"; " if c.get("threshold_words") else ""}'
                f"{e(c['detail'])})</span>"
                + (f' <span class="wide">{e(c["smoke_note"])}</span>' if c.get("smoke_note") else "")
                for c in claim["controls"]
            )
            or "none declared"
        )
        for j, row in enumerate(rows):
            span = f' rowspan="{len(rows)}"' if len(rows) > 1 else ""
            first = (
                (
                    f"<td{span}>{i}</td><td{span}>{e(claim['statement'])}</td>"
                    f'<td{span} class="small">{e(claim["test"])}</td>'
                )
                if j == 0
                else ""
            )
            estimate = e(estimate_words(row))
            if row["interval_note"].startswith("wide"):
                estimate = estimate.replace(
                    e(f"({row['interval_note']})"), f'<span class="wide">({e(row["interval_note"])})</span>'
                )
            agree = e(row["agree_words"]) or "-"
            last = f"<td{span}>{control}</td>" if j == 0 else ""
            verdict = VERDICT_CLASS.get(row["verdict"], "")
            body.append(
                f'<tr>{first}<td class="small">{e(measured_words(claim, row))}</td>'
                f'<td>{e(row["variant"]) or "-"}</td><td class="num">{estimate}</td>'
                f'<td class="num">{row["n_seeds"]}</td><td>{agree}</td>{last}'
                f'<td class="{verdict}">{e(row["verdict_words"])}</td></tr>'
            )
    parts.append(
        f'<div class="scroll"><table class="claims"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
    return parts


def _html_aggregates(agg: dict[str, Any], out_dir: Path) -> list[str]:
    from raylab.report.suite import NAMES, interval_words

    e = html.escape
    parts = [f'<h2 id="{e(agg["name"])}">Aggregate performance: {e(agg["title"])}</h2>']
    parts += [f'<div class="note">{e(n)}</div>' for n in agg["notes"]]
    if not agg["shown"]:
        return parts + [f'<div class="note">not shown: {e(agg.get("note", ""))}</div>']
    parts.append(figure_html(out_dir, agg["file"], agg["title"], agg.get("note", "")))
    columns = [fn for fn in ("median", "iqm", "mean", "optimality_gap") if fn in agg["arms"][0]]
    head = "".join(
        f"<th>{e(h)}</th>" for h in ("arm", "seeds", *(NAMES[c] for c in columns), f"P(arm > {agg['reference']})")
    )
    improvement = {x["arm"]: x for x in agg["improvement"]}
    body = "".join(
        f'<tr><td>{e(a["arm"])}</td><td class="num">{a["runs"]}</td>'
        + "".join(f'<td class="num">{e(interval_words(a[c]))}</td>' for c in columns)
        + f'<td class="num">{e(interval_words(improvement.get(a["arm"])))}</td></tr>'
        for a in agg["arms"]
    )
    parts.append(
        f'<p class="small">{e(agg["kind"])} over {len(agg["tasks"])} {e(agg["task_key"])}(s) '
        f"({e(', '.join(agg['tasks']))}); estimate [95% stratified bootstrap interval]"
        + (f'; <span class="wide">{e(agg["note"])}</span>' if agg.get("note") else "")
        + "</p>"
    )
    parts.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
    if agg["normalizers"]:
        rows = "".join(
            f'<tr><td>{e(t)}</td><td class="num">{fmt_number(lo)}</td><td class="num">{fmt_number(hi)}</td></tr>'
            for t, (lo, hi) in agg["normalizers"].items()
        )
        parts.append(
            f'<p class="small">normalising scores (score 0 and 1): {e(agg["source"])}</p>'
            f"<table><thead><tr><th>{e(agg['task_key'])}</th><th>0 (random)</th><th>1 (human)</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>"
        )
    return parts


def _html_sweep(sweep: dict[str, Any], out_dir: Path) -> list[str]:
    e = html.escape
    parts = ['<h2 id="sweep">Sweep</h2>']
    if not sweep.get("shown"):
        return parts + [f'<div class="note">no sweep view: {e(sweep.get("note", "no search space"))}</div>']
    for key in ("parallel", "curves"):
        view = sweep[key]
        if view.get("file"):
            parts.append(figure_html(out_dir, view["file"], f"sweep {key}", view.get("note", "")))
        else:
            parts.append(f'<div class="note">{e(view.get("note", ""))}</div>')
        if key == "parallel":
            parts += _html_importance(sweep["importance"])
    return parts


def _html_importance(imp: dict[str, Any]) -> list[str]:
    e = html.escape
    parts = ["<h3>Hyperparameter importance</h3>"]
    if not imp["rows"]:
        return parts + [f'<div class="note">{e(imp.get("note", ""))}</div>']
    head = "<tr><th>key</th><th>values</th><th>main-effect variance share</th><th>permutation importance (R² drop)</th></tr>"
    body = "".join(
        f'<tr><td>{e(r["key"])}{" (seed: the noise floor)" if r["seed"] else ""}</td><td class="num">{r["values"]}</td>'
        f'<td class="num">{fmt_number(r["variance_share"], 3)}</td>'
        f'<td class="num">{fmt_number(r["permutation"], 3)} ± {fmt_number(r["permutation_std"], 2)}</td></tr>'
        for r in imp["rows"]
    )
    return parts + [
        f'<p class="small">{imp["trials"]} trials; {e(imp["method"])}</p>',
        f"<table><thead>{head}</thead><tbody>{body}</tbody></table>",
    ]


def _html_plain_table(columns: list[str], rows: list[list[Any]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in columns)

    def cell(value: Any) -> str:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return f'<td class="num">{e(fmt_number(value))}</td>' if number else f"<td>{e(fmt_number(value))}</td>"

    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


# ------------------------------------------------------------------------ Markdown


def to_markdown(report: dict[str, Any]) -> str:
    lines = [f"# {report['title']}", ""]
    lines += _md_table(["", ""], [[k, str(v)] for k, v in report["facts"]])
    lines += ["", "## Status", ""]
    lines += [f"- {n}" for n in report["notes"]] or ["- every expected trial reported; nothing is missing"]
    lines += _md_claims(report.get("claims", []))
    for agg in report.get("aggregates", []):
        lines += _md_aggregates(agg)
    lines += ["", "## Figures", ""]
    for figure in report["figures"]:
        if figure["file"]:
            lines += [
                f"![{figure['title']}]({figure['file']})",
                "",
                f"*{figure['title']}*"
                + (f"; {figure['band']}" if figure.get("band") else "")
                + (f" ({figure['note']})" if figure["note"] else ""),
                "",
            ]
        else:
            lines += [f"- figure **{figure['title']}** not drawn: {figure['note']}", ""]
    lines += ["## Tables", ""]
    for table in report["tables"]:
        lines += [f"### {table['title']}", ""] + ([table["note"], ""] if table.get("note") else [])
        for block in table["blocks"]:
            if block["title"]:
                lines += [f"**{block['title']}**", ""]
            best = {tuple(b) for b in block["best"]}
            body = []
            for i, row in enumerate(block["rows"]):
                cells = []
                for j, cell in enumerate(row["cells"]):
                    text, count = fmt_cell(cell)
                    text = f"{text} ({count})" if count else text
                    cells.append(f"**{text}**" if (i, j) in best else text)
                body.append([row["label"], *cells])
            lines += _md_table([block["row_header"], *block["columns"]], body) + [""]
            lines += [f"*{n}*" for n in block.get("best_notes", [])] + ([""] if block.get("best_notes") else [])
    lines += _md_sweep(report.get("sweep") or {})
    lines += ["## Trials", ""]
    lines += _md_table(report["trial_columns"], [[fmt_number(v) for v in row] for row in report["trial_rows"]])
    return "\n".join(lines) + "\n"


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def _md_claims(claims: list[dict[str, Any]]) -> list[str]:
    from raylab.report.evidence import controls_words, estimate_words, measured_words

    lines = ["", "## Claims", ""]
    if not claims:
        return lines + ["this workload declares no claims"]
    rows = []
    for i, claim in enumerate(claims, start=1):
        for row in claim["rows"]:
            rows.append(
                [
                    str(i),
                    claim["statement"],
                    measured_words(claim, row),
                    row["variant"] or "-",
                    estimate_words(row),
                    str(row["n_seeds"]),
                    row["agree_words"] or "-",
                    row["verdict_words"],
                ]
            )
    lines += _md_table(
        ["#", "claim", "metric", "variant", "estimate [95% interval]", "n", "seeds agree", "verdict"], rows
    )
    lines.append("")
    for i, claim in enumerate(claims, start=1):
        lines.append(f"{i}. statistic: {claim['test']}. Positive control: {controls_words(claim)}")
    return lines


def _md_aggregates(agg: dict[str, Any]) -> list[str]:
    from raylab.report.suite import NAMES, interval_words

    lines = ["", f"## Aggregate performance: {agg['title']}", ""] + [f"- {n}" for n in agg["notes"]]
    if not agg["shown"]:
        return lines + [f"not shown: {agg.get('note', '')}"]
    columns = [fn for fn in ("median", "iqm", "mean", "optimality_gap") if fn in agg["arms"][0]]
    improvement = {x["arm"]: x for x in agg["improvement"]}
    lines += [
        f"![{agg['title']}]({agg['file']})",
        "",
        f"*{agg['kind']}, n = {agg['seeds']} seeds x {len(agg['tasks'])} {agg['task_key']}(s)"
        + (f"; {agg['note']}" if agg.get("note") else "")
        + "*",
        "",
    ]
    lines += _md_table(
        ["arm", "seeds", *(NAMES[c] for c in columns), f"P(arm > {agg['reference']})"],
        [
            [a["arm"], a["runs"], *(interval_words(a[c]) for c in columns), interval_words(improvement.get(a["arm"]))]
            for a in agg["arms"]
        ],
    )
    if agg["normalizers"]:
        lines += ["", f"normalising scores: {agg['source']}", ""]
        lines += _md_table(
            [agg["task_key"], "0 (random)", "1 (human)"],
            [[t, fmt_number(lo), fmt_number(hi)] for t, (lo, hi) in agg["normalizers"].items()],
        )
    return lines


def _md_sweep(sweep: dict[str, Any]) -> list[str]:
    lines = ["## Sweep", ""]
    if not sweep.get("shown"):
        return lines + [f"no sweep view: {sweep.get('note', 'no search space')}", ""]
    for key in ("parallel", "curves"):
        view = sweep[key]
        lines += [f"![sweep {key}]({view['file']})", ""] if view.get("file") else [view.get("note", ""), ""]
    imp = sweep["importance"]
    lines += ["### Hyperparameter importance", ""]
    if not imp["rows"]:
        return lines + [imp.get("note", ""), ""]
    lines += [f"{imp['trials']} trials; {imp['method']}", ""]
    lines += _md_table(
        ["key", "values", "main-effect variance share", "permutation importance (R² drop)"],
        [
            [
                r["key"] + (" (seed)" if r["seed"] else ""),
                r["values"],
                fmt_number(r["variance_share"], 3),
                f"{fmt_number(r['permutation'], 3)} ± {fmt_number(r['permutation_std'], 2)}",
            ]
            for r in imp["rows"]
        ],
    )
    return lines + [""]
