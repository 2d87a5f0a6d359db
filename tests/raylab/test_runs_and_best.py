"""The runs a lab looks for afterwards: each sweep's best trial (``best.yaml``, printed at the
end), ``python -m raylab.runs`` over a local folder and a moto S3 bucket, ``--notes`` and
``--tag`` saved in the run and sent to MLflow, and ``python -m raylab.report RUN_A RUN_B``.

Two toy smoke sweeps of one trial each, run once for the module through ``raylab.tune.main``."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from raylab import report
from raylab import runs as raylab_runs
from raylab import tune as raylab_tune
from raylab.report import writer as report_writer
from raylab.report.claims import Claim, Control, Value
from raylab.report.spec import Report
from raylab.run_folder import BEST_FILE, EXPERIMENT_FILE, RunFolder
from tests.raylab.report.test_report_units import write_run


def _main(main, argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def two_runs(ray_session, tmp_path_factory):
    """``(storage, {name: stdout})``: toy-a, a real toy smoke sweep (notes, two tags), and
    toy-b, a finished run of another lr written by hand as a sweep leaves it (started later)."""
    import datetime

    storage = tmp_path_factory.mktemp("runs") / "results"
    argv = ["toy", "--smoke", "search.seed=[0]", "--storage", str(storage), "--quiet", "--name", "toy-a"]
    code, out, err = _main(
        raylab_tune.main, [*argv, "--notes", "first try: lr 0.05", "--tag", "baseline", "--tag", "lr sweep"]
    )
    assert code == 0, err
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).isoformat(timespec="seconds")
    b = RunFolder(storage / "toy-b")
    experiment = {
        "name": "toy",
        "workload": "toy",
        "metric": "eval/mse",
        "mode": "min",
        "search": {"lr": {"grid": [0.01]}, "seed": {"grid": [0]}},
        "num_samples": 1,
        "smoke": True,
        "provenance": {"started": later, "ended": later, "git": {"commit": "0" * 40, "dirty": True}},
    }
    b.write_text(EXPERIMENT_FILE, yaml.safe_dump(experiment))
    trial = b.trial("toy_b_00000")
    trial.write_params({"lr": 0.01, "seed": 0, "steps": 60})
    trial.write_rows(
        [
            {"train/step": s, "eval/mse": 1.0 / s, "training_iteration": i, "time_total_s": 0.1 * i}
            for i, s in ((1, 20), (2, 40), (3, 60))
        ]
    )
    b.mark_ended("b_00000")
    b.mark_finished(1)
    b.write_best(
        {
            "trial": "b_00000",
            "metric": "eval/mse",
            "mode": "min",
            "value": 1 / 60,
            "config": {"lr": 0.01, "seed": 0},
            "checkpoint": None,
        }
    )
    return storage, {"toy-a": out}


def test_a_finished_sweep_writes_its_best_trial_and_prints_it(two_runs):
    storage, printed = two_runs
    run = RunFolder(storage / "toy-a")
    best = yaml.safe_load((storage / "toy-a" / BEST_FILE).read_text())
    assert best == run.best()
    (trial,) = run.trials()
    rows = trial.rows()
    values = [r["eval/mse"] for r in rows if "eval/mse" in r]
    assert best["metric"] == "eval/mse" and best["mode"] == "min" and best["value"] == pytest.approx(min(values))
    assert best["config"]["lr"] == 0.05 and best["config"]["seed"] == 0
    assert best["checkpoint"].startswith(trial.location) and Path(best["checkpoint"]).is_dir()
    assert Path(best["checkpoint"]).name in trial.checkpoints()
    out = printed["toy-a"]
    assert f"best trial: {best['trial']}  eval/mse (min) = {best['value']:.4g}" in out
    assert "config: lr=0.05 seed=0" in out and f"checkpoint: {best['checkpoint']}" in out
    assert f"saved in: {run.join(BEST_FILE)}" in out


def test_notes_and_tags_are_saved_in_the_run_and_sent_to_mlflow(two_runs, monkeypatch):
    """Saved in the run's provenance by the sweep; the MLflow callback (set up and driven as
    Tune drives it, no Ray) puts them on the trial's MLflow run, read back with MLflow's client."""
    from types import SimpleNamespace

    mlflow = pytest.importorskip("mlflow")
    from raylab import experiment as experiments
    from raylab.launch.trackers import logger_option

    storage, _ = two_runs
    saved = yaml.safe_load((storage / "toy-a" / EXPERIMENT_FILE).read_text())["provenance"]
    assert saved["notes"] == "first try: lr 0.05" and saved["tags"] == ["baseline", "lr sweep"]
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = RunFolder(storage / "toy-a")
    toy = experiments.load("toy", ["search.seed=[0]"], smoke=True)
    (callback,) = logger_option.callbacks(["mlflow"], toy, run)
    trial = SimpleNamespace(trial_id="abc_00000", config={**toy.config, "lr": 0.05, "seed": 0})
    callback.setup()
    callback.log_trial_start(trial)
    callback.log_trial_end(trial)
    client = mlflow.tracking.MlflowClient(tracking_uri=f"file://{run.location}/mlruns")
    (experiment,) = [e for e in client.search_experiments() if e.name == "toy"]
    (mlrun,) = client.search_runs([experiment.experiment_id])
    assert mlrun.data.tags["mlflow.note.content"] == "first try: lr 0.05"
    assert mlrun.data.tags["raylab.tags"] == "baseline, lr sweep"


def test_bad_tags_and_notes_on_resume_are_one_line(tmp_path):
    code, _, err = _main(raylab_tune.main, ["toy", "--smoke", "--tag", "a,b", "--storage", str(tmp_path), "--dry-run"])
    assert code == 2 and err.count("\n") == 1 and "--tag 'a,b'" in err
    code, _, err = _main(raylab_tune.main, ["toy", "--resume", "--notes", "x", "--storage", str(tmp_path)])
    assert code == 2 and err.count("\n") == 1 and "--resume continues it as it was started" in err


def _listed(storage: str, *args: str) -> list[dict]:
    code, out, err = _main(raylab_runs.main, [storage, *args, "--format", "json"])
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_runs_lists_a_local_storage(two_runs):
    storage, _ = two_runs
    rows = {row["name"]: row for row in _listed(str(storage))}
    assert set(rows) == {"toy-a", "toy-b"}
    a = rows["toy-a"]
    best = RunFolder(storage / "toy-a").best()
    assert a["experiment"] == "toy" and a["status"] == "finished" and (a["trials_done"], a["trials"]) == (1, 1)
    assert a["best"] == best["value"] and a["metric"] == "eval/mse" and a["smoke"] is True
    assert a["tags"] == ["baseline", "lr sweep"] and len(a["commit"] or "x" * 40) == 40 and a["started"]
    assert [row["name"] for row in _listed(str(storage), "--tag", "baseline")] == ["toy-a"]
    assert _listed(str(storage), "--experiment", "other") == []
    code, out, _ = _main(raylab_runs.main, [str(storage)])
    header, _, *lines = out.splitlines()
    assert header.split() == [
        "name",
        "experiment",
        "started",
        "status",
        "trials",
        "done",
        "best",
        "commit",
        "smoke",
        "tags",
    ]
    assert lines[0].startswith("toy-b") and "eval/mse=" in lines[1] and "baseline, lr sweep" in lines[1]
    code, _, err = _main(raylab_runs.main, [str(storage / "nothing-here")])
    assert code == 2 and err.count("\n") == 1 and "is not a folder" in err


def test_runs_lists_an_s3_storage(two_runs, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    import pyarrow.fs
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from scenarios.clusters.conftest import free_port
    from scenarios.clusters.s3_store import CREDENTIALS

    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    storage, _ = two_runs
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="raylab")
        uri = f"s3://raylab/runs?endpoint_override={endpoint}&scheme=http"
        fs, path = pyarrow.fs.FileSystem.from_uri(uri)
        local = pyarrow.fs.LocalFileSystem()
        for name in ("toy-a", "toy-b"):
            pyarrow.fs.copy_files(
                str(storage / name), f"{path}/{name}", source_filesystem=local, destination_filesystem=fs
            )
        rows = {row["name"]: row for row in _listed(uri)}
        local_rows = {row["name"]: row for row in _listed(str(storage))}
        assert set(rows) == {"toy-a", "toy-b"}
        for name, row in rows.items():
            same = ("experiment", "started", "status", "trials", "trials_done", "best", "commit", "smoke", "tags")
            assert {k: row[k] for k in same} == {k: local_rows[name][k] for k in same}
            assert row["location"].startswith(f"s3://raylab/runs/{name}")
    finally:
        server.stop()


def test_two_runs_compare_in_one_report(two_runs, tmp_path):
    storage, _ = two_runs
    out = tmp_path / "compare"
    code, printed, err = _main(report.main, [str(storage / "toy-a"), str(storage / "toy-b"), "--out", str(out)])
    assert code == 0, err
    assert printed == f"comparison: {out / 'comparison.html'}\n"
    content = json.loads((out / "comparison.json").read_text())
    lines = content["curves"]["lines"]
    assert {(line["run"], line["configuration"]) for line in lines} == {
        ("A", "Learning rate=0.05"),
        ("B", "Learning rate=0.01"),
    }
    html = (out / "comparison.html").read_text()
    assert html.count("<img") == 1 and "A solid" not in html  # the figure's words are in the PNG
    assert content["best"]["A"]["value"] == RunFolder(storage / "toy-a").best()["value"]
    assert content["best"]["B"]["config"]["lr"] == 0.01
    facts = {key: (a, b) for key, a, b in content["facts"]}
    assert facts["notes"] == ("first try: lr 0.05", "-") and facts["tags"] == ("baseline, lr sweep", "-")
    code, _, err = _main(report.main, [str(storage / "toy-a"), str(storage / "toy-b"), str(storage / "toy-a")])
    assert code == 2 and "not 3" in err


def test_claims_of_two_runs_sit_side_by_side(tmp_path, monkeypatch):
    spec = Report(
        claims=(
            Claim(
                "the score is above 0.5",
                Value("score"),
                expect=">",
                threshold=0.5,
                controls=(Control("scores are positive", Value("score"), expect=">", threshold=0.0),),
                name="score",
            ),
        )
    )
    monkeypatch.setattr(report_writer, "declared_report", lambda run: (spec, ""))
    paths = []
    for name, level in (("a-20260101-000000", 0.9), ("b-20260101-000000", 0.1)):
        trials = [{"params": {"seed": s}, "rows": [{"score": level + 0.01 * s}]} for s in range(5)]
        paths.append(str(write_run(tmp_path, {"seed": list(range(5))}, trials, name=name)))
    out = tmp_path / "cmp"
    assert report.main([*paths, "--out", str(out), "--format", "md"]) == 0
    (row,) = json.loads((out / "comparison.json").read_text())["claims"]
    assert row["A"]["verdict"] == "supported" and row["B"]["verdict"] == "not supported"
    assert row["A"]["metric"] == "score" and row["A"]["n"] == 5
    markdown = (out / "comparison.md").read_text()
    assert "| the score is above 0.5 | - | 0.92" in markdown and "not supported" in markdown
