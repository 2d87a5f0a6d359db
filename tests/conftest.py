"""This repository's own test setup. The shared fixtures (one Ray instance per test session,
sweep/trial runners, torch on one thread) come from the ``raylab.testing`` plugin, which
pyproject.toml loads (``-p raylab.testing``) as a lab's own package would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raylab.testing import assert_finite_metrics  # noqa: F401 - tests import it from here

# Loops that live in tests/ (faulty and failing loops) are imported by module path in Ray
# workers, whose working directory is not the repository's: they find it on PYTHONPATH.
REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)


def pytest_terminal_summary(terminalreporter):
    """Count the deprecation warnings of the run (they are not filtered: see pyproject.toml)."""
    warned = terminalreporter.stats.get("warnings", [])
    deprecations = [
        w
        for w in warned
        if "Deprecat" in str(getattr(w, "message", "")) or "FutureWarning" in str(getattr(w, "message", ""))
    ]
    terminalreporter.write_line(
        f"deprecation warnings: {len(deprecations)} (of {len(warned)} warnings); see the warnings summary above"
    )


LONG_TESTS = os.environ.get("RAYLAB_LONG_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``long`` (multi-seed science, repeated fault scenarios) are skipped, naming the
    variable, unless ``RAYLAB_LONG_TESTS=1``: the default run stays under 25 minutes on 2 cores."""
    if LONG_TESTS:
        return
    skip = pytest.mark.skip(reason="long: RAYLAB_LONG_TESTS=1 runs it (make test-long)")
    for item in items:
        if item.get_closest_marker("long"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _torch_switches_restored():
    """Each test starts with torch's process-wide determinism switches as the session had them.

    A library run in the pytest process may flip them and leave them flipped (RLlib's seeding
    turns deterministic algorithms on, on a CPU build of torch), which would make a later test's
    outcome depend on the order tests run in."""
    import sys

    def switches(torch):
        return (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic,
        )

    torch = sys.modules.get("torch")
    before = switches(torch) if torch is not None else (False, False, False, False)  # torch's defaults
    yield
    torch = sys.modules.get("torch")
    if torch is not None and switches(torch) != before:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]
