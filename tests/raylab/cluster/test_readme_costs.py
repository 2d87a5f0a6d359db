"""The cost table of docs/cluster.md is what ``--dry-run --cluster cluster/gpu.yaml`` prints.

Each row of the table under "**Costs.**" is compared, field by field, with the lines
``raylab.cluster.plan.plan_text`` prints for that experiment on ``cluster/gpu.yaml``; and every
shipped GPU experiment has a row with known hours and dollars (an ``estimate:`` in its file),
or a row saying why its plan is refused (a trial larger than the node's memory).
``python tests/raylab/cluster/test_readme_costs.py`` prints the table from the code.
"""

from __future__ import annotations

import re
from pathlib import Path

from raylab import experiment as experiments
from raylab import search_space
from raylab.cluster import plan
from raylab.errors import UserError

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = REPO / "cluster" / "gpu.yaml"
FIELDS = {  # the table's column -> the piece of the dry run's text it shows
    "nodes at the cap": r"at the cap (\d+ x \S+) \(of",
    "trials (at once)": r"(\d+) of (\d+) trials at once",
    "$/h at the cap": r"price at the cap: (\$[\d,.]+)/h",
    "trial-hours": r"= ([\d,.]+) trial-hours",
    "GPU-hours": r"trial-hours, ([\d,.]+) GPU-hours",
    "wall time at the cap": r"wave\(s\) x [^=]+= ([^;]+);",
    "dollars": r"; about (\$[\d,.]+) \(",
    "spot $/h at the cap": r"on-demand vs spot at the cap: \$[\d,.]+/h vs (\$[\d,.]+)/h",
    "spot dollars": r"on-demand vs spot expected: about \$[\d,.]+ in .+? vs (\$[\d,.]+) in",
    "spot preemptions (re-run node-hours)": r"spot preemptions: .*?, ([\d,.]+) expected, ([\d,.]+) node-hours re-run",
    "rate": r"; about \$[\d,.]+ \(rate ((?:not )?measured)",
    "checkpoints in S3": r"= ([\d,.]+ GB) \(S3",
}


HEADER = "| experiment | nodes at the cap"


def readme_rows() -> dict[str, dict[str, str]]:
    text = (REPO / "docs" / "cluster.md").read_text()
    table = text[text.index(HEADER) :]
    lines = table.splitlines()
    lines = lines[: next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header[1:], cells[1:]))
    return rows


REFUSED = re.compile(r"needs ([\d,.]+ GB) of memory .* the largest node type, (\S+) \(\S+\), has ([\d,.]+ GB)")


def printed(name: str) -> dict[str, str]:
    try:
        text = plan.plan_text(experiments.load(name, []), GPU_YAML) + "\n"
    except UserError as err:
        match = REFUSED.search(str(err))
        assert match, err
        need, node, size = match.groups()
        return {
            column: f"refused: a trial needs {need}, {node} has {size}" if column == "nodes at the cap" else "-"
            for column in FIELDS
        }
    out = {}
    for column, pattern in FIELDS.items():
        match = re.search(pattern, text)
        if match is None:
            out[column] = "-"
        elif column == "trials (at once)":
            out[column] = f"{match.group(2)} ({match.group(1)})"
        elif match.lastindex == 2:
            out[column] = f"{match.group(1)} ({match.group(2)})"
        else:
            out[column] = match.group(1)
    return out


def gpu_experiments() -> list[str]:
    names = []
    for path in sorted((REPO / "tune_configs").glob("*.yaml")):
        experiment = experiments.load(path.stem, [])
        if experiment.resources.total()["GPU"] > 0 and search_space.grid_size(experiment.search):
            names.append(path.stem)
    return names


def test_readme_cost_table_equals_the_dry_run():
    rows = readme_rows()
    assert "dqn_softlinf" in rows and len(rows) >= 10
    for name, row in rows.items():
        assert row == printed(name), name


def test_every_shipped_gpu_experiment_has_a_costed_row():
    rows = readme_rows()
    missing = [name for name in gpu_experiments() if name not in rows]
    assert not missing, missing
    for name in gpu_experiments():
        if rows[name]["nodes at the cap"].startswith("refused"):
            continue  # its plan is refused (checked against the code in the test above)
        assert "unknown" not in plan.plan_text(experiments.load(name, []), GPU_YAML), name
        assert rows[name]["dollars"].startswith("$"), name


def table() -> str:
    """The cluster page's table, as the code prints it now (to paste after a change)."""
    rows = readme_rows()
    lines = ["| experiment | " + " | ".join(FIELDS) + " |", "| --- " * (len(FIELDS) + 1) + "|"]
    for name in rows:
        lines.append(f"| {name} | " + " | ".join(printed(name).values()) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
