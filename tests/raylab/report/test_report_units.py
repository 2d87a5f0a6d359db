"""The report on hand-written run folders (no Ray): aggregates, pivots, partial sweeps, bad input."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from raylab import report
from raylab.errors import UserError
from raylab.report.aggregate import aggregate, series_xy, table_blocks, value_at
from raylab.report.run_view import find_run, load_run
from raylab.report.spec import Bars, Curve, Report, Scatter, Table, Versus
from raylab.run_folder import TRAIN_TRIAL, RunFolder


def write_run(root: Path, search: dict, trials: list[dict], name="exp-20260101-120000", **experiment) -> Path:
    """A run folder like a sweep's: experiment.yaml, and per trial its params, rows and error."""
    run = root / name
    run.mkdir(parents=True)
    exp = {
        "name": "exp",
        "workload": "not_registered_here",
        "metric": "score",
        "mode": "max",
        "search": {k: {"grid": v} for k, v in search.items()},
        "num_samples": 1,
        "smoke": False,
        **experiment,
    }
    (run / "experiment.yaml").write_text(yaml.safe_dump(exp, sort_keys=False))
    for i, trial in enumerate(trials):
        folder = RunFolder(run).trial(f"t_{i:05d}")
        folder.write_params(trial["params"])
        if "rows" in trial:
            folder.write_rows([{**row, "training_iteration": n + 1} for n, row in enumerate(trial["rows"])])
        if "error" in trial:
            folder.write_error(trial["error"])
    return run


def test_aggregate_is_mean_and_sample_std_elementwise_for_vectors():
    agg = aggregate([1.0, 2.0, 4.0], ["a", "b", "c"])
    assert agg.mean == pytest.approx(7 / 3) and agg.std == pytest.approx(math.sqrt(7 / 3)) and agg.n == 3
    one = aggregate([5.0, None], ["a", "b"])
    assert one.mean == 5.0 and math.isnan(one.std) and one.trials == ["a"]
    vec = aggregate([[0.0, 1.0], [2.0, 3.0], [9.0]], ["a", "b", "c"])  # the odd length is dropped
    assert vec.mean == [1.0, 2.0] and vec.std == pytest.approx([math.sqrt(2)] * 2) and vec.n == 2
    assert aggregate([None], ["a"]) is None


def test_value_at_last_max_min_and_curve_without_carried_values(tmp_path):
    run = load_run(
        str(
            write_run(
                tmp_path,
                {"seed": [0]},
                [
                    {
                        "params": {"seed": 0},
                        "rows": [
                            {"step": 1, "early": 3.0, "acc": [0.1, 0.5]},
                            {"step": 2, "early": 2.0, "acc": [0.4, 0.2]},
                            {"step": 3, "early": 2.0},
                            {"step": 4, "early": 2.0, "late": 7},
                        ],
                    }
                ],
            )
        )
    )
    trial = run.trials[0]
    assert value_at(trial, "early") == 2.0 and value_at(trial, "early", "max") == 3.0
    assert value_at(trial, "acc") == [0.4, 0.2] and value_at(trial, "acc", "max") == [0.4, 0.5]
    assert value_at(trial, "missing") is None
    assert series_xy(trial, "step", "early")[0].tolist() == [1, 2, 3, 4]
    assert series_xy(trial, "step", "early", skip_repeats=True)[0].tolist() == [1, 2]


def probe_run(tmp_path: Path) -> Path:
    """Two tasks (a: MAE, lower is better; b: AUROC) x two feature sets x two seeds."""
    values = {("a", "x"): [0.5, 0.7], ("a", "y"): [0.3, 0.4], ("b", "x"): [0.9, 0.8], ("b", "y"): [0.6, 0.7]}
    metric = {"a": "probe/a/mae", "b": "probe/b/auroc"}
    trials = [
        {
            "params": {"task": t, "features": f, "seed": s},
            "rows": [{metric[t]: 99.0, "score": 0.0}, {metric[t]: values[t, f][s], "score": 1.0}],
        }
        for (t, f) in values
        for s in (0, 1)
    ]
    return write_run(tmp_path, {"task": ["a", "b"], "features": ["x", "y"], "seed": [0, 1]}, trials)


def test_pivot_table_resolves_each_trials_metric_and_marks_the_best_per_row(tmp_path):
    run = load_run(str(probe_run(tmp_path)))
    table = Table("probe/{task}/*", rows="task", columns="features", best="max", lower_is_better="*/mae")
    (block,) = table_blocks(run, table, None)
    assert block.columns == ["features=x", "features=y"]
    cells = {(label, block.columns[j]): c for label, _, cs in block.rows for j, c in enumerate(cs)}
    assert cells["a", "features=x"].mean == pytest.approx(0.6)
    assert cells["a", "features=x"].std == pytest.approx(math.sqrt(0.02))
    assert cells["b", "features=y"].mean == pytest.approx(0.65) and cells["b", "features=y"].n == 2
    assert block.metrics[0] == ["probe/a/mae", "probe/a/mae"]
    assert block.best == [(0, 1), (1, 0)]  # a: the lower MAE (y); b: the higher AUROC (x)
    # group rows instead: one row per (task, features), columns the metrics
    (rows_block,) = table_blocks(run, Table(("score", "probe/{task}/*"), at="max"), None)
    assert [label for label, _, _ in rows_block.rows] == [
        "task=a, features=x",
        "task=a, features=y",
        "task=b, features=x",
        "task=b, features=y",
    ]
    assert rows_block.rows[0][2][1].mean == 99.0  # the max over reports


def test_report_of_a_partial_sweep_names_failed_running_and_missing(tmp_path):
    run = write_run(
        tmp_path,
        {"lr": [0.1, 0.2, 0.3], "seed": [0, 1]},
        [
            {"params": {"lr": 0.1, "seed": 0}, "rows": [{"score": 1.0, "done": True}]},
            {"params": {"lr": 0.1, "seed": 1}, "rows": [{"score": 3.0}]},
            {
                "params": {"lr": 0.2, "seed": 0},
                "error": "Failure # 1 (occurred at 2026-01-01)\nTraceback (most recent call last):\n"
                "  File x\nValueError: loss is nan\n",
            },
            {"params": {"lr": 0.2, "seed": 1}},
        ],
    )
    # Tune's state file (JSON) says which trials run; one it knows has no folder yet
    state = {
        "trial_data": [
            [json.dumps({"relative_logdir": "t_00001", "status": "RUNNING", "config": {"lr": 0.1, "seed": 1}}), "{}"],
            [json.dumps({"relative_logdir": "t_00002", "status": "ERROR", "config": {"lr": 0.2, "seed": 0}}), "{}"],
            [json.dumps({"relative_logdir": "t_00004", "status": "PENDING", "config": {"lr": 0.3, "seed": 0}}), "{}"],
        ]
    }
    (run / "experiment_state-2026-01-01_12-00-00.json").write_text(json.dumps(state))
    spec = Report(items=(Curve("score"), Curve("never"), Table(("score", "never"))))
    content = report.build(load_run(str(run)), spec, tmp_path / "out")
    assert content["status_counts"] == {"TERMINATED": 1, "RUNNING": 1, "ERROR": 1, "NO RESULTS": 1, "PENDING": 1}
    notes = "\n".join(content["notes"])
    assert "1 of 6 trials have not started (no trial folder yet): lr=0.3, seed=1" in notes
    assert "sweep still running: 2 trial(s) not finished when Tune last saved its state" in notes
    assert "trial t_00002 failed: Failure # 1 (occurred at 2026-01-01) ... ValueError: loss is nan" in notes
    assert "declared metrics no trial reported: never" in notes
    assert "figure 'never vs training_iteration' not drawn: no trial reported never" in notes
    sweep_table = content["tables"][0]
    cell = sweep_table["blocks"][0]["rows"][0]["cells"][0]  # lr=0.1 over both seeds, one still running
    assert (cell["mean"], cell["n"]) == (2.0, 2)


def test_vector_bars_scatter_and_versus_are_drawn(tmp_path):
    trials = [
        {
            "params": {"method": m, "eps": e, "seed": s},
            "rows": [{"acc": [0.2 * s + e, 0.5, 0.1 + e], "pred": e + s, "meas": e + 0.9 * s, "score": e}],
        }
        for m in ("a", "b")
        for e in (0.1, 0.2)
        for s in (0, 1)
    ]
    run = load_run(str(write_run(tmp_path, {"method": ["a", "b"], "eps": [0.1, 0.2], "seed": [0, 1]}, trials)))
    spec = Report(
        items=(
            Bars("acc", by="method", labels=("cat", "dog", "ship")),
            Scatter("pred", "meas", diagonal=True),
            Versus("eps", "score", by="method"),
        )
    )
    content = report.build(run, spec, tmp_path / "out")
    assert [f["file"] for f in content["figures"]] == [
        "figures/01_bars_acc.png",
        "figures/02_scatter_meas.png",
        "figures/03_versus_score.png",
    ]
    from PIL import Image

    for figure in content["figures"]:
        with Image.open(tmp_path / "out" / figure["file"]) as image:
            assert image.width > 300
    assert content["notes"] == [] or all("not registered" in n for n in content["notes"])


def test_markdown_report_and_a_single_local_trial_run(tmp_path):
    run = tmp_path / "toy-train-20260101-120000"
    run.mkdir(parents=True)
    (run / "experiment.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "toy",
                "workload": "toy",
                "metric": "eval/mse",
                "mode": "min",
                "search": {"lr": {"grid": [0.05, 0.1]}},
                "smoke": True,
            }
        )
    )
    trial = RunFolder(run).trial(TRAIN_TRIAL)
    trial.write_params({"lr": 0.05, "seed": 0})
    trial.write_rows(
        [{"train/loss": 1.0 / s, "eval/mse": 2.0 / s, "train/step": s, "training_iteration": s} for s in (1, 2, 3)]
    )
    path = Path(report.write_report(str(run), out=tmp_path / "md", fmt="md"))
    text = path.read_text()
    assert path.name == "report.md" and "![training loss and held-out MSE" in text
    assert "| lr=0.05 | 0.6667 (n=1) |" in text  # one trial: no std
    assert "not started" not in text  # raylab.train runs one point of the search by design
    assert (tmp_path / "md" / "figures" / "01_curve_train_loss_eval_mse.png").is_file()
    assert (tmp_path / "md" / "tables" / "03_table_eval_mse_train_loss.csv").is_file()


def test_experiment_name_picks_the_newest_run(tmp_path):
    names = ("exp-20260101-120000", "exp-smoke-20260301-090000", "exp-train-20260201-000000", "expx-20270101-000000")
    changed = {
        "exp-20260101-120000": 1,
        "exp-smoke-20260301-090000": 3,
        "exp-train-20260201-000000": 4,
        "expx-20270101-000000": 5,
    }  # when each experiment.yaml last changed
    for name in names:
        run = write_run(tmp_path, {"seed": [0]}, [], name=name)
        if name.startswith("expx"):  # a sweep of another experiment saves its own name
            (run / "experiment.yaml").write_text(
                (run / "experiment.yaml").read_text().replace("name: exp", "name: expx")
            )
        os.utime(run / "experiment.yaml", (1e9 + changed[name], 1e9 + changed[name]))
    assert find_run("exp", str(tmp_path)) == str(tmp_path / "exp-smoke-20260301-090000")
    with pytest.raises(UserError, match="no run of experiment 'other'"):
        find_run("other", str(tmp_path))


@pytest.mark.parametrize(
    "make, argv, message",
    [
        (lambda p: None, ["{p}/nowhere"], "no such run folder"),
        (lambda p: (p / "file.txt").write_text("x"), ["{p}/file.txt"], "not a run folder (a file, not a folder)"),
        (lambda p: (p / "empty").mkdir(), ["{p}/empty"], "not a run folder (no experiment.yaml"),
        (lambda p: None, ["toy", "--storage", "{p}"], "no run of experiment 'toy'"),
        (lambda p: None, ["{p}", "--format", "pdf"], "argument --format: invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, make, argv, message):
    make(tmp_path)
    assert report.main([a.format(p=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_bars_take_the_class_names_from_the_workloads_hook_and_a_tie_is_not_marked_best(tmp_path, monkeypatch):
    trials = [
        {"params": {"method": m, "seed": s, "dataset": "cifar10"}, "rows": [{"acc": [0.5, 0.4 + s / 10], "score": 1.0}]}
        for m in ("a", "b")
        for s in (0, 1)
    ]
    run = load_run(str(write_run(tmp_path, {"method": ["a", "b"], "seed": [0, 1]}, trials)))
    asked = []

    def names(config):
        asked.append(config["dataset"])
        return ("cat", "dog")

    from raylab.report import plots as report_plots

    ticks = []
    real_subplots = report_plots.plt.subplots

    def subplots(*args, **kwargs):  # keep the axes the report draws into, to read their ticks
        fig, axes = real_subplots(*args, **kwargs)
        ticks.append(axes)
        return fig, axes

    monkeypatch.setattr(report_plots.plt, "subplots", subplots)
    drawn, _ = report_plots.draw(Bars("acc", by="method", labels_from=names), run, None, tmp_path / "bars.png")
    assert drawn and asked == ["cifar10"]
    assert [t.get_text() for t in ticks[0][0][0].get_xticklabels()] == ["cat", "dog"]
    (block,) = table_blocks(run, Table("score", rows="method", best="max"), None)
    assert block.best == []  # both methods score 1.0: no best


def test_a_clean_arm_swept_once_is_the_baseline_point_of_every_series_without_its_own(tmp_path, monkeypatch):
    """backdoor_resnet sweeps the clean arm once (badnets at 0%): blended's line starts from it,
    wanet keeps its own clean arm, and the caption says which series borrowed it."""
    arms = [("badnets", 0.0), ("wanet", 0.0), ("badnets", 0.1), ("blended", 0.1), ("wanet", 0.1)]
    asr = {
        ("badnets", 0.0): 0.05,
        ("wanet", 0.0): 0.02,
        ("badnets", 0.1): 0.9,
        ("blended", 0.1): 0.8,
        ("wanet", 0.1): 0.7,
    }
    trials = [
        {
            "params": {"variant": {"attack": a, "poison_ratio": p}, "seed": s},
            "rows": [{"eval/asr": asr[a, p] + s / 100}],
        }
        for a, p in arms
        for s in (0, 1)
    ]
    search = {"variant": [{"attack": a, "poison_ratio": p} for a, p in arms], "seed": [0, 1]}
    run = load_run(str(write_run(tmp_path, search, trials)))
    from raylab.report import plots as report_plots

    axes_seen = []
    real_subplots = report_plots.plt.subplots

    def subplots(*args, **kwargs):
        fig, axes = real_subplots(*args, **kwargs)
        axes_seen.append(axes)
        return fig, axes

    monkeypatch.setattr(report_plots.plt, "subplots", subplots)

    def lines(item):
        drawn, note = report_plots.draw(item, run, None, tmp_path / "v.png")
        ax = axes_seen[-1][0][0]
        points = {c.get_label(): [round(v, 6) for xy in zip(*c.lines[0].get_data()) for v in xy] for c in ax.containers}
        return drawn, note, points

    drawn, note, points = lines(
        Versus("poison_ratio", "eval/asr", by="attack", baseline={"poison_ratio": 0.0, "attack": "badnets"})
    )
    assert drawn
    assert points["attack=badnets"] == [0.0, 0.055, 0.1, 0.905]  # (x, mean) pairs
    assert points["attack=blended"] == [0.0, 0.055, 0.1, 0.805]  # the clean arm at 0
    assert points["attack=wanet"] == [0.0, 0.025, 0.1, 0.705]  # its own
    assert note == (
        "at poison_ratio=0, attack=blended show the trials of poison_ratio=0, attack=badnets (one training for both)"
    )
    _, note, points = lines(Versus("poison_ratio", "eval/asr", by="attack"))  # the control
    assert points["attack=blended"] == [0.1, 0.805] and note == ""
    with pytest.raises(ValueError, match="baseline must be a dict of swept values that holds x"):
        Versus("poison_ratio", "eval/asr", baseline={"attack": "badnets"})


def test_step_before_and_value_at_step_read_the_probe_a_carried_row_comes_from():
    from raylab.report.aggregate import step_before, value_at_step
    from raylab.run_folder import Trial

    nan = float("nan")
    rows = [{"train/step": 1, "loss": 9.0}]  # before the first probe: no probe step yet
    for step, asr, drop in ((12, nan, 0.1), (24, 0.3, 1.0), (36, 0.8, 3.0)):
        rows.append({"train/step": step, "probe": step, "asr": asr, "drop": drop})
        rows.append({**rows[-1], "train/step": step + 5})  # a later report carrying the probe's values
    trial = Trial("t", {}, rows)
    assert step_before(trial, "asr", 0.5, "probe") == 24  # NaN counts as below; 0.8 at probe 36
    assert value_at_step(trial, "drop", 24, "probe") == 1.0
    assert value_at_step(trial, "drop", 11, "probe") is None
    assert step_before(trial, "asr", 0.9, "probe") == 36  # never reached: the last report's probe
    first = Trial("f", {}, [{"probe": 12, "asr": 0.7}])
    assert step_before(first, "asr", 0.5, "probe") is None  # reached at the first report


def test_before_reads_a_paired_contrast_only():
    from raylab.report.claims import Before, Contrast

    before = Before("early/asr", 0.5, step="early/probe_step")
    words = Contrast("early/drop", arm={"mode": "a"}, against={"mode": "b"}, before=before).words()
    assert "last report before early/asr reaches 0.5, the partner at the same early/probe_step" in words
    with pytest.raises(ValueError, match="before="):
        Contrast("early/drop", arm={"mode": "a"}, against_metric="x", before=before)
    with pytest.raises(ValueError, match="before="):
        Contrast("early/drop", arm={"mode": "a"}, against={"mode": "b"}, at="max", before=before)
