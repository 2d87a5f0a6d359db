"""The long science tests' findings, kept where the workload pages read them.

A science test calls ``record(name, seeds, lines)`` with every statistic it asserts or prints.
With ``RAYLAB_SCIENCE_RECORD`` set to a folder (the repository keeps them in ``docs/science/``),
the lines are written to ``<folder>/<name>/<seeds>.json``; without it nothing is written.

``python tests/science_findings.py`` rewrites, in each workload's README and documentation page,
the block between ``<!-- science-findings: NAME -->`` and ``<!-- /science-findings -->`` from
those files: one table, a row per statistic, a column per seed set.
``tests/docs/test_science_findings.py`` fails when a page's block is not what the files give, so
the claim lines a reader sees are the ones the tests computed.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

RECORD_ENV = "RAYLAB_SCIENCE_RECORD"
REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "docs" / "science"
PAGES = ("trainers/{workload}/README.md", "docs/workloads/{workload}.md")
BLOCK = re.compile(r"(<!-- science-findings: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /science-findings -->)", re.S)


@dataclass(frozen=True)
class Line:
    """One statistic over the seeds of a set: per-seed ``values``, their mean and, for a difference,
    its 95% t interval (``low``, ``high``; NaN for a level), and, for what the test asserts, its
    bound in words and whether it held."""

    statistic: str
    values: tuple[float, ...]
    mean: float
    low: float = math.nan
    high: float = math.nan
    bound: str = ""
    holds: bool | None = None
    level: bool = False
    """A level (an accuracy, a share) rather than a difference between arms."""

    @property
    def role(self) -> str:
        return "printed" if self.holds is None else "asserted"


def seeds_label(seeds: Sequence[int]) -> str:
    """``80-84`` for a run of consecutive seeds, else the seeds comma-separated."""
    s = list(seeds)
    if len(s) > 2 and s == list(range(s[0], s[0] + len(s))):
        return f"{s[0]}-{s[-1]}"
    return ",".join(map(str, s))


def record(name: str, seeds: Sequence[int], lines: Sequence[Line], folder: str | None = None) -> Path | None:
    """Write ``lines`` for ``seeds`` under ``$RAYLAB_SCIENCE_RECORD/<name>/`` (or ``folder``);
    nothing without either. Returns the file written."""
    folder = folder or os.environ.get(RECORD_ENV, "").strip()
    if not folder:
        return None
    path = Path(folder) / name / f"{seeds_label(seeds)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(line), "values": [float(v) for v in line.values]} for line in lines]
    path.write_text(json.dumps({"seeds": list(seeds), "lines": rows}, indent=1, allow_nan=True) + "\n")
    return path


def read(name: str, folder: Path = RECORDS) -> dict[str, list[Line]]:
    """Every seed set recorded for ``name``: ``{seeds label: lines}``, sets in order of their first seed."""
    out = {}
    files = sorted((folder / name).glob("*.json"), key=lambda p: json.loads(p.read_text())["seeds"][0])
    for path in files:
        data = json.loads(path.read_text())
        out[seeds_label(data["seeds"])] = [Line(**{**r, "values": tuple(r["values"])}) for r in data["lines"]]
    return out


def cell(line: Line) -> str:
    """A difference over seeds as ``+0.057 [+0.012, +0.102], 4/5 above 0``; a level as ``0.981
    [0.959, 1.003], 0.904 to 1.000 per seed`` (without an interval where there is none); then
    whether an asserted bound held."""
    if line.level or math.isnan(line.low):
        interval = "" if math.isnan(line.low) else f" [{line.low:.3f}, {line.high:.3f}]"
        text = f"{line.mean:.3f}{interval}, {min(line.values):.3f} to {max(line.values):.3f} per seed"
    else:
        above = sum(v > 0 for v in line.values)
        text = f"{line.mean:+.3f} [{line.low:+.3f}, {line.high:+.3f}], {above}/{len(line.values)} above 0"
    if line.holds is not None:
        text += ": **holds**" if line.holds else ": **fails**"
    return text


def render(name: str, folder: Path = RECORDS) -> str:
    """The markdown table of every seed set recorded for ``name``."""
    sets = read(name, folder)
    if not sets:
        return f"No seed set of `{name}` recorded yet.\n"
    order: list[tuple[str, str]] = []
    for lines in sets.values():
        for line in lines:
            if (line.statistic, line.bound) not in order:
                order.append((line.statistic, line.bound))
    head = "| statistic | asserted | " + " | ".join(f"seeds {label}" for label in sets) + " |"
    rows = [head, "| --- | --- | " + " | ".join("---" for _ in sets) + " |"]
    for statistic, bound in order:
        cells = []
        for lines in sets.values():
            found = [line for line in lines if (line.statistic, line.bound) == (statistic, bound)]
            cells.append(cell(found[0]) if found else "not recorded")
        words = [text.replace("|", "\\|") for text in (statistic, bound or "no (printed)")]
        rows.append(f"| {words[0]} | {words[1]} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def rewrite(text: str, folder: Path = RECORDS) -> str:
    """``text`` with each science-findings block replaced by its rendered table."""
    return BLOCK.sub(lambda m: m.group(1) + "\n" + render(m.group("name"), folder) + "\n" + m.group(4), text)


def pages() -> list[Path]:
    return [
        REPO / p.format(workload=w.name)
        for w in sorted((REPO / "trainers").iterdir())
        for p in PAGES
        if (REPO / p.format(workload=w.name)).exists()
    ]


def main() -> int:
    changed = 0
    for page in pages():
        text = page.read_text()
        new = rewrite(text)
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(REPO)}")
            changed += 1
    print(f"{changed} page(s) rewritten from {RECORDS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
