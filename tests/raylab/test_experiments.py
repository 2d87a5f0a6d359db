"""Every experiment YAML and every registered workload meets the contract."""

from __future__ import annotations

import dataclasses

import pytest

from raylab import experiment as experiments
from raylab import tune as raylab_tune
from raylab import workloads
from raylab.config import field_docs
from raylab.experiment import Experiment
from raylab.testing import validate_experiment, validate_workload

EXPERIMENTS = sorted(experiments.available())
WORKLOADS = sorted(workloads.registry())


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_yaml_meets_the_contract(name):
    """Both modes load and name a declared metric; the first line is its command; the smoke
    mode is one small CPU worker (``raylab.testing.validate_experiment``, as a lab's tests run it)."""
    full, smoke = validate_experiment(name)
    assert full.workload == smoke.workload and smoke.smoke and not full.smoke


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_dry_run_prints_resolved_experiment(name, capsys):
    code = raylab_tune.main([name, "--dry-run"])
    out, err = capsys.readouterr()
    # exit 2 exactly when a check it prints refuses (this machine lacks a GPU, a dataset, ...)
    refusals = [line.partition(": ")[2] for line in out.splitlines() if line.startswith("# ") and ": " in line]
    problems = [line.removeprefix("error: ") for line in err.splitlines() if line.startswith("error: ")]
    assert code == (2 if problems else 0) and all(problem in refusals for problem in problems), (code, err)
    assert f"workload: {experiments.load(name).workload}" in out and "# trials:" in out


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_config_field_has_a_docstring(name):
    validate_workload(name)


def test_the_contract_checks_name_what_is_wrong(tmp_path, monkeypatch):
    """A YAML without its command line, and one whose smoke mode asks a GPU, are refused by name."""
    base = experiments.available()["toy"].read_text().splitlines()
    (tmp_path / "no_command.yaml").write_text("\n".join(base[1:]) + "\n")
    (tmp_path / "gpu_smoke.yaml").write_text(
        "\n".join(["# python -m raylab.tune gpu_smoke", *base[1:], "  resources: {gpus_per_worker: 1}"]) + "\n"
    )
    monkeypatch.setenv(experiments.CONFIGS_ENV, str(tmp_path))
    with pytest.raises(AssertionError, match="first line must be the command"):
        validate_experiment("no_command")
    with pytest.raises(AssertionError, match="gpus_per_worker=1"):
        validate_experiment("gpu_smoke")


def test_experiment_sections_have_docstrings():
    for cls in (
        Experiment,
        experiments.Resources,
        experiments.Scheduler,
        experiments.Checkpointing,
        experiments.Failure,
        experiments.Estimate,
        experiments.SearchAlg,
    ):
        docs = field_docs(cls)
        undocumented = [
            f.name
            for f in dataclasses.fields(cls)
            if not docs.get(f.name)
            and not dataclasses.is_dataclass(f.type)
            and f.name not in {"scheduler", "resources", "checkpoint", "failure", "estimate"}
        ]
        assert not undocumented, (cls.__name__, undocumented)


def test_list_shows_experiments_and_workloads(capsys):
    assert raylab_tune.main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in EXPERIMENTS + WORKLOADS:
        assert name in out
    assert "INVALID" not in out


def test_overrides_and_smoke_merge_into_the_file():
    exp = experiments.load("toy", ["config.lr=0.01", "search.seed=[3, 4, 5]", "num_samples=1"], smoke=True)
    assert exp.config["lr"] == 0.01 and "lr" not in exp.search
    assert exp.search["seed"] == {"grid": [3, 4, 5]} and exp.smoke
    assert exp.config["steps"] == 60  # from the smoke section


def test_pbt_and_asha_schedulers_build():
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

    from raylab.launch import scheduler as schedulers

    assert isinstance(schedulers.make_scheduler(experiments.load("toy")), ASHAScheduler)
    pbt = experiments.load("toy", ["scheduler.type=pbt", "scheduler.hyperparam_mutations={lr: [0.01, 0.1]}"])
    assert isinstance(schedulers.make_scheduler(pbt), PopulationBasedTraining)


def test_loading_and_validating_every_experiment_does_not_import_ray_tune():
    """``import raylab.experiment`` and ``load`` (both modes) stay clear of Ray Tune (seconds to
    import): a fresh interpreter, since this test process has imported it already."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom raylab import experiment\n"
        "for name in experiment.available():\n"
        "    experiment.load(name, smoke=True); experiment.load(name)\n"
        "print(sorted(m for m in sys.modules if m == 'ray.tune' or m.startswith('ray.tune.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout[-2000:]
