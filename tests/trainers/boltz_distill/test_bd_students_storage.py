"""Students of a boltz_distill run read from a storage URI (a moto S3 server), the best
``distill/val_loss`` weights probed, unfinished trials not listed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scenarios.clusters.conftest import s3_server  # noqa: F401 - the fixture

from raylab import checkpoint as ckpt
from raylab import run_folder
from raylab.run_folder import RunFolder
from trainers.boltz_distill import data, students
from trainers.boltz_distill.config import Config
from trainers.boltz_distill.loop import distill, load_student
from trainers.boltz_distill.model import GINEStudent


def _run(tmp_path):
    """A local run of three trials: trial_0 and trial_1 finished (trial_1 carries a best-val
    student that differs from its newest weights), trial_2 stopped before its end."""
    run = tmp_path / "boltz_distill-run"
    cfg = Config(
        corpus="nci",
        max_molecules=40,
        epochs=1,
        teachers=("descriptors",),
        width=16,
        depth=2,
        batch_size=16,
        store_root=str(tmp_path / "stores"),
        allow_missing_tests=True,
    )
    state = distill(cfg)
    torch.manual_seed(7)
    best = GINEStudent(16, 2, state["out_dim"]).state_dict()
    for name, extra, rows in (
        ("trial_0", {}, [{"distill/val_loss": 1.0}, {"distill/val_loss": 0.9, "done": True}]),
        ("trial_1", {"best_model": best, "best_step": 3}, [{"distill/val_loss": 0.8, "done": True}]),
        ("trial_2", {}, [{"distill/val_loss": 1.0}]),
    ):
        trial = RunFolder(run).trial(name)
        ckpt.save(trial.checkpoint_path(0), {**state, **extra})
        trial.write_params({"seed": 0})
        trial.write_rows(rows)
    return run, best


@pytest.mark.slow
def test_students_from_s3_lists_finished_trials_and_probes_the_best_weights(
    s3_server,  # noqa: F811 - the fixture imported above
    tmp_path,
    local_trial,
    capsys,
    one_thread,
):
    import pyarrow.fs

    uri, _client = s3_server
    run, best = _run(tmp_path)
    assert students.run_students(str(run)) == ["trial_0", "trial_1"]  # trial_2 did not finish
    remote = run_folder.join(uri, run.name)
    fs, path = run_folder.filesystem(remote)
    pyarrow.fs.copy_files(str(run), path, source_filesystem=pyarrow.fs.LocalFileSystem(), destination_filesystem=fs)

    assert students.run_students(remote) == ["trial_0", "trial_1"]
    model, state = load_student(run_folder.join(remote, "trial_1"))
    assert all(torch.equal(model.state_dict()[k], best[k]) for k in best)  # the best, not the newest
    assert state["probed_step"] == 3
    newest, state0 = load_student(run_folder.join(remote, "trial_0"))  # no best recorded: its final weights
    assert all(torch.equal(newest.state_dict()[k], state0["model"][k]) for k in state0["model"])
    assert students.main([remote]) == 0
    assert "probed: step 3" in capsys.readouterr().out

    rows = local_trial(
        "admet_probe",
        "search.variant=[{features: student, probe: linear}]",
        f"config.students_from={remote}",
        "config.student_trial=trial_1",
        trial_dir=tmp_path / "probe",
    )
    assert np.isfinite(rows[-1][data.metric_name("solubility")])
    from raylab.errors import UserError
    from trainers.boltz_distill.config import ProbeConfig
    from trainers.boltz_distill.probe_loop import preflight

    with pytest.raises(UserError, match=r"student_trial: 'trial_2' is not a finished trial"):
        preflight(ProbeConfig(features="student", students_from=remote, student_trial="trial_2"))
