"""Rendering a report's content (a JSON-able dict built by ``raylab.report``) as HTML or Markdown.

HTML is one self-contained file: figures embedded as base64 PNG, inline CSS, no scripts and no
external resources. Markdown refers to the PNGs beside it (``figures/*.png``).
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
"""


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


def to_html(report: dict[str, Any], out_dir: Path) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(report['title'])}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(report['title'])}</h1>",
        '<table class="facts">' + "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>"
                                          for k, v in report["facts"]) + "</table>",
        "<h2>Status</h2>",
    ]
    notes = report["notes"]
    parts += [f'<div class="note">{e(n)}</div>' for n in notes] or ['<div class="ok">every expected trial '
                                                                     "reported; nothing is missing</div>"]
    parts.append("<h2>Figures</h2>")
    for figure in report["figures"]:
        if not figure["file"]:
            parts.append(f'<div class="note">figure <b>{e(figure["title"])}</b> not drawn: '
                         f'{e(figure["note"])}</div>')
            continue
        data = base64.b64encode((out_dir / figure["file"]).read_bytes()).decode("ascii")
        parts.append(
            f'<figure id="{e(figure["name"])}"><img alt="{e(figure["title"])}" '
            f'src="data:image/png;base64,{data}"><figcaption>{e(figure["file"])}'
            + (f" ({e(figure['note'])})" if figure["note"] else "") + "</figcaption></figure>"
        )
    parts.append("<h2>Tables</h2>")
    for table in report["tables"]:
        parts.append(f'<h3 id="{e(table["name"])}">{e(table["title"])}</h3>')
        if not table["blocks"] or not any(b["rows"] for b in table["blocks"]):
            parts.append(f'<div class="note">{e(table.get("note") or "no values yet")}</div>')
        for block in table["blocks"]:
            parts.append(_html_block(block))
    parts.append("<h2>Trials</h2>")
    parts.append(_html_plain_table(report["trial_columns"], report["trial_rows"]))
    parts.append("</body></html>")
    return "\n".join(parts)


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
    return f"{title}<div class=\"scroll\"><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"


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
    lines += ["", "## Figures", ""]
    for figure in report["figures"]:
        if figure["file"]:
            lines += [f"![{figure['title']}]({figure['file']})", "",
                      f"*{figure['title']}*" + (f" ({figure['note']})" if figure["note"] else ""), ""]
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
    lines += ["## Trials", ""]
    lines += _md_table(report["trial_columns"], [[fmt_number(v) for v in row] for row in report["trial_rows"]])
    return "\n".join(lines) + "\n"


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out
