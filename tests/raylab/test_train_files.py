"""``python -m raylab.train`` trial folders hold what Tune's do beside ``result.json``:
``progress.csv`` and TensorBoard events; a NaN metric (seagram's attack
metrics before the attack phase) prints as ``-``, not ``nan``."""

from __future__ import annotations

import csv
import struct

from raylab import session
from raylab import train as raylab_train
from raylab.launch import progress
from raylab.run_folder import TRAIN_TRIAL, RunFolder


def _event_scalars(path) -> dict[str, list[tuple[int, float]]]:
    """Tag -> [(step, value)] from a TensorBoard event file (TFRecord framing, Event protos)."""
    from tensorboardX.proto import event_pb2

    data, at, found = path.read_bytes(), 0, {}
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at : at + 8])
        event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
        at += 12 + length + 4
        for value in event.summary.value:
            found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found


def test_a_train_run_writes_progress_csv_and_tensorboard_events(tmp_path, capsys):
    assert raylab_train.main(["toy", "--smoke", "--quiet", "--storage", str(tmp_path)]) == 0
    (run,) = list(tmp_path.iterdir())
    folder = RunFolder(run).trial(TRAIN_TRIAL)
    rows, trial = folder.rows(), folder.path
    with (trial / "progress.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) >= 2
    assert [float(r["train/loss"]) for r in table] == [r["train/loss"] for r in rows]
    (events,) = trial.glob("events.out.tfevents.*")
    scalars = _event_scalars(events)
    assert [step for step, _ in scalars["train/loss"]] == [r["training_iteration"] for r in rows]
    assert abs(scalars["train/loss"][-1][1] - rows[-1]["train/loss"]) < 1e-6


def test_a_nan_metric_prints_as_a_dash(capsys):
    session.start(backend="local", verbose=True)
    try:
        session.report({"victim/loss": 0.5, "attack/map": float("nan")})
    finally:
        session.start()  # the default session again
    err = capsys.readouterr().err
    assert "attack/map -" in err and "nan" not in err
    assert "victim/loss 0.5" in err  # control: a measured value prints
    assert progress._number(float("nan")) == "-" and progress._number(0.25) == "0.25"
