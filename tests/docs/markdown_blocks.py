"""Run a Markdown page's code blocks in order, as a reader who copies them would.

A fenced block with a ``title="PATH"`` (MkDocs Material shows it as the file's name) is written to
PATH under the project folder; a ``bash`` block runs in bash (``-euo pipefail``) from that
folder; a ``python`` block without a title runs as a script there. Any other block is an error,
so that every code block of a page is either written or run.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,})(?P<info>[^`]*)$")
TITLE = re.compile(r'title="(?P<path>[^"]+)"')


@dataclass(frozen=True)
class Block:
    lang: str
    title: str
    code: str
    line: int
    """The line of the opening fence (1-based), for error messages."""


def blocks(markdown: str) -> list[Block]:
    """The fenced code blocks of ``markdown``, in order."""
    found, lines, i = [], markdown.splitlines(), 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence, info = opened["indent"], opened["fence"], opened["info"].strip()
        body, j = [], i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise ValueError(f"line {i + 1}: code block never closed")
        title = TITLE.search(info)
        found.append(
            Block(info.split()[0] if info else "", title["path"] if title else "", "\n".join(body) + "\n", i + 1)
        )
        i = j + 1
    return found


class BlockFailed(AssertionError):
    pass


def run_blocks(page: Path, project: Path, env: dict[str, str], timeout: float = 300) -> list[str]:
    """Write or run each block of ``page`` in ``project``; return each run block's output.

    Raises ``BlockFailed`` naming the page's line of the first block that fails (or that is of
    a kind this runner neither writes nor runs)."""
    outputs = []
    for block in blocks(page.read_text()):
        where = f"{page.name}:{block.line}"
        if block.title:
            target = project / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            continue
        if block.lang in ("bash", "sh", "shell"):
            command = ["bash", "-euo", "pipefail", "-c", block.code]
        elif block.lang == "python":
            command = ["python", "-c", block.code]
        else:
            raise BlockFailed(f"{where}: a ```{block.lang or ''} block is neither a file (title=) nor bash/python")
        done = subprocess.run(
            command, cwd=project, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        out = done.stdout + done.stderr
        outputs.append(out)
        if done.returncode != 0:
            raise BlockFailed(f"{where}: exit {done.returncode}\n--- block:\n{block.code}--- output:\n{out[-6000:]}")
    return outputs
