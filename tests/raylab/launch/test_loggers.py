"""--logger mlflow|wandb|tensorboard: each tracker receives the whole run, read back with its own reader."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from raylab import tune as raylab_tune
from raylab.errors import UserError
from raylab.experiment import new_run_name
from raylab.launch.trackers import logger_option
from raylab.run_folder import RunFolder

REPO = Path(__file__).resolve().parents[3]


def test_unknown_or_missing_logger_is_a_user_error():
    with pytest.raises(UserError, match="expected one of mlflow, wandb, tensorboard"):
        logger_option.check(["comet"])
    done = subprocess.run(
        [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--logger", "comet"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2 and "--logger comet" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_every_tracker_gets_the_whole_config_the_provenance_and_the_workloads_counter(
    ray_session, tmp_path, monkeypatch
):
    """A toy smoke sweep with ``--logger mlflow wandb tensorboard``, read back with each tool's
    own reader: every Config field (defaults included: toy's YAML sets 4 of its 10), the git
    commit, and ``eval/mse`` stepped by toy's ``train/step`` (20, 40, 60), not by Tune's
    ``training_iteration`` (1, 2, 3)."""
    import dataclasses
    import json

    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboardX")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb").mkdir()
    from raylab import experiment as experiments
    from raylab import provenance
    from raylab.launch import sweep
    from trainers.toy.config import Config

    experiment = experiments.load("toy", ["search.seed=[0]"], smoke=True)
    run = RunFolder.under(str(tmp_path / "results"), new_run_name(experiment))
    (result,) = sweep.run(experiment, run, verbose=0, loggers=["mlflow", "wandb", "tensorboard"]).results
    assert result.error is None
    fields = dataclasses.asdict(Config(steps=60, report_every=20, lr=0.05, seed=0))
    expected = {k: str(v) for k, v in fields.items()}
    git = provenance.git_state(REPO)
    steps = [20, 40, 60]

    client = mlflow.tracking.MlflowClient(tracking_uri=f"file://{run.location}/mlruns")
    (exp,) = [e for e in client.search_experiments() if e.name == "toy"]
    (mlrun,) = client.search_runs([exp.experiment_id])
    assert mlrun.data.params == expected  # every field, nothing else
    tags = mlrun.data.tags
    assert tags["mlflow.source.git.commit"] == git["commit"] and tags["raylab.git.dirty"] == str(git["dirty"])
    assert "pytest" in tags["mlflow.source.name"] and tags["raylab.versions.ray"] == provenance.versions()["ray"]
    history = client.get_metric_history(mlrun.info.run_id, "eval/mse")
    assert [m.step for m in history] == steps
    assert history[-1].value == pytest.approx(result.metrics["eval/mse"])

    (offline,) = (tmp_path / "wandb").rglob("offline-run-*/run-*.wandb")  # one trial, one run
    records = wandb_records(offline)
    kinds = [r.WhichOneof("record_type") for r in records]
    (meta,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert meta.project == "raylab" and meta.run_group == run.name and meta.git.commit == git["commit"]
    environments = [r.environment for r in records if r.WhichOneof("record_type") == "environment"]
    assert any(e.git.commit == git["commit"] and "pytest" in e.program for e in environments), environments
    config = {item.key: json.loads(item.value_json) for item in meta.config.update}
    assert {k: str(v) for k, v in config.items() if k in expected} == expected
    assert config["raylab.git.dirty"] == git["dirty"] and "pytest" in config["raylab.command_line"]
    axes = {
        m.glob_name or m.name: m.step_metric
        for r in records
        if r.WhichOneof("record_type") == "metric"
        for m in [r.metric]
    }
    assert axes.get("*") == "train/step", (kinds, axes)
    rows = [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert [row["train/step"] for row in rows if "eval/mse" in row] == steps, rows

    scalars = tensorboard_events(Path(result.path))
    assert [step for step, _ in scalars["eval/mse"]] == steps
    assert scalars["eval/mse"][-1][1] == pytest.approx(result.metrics["eval/mse"], rel=1e-6)
    hparams = tensorboard_hparams(Path(result.path))
    assert hparams == fields  # the hparams plugin keeps numbers as doubles: 32.0 == 32


def tensorboard_events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value)]}`` of the scalars in a folder's TensorBoard event files (TFRecords
    of tensorboardX's ``Event`` protos: length, its CRC, the record, its CRC)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for event in _events(folder.glob("events.out.tfevents.*")):
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def tensorboard_hparams(folder: Path) -> dict:
    """The hparams plugin's session values (``_hparams_/session_start_info``) under ``folder``."""
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    for event in _events(folder.rglob("events.out.tfevents.*")):
        for value in event.summary.value:
            if value.tag == "_hparams_/session_start_info":
                data = HParamsPluginData.FromString(value.metadata.plugin_data.content)
                return {key: getattr(v, v.WhichOneof("kind")) for key, v in data.session_start_info.hparams.items()}
    return {}


def _events(paths):
    from tensorboardX.proto.event_pb2 import Event

    for path in sorted(paths):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            yield Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4


@pytest.mark.slow
def test_an_mlflow_sqlite_store_gets_the_sweeps_run(ray_session, tmp_path, monkeypatch):
    """``MLFLOW_TRACKING_URI=sqlite:///...``: the check before Ray passes (SQLAlchemy and alembic
    are in the dev and loggers extras), and the smoke sweep's run is read back from the database."""
    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("alembic")
    from raylab import experiment as experiments
    from raylab.launch import sweep

    db = tmp_path / "x.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    run = RunFolder.under(str(tmp_path / "results"), "toy-sqlite")
    logger_option.check_targets(["mlflow"], run)  # what the CLI runs first
    experiment = experiments.load("toy", ["search.seed=[0]"], smoke=True)
    results, run_path = sweep.run(experiment, run, verbose=0, loggers=["mlflow"]).results, run.location
    (result,) = results
    assert result.error is None
    assert db.is_file() and not (Path(run_path) / "mlruns").exists()
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{db}")
    (exp,) = [e for e in client.search_experiments() if e.name == "toy"]
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["raylab.run"] == "toy-sqlite"
    history = client.get_metric_history(run.info.run_id, "eval/mse")
    assert len(history) == 3 and history[-1].value == pytest.approx(result.metrics["eval/mse"])


def wandb_records(path: Path) -> list:
    """The records of a W&B run file (``run-ID.wandb``), read with W&B's own protobuf schema.

    The file is ``:W&B``, a 2-byte magic and a version byte, then a LevelDB-style log: 32 KiB
    blocks of chunks, each a 7-byte header (CRC32C, little-endian length, type: 1 full,
    2 first, 3 middle, 4 last) and its bytes; a block's tail shorter than a header is padding.
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_a_query_string_uri_names_the_logger_runs_and_the_report_folder_by_the_run(monkeypatch, tmp_path):
    """``--storage s3://b/runs?endpoint_override=http://host:9000&scheme=http``: the MLflow tag,
    the W&B group and the default report folder are the run name, not the query's tail."""
    from raylab import report
    from raylab.report.run_view import Run

    run_path = "s3://bucket/runs/toy-smoke-20260101-000000?endpoint_override=http://127.0.0.1:9000&scheme=http"
    assert run_path.rsplit("/", 1)[-1] == "127.0.0.1:9000&scheme=http"  # the trap: a "/" in the query
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path}/mlruns")  # a cloud run needs one
    from raylab import experiment as experiments

    toy = experiments.load("toy", smoke=True)
    mlflow_cb, wandb_cb = logger_option.callbacks(["mlflow", "wandb"], toy, RunFolder(run_path))
    assert mlflow_cb.tags == {"raylab.run": "toy-smoke-20260101-000000"}
    assert wandb_cb.group == "toy-smoke-20260101-000000"
    run = Run(path=run_path, experiment={}, trials=[], swept=[])
    assert report.default_out(run) == Path("reports") / "toy-smoke-20260101-000000"


def test_a_file_store_tracking_uri_works_with_the_opt_in_raylab_sets(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"file://{tmp_path / 'store'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    logger_option.check_targets(["mlflow"], RunFolder.under(str(tmp_path / "results"), "run-1"))
    from raylab import experiment as experiments

    toy = experiments.load("toy", smoke=True)
    (callback,) = logger_option.callbacks(["mlflow"], toy, RunFolder(tmp_path / "results" / "run-1"))
    callback.setup()  # what Tune calls on the driver before the first trial
    assert "toy" in [e.name for e in MlflowClient(tracking_uri=uri).search_experiments()]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "uri, fragment",
    [
        ("sqlite:///TMP/mlflow.db", "MLflow's database stores need"),
        ("http://127.0.0.1:9", "--logger mlflow: MLFLOW_TRACKING_URI=http://127.0.0.1:9: "),
        ("file:///proc/mlruns", "'/proc' is not a writable directory"),
        ("", "--logger mlflow with a cloud --storage needs MLFLOW_TRACKING_URI"),
    ],
)
def test_an_mlflow_store_that_cannot_work_is_one_line_before_ray_starts(uri, fragment, tmp_path, capsys, monkeypatch):
    import importlib.util
    import time

    pytest.importorskip("mlflow")
    if uri.startswith("sqlite") and importlib.util.find_spec("sqlalchemy"):
        pytest.skip("SQLAlchemy is installed: the sqlite store can work here")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.replace("TMP", str(tmp_path)))
    storage = "s3://bucket/runs" if not uri else str(tmp_path / "results")
    if not uri:  # the default store goes into the run folder: not on a cloud storage
        from raylab.launch import checks

        monkeypatch.setattr(checks, "probe_uri", lambda *a, **k: None)
    start = time.monotonic()
    assert raylab_tune.main(["toy", "--smoke", "--logger", "mlflow", "--storage", storage]) == 2
    # The session's shared Ray may still stream an earlier test's actor lines ("(Actor pid=N) ...")
    # into this process: those are not the CLI's output.
    err = "\n".join(
        line
        for line in capsys.readouterr().err.strip().splitlines()
        if not re.match(r"^(\x1b\[\d+m)?\(\S+ pid=\d+", line)
    )
    assert err.count("\n") == 0 and fragment in err, err
    assert time.monotonic() - start < 15
    assert not list(tmp_path.iterdir()), "nothing is created"
    assert raylab_tune.main(["toy", "--smoke", "--logger", "mlflow", "--storage", storage, "--dry-run"]) == 2
    assert "# loggers: " in capsys.readouterr().out


def test_a_resumed_sweep_continues_each_trials_mlflow_run(tmp_path):
    """Tune restores the callbacks it pickled with the sweep and sets them up again: the new
    callback finds the trial's run by its tags and logs on, params logged once. No Ray."""
    import pickle
    from types import SimpleNamespace

    mlflow = pytest.importorskip("mlflow")
    from raylab import experiment as experiments

    toy = experiments.load("toy", ["search.seed=[0]"], smoke=True)
    run = RunFolder.under(str(tmp_path / "results"), "toy-resumed")
    toy.write_to(run)
    trial = SimpleNamespace(trial_id="abc_00000", config={**toy.config, "lr": 0.05, "seed": 0})

    def session(counter: int):
        (callback,) = pickle.loads(pickle.dumps(logger_option.callbacks(["mlflow"], toy, run)))
        callback.setup()
        callback.log_trial_start(trial)
        callback.log_trial_result(1, trial, {"train/step": counter, "eval/mse": 1.0 / counter, "training_iteration": 1})
        callback.log_trial_end(trial)

    session(20)
    session(40)  # the resumed sweep
    client = mlflow.tracking.MlflowClient(tracking_uri=f"file://{run.location}/mlruns")
    (exp,) = [e for e in client.search_experiments() if e.name == "toy"]
    (resumed,) = client.search_runs([exp.experiment_id])
    assert [m.step for m in client.get_metric_history(resumed.info.run_id, "eval/mse")] == [20, 40]
    assert resumed.data.params["steps"] == "60" and resumed.info.status == "FINISHED"
