"""Reports of real toy smoke sweeps: figures, tables against result.json, failures, URIs, CLI."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from raylab import report, workloads
from raylab.workloads import Workload


@pytest.mark.slow
def test_toy_report_figures_and_tables_match_the_trials_result_files(smoke_sweep, report_checks, capsys):
    results, run_path, _ = smoke_sweep("toy", "search.lr=[0.02,0.05]")
    assert len(results) == 4 and all(r.error is None for r in results)
    path = Path(report.write_report(run_path))
    assert path == Path(run_path) / "report" / "report.html"
    content = json.loads((path.parent / "report.json").read_text())

    declared = workloads.get("toy").report_spec()
    assert report_checks.figures(Path(run_path), path.parent, content) == len(declared.figures())
    assert [f["file"] for f in content["figures"]] == [
        "figures/01_curve_train_loss_eval_mse.png",
        "figures/02_versus_eval_mse.png",
    ]
    # 2 learning rates x 2 metrics, each the mean over 2 seeds
    assert report_checks.tables(Path(run_path), content) == 4
    table = next(t for t in content["tables"] if t["metrics"] == ["eval/mse", "train/loss"])
    assert [row["values"] for row in table["blocks"][0]["rows"]] == [{"lr": 0.02}, {"lr": 0.05}]
    assert all(cell["n"] == 2 for row in table["blocks"][0]["rows"] for cell in row["cells"])
    assert table["blocks"][0]["best"]  # best="min": the lower final MSE is marked
    assert content["notes"] == [] and content["unreported_metrics"] == []
    assert content["status_counts"] == {"TERMINATED": 4}

    # Markdown beside the same PNGs, the same numbers
    md = Path(report.write_report(run_path, fmt="md"))
    text = md.read_text()
    assert "![" in text and "(figures/01_curve_train_loss_eval_mse.png)" in text
    mean = table["blocks"][0]["rows"][0]["cells"][0]["mean"]
    assert f"{mean:.4g}" in text

    # CLI: by experiment name (the newest run under --storage) and through a file:// URI
    storage = str(Path(run_path).parent)
    capsys.readouterr()
    assert report.main(["toy", "--storage", storage, "--out", str(Path(storage) / "by-name")]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == f"report: {Path(storage) / 'by-name' / 'report.html'}"
    uri_out = Path(storage) / "by-uri"
    assert report.main([f"file://{run_path}", "--out", str(uri_out), "--format", "md"]) == 0
    by_uri = json.loads((uri_out / "report.json").read_text())
    assert by_uri["tables"] == content["tables"]

    # Live monitoring: every trial folder holds TensorBoard event files with the metrics
    for trial in report_checks.trials(Path(run_path)):
        events = list((Path(run_path) / trial["name"]).glob("events.out.tfevents.*"))
        assert events, f"no TensorBoard event file in {trial['name']}"
        scalars = tensorboard_scalars(events[0])
        assert scalars["ray/tune/eval/mse"] == [row["eval/mse"] for row in trial["rows"]]


def tensorboard_scalars(path: Path) -> dict[str, list[float]]:
    """Scalar values by tag from a TensorBoard event file (TFRecord of Event protos)."""
    from tensorboardX.proto.event_pb2 import Event

    data, offset, scalars = path.read_bytes(), 0, {}
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        event = Event.FromString(data[offset + 12 : offset + 12 + length])
        offset += 12 + length + 4
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append(value.simple_value)
    return {tag: [pytest.approx(v, rel=1e-6) for v in values] for tag, values in scalars.items()}


FAULTY_YAML = """\
# python -m raylab.tune {path}
description: toy sweep whose seed-1 trial fails and which never reports eval/mse
workload: toy_faulty
metric: train/loss
mode: min
config: {{steps: 40, report_every: 20}}
search: {{lr: [0.05], seed: [0, 1]}}
smoke: {{}}
"""


@pytest.mark.slow
def test_failed_trial_and_missing_metric_are_reported(smoke_sweep, report_checks, monkeypatch, tmp_path):
    toy = workloads.get("toy")
    monkeypatch.setitem(
        workloads.registry(),
        "toy_faulty",
        Workload(
            config=toy.config,
            loop="tests.raylab.report.faulty_loop:train_loop",
            metrics=toy.metrics,
            figures=toy.figures,
        ),
    )
    experiment_file = tmp_path / "toy_faulty.yaml"
    experiment_file.write_text(FAULTY_YAML.format(path=experiment_file))
    results, run_path, _ = smoke_sweep(str(experiment_file))
    assert sorted(r.error is not None for r in results) == [False, True]

    path = Path(report.write_report(run_path))
    content = json.loads((path.parent / "report.json").read_text())
    failed = [t for t in report_checks.trials(Path(run_path)) if t["params"]["seed"] == 1]
    assert not failed  # the failed trial reported nothing
    assert len(content["failed"]) == 1
    assert "RuntimeError: injected failure for seed 1" in content["failed"][0]["error"]
    assert content["unreported_metrics"] == ["eval/mse"]
    notes = "\n".join(content["notes"])
    assert "failed: " in notes and "injected failure for seed 1" in notes
    assert "declared metrics no trial reported: eval/mse" in notes
    assert "not drawn" in notes  # MSE against the learning rate has no data
    html = path.read_text()
    assert "injected failure for seed 1" in html and "eval/mse" in html
    # what could be drawn was: the training-loss curve (eval/mse panel empty), the tables
    assert report_checks.figures(Path(run_path), path.parent, content) == 1
    assert report_checks.tables(Path(run_path), content) >= 1
