"""Mistakes that used to run a sweep silently wrong, or end it with a traceback, typed as a
user types them: each is refused (or reported) in one line with its exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raylab.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tune_configs" / "toy.yaml"


def command(*argv: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120):
    """``python -m raylab.tune ...`` (or another module) as a user runs it."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    module = argv[0] if argv[0].startswith("raylab.") else "raylab.tune"
    args = argv[1:] if argv[0].startswith("raylab.") else argv
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=environ,
        timeout=timeout,
    )


def one_error_line(done, code: int = 2) -> str:
    """The single ``error:`` line of a refused command, with no traceback."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_a_key_written_twice_is_refused_with_file_line_and_key(tmp_path):
    text = TOY.read_text().replace("  report_every: 20\n", "  report_every: 20\n  steps: 40\n")
    path = tmp_path / "toy_copy.yaml"
    path.write_text(text)
    line = one_error_line(command(str(path), "--dry-run"))
    number = text.splitlines().index("  steps: 40") + 1
    assert f"{path}:{number}:" in line and "'steps'" in line and "twice" in line


@pytest.mark.parametrize(
    "override",
    [
        "config.lr=.inf",
        "config.lr=-.inf",
        "config.lr=.nan",
        "search.lr=[0.1, .nan]",
        "search.lr={uniform: [0.1, .inf]}",
    ],
)
def test_a_non_finite_config_or_search_value_is_refused(override):
    line = one_error_line(command("toy", "--smoke", override, "--dry-run"))
    assert "config.lr: expected a finite number" in line


def read_only_command(mount: str, *argv: str, bind: bool = False):
    """A command run with ``mount`` read-only (a fresh read-only tmpfs, or with ``bind`` the
    folder itself bound read-only), in a private mount namespace; skips where that is not allowed."""
    import shlex

    if bind:
        setup = (
            f"mount --bind {shlex.quote(mount)} {shlex.quote(mount)} && mount -o remount,ro,bind {shlex.quote(mount)}"
        )
    else:
        setup = f"mount -t tmpfs -o ro tmpfs {shlex.quote(mount)}"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", setup], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no private read-only mount here (unshare -m)")
    module = argv[0] if argv[0].startswith("raylab.") else "raylab.tune"
    args = argv[1:] if argv[0].startswith("raylab.") else argv
    python = " ".join(shlex.quote(a) for a in [sys.executable, "-m", module, *args])
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", f"{setup} && exec {python}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    """Two sweeps started at once with the same new ``--name``, of an experiment file and a run
    name that are not ASCII, with trials whose metric is NaN (a learning rate that diverges):
    ``(run folder, [both results])``."""
    storage = tmp_path_factory.mktemp("raced")
    path = storage / "expé_α.yaml"
    path.write_text(TOY.read_text())
    argv = [str(path), "--smoke", "config.lr=1e6", "--storage", str(storage), "--name", "rün_β", "--quiet"]
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "raylab.tune", *argv],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return storage / "rün_β", done


def test_two_sweeps_of_one_new_name_started_at_once_get_one_folder(raced):
    run, done = raced
    refused = [d for d in done if d.returncode == 2]
    assert len(refused) == 1, [(d.returncode, d.stderr) for d in done]
    assert "--name rün_β:" in one_error_line(refused[0])
    assert len(RunFolder(run).trials()) == 2  # the one sweep's two trials


def test_a_run_of_any_script_keeps_its_names_and_its_trials_run(raced):
    run, done = raced
    assert run.is_dir()  # the folder has the name the user gave, unescaped
    trials = RunFolder(run).trials()
    assert trials and not [t.error() for t in trials if t.error()], [t.error() for t in trials]
    assert not any("UnicodeEncodeError" in d.stdout + d.stderr for d in done)


def test_a_sweep_whose_every_trial_ends_with_a_nan_metric_exits_1(raced):
    _, done = raced
    (ran,) = [d for d in done if d.returncode != 2]
    assert one_error_line(ran, code=1).startswith("error: every trial ended without a finite eval/mse")


def test_report_out_naming_a_file_is_one_line(raced, tmp_path):
    run, _ = raced
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    assert f"--out {target}: a file is there" in one_error_line(
        command("raylab.report", str(run), "--out", str(target))
    )
    assert target.read_text() == "mine"


def test_report_on_a_read_only_run_folder_is_one_line_naming_out(raced):
    run, _ = raced
    line = one_error_line(read_only_command(str(run), "raylab.report", str(run), bind=True))
    assert "Read-only file system" in line and "--out" in line


@pytest.mark.parametrize("module", ["raylab.tune", "raylab.train"])
def test_storage_on_a_read_only_disk_is_one_line(module, tmp_path):
    line = one_error_line(
        read_only_command(str(tmp_path), module, "toy", "--smoke", "--storage", str(tmp_path / "runs"))
    )
    assert f"--storage {tmp_path / 'runs'}" in line and "Read-only file system" in line


def test_the_probes_cleanup_on_a_read_only_disk_does_not_hide_the_refusal(tmp_path, monkeypatch):
    import errno

    from raylab.errors import UserError
    from raylab.launch import checks

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "unlink", read_only)
    monkeypatch.setattr("builtins.open", read_only)
    with pytest.raises(UserError, match="Read-only file system"):
        checks.probe_local(str(tmp_path))


@pytest.mark.parametrize("module", ["raylab.tune", "raylab.train"])
def test_a_file_where_the_storage_folder_should_be_is_one_line(module, tmp_path):
    (tmp_path / "runs").write_text("")
    line = one_error_line(command(module, "toy", "--smoke", "--storage", str(tmp_path / "runs" / "deeper")))
    assert "--storage" in line and "not a writable directory" in line


def test_a_second_ctrl_c_still_prints_the_resume_command(tmp_path, monkeypatch, capsys):
    from raylab import tune as raylab_tune
    from raylab.launch import ray_start, sweep

    def second_ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt  # what Tune lets through on the second SIGINT

    monkeypatch.setattr(ray_start, "connect", lambda *a, **k: {"dashboard_url": None})
    monkeypatch.setattr(sweep, "run", second_ctrl_c)
    argv = ["toy", "--smoke", "--storage", str(tmp_path), "--name", "r1"]
    assert raylab_tune.main(argv) == 130
    assert f"python -m raylab.tune toy --resume --name r1 --storage {tmp_path}" in capsys.readouterr().err


def test_resume_after_the_experiment_file_changed_says_so_and_resumes_the_saved_spec(tmp_path):
    from raylab import experiment as experiments
    from raylab.run_folder import FINISHED_FILE

    path = tmp_path / "mine.yaml"
    path.write_text(TOY.read_text())
    run = RunFolder(tmp_path / "runs" / "r1")
    experiments.load(str(path), smoke=True).write_to(run)
    run.write_text(FINISHED_FILE, "trials: 2\n")
    run.write_text("tuner.pkl", "")  # what Tune's restore looks for (the run has finished: nothing restores)
    run.write_text("experiment_state-2026-01-01_00-00-00.json", "{}")
    argv = [str(path), "--resume", "--name", "r1", "--storage", str(tmp_path / "runs")]
    unchanged = command(*argv)
    assert unchanged.returncode == 0 and "has changed" not in unchanged.stderr, unchanged.stderr
    path.write_text(TOY.read_text().replace("steps: 60", "steps: 61"))
    done = command(*argv)
    assert done.returncode == 0, done.stderr
    (note,) = [line for line in done.stderr.splitlines() if "has changed" in line]
    assert f"note: {path} has changed since r1 started" in note and "start a new run" in note


def test_a_metric_tag_is_ascii_for_ray_and_names_keep_their_ascii():
    from raylab.launch.gauges import tag

    assert tag("expé_α") == "exp%C3%A9_%CE%B1" and tag("toy_1a2b3") == "toy_1a2b3" and tag("eval/mse") == "eval/mse"
