"""A workload's ``figures.py`` declares its report through ``raylab.report.spec`` and
``raylab.report.claims``: importing them loads neither the report's build nor its numerics."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def heavy_modules_after(code: str, root: Path = REPO) -> list[str]:
    """Which of scipy and matplotlib a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in ('scipy', 'matplotlib') if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env, cwd=root)
    return out.stdout.split()


def test_the_report_declarations_load_no_scipy():
    assert heavy_modules_after("import raylab.report.spec, raylab.report.claims") == []
    assert "scipy" in heavy_modules_after("import raylab.report.writer")  # the probe sees it when it is there
