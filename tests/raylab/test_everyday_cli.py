"""The researcher's everyday path, without Ray: saved experiments, resume choice, run names,
checks that agree with the real command, flags spelled out, console lines."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import tune as raylab_tune
from raylab import yaml_io
from raylab.launch import checks, cli, progress, ray_start, sweep
from raylab.run_folder import EXPERIMENT_FILE, FINISHED_FILE, RunFolder

EXPERIMENTS = sorted(experiments.available())


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.parametrize("smoke", [False, True])
def test_saved_experiment_round_trips_through_validation(name, smoke, tmp_path):
    exp = experiments.load(name, smoke=smoke)
    RunFolder(tmp_path).write_text(EXPERIMENT_FILE, yaml_io.dumps(exp.to_yaml_dict()))
    again = experiments.from_run(RunFolder(str(tmp_path)))
    assert again.name == name and again.smoke == smoke
    assert {**again.to_yaml_dict(), "source": ""} == {**exp.to_yaml_dict(), "source": ""}


def test_variant_fields_are_left_out_of_the_saved_config():
    exp = experiments.load("dqn_softlinf", smoke=True)
    assert exp.searched_fields() == ["loss", "beta", "seed"]
    saved = exp.to_yaml_dict()["config"]
    assert "loss" not in saved and "beta" not in saved and "seed" not in saved


def fake_run(
    root: Path,
    name: str,
    experiment: str = "toy",
    smoke: bool = True,
    finished: bool = False,
    age_s: float = 0.0,
    tune_state: bool = True,
) -> Path:
    """A run folder as a sweep leaves it: experiment.yaml, Tune's tuner.pkl and experiment
    state (``tune_state``; a sweep that failed before its first trial has tuner.pkl alone),
    maybe finished."""
    exp = experiments.load(experiment, smoke=smoke)
    run = root / name
    RunFolder(run).write_text(EXPERIMENT_FILE, yaml_io.dumps(exp.to_yaml_dict()))
    (run / "tuner.pkl").write_bytes(b"")
    if tune_state:
        (run / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    if finished:
        RunFolder(run).write_text(FINISHED_FILE, "trials: 2\n")
    stamp = time.time() - age_s
    os.utime(run / EXPERIMENT_FILE, (stamp, stamp))
    return run


def test_bare_resume_takes_the_newest_unfinished_run(tmp_path):
    fake_run(tmp_path, "old-interrupted", age_s=300)
    fake_run(tmp_path, "new-finished", finished=True, age_s=10)
    fake_run(tmp_path, "other", experiment="backdoor", age_s=0)
    assert str(sweep.run_to_resume(str(tmp_path), "toy", None, None)) == str(tmp_path / "old-interrupted")
    fake_run(tmp_path, "full-interrupted", smoke=False, age_s=5)
    assert str(sweep.run_to_resume(str(tmp_path), "toy", None, None)).endswith("full-interrupted")
    assert str(sweep.run_to_resume(str(tmp_path), "toy", True, None)).endswith("old-interrupted")


def test_bare_resume_skips_a_folder_tune_cannot_restore(tmp_path, capsys):
    fake_run(tmp_path, "older", age_s=300)
    fake_run(tmp_path, "failed-before-its-first-trial", tune_state=False, age_s=0)
    assert str(sweep.run_to_resume(str(tmp_path), "toy", None, None)) == str(tmp_path / "older")
    argv = ["toy", "--resume", "--name", "failed-before-its-first-trial", "--storage", str(tmp_path)]
    assert raylab_tune.main(argv) == 2
    assert "no resumable sweep at" in capsys.readouterr().err


def test_bare_resume_says_when_every_run_has_finished(tmp_path, capsys):
    fake_run(tmp_path, "done", finished=True)
    assert raylab_tune.main(["toy", "--resume", "--storage", str(tmp_path)]) == 2
    assert "every run of 'toy'" in capsys.readouterr().err


def test_resuming_a_finished_run_by_name_says_so_and_exits_0(tmp_path, capsys):
    fake_run(tmp_path, "done", finished=True)
    assert raylab_tune.main(["toy", "--resume", "--name", "done", "--storage", str(tmp_path)]) == 0
    assert "done has finished" in capsys.readouterr().out


def test_resume_by_name_needs_no_smoke_flag_and_checks_the_saved_experiment(tmp_path, capsys):
    # A full dqn_softlinf run would be refused here (6 CPU, a GPU); its smoke run is not, and
    # the run folder says which it was. --dry-run shows the checks the real command makes.
    fake_run(tmp_path, "smoke-run", experiment="dqn_softlinf", smoke=True)
    argv = ["dqn_softlinf", "--resume", "--name", "smoke-run", "--storage", str(tmp_path), "--dry-run"]
    assert raylab_tune.main(argv) == 0
    out = capsys.readouterr().out
    assert "(smoke)" in out and "# resources on this machine: ok" in out
    assert "search:\n  variant:" in out


def test_resume_of_another_experiments_run_is_refused(tmp_path, capsys):
    fake_run(tmp_path, "r", experiment="backdoor")
    assert raylab_tune.main(["toy", "--resume", "--name", "r", "--storage", str(tmp_path)]) == 2
    assert "is of experiment 'backdoor'" in capsys.readouterr().err


@pytest.mark.parametrize("dry_run", [False, True])
def test_name_of_an_existing_run_is_refused_without_resume(tmp_path, capsys, dry_run):
    fake_run(tmp_path, "taken")
    argv = ["toy", "--smoke", "--name", "taken", "--storage", str(tmp_path)]
    if dry_run:
        assert raylab_tune.main([*argv, "--dry-run"]) == 2
        assert "# run name: --name taken: a run already exists" in capsys.readouterr().out
    else:
        assert raylab_tune.main(argv) == 2
        assert "--name taken: a run already exists" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == [
        "experiment.yaml",
        "experiment_state-2026-01-01_00-00-00.json",
        "tuner.pkl",
    ]


def test_dry_run_runs_the_resource_check_the_real_command_runs(capsys, monkeypatch):
    monkeypatch.setattr(ray_start, "local_resources", lambda: {"CPU": 2.0, "GPU": 0.0})
    monkeypatch.setattr(checks, "storage_need", lambda *args, **kwargs: None)  # the checkpoints' 168 GB
    assert raylab_tune.main(["dqn_softlinf", "--dry-run"]) == 2  # the resource check refuses
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("# resources on this machine"))
    assert "6 CPU per trial, but this machine has 2 CPU" in line and "--smoke" in line
    assert raylab_tune.main(["dqn_softlinf"]) == 2  # and the real command refuses the same
    assert "6 CPU per trial" in capsys.readouterr().err


def test_flags_must_be_spelled_out(capsys):
    assert raylab_tune.main(["toy", "--smok", "--dry-run"]) == 2
    assert "unrecognized arguments: --smok" in capsys.readouterr().err


def test_ray_resume_advice_is_dropped_and_raylab_prints_the_exact_command():
    cli.quiet_third_party_warnings()
    record = logging.LogRecord(
        "ray.tune.tune",
        logging.WARNING,
        "",
        0,
        'Resume experiment with: Tuner.restore(path="x", trainable=...)',
        (),
        None,
    )
    assert not logging.getLogger("ray.tune.tune").filter(record)
    args = raylab_tune.parser().parse_args(["toy", "--storage", "s3://b/x y"])
    assert raylab_tune.resume_command("toy", "RUN", args) == (
        "python -m raylab.tune toy --resume --name RUN --storage 's3://b/x y'"
    )


def test_one_progress_line_carries_the_sweep_metric_and_the_stop_progress():
    exp = experiments.load("dqn_softlinf", smoke=True)
    best = progress.better("max", 3.0, progress.better("max", 5.0, None))
    line = progress.result_line(
        "abc_00001", {"training_iteration": 4, "env/steps": 1000, "eval/return_mean": 3.0}, exp, best
    )
    assert line == "abc_00001 iter 4  env/steps=1000/2000  eval/return_mean=3 (max so far 5)"


def test_dashboard_text_says_how_to_get_past_the_token_prompt(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    text = ray_start.dashboard_text({"dashboard_url": "http://127.0.0.1:8265"})
    assert "http://127.0.0.1:8265" in text and "ray get-auth-token" in text
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert "token" not in ray_start.dashboard_text({"dashboard_url": "http://127.0.0.1:8265"})


def test_raylab_train_refuses_a_taken_name_and_resumes_by_name_alone(tmp_path, capsys):
    from raylab import train as raylab_train

    argv = ["toy", "--smoke", "--quiet", "--storage", str(tmp_path), "--name", "t"]
    assert raylab_train.main(argv) == 0
    assert raylab_train.main(argv) == 2
    assert "--name t: a run already exists" in capsys.readouterr().err
    # a full toy run would differ from the smoke run; the folder says it was a smoke run
    assert raylab_train.main(["toy", "--resume", "--quiet", "--storage", str(tmp_path), "--name", "t"]) == 0
    assert "t" in capsys.readouterr().out
    record = yaml_io.load(tmp_path / "t" / EXPERIMENT_FILE)["provenance"]
    assert len(record["resumed"]) == 1 and record["started"] <= record["resumed"][0] <= record["ended"]


def test_through_a_storage_uri_finished_runs_say_so_and_the_saved_experiment_is_read(tmp_path, capsys):
    # file:// takes the path cloud storage takes (pyarrow's filesystem), without a cloud.
    fake_run(tmp_path, "done", finished=True)
    fake_run(tmp_path, "open", experiment="dqn_softlinf")
    uri = f"file://{tmp_path}"
    assert raylab_tune.main(["toy", "--resume", "--name", "done", "--storage", uri]) == 0
    assert "done has finished" in capsys.readouterr().out
    saved = experiments.from_run(RunFolder(f"{uri}/open"))
    assert saved.smoke and saved.search["variant"]["grid"][1] == {"loss": "soft_linf", "beta": 10.0}
    assert raylab_tune.main(["dqn_softlinf", "--smoke", "--name", "open", "--storage", uri]) == 2
    assert "a run already exists" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, environ, binds_loopback",
    [
        (["toy", "--smoke"], {}, True),
        (["toy", "--listen"], {}, False),
        (["toy", "--address", "auto"], {}, False),
        (["toy", "--address=10.0.0.5:6379"], {}, False),
        (["toy"], {"RAY_ADDRESS": "auto"}, False),
        (["toy"], {ray_start.SINGLE_MACHINE_ENV: "1"}, False),  # the user's own choice stands
    ],
)
def test_a_local_ray_listens_on_loopback_unless_asked(argv, environ, binds_loopback, monkeypatch):
    monkeypatch.delitem(sys.modules, "ray")  # as in a fresh CLI process, before Ray is imported
    assert ray_start.bind_to_loopback_unless_asked(argv, environ) is binds_loopback
    assert (environ.get(ray_start.SINGLE_MACHINE_ENV) == "0") is binds_loopback


def test_loopback_binding_is_not_attempted_once_ray_is_imported():
    environ: dict[str, str] = {}
    assert "ray" in sys.modules
    assert ray_start.bind_to_loopback_unless_asked(["toy"], environ) is False and not environ


def test_help_shows_no_rst_markup(capsys):
    with pytest.raises(SystemExit):
        raylab_tune.main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m raylab.tune") and "``" not in out
    assert "python -m raylab.tune NAME [key=value ...]: run an experiment" in out


def test_provenance_records_a_resumption_and_the_end_and_the_saved_experiment_still_loads(tmp_path):
    from raylab import provenance

    exp = experiments.load("toy", smoke=True)
    saved = {**exp.to_yaml_dict(), "provenance": provenance.record(Path(__file__).parent)}
    RunFolder(tmp_path).write_text(EXPERIMENT_FILE, yaml_io.dumps(saved))
    resumed = provenance.now()
    RunFolder(tmp_path).record(resumed=resumed)
    assert yaml_io.load(tmp_path / EXPERIMENT_FILE)["provenance"]["ended"] is None
    ended = provenance.now()
    RunFolder(tmp_path).record(ended=ended)
    record = yaml_io.load(tmp_path / EXPERIMENT_FILE)["provenance"]
    assert record["resumed"] == [resumed] and record["ended"] == ended
    assert len(record["git"]["commit"]) == 40 and record["started"] <= record["ended"]
    assert experiments.from_run(RunFolder(str(tmp_path))).name == "toy"  # provenance is not a setting
