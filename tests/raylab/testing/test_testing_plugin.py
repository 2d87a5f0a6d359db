"""``raylab.testing`` as a lab uses it: a tiny lab package written to a temporary folder, its
workload and experiments registered through the entry-point groups, tested by its own pytest
run with ``-p raylab.testing``, which joins this session's Ray."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

FILES = {
    # An installed distribution's metadata: importlib.metadata finds it on sys.path, as pip
    # would leave it; its entry points register the workload and the experiment folder.
    "minilab-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: minilab\nVersion: 0.1\n",
    "minilab-0.1.dist-info/entry_points.txt": """
        [raylab.workloads]
        mini = minilab:WORKLOAD

        [raylab.experiments]
        minilab = minilab_configs
        """,
    "minilab/__init__.py": """
        from raylab.workloads import Workload

        WORKLOAD = Workload(config="minilab.loop:Config", loop="minilab.loop:train_loop",
                            metrics=("train/loss", "train/step"), description="the lab's toy")
        """,
    "minilab/loop.py": '''
        from dataclasses import dataclass

        from raylab import session
        from raylab.config import from_dict, check


        @dataclass(frozen=True)
        class Config:
            steps: int = 40
            """Gradient steps on x**2."""
            lr: float = 0.1
            """Step size."""
            start: float = 1.0
            """Where x starts."""

            def __post_init__(self):
                check(self.steps >= 1, "steps", "must be >= 1")


        def train_loop(config):
            cfg = from_dict(Config, config, "trial config")
            state = session.restore()
            step, x = (state["step"], state["x"]) if state else (0, cfg.start)
            while step < cfg.steps:
                x, step = x - cfg.lr * 2 * x, step + 1
                session.report({"train/loss": x * x, "train/step": step},
                               state=lambda: {"step": step, "x": x})
        ''',
    "minilab_configs/__init__.py": "",
    "minilab_configs/mini_descent.yaml": """
        # python -m raylab.tune mini_descent
        description: gradient descent on x**2 from two starts
        workload: mini
        metric: train/loss
        mode: min
        config: {steps: 40}
        search:
          start: [1.0, -2.0]
        resources: {workers: 1, cpus_per_worker: 1}
        smoke:
          config: {steps: 6}
          search: {start: [-2.0]}
        """,
    # the control: a metric the workload does not report, which the check must refuse
    "minilab_configs/mini_typo.yaml": """
        # python -m raylab.tune mini_typo
        workload: mini
        metric: eval/acuracy
        mode: max
        smoke:
          config: {steps: 2}
        """,
    "tests/test_minilab.py": """
        from pathlib import Path

        import minilab
        import pytest
        from raylab import workloads
        from raylab.testing import (check_smoke_result, validate_experiment, validate_workload,
                                    workload_api_violations)


        def test_workload_is_registered_and_valid():
            assert workloads.get("mini") is minilab.WORKLOAD
            validate_workload("mini")


        def test_experiment_validates():
            full, smoke = validate_experiment("mini_descent")
            assert smoke.resolved_config()["steps"] == 6 and full.search["start"]["grid"] == [1.0, -2.0]


        def test_typo_is_refused():
            validate_experiment("mini_typo")


        def test_workload_uses_the_declared_api():
            assert workload_api_violations(Path(minilab.__file__).parent.rglob("*.py")) == []


        def test_smoke_sweep(smoke_sweep):
            results, run_path, experiment = smoke_sweep("mini_descent")
            check_smoke_result(results, experiment)
            assert [r.metrics["train/loss"] for r in results] == pytest.approx([4 * 0.8 ** 12])
            assert Path(run_path, "experiment.yaml").is_file()


        def test_local_trial(local_trial):
            rows = local_trial("mini_descent")
            assert [r["train/step"] for r in rows] == [1, 2, 3, 4, 5, 6]
        """,
}


def write_lab(root: Path) -> None:
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


@pytest.mark.slow
def test_a_lab_package_is_validated_and_smoke_swept_with_the_plugin(tmp_path, ray_session):
    lab = tmp_path / "lab"
    write_lab(lab)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(lab), str(REPO)]),
        "RAYLAB_TEST_RAY_ADDRESS": ray_session.get_runtime_context().gcs_address,
    }
    env.pop("RAYLAB_CONFIGS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "raylab.testing",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rfE",
            "--durations=0",
            "tests",
        ],
        cwd=lab,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    print(out)
    summary = re.search(r"(\d+) failed, (\d+) passed", out)
    assert summary and summary.groups() == ("1", "5"), out[-4000:]
    # the one failure is the control, and its line names the file, the metric and what is reported
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and "test_typo_is_refused" in failed[0], out[-4000:]
    assert re.search(
        r"mini_typo\.yaml: metric 'eval/acuracy' is not reported by workload 'mini'; "
        r"it reports: train/loss, train/step",
        out,
    ), out[-4000:]
