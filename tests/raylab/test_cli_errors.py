"""Bad input: one line on stderr, exit code 2, no traceback, no results folder left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raylab import train as raylab_train
from raylab import tune as raylab_tune
from raylab.data import cifar
from raylab.launch import checks, ray_start

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


TOY = "# python -m raylab.tune exp\nworkload: toy\nmetric: eval/mse\nmode: min\n"


# Each case: (experiment file text or None, arguments, a fragment the one-line error contains).
# In the arguments, EXP is that file's path and TMP the test's temporary folder.
BAD_INPUTS = {
    "unknown experiment": (None, ["no_such_experiment"], "unknown experiment 'no_such_experiment'; available: "),
    "malformed yaml": (TOY + "config: {steps: [1, 2}\n", ["EXP"], "exp.yaml:5"),
    "unknown key": (TOY + "config: {stepz: 3}\n", ["EXP"], "unknown key 'config.stepz'; valid keys: batch_size"),
    "unknown section": (TOY + "serach: {}\n", ["EXP"], "unknown key 'serach'"),
    "wrong type": (None, ["toy", "config.steps=many"], "config.steps: expected int, got 'many'"),
    "negative learning rate": (None, ["toy", "config.lr=-0.1"], "config.lr: must be > 0"),
    "bad search range": (None, ["toy", "search.lr={uniform: [1, 0]}"], "needs low < high"),
    "override does not parse": (None, ["toy", "config.lr=[1,"], "YAML syntax error"),
    "override without value": (None, ["toy", "config.lr"], "expected key=value"),
    "unknown workload": (TOY.replace("toy", "tyo"), ["EXP"], "unknown workload 'tyo'; available: "),
    "metric not reported": (TOY.replace("eval/mse", "eval/acc"), ["EXP"], "metric 'eval/acc' is not reported"),
    "stop key the workload never reports": (
        None,
        ["toy", "stop.eval/mse2=1"],
        "stop.eval/mse2: 'eval/mse2' is not reported by workload 'toy'; it reports: train/loss, eval/mse",
    ),
    "time_attr the workload never reports": (
        None,
        ["toy", "scheduler.time_attr=train/stpe"],
        "scheduler.time_attr: 'train/stpe' is not reported",
    ),
    "missing mode": (TOY.replace("mode: min\n", ""), ["EXP"], "missing required key 'mode'"),
    "unwritable storage": (TOY, ["EXP", "--storage", "EXP/sub"], "is not a writable directory"),
    "resume without a run": (None, ["toy", "--resume", "--storage", "TMP/empty"], "--resume: no resumable run"),
    "bad flag": (None, ["toy", "--nmu-samples", "2"], "unrecognized arguments"),
    "negative num samples": (None, ["toy", "--num-samples", "0"], "num_samples: must be >= 1"),
    "smoke without section": (TOY, ["EXP", "--smoke"], "has no 'smoke' section"),
    "workers for a workload that is not data-parallel": (
        None,
        ["seagram", "--smoke", "resources.workers=2"],
        "'seagram' is not data-parallel",
    ),
    # Workload configs and preflight checks, still before Ray starts:
    "poisoning ratio above 1": (
        None,
        ["backdoor", "--smoke", "config.poison_ratio=1.5"],
        "config.poison_ratio: must be in [0, 1)",
    ),
    "eps below 0": (None, ["fair_adv", "--smoke", "config.eps=-0.1"], "config.eps"),
    "replay buffer beyond memory": (
        None,
        ["dqn_softlinf", "--smoke", "config.buffer_size=100000000"],
        "config.buffer_size: 100,000,000 transitions need",
    ),
    "unknown Atari game": (None, ["dqn_softlinf", "--smoke", "config.game=Pongg"], "Pongg"),
    "missing dataset": (
        None,
        ["backdoor", "--smoke", "config.synthetic_data=false", "config.data_dir=TMP/nodata"],
        "cifar10 not found: looked for",
    ),
    "corrupted dataset": (
        None,
        ["backdoor", "--smoke", "config.synthetic_data=false", "config.data_dir=TMP/bad"],
        "checksum mismatch",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text, args, fragment = BAD_INPUTS[case]
    exp = write(tmp_path, text) if text is not None else ""
    if case == "corrupted dataset":  # a real-format archive with one byte flipped
        archive = cifar.write_synthetic_cifar(tmp_path / "bad", "cifar10", n_train=20, n_test=10)
        data = bytearray(archive.read_bytes())
        data[len(data) // 2] ^= 0xFF
        archive.write_bytes(bytes(data))
    args = [a.replace("EXP", exp).replace("TMP", str(tmp_path)) for a in args]
    if "--storage" not in args:
        args = [*args, "--storage", str(tmp_path / "results")]
    assert raylab_tune.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert fragment in err, err
    assert not (tmp_path / "results").exists()


def test_gpu_request_on_a_machine_without_gpu_is_refused(capsys, tmp_path):
    if ray_start.local_resources()["GPU"] > 0:
        pytest.skip("this machine has a GPU")
    assert raylab_tune.main(["toy", "resources.gpus_per_worker=1", "--storage", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "1 GPU per trial, but this machine has 0 GPU" in err
    assert raylab_train.main(["toy", "resources.gpus_per_worker=1", "--storage", str(tmp_path / "r")]) == 2
    assert not (tmp_path / "r").exists()


def test_fractional_gpus_for_several_workers_are_refused_before_ray_starts(capsys, tmp_path):
    """NCCL refuses two workers of one process group on one GPU; refused as one line, exit 2."""
    argv = ["toy", "resources.workers=2", "resources.gpus_per_worker=0.5", "--storage", str(tmp_path / "r")]
    assert raylab_tune.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpus_per_worker" in err[0] and "NCCL" in err[0], err
    assert not (tmp_path / "r").exists()
    # One worker with half a GPU stays allowed (two trials share a GPU, each its own process group).
    from raylab import experiment as experiments

    assert (
        experiments.load("toy", ["resources.workers=1", "resources.gpus_per_worker=0.5"]).resources.gpus_per_worker
        == 0.5
    )


def test_resources_beyond_a_joined_cluster_only_warn(capsys):
    from raylab import experiment as experiments

    exp = experiments.load("toy", ["resources.gpus_per_worker=1"])
    checks.check_resources(exp, {"CPU": 8, "GPU": 0}, local=False)
    assert "wait for the autoscaler" in capsys.readouterr().out


def test_cli_process_exit_code_and_no_traceback(tmp_path):
    """The real entry point, as a user runs it: including an address that does not answer."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for args, fragment in [
        (["toy", "config.lrr=1"], "unknown key 'config.lrr'"),
        (
            ["toy", "--smoke", "--address", f"127.0.0.1:{dead_port}"],
            f"cannot reach Ray cluster at 127.0.0.1:{dead_port}",
        ),
    ]:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "raylab.tune", *args, "--storage", str(tmp_path / "results")],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and fragment in proc.stderr
        assert proc.stderr.strip().count("\n") == 0, proc.stderr
        assert time.monotonic() - start < 30
    assert not (tmp_path / "results").exists()


def test_counters_a_stop_key_may_use_are_ones_tune_adds_to_every_result():
    from ray.tune.result import AUTO_RESULT_KEYS

    from raylab import experiment as experiments

    assert set(experiments.TUNE_COUNTERS) <= set(AUTO_RESULT_KEYS)
    for counter in experiments.TUNE_COUNTERS:  # each accepted as a stop key and as a time_attr
        experiments.load("toy", [f"stop.{counter}=5", f"scheduler.time_attr={counter}"])
