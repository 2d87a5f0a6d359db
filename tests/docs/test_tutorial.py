"""docs/tutorial.md runs: every code block, in order, in a fresh project folder (files written,
commands run); and a block that fails fails the test.

The tutorial's sweep starts its own local Ray, as it does for a reader: joining this session's
Ray would need ``--shared-storage`` on the page's command line (a joined cluster's trials may run
on other nodes), which a reader on one machine does not type."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from markdown_blocks import BlockFailed, blocks, run_blocks
from tutorial_env import REPO, make_env

TUTORIAL = REPO / "docs" / "tutorial.md"


@pytest.mark.slow
def test_the_tutorial_runs_from_an_empty_folder(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    env = make_env(tmp_path)
    outputs = run_blocks(TUTORIAL, project, env)
    # the page's own checks ran; and what it promises is there: two finished trials, a report
    assert len(outputs) == len([b for b in blocks(TUTORIAL.read_text()) if not b.title])
    run = project / "results" / "ridge-smoke-first"
    report = json.loads((run / "report" / "report.json").read_text())
    assert [c["statement"][:25] for c in report["claims"]] == ["Weight decay lowers the h"]
    assert (run / "report" / "report.html").stat().st_size > 10_000


def test_a_failing_block_fails_naming_its_line(tmp_path):
    page = tmp_path / "page.md"
    env = make_env(tmp_path)
    cases = (  # (page body after 4 lines, what the failure says, the failing block's line)
        (
            '```python title="pkg/mod.py"\nX = 1\n```\n\n```python\nimport pkg.mod\nassert pkg.mod.X == 2\n```\n',
            "AssertionError",
            9,
        ),
        ("```bash\ntrue\nfalse\necho never\n```\n", "exit 1", 5),
        ("```text\nnot code\n```\n", "neither a file", 5),
    )
    for body, expect, line in cases:
        page.write_text("# A page\n\nSome text.\n\n" + body)
        with pytest.raises(BlockFailed, match=expect) as failed:
            run_blocks(page, tmp_path, env)
        assert str(failed.value).startswith(f"page.md:{line}:"), failed.value
    page.write_text('```python title="pkg/ok.py"\nX = 2\n```\n\n```python\nimport pkg.ok\nassert pkg.ok.X == 2\n```\n')
    assert run_blocks(page, tmp_path, env) == [""]  # the control: a page whose blocks pass
