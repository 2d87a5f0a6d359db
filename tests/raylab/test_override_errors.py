"""Small input mistakes: a stop value that ends every trial at once, an
unknown workload, a bad command-line override (named, not blamed on the shipped YAML), and a
``--dry-run`` whose checks refuse (exit 2, as the real command). Each is one line, exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import tune as raylab_tune
from raylab.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("value", ["-1", "0"])
def test_a_stop_value_that_ends_every_trial_at_its_first_report_is_refused(value, capsys):
    assert raylab_tune.main(["toy", "--smoke", f"stop.training_iteration={value}", "--dry-run"]) == 2
    err = _error(capsys)
    assert err.startswith(f"error: command line: override 'stop.training_iteration={value}': stop.training_iteration:")
    assert "give a value > 0" in err
    experiments.load("toy", ["stop.training_iteration=1"], smoke=True)  # the smallest that runs
    # a metric that may be negative (a return) keeps a negative target
    assert experiments.load("dqn_softlinf", ["stop.eval/return_mean=-5"]).stop["eval/return_mean"] == -5


def test_an_unknown_workload_names_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("workload: no_such_workload\nmetric: m\nmode: max\n")
    with pytest.raises(UserError) as err:
        experiments.load(str(path))
    assert str(err.value).startswith(f"{path}: workload: unknown workload 'no_such_workload'; available: ")


def test_a_bad_override_is_named_and_the_shipped_file_is_not_blamed(capsys):
    source = experiments.find("toy")
    for override, what in (
        ("config.lr=abc", "config.lr: expected float"),
        ("resources.workers=0", "resources.workers: must be >= 1"),
        ("workload=nope", "workload: unknown workload 'nope'"),
    ):
        assert raylab_tune.main(["toy", "--smoke", override, "--dry-run"]) == 2
        err = _error(capsys)
        assert err.startswith(f"error: command line: override '{override}': {what}"), err
        assert err.endswith(f"(experiment {source})") and f"{source}:" not in err


def test_a_file_wrong_by_itself_is_still_named_with_overrides_given(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("workload: toy\nmode: min\n")
    with pytest.raises(UserError, match=rf"^{path}: missing required key 'metric'$"):
        experiments.load(str(path), ["config.lr=1e-3"])


def test_dry_run_exits_2_when_it_prints_a_preflight_refusal(capsys, tmp_path):
    argv = ["dqn_softlinf", "--smoke", "config.game=NoSuchGame", "--dry-run", "--storage", str(tmp_path)]
    assert raylab_tune.main(argv) == 2
    out, err = capsys.readouterr()
    (line,) = [line for line in out.splitlines() if line.startswith("# workload preflight:")]
    problem = line.removeprefix("# workload preflight: ")
    assert problem != "ok" and "NoSuchGame" in problem and err.strip() == f"error: {problem}"
    assert raylab_tune.main(["dqn_softlinf", "--smoke", "--dry-run", "--storage", str(tmp_path)]) == 0


def test_reports_is_git_ignored():
    """``python -m raylab.report`` of a URI run writes ``reports/RUN`` in the working folder."""
    done = subprocess.run(
        ["git", "check-ignore", "-q", "reports/some-run/report.md"], cwd=REPO, capture_output=True, check=False
    )
    assert done.returncode == 0, "reports/ is not in .gitignore"
    done = subprocess.run(["git", "check-ignore", "-q", "raylab/report/plots.py"], cwd=REPO, check=False)
    assert done.returncode == 1  # control: the report package itself is tracked
