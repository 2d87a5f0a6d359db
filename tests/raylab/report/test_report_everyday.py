"""The report on the everyday path: sweeps before debug runs, variant fields once, wide
tables that scroll."""

from __future__ import annotations

import json
import os

import yaml

from raylab.report import write_report
from raylab.report.aggregate import label_of
from raylab.report.run_view import _swept_keys, find_run
from raylab.run_folder import RunFolder


def test_an_experiment_name_skips_raylab_train_debug_runs_unless_asked(tmp_path):
    for age, (name, command) in enumerate(
        [("exp-train-20260201-000000", "raylab.train"), ("exp-20260101-120000", "raylab.tune")][::-1]
    ):
        (tmp_path / name).mkdir()
        saved = tmp_path / name / "experiment.yaml"
        saved.write_text(yaml.safe_dump({"name": "exp", "provenance": {"command": command}}))
        os.utime(saved, (1e9 + age, 1e9 + age))  # the debug run is the newer one
    assert find_run("exp", str(tmp_path)) == str(tmp_path / "exp-20260101-120000")
    assert find_run("exp", str(tmp_path), train_runs=True) == str(tmp_path / "exp-train-20260201-000000")


def test_variant_fields_are_swept_once_and_unset_ones_are_not_labelled():
    search = {
        "variant": {"grid": [{"loss": "mse"}, {"loss": "soft_linf", "beta": 3.0}, {"loss": "soft_linf", "beta": 30.0}]},
        "seed": {"grid": [0]},
    }
    assert _swept_keys(search) == ["loss", "beta", "seed"]
    assert label_of(["loss", "beta"], ("mse", None)) == "loss=mse"
    assert label_of(["loss", "beta"], ("soft_linf", 3.0)) == "loss=soft_linf, beta=3"


def test_a_variant_field_a_trial_does_not_set_shows_a_dash_not_its_default_nor_none(tmp_path):
    """``beta`` of an mse trial: the trial table shows ``-`` (the mse loss does not use it),
    not the Config default, whether the workload is registered or not; no cell reads ``None``."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_report_units import write_run

    arms = [{"loss": "mse"}, {"loss": "soft_linf", "beta": 3.0}]
    trials = [{"params": {"variant": v, "seed": 0}, "rows": [{"eval/return_mean": 1.0 + len(v)}]} for v in arms]
    search = {"variant": arms, "seed": [0]}
    for workload, unset in (("dqn_softlinf", "-"), ("not_registered_here", "-")):
        run = write_run(tmp_path / workload, search, trials, workload=workload, metric="eval/return_mean")
        html = Path(write_report(str(run))).read_text()
        content = json.loads((run / "report" / "report.json").read_text())
        beta = content["trial_columns"].index("beta")
        assert [row[beta] for row in content["trial_rows"]] == [unset, "3"]
        assert "None" not in html, html[html.index("None") - 200 : html.index("None") + 50]


def test_metrics_of_other_environments_are_not_noted_missing(tmp_path):
    """dqn_softlinf on Atari reports no FeatureMDP-only exact metrics, and on the FeatureMDP no
    Atari-only held-out ones: neither run's status notes name the other's; the other's figure
    and table say they do not apply. Control: an Atari run that lost its held-out metrics is
    still told so."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_report_units import write_run

    from trainers.dqn_softlinf import COMMON_METRICS, EXACT_METRICS, HELDOUT_METRICS

    def run(name, game, suite, metrics):
        trials = [
            {
                "params": {"suite": suite, "game": game, "loss": loss, "backend": "raylab", "seed": 0},
                "rows": [{m: 1.0 for m in (*metrics, *(("train/soft_linf_ess",) if loss == "soft_linf" else ()))}],
            }
            for loss in ("mse", "soft_linf")
        ]
        folder = write_run(
            tmp_path / name,
            {"loss": ["mse", "soft_linf"], "seed": [0]},
            trials,
            workload="dqn_softlinf",
            metric="eval/return_mean",
        )
        html = Path(write_report(str(folder))).read_text()
        return json.loads((folder / "report" / "report.json").read_text()), html

    def status(content):
        return " ".join(content["notes"])

    atari, html = run("atari", "Pong", "atari", COMMON_METRICS + HELDOUT_METRICS)
    assert not any(m in status(atari) for m in EXACT_METRICS) and "FeatureMDP" not in status(atari), atari["notes"]
    exact = [f for f in atari["figures"] if "FeatureMDP" in f["title"]][0]
    assert exact["file"] == "" and not exact["applicable"] and exact["note"].startswith("not applicable")
    table = [t for t in atari["tables"] if t["metrics"] == ["bellman/residual_linf_exact"]][0]
    assert table["blocks"] == [] and "known-model environments (FeatureMDP) only" in table["note"]
    assert "known-model environments (FeatureMDP) only" in html
    mdp, _ = run("mdp", "raylab/FeatureMDP-v0", "gymnasium", COMMON_METRICS + EXACT_METRICS)
    assert not any(m in status(mdp) for m in HELDOUT_METRICS), mdp["notes"]
    drawn = [f for f in mdp["figures"] if "FeatureMDP" in f["title"]][0]
    assert drawn["file"] and drawn["note"] == ""
    first = mdp["figures"][0]  # return (drawn) beside the Atari-only held-out residuals
    assert first["file"] and "heldout" not in first["note"]
    lost, _ = run("lost", "Pong", "atari", COMMON_METRICS)  # the control: missing where it applies
    assert "declared metrics no trial reported: bellman/residual_linf_heldout" in status(lost), lost["notes"]
    assert not any(m in status(lost) for m in EXACT_METRICS)


def test_wide_tables_scroll_inside_their_box(tmp_path):
    run = tmp_path / "exp-20260101-120000"
    run.mkdir()
    keys = [f"a_rather_long_hyperparameter_name_{i}" for i in range(12)]
    (run / "experiment.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "exp",
                "workload": "not_registered_here",
                "metric": "score",
                "mode": "max",
                "search": {k: {"grid": [1]} for k in keys},
                "num_samples": 1,
                "smoke": False,
            }
        )
    )
    trial = RunFolder(run).trial("t_00000")
    trial.write_params({k: 1 for k in keys})
    trial.write_rows([{"score": 1.0, "training_iteration": 1}])
    html = open(write_report(str(run), out=tmp_path / "report")).read()
    assert ".scroll{overflow-x:auto" in html
    assert html.count('<div class="scroll"><table>') == html.count("<table>") > 0
