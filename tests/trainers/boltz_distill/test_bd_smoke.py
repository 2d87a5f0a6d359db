"""boltz_distill and admet_probe through real Ray Tune (smoke), and exact resume of a trial."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import assert_finite_metrics

from raylab.errors import UserError
from trainers.boltz_distill import DISTILL_METRICS, metric_name

PROBE_REPORTED = (
    metric_name("solubility"),
    "probe/test/score",
    "probe/valid/score",
    "probe/test/mean_predictor",
    "probe/epoch",
    "probe/test/molecules",
    "probe/test/imputed",
    "probe/train_loss",
)


@pytest.mark.slow
def test_distill_smoke_sweep_reports_metrics(shared_smoke_sweep):
    # the report tests read the same sweep
    results, _, experiment = shared_smoke_sweep("boltz_distill", "config.store_root={shared}/stores")
    assert len(results) == 2  # descriptor and conformer teachers
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, DISTILL_METRICS)
        assert result.metrics["distill/epoch"] == 2
        assert result.checkpoint is not None
    assert {tuple(r.config["variant"]["teachers"]) for r in results} == {("descriptors",), ("conformer",)}


@pytest.mark.slow
@pytest.mark.long
def test_probe_smoke_sweep_is_one_table_of_every_row(smoke_sweep, tmp_path):
    from pathlib import Path

    from raylab import report
    from trainers.boltz_distill import table

    roots = (f"config.store_root={tmp_path / 'stores'}", f"config.student_root={tmp_path / 'students'}")
    results, run_path, _ = smoke_sweep("admet_probe", *roots)
    assert len(results) == 18  # 9 rows x split seeds 1, 2
    for result in results:
        assert result.error is None, result.error
        end_to_end = result.config["variant"]["probe"] == "end_to_end"
        assert_finite_metrics(result.metrics, PROBE_REPORTED[:-1] if end_to_end else PROBE_REPORTED)
        assert result.metrics[metric_name("solubility")] > 0
        assert result.metrics["probe/test/molecules"] == 257 and result.metrics["probe/test/imputed"] == 0
    cells = table.collect(Path(run_path))
    assert [name for name, _ in cells] == [
        "Chemprop D-MPNN",
        "Chemprop-RDKit D-MPNN",
        "GINE, supervised",
        "Morgan + descriptors",
        "Morgan + descriptors",
        "GINE, random init",
        "teacher descriptors",
        "student <- conformer",
        "student <- descriptors",
    ]
    assert all(len(per_task["solubility"]) == 2 for per_task in cells.values())  # mean ± std over 2 seeds
    assert {probe for name, probe in cells if name == "Morgan + descriptors"} == {"linear", "gbm"}
    printed = table.format_table(cells).splitlines()
    assert any(
        line.startswith("published: best of compilation") and "different data and split" in line for line in printed
    )
    # two students from different teachers were distilled once each into the run's storage,
    # shared by both seeds (student_root holds only the node's locks)
    assert len(list(Path(run_path).glob("_students/*/published.json"))) == 2
    assert len(list(Path(run_path).glob("_students/*/*/state.pt"))) == 2
    assert not list((tmp_path / "students").glob("*/state.pt"))
    html = Path(report.write_report(run_path)).read_text()
    assert "Chemprop" in html or "chemprop" in html
    # its claims (tests/raylab/report/test_report_workloads.py checks the other workloads' from their smokes)
    from raylab import workloads
    from tests.raylab.report.test_report_workloads import check_claims

    content = json.loads((Path(run_path) / "report" / "report.json").read_text())
    assert check_claims(content, workloads.get("admet_probe").report_spec()) >= 1
    students = content["claims"][0]["rows"]  # distilled students against their random init
    assert sorted(r["variant"] for r in students) == ["student_teachers=conformer", "student_teachers=descriptors"]
    assert all(r["n_seeds"] == 2 and r["interval_note"] == "wide: 2 seeds < 5" for r in students)


@pytest.mark.slow
def test_distill_trial_resumes_exactly(local_trial, tmp_path):
    stores = f"config.store_root={tmp_path / 'stores'}"
    full = local_trial("boltz_distill", stores, trial_dir=tmp_path / "full")
    part = local_trial("boltz_distill", stores, trial_dir=tmp_path / "resumed", stop={"distill/step": 10})
    assert part[-1]["distill/step"] == 10
    rest = local_trial("boltz_distill", stores, trial_dir=tmp_path / "resumed")
    assert rest[0]["distill/step"] == 15  # continued from the step-10 checkpoint
    assert rest[-1]["distill/step"] == full[-1]["distill/step"]
    assert rest[-1]["distill/val_loss"] == full[-1]["distill/val_loss"]
    assert rest[-1]["distill/loss"] == full[-1]["distill/loss"]
    # the checkpoint carries the student with the lowest reported val loss, which load_student probes
    from trainers.boltz_distill.loop import load_student

    model, state = load_student(tmp_path / "full")
    best = min(range(len(full)), key=lambda i: full[i]["distill/val_loss"])
    assert state["best_val_loss"] == full[best]["distill/val_loss"]
    assert state["probed_step"] == state["best_step"] == full[best]["distill/step"]
    assert all(torch.equal(model.state_dict()[k], state["best_model"][k]) for k in state["best_model"])

    # the distilled student is probed by admet_probe straight from its trial folder
    rows = local_trial(
        "admet_probe",
        "search.variant=[{features: student, probe: linear}]",
        f"config.student_checkpoint={tmp_path / 'full'}",
        trial_dir=tmp_path / "probe",
    )
    assert_finite_metrics(rows[-1], PROBE_REPORTED)
    # a teacher store lacking test molecules: every test molecule is still scored, the missing
    # ones imputed and counted; a store with none of the task's molecules is refused
    from trainers.boltz_distill import data
    from trainers.boltz_distill.chem import canonical_smiles
    from trainers.boltz_distill.embedding_store import StoreWriter

    partial = tmp_path / "partial"
    task = data.load_task("solubility")
    test_keys = [canonical_smiles(s) for s in task.test_smiles]
    stored = {canonical_smiles(s) for s in task.train_val_smiles} | set(test_keys[::2])
    rng = np.random.default_rng(0)
    with StoreWriter(partial, 4, {"teacher": "random", "settings": {}}) as writer:
        for key in sorted(stored):
            writer.add(key, rng.normal(size=(3, 4)))
    rows = local_trial(
        "admet_probe",
        "search.variant=[{features: teacher, probe: linear}]",
        f"config.teacher_store={partial}",
        trial_dir=tmp_path / "t",
    )
    assert rows[-1]["probe/test/molecules"] == len(test_keys)
    assert rows[-1]["probe/test/imputed"] == sum(k not in stored for k in test_keys) > 50
    with StoreWriter(tmp_path / "unrelated", 3, {"teacher": "test", "settings": {}}) as writer:
        writer.add("C[Si](C)(C)[Si](C)(C)C", np.zeros((8, 3)))
    with pytest.raises(UserError, match=r"none of the .* task molecules are in"):
        local_trial(
            "admet_probe",
            "search.variant=[{features: teacher, probe: linear}]",
            f"config.teacher_store={tmp_path / 'unrelated'}",
            trial_dir=tmp_path / "t2",
        )


@pytest.mark.slow
def test_probe_trial_resumes_exactly(local_trial, tmp_path):
    mlp = "search.variant=[{features: random_student, probe: mlp}]"
    full = local_trial("admet_probe", mlp, trial_dir=tmp_path / "full")
    part = local_trial("admet_probe", mlp, trial_dir=tmp_path / "resumed", stop={"probe/epoch": 5})
    assert part[-1]["probe/epoch"] == 5
    rest = local_trial("admet_probe", mlp, trial_dir=tmp_path / "resumed")
    assert rest[0]["probe/epoch"] == 10
    assert rest[-1][metric_name("solubility")] == full[-1][metric_name("solubility")]
