"""``resources.spot`` and ``--spot``: validated, refused where no spot node exists, and asked of
Ray by every worker of a spot trial."""

from __future__ import annotations

import pytest

from raylab import experiment as experiments
from raylab import train as raylab_train
from raylab import tune as raylab_tune
from raylab.launch.trial import TrialSettings
from raylab.run_folder import RunFolder


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["toy", "resources.spot=maybe"], "resources.spot: expected bool, got 'maybe'"),
        (["toy", "resources.spot=1"], "resources.spot: expected bool, got 1"),
    ],
)
def test_a_bad_spot_value_is_one_line_exit_2(args, fragment, capsys, tmp_path):
    assert raylab_tune.main([*args, "--dry-run", "--storage", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err, err


def test_a_bad_spot_value_in_a_file_names_the_file(capsys, tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("workload: toy\nmetric: eval/mse\nmode: min\nresources: {spot: sometimes}\n")
    assert raylab_tune.main([str(path), "--dry-run", "--storage", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "exp.yaml" in err and "resources.spot" in err and "sometimes" in err, err


def test_spot_on_this_machine_is_refused_before_ray_starts(capsys, tmp_path):
    """A local Ray has no spot node: the trials would wait forever, so both commands refuse."""
    for main in (raylab_tune.main, raylab_train.main):
        assert main(["toy", "--spot", "--storage", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "0.001 spot per trial, but this machine has 0 spot" in err, err
        assert "--spot" in err
    assert not (tmp_path / "r").exists()


def test_the_flag_and_the_key_ask_ray_for_the_spot_resource(tmp_path):
    """--spot is resources.spot=true; each worker's request (both trial paths take it from
    TrialSettings.worker_request) then holds the spot ask, and without it holds none."""
    run = RunFolder.under(str(tmp_path / "r"), "x")
    args = raylab_tune.parser().parse_intermixed_args(["backdoor", "--spot"])
    spot = experiments.load("backdoor", raylab_tune.overrides_of(args))
    plain = experiments.load("backdoor", [])
    assert spot.resources.spot and not plain.resources.spot
    assert TrialSettings.of(spot, run).worker_request == {
        "CPU": plain.resources.cpus_per_worker,
        "GPU": plain.resources.gpus_per_worker,
        experiments.SPOT_RESOURCE: experiments.SPOT_ASK,
    }
    assert experiments.SPOT_RESOURCE not in TrialSettings.of(plain, run).worker_request
    assert TrialSettings.of(experiments.load("toy", ["resources.spot=true"]), run).worker_request == {
        "CPU": 1.0,
        experiments.SPOT_RESOURCE: experiments.SPOT_ASK,
    }
