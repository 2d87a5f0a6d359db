"""Storage paths and run names that would silently go wrong are refused before Ray starts, in
one line with exit code 2: a URI with one slash, a full disk, too little room for the estimate's
checkpoints, a ``--name`` that is not one folder name; and the printed resume command works for
a name with a space. No test here starts Ray."""

from __future__ import annotations

import builtins
import errno
import shlex
from collections import namedtuple
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import train as raylab_train
from raylab import tune as raylab_tune
from raylab import yaml_io
from raylab.launch import checks, disk_full
from raylab.run_folder import EXPERIMENT_FILE, FINISHED_FILE, RunFolder

COMMANDS = {"tune": raylab_tune.main, "train": raylab_train.main}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("storage", "meant"),
    [("s3:/bucket/runs", "s3://bucket/runs"), ("gs:bucket", "gs://bucket"), ("file:/tmp/r", "file:///tmp/r")],
)
def test_a_uri_without_two_slashes_is_refused_and_no_local_folder_is_made(
    command, storage, meant, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert COMMANDS[command](["toy", "--smoke", "--storage", storage]) == 2
    err = one_error_line(capsys)
    assert f"--storage {storage}: malformed URI" in err and f"did you mean {meant}?" in err
    assert list(tmp_path.iterdir()) == []  # no folder named 's3:' (or anything else)
    assert raylab_tune.main(["toy", "--smoke", "--storage", storage, "--dry-run"]) == 2


def test_a_local_folder_with_a_colon_is_still_possible(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert raylab_tune.main(["toy", "--smoke", "--storage", "./s3:runs", "--dry-run"]) == 0
    assert "# storage: ok" in capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../x", "path separator"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("", "it is empty"),
        ("..", "is not a folder of its own"),
        ("a\tb", "control character"),
        ("a\x1b[31mb", "control character"),
        ("run?x=1", "'?' or '#'"),
    ],
)
def test_a_name_that_is_not_one_folder_name_is_refused(command, name, problem, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    storage = tmp_path / "results"
    assert COMMANDS[command](["toy", "--smoke", "--storage", str(storage), "--name", name]) == 2
    err = one_error_line(capsys)
    assert f"--name {name!r}: a run name must be one folder name" in err and problem in err, err
    assert list(tmp_path.iterdir()) == []  # nothing inside --storage, nothing beside it
    assert COMMANDS[command](["toy", "--resume", "--storage", str(storage), "--name", name]) == 2
    assert problem in one_error_line(capsys)


def test_the_printed_resume_command_continues_a_run_whose_name_and_storage_hold_spaces(tmp_path, capsys):
    storage = tmp_path / "my results"
    run = RunFolder(storage / "toy run 1")
    run.write_text(EXPERIMENT_FILE, yaml_io.dumps(experiments.load("toy", smoke=True).to_yaml_dict()))
    (Path(run.location) / "tuner.pkl").write_bytes(b"")
    (Path(run.location) / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    run.write_text(FINISHED_FILE, "trials: 1\n")
    args = raylab_tune.parser().parse_args(["toy", "--storage", str(storage)])
    printed = raylab_tune.resume_command("toy", "toy run 1", args)
    words = shlex.split(printed)
    assert words[:3] == ["python", "-m", "raylab.tune"]
    assert raylab_tune.main(words[3:]) == 0  # the run was found under its name: it has finished
    assert "toy run 1 has finished" in capsys.readouterr().out


def _marker_writes_go_to_dev_full(monkeypatch):
    """The probe's marker file is opened on /dev/full: every write to it fails with the kernel's
    own ENOSPC, as on a full disk (an empty file would still be created there)."""
    real_open = builtins.open

    def open_(path, mode="r", *args, **kwargs):
        if Path(path).name.startswith(".raylab-write-test") and "b" in mode:
            return real_open("/dev/full", "wb")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(checks, "open", open_, raising=False)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_full_disk_is_refused_by_the_storage_probe(command, tmp_path, monkeypatch, capsys):
    _marker_writes_go_to_dev_full(monkeypatch)
    storage = tmp_path / "results"
    assert COMMANDS[command](["toy", "--smoke", "--storage", str(storage)]) == 2
    err = one_error_line(capsys)
    assert f"--storage {storage}: the disk holding '{tmp_path}' is full (No space left on device)" in err
    assert list(tmp_path.iterdir()) == []  # the marker is gone, no run folder


Usage = namedtuple("Usage", "total used free")


def test_free_space_is_compared_with_the_estimates_checkpoints(tmp_path, monkeypatch, capsys):
    storage = str(tmp_path / "results")
    argv = ["toy", "estimate.checkpoint_bytes=1e9", "--num-samples", "1", "--storage", storage]
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: Usage(10**12, 10**12 - 3 * 10**9, 3 * 10**9))
    # toy's grid has two values: 2 trials x checkpoint.keep 2 x 1 GB = 4 GB > 3 GB free
    assert raylab_tune.main([*argv, "--dry-run"]) == 2  # it prints the refusal the real run makes
    out = capsys.readouterr().out
    assert "#   checkpoints kept: 2 trials x 2 x 1.0 GB = 4.0 GB" in out  # the same figure
    line = next(line for line in out.splitlines() if line.startswith("# storage: "))
    assert f"3.0 GB free on the disk holding '{tmp_path}'" in line and "2 trials x 2 x 1.0 GB = 4.0 GB" in line
    assert raylab_tune.main(argv) == 2
    assert "checkpoint.keep=1" in one_error_line(capsys)
    assert not Path(storage).exists()
    # one checkpoint kept fits (2 GB), and so does raylab.train's one trial; a smoke run is not
    # held to the full run's estimate
    assert raylab_tune.main([*argv, "checkpoint.keep=1", "--dry-run"]) == 0
    assert "# storage: ok" in capsys.readouterr().out
    assert raylab_tune.main([*argv, "--smoke", "--dry-run"]) == 0
    assert "# storage: ok" in capsys.readouterr().out
    need = checks.storage_need(experiments.load("toy", argv[1:2], smoke=False), trials=1)
    assert need.total == 2e9
    checks.probe_local(storage, need)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_disk_that_fills_during_the_sweep_stops_it_in_one_line_without_restarts(
    smoke_sweep, toy_with_loop, tmp_path, monkeypatch
):
    # The trial's checkpoint writes go to /dev/full (the kernel's own ENOSPC at the real write
    # site); a restart would fail the same way, and max_failures would allow two.
    monkeypatch.chdir(tmp_path)
    experiment = toy_with_loop("tests.raylab.launch.disk_full_loop:train_loop", "toy_disk_full")
    with pytest.raises(disk_full.DiskFull) as stopped:
        smoke_sweep(experiment, "failure.max_failures=2", "search.seed=[0]", smoke=False, run_name="full")
    message = str(stopped.value)
    assert "\n" not in message
    assert message.startswith(f"the disk holding the run folder {tmp_path / 'results' / 'full'} is full")
    assert "No space left on device" in message
    assert len((tmp_path / "attempts.txt").read_text().splitlines()) == 1  # no restart


def test_disk_full_is_found_through_wrappers_and_names_the_path():
    assert disk_full.is_disk_full(OSError(errno.ENOSPC, "No space left on device", "/r/x"))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as err:
            raise RuntimeError("Ray Tune failed") from err
    except RuntimeError as wrapped:
        assert disk_full.is_disk_full(wrapped)
    assert disk_full.is_disk_full(RuntimeError("pyarrow: IOError: [Errno 28] No space left on device"))
    assert not disk_full.is_disk_full(OSError(errno.EACCES, "Permission denied"))
    text = "Traceback ...\nOSError: [Errno 28] No space left on device: '/tmp/raylab-ckpt-1/state.pt.tmp'\n"
    assert disk_full.message("/runs/r", text) == (
        "the disk holding the run folder /runs/r is full (writing /tmp/raylab-ckpt-1/state.pt.tmp): "
        "No space left on device; the sweep stopped"
    )
    assert disk_full.message("/runs/r", text.replace("/tmp/raylab-ckpt-1", "/runs/r/t1")).endswith(
        "/runs/r is full: No space left on device; the sweep stopped"
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_raylab_train_on_a_disk_that_fills_stops_in_one_line_and_resumes(tmp_path, monkeypatch, capsys):
    from raylab import checkpoint

    def save_on_a_full_disk(directory, state):
        with open("/dev/full", "wb") as out:  # the kernel's own ENOSPC, at the checkpoint write
            out.write(b"\0" * 65536)
            out.flush()

    storage = tmp_path / "my results"
    with monkeypatch.context() as full:
        full.setattr(checkpoint, "save", save_on_a_full_disk)
        assert raylab_train.main(["toy", "--smoke", "--quiet", "--storage", str(storage), "--name", "t 1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()  # raylab.train's search.* lines, then one error
    assert [line for line in lines if not line.startswith("search.")] == [lines[-1]]
    err = lines[-1]
    assert err.startswith("error: ") and "Traceback" not in err
    assert f"the disk holding the run folder {storage / 't 1'} is full" in err and "No space left on device" in err
    printed = err.split("continue with: ", 1)[1]
    assert shlex.split(printed)[:3] == ["python", "-m", "raylab.train"]
    assert raylab_train.main(shlex.split(printed)[3:] + ["--quiet"]) == 0  # room again: it resumes
