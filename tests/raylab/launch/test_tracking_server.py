"""Trackers against real servers: MLflow's reachability check times the server, not the import
of its client; a sweep tracked over HTTP to a real ``mlflow server`` is read back whole."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from raylab.launch.trackers import logger_option
from raylab.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[3]
MLFLOW_SERVER_ENV = "RAYLAB_MLFLOW_SERVER"
"""The ``mlflow`` command that serves (the full package; the Makefile installs it into
``.venv-mlflow``, beside the main environment's client-only ``mlflow-skinny``)."""


def test_the_mlflow_reachability_clock_starts_after_the_client_is_imported(tmp_path):
    """A client whose import takes longer than the whole check's window still gets its answer:
    only the server's answer is timed (a cold ``import mlflow`` takes seconds on a busy machine)."""
    fake = tmp_path / "mlflow"
    (fake / "tracking").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "tracking" / "__init__.py").write_text(
        "import time\ntime.sleep(1.5)  # a slow cold import\n"
        "class MlflowClient:\n"
        "    def __init__(self, tracking_uri):\n        self.uri = tracking_uri\n"
        "    def search_experiments(self, max_results):\n        return []\n"
    )
    check = (
        "import sys; sys.path.insert(0, sys.argv[1]); from raylab.launch.trackers import logger_option; "
        "logger_option._ask_mlflow_server('http://127.0.0.1:5000', '--logger mlflow', timeout_s=1.0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def mlflow_server_command() -> str | None:
    """The ``mlflow`` command of the full package: ``RAYLAB_MLFLOW_SERVER``, else ``.venv-mlflow``'s."""
    command = os.environ.get(MLFLOW_SERVER_ENV) or str(ROOT / ".venv-mlflow" / "bin" / "mlflow")
    return command if Path(command).is_file() else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on 127.0.0.1 with its own SQLite store; its URI."""
    command = mlflow_server_command()
    if command is None:
        pytest.skip(f"no mlflow server command (make installs .venv-mlflow; or set {MLFLOW_SERVER_ENV})")
    port = free_port()
    log = open(tmp_path / "mlflow-server.log", "w")
    server = subprocess.Popen(
        [
            command,
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--artifacts-destination",
            str(tmp_path / "artifacts"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240  # a cold start on 2 busy cores: tens of seconds
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not come up: {(tmp_path / 'mlflow-server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()


@pytest.mark.slow
def test_a_sweep_tracked_to_a_real_mlflow_server_is_read_back_whole(ray_session, mlflow_server, tmp_path, monkeypatch):
    """``MLFLOW_TRACKING_URI=http://127.0.0.1:PORT`` with a real server: the check before Ray
    passes, and every trial's run holds its swept and fixed params and each metric at the
    workload's step (``train/step``), as the trial reported them."""
    from mlflow.tracking import MlflowClient

    from raylab import experiment as experiments
    from raylab.launch import sweep

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    run = RunFolder.under(str(tmp_path / "results"), "toy-server")
    logger_option.check_targets(["mlflow"], run)  # what the CLI runs first
    experiment = experiments.load("toy", [], smoke=True)
    done = sweep.run(experiment, run, verbose=0, loggers=["mlflow"])
    assert [r.error for r in done.results] == [None, None]

    client = MlflowClient(tracking_uri=mlflow_server)
    (exp,) = [e for e in client.search_experiments() if e.name == "toy"]
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2 and {r.data.tags["raylab.run"] for r in runs} == {"toy-server"}
    by_seed = {int(r.data.params["seed"]): r for r in runs}
    for result in done.results:
        tracked = by_seed[result.config["seed"]]
        assert tracked.data.params["lr"] == str(result.config["lr"])
        assert tracked.data.params["steps"] == "60" and tracked.info.status == "FINISHED"
        rows = result.metrics_dataframe
        history = client.get_metric_history(tracked.info.run_id, "eval/mse")
        assert [m.step for m in history] == [int(s) for s in rows["train/step"]]
        assert [m.value for m in history] == pytest.approx(list(rows["eval/mse"]))


@pytest.mark.slow
@pytest.mark.long
def test_ctrl_c_stops_a_sweep_tracked_to_a_server_and_wandb_within_a_minute(mlflow_server, tmp_path):
    """Trackers on (a real MLflow server over HTTP, W&B offline, TensorBoard): Ctrl-C while a
    trial is held mid-run ends the sweep, with its resume line, within 60 s."""
    import signal

    from raylab.run_folder import RunFolder

    release = tmp_path / "release"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MLFLOW_TRACKING_URI": mlflow_server,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "wandb"),
    }
    (tmp_path / "wandb").mkdir()
    argv = [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--storage", str(tmp_path), "--name", "held"]
    argv += ["search.seed=[0]", "config.hold_at_step=20", f"config.release_file={release}", "--quiet"]
    argv += ["--logger", "mlflow", "--logger", "wandb", "--logger", "tensorboard"]
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "held"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        trials = RunFolder(str(run)).trials() if run.is_dir() else []
        if trials and trials[0].rows():
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    else:
        pytest.fail("the trial never reported")
    stopped = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - stopped
    assert proc.returncode == 130, err[-3000:]
    assert "--resume --name held" in err
    assert took < 60, f"{took:.0f} s from Ctrl-C to exit"
