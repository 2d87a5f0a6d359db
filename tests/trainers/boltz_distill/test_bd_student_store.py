"""Students distilled inside a sweep live in the run's storage: written once (the first
writer's copy published whole), read by every trial on any node, distilled once per run;
outside a run, in the node-local ``student_root`` as before."""

from __future__ import annotations

import threading

import pytest
import torch
from scenarios.clusters.conftest import s3_server  # noqa: F401 - the fixture

from raylab import session
from raylab.checkpoint import load_at
from raylab.run_folder import RESULT_FILE, RunFolder, join
from trainers.boltz_distill import loop, shared_students
from trainers.boltz_distill.config import ProbeConfig
from trainers.boltz_distill.probe_loop import distilled_student


def tiny_state(seed: int) -> dict:
    torch.manual_seed(seed)
    return {"model": {"w": torch.randn(3)}, "seed": seed}


@pytest.fixture
def fresh_session():
    yield
    session.start()


@pytest.fixture
def counted_distill(monkeypatch):
    """Every ``loop.distill`` call (the real one) recorded: how many students were distilled."""
    calls = []
    real = loop.distill

    def counting(cfg, device=None):
        calls.append(cfg)
        return real(cfg, device)

    monkeypatch.setattr(loop, "distill", counting)
    return calls


def probe_config(tmp_path, node: str) -> ProbeConfig:
    """A probe trial's config for a small descriptor student; ``node`` names its node-local
    ``student_root`` (trials on different nodes lock different ones). The sweep gives every
    trial the same ``store_root`` (the descriptor teacher is built where the student is)."""
    return ProbeConfig(
        features="student",
        student_teachers=("descriptors",),
        distill_corpus="nci",
        distill_max_molecules=40,
        distill_epochs=1,
        random_width=16,
        random_depth=2,
        allow_missing_tests=True,
        store_root=str(tmp_path / "stores"),
        student_root=str(tmp_path / node / "students"),
    )


def test_the_first_writer_wins_and_a_later_writer_reads_its_copy(tmp_path):
    run = RunFolder(tmp_path / "run")
    first = shared_students.publish(run, "s", tiny_state(0))
    second = shared_students.publish(run, "s", tiny_state(1))  # distilled meanwhile elsewhere
    assert second == first == shared_students.published(run, "s")
    assert [name for name, kind in run.listdir("_students/s") if kind == "dir"] == [first.rsplit("/", 1)[1]]
    assert load_at(second)[0]["seed"] == 0  # the first copy, whole (its checksum verified)
    assert run.trials() == []  # not mistaken for a trial of the run


def test_racing_writers_publish_one_whole_copy(tmp_path):
    """Eight writers publishing at once (one barrier) on a local run folder: one copy is
    published, every writer returns it, the others' copies are gone."""
    run = RunFolder(tmp_path / "run")
    barrier, got = threading.Barrier(8), {}

    def writer(i):
        barrier.wait()
        got[i] = shared_students.publish(run, "s", tiny_state(i))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (winner,) = set(got.values())
    assert [name for name, kind in run.listdir("_students/s") if kind == "dir"] == [winner.rsplit("/", 1)[1]]
    assert load_at(winner)[0]["seed"] in range(8)


def test_in_a_run_the_student_is_distilled_once_into_its_storage_and_read_from_another_node(
    tmp_path, counted_distill, fresh_session, one_thread
):
    session.start(backend="local", run=str(tmp_path / "run"))
    on_a = distilled_student(probe_config(tmp_path, "node_a"))
    on_b = distilled_student(probe_config(tmp_path, "node_b"))  # another node: its own student_root
    assert on_a == on_b and on_a.startswith(str(tmp_path / "run" / "_students" / "descriptors-"))
    assert len(counted_distill) == 1  # node b read node a's student instead of distilling
    assert not list((tmp_path / "node_a" / "students").glob("*/state.pt"))  # nothing on the node's disk
    model, state = loop.load_student(on_b)
    assert state["config"]["width"] == 16 and len(model.convs) == 2  # the setting asked for


def test_outside_a_run_the_student_stays_under_student_root(tmp_path, counted_distill, fresh_session, one_thread):
    session.start(backend="local")  # a loop called in-process: no run, no storage
    cfg = probe_config(tmp_path, "node_a")
    folder = distilled_student(cfg)
    assert folder.startswith(str(tmp_path / "node_a" / "students")) and load_at(folder) is not None
    assert distilled_student(cfg) == folder and len(counted_distill) == 1


def test_two_trials_share_one_student_written_to_s3(s3_server, tmp_path, counted_distill, fresh_session, one_thread):  # noqa: F811
    """A sweep whose ``--storage`` is an S3 bucket (moto's server on 127.0.0.1): the first
    trial distils the student and publishes it in the run's storage; the second, on another
    node (its own ``student_root``), reads it from the bucket instead of distilling."""
    from scenarios.clusters.s3_store import keys

    def files(client) -> list[str]:  # the run's student objects (not the empty folder objects pyarrow writes)
        return sorted(k for k in keys(client, "runs/admet_probe-run/_students/") if not k.endswith("/"))

    uri, client = s3_server
    run = join(uri, "admet_probe-run")
    session.start(backend="tune", run=run)  # what run_trial gives a sweep's trial
    first = distilled_student(probe_config(tmp_path, "node_a"))
    second = distilled_student(probe_config(tmp_path, "node_b"))
    assert first == second and first.startswith("s3://raylab/runs/admet_probe-run/_students/descriptors-")
    assert len(counted_distill) == 1
    stored = files(client)
    name = first.partition("?")[0].rsplit("/", 2)[1]
    copy = first.partition("?")[0].rsplit("/", 1)[1]
    assert stored == sorted(
        [
            f"runs/admet_probe-run/_students/{name}/{copy}/meta.json",
            f"runs/admet_probe-run/_students/{name}/{copy}/state.pt",
            f"runs/admet_probe-run/_students/{name}/published.json",
        ]
    )
    assert not list(tmp_path.glob("node_*/students/*/state.pt"))  # no node holds it
    model, state = loop.load_student(second)  # read through pyarrow's S3 filesystem
    assert state["config"]["width"] == 16 and not model.training

    # a writer that distilled it too, racing the first: its copy is dropped, the first stays
    late = shared_students.publish(RunFolder(run), name, tiny_state(1))
    assert late == first and files(client) == stored


@pytest.mark.slow
@pytest.mark.long
def test_a_sweeps_trials_share_one_student_in_the_runs_storage(smoke_sweep, tmp_path):
    """Through Ray Tune: two probe trials (split seeds 1, 2) of one in-sweep student; the
    student is published once in the run folder under ``--storage`` and both trials probe it."""
    from pathlib import Path

    from raylab.run_folder import RunFolder

    results, run_path, _ = smoke_sweep(
        "admet_probe",
        "search.variant=[{features: student, student_teachers: [descriptors], probe: linear}]",
        f"config.store_root={tmp_path / 'stores'}",
        f"config.student_root={tmp_path / 'students'}",
    )
    assert len(results) == 2 and all(r.error is None for r in results), [r.error for r in results]
    (name,) = [n for n, kind in RunFolder(run_path).listdir("_students") if kind == "dir"]
    copies = [n for n, kind in RunFolder(run_path).listdir(f"_students/{name}") if kind == "dir"]
    assert len(copies) == 1 and shared_students.published(RunFolder(run_path), name).endswith(copies[0])
    assert not list((tmp_path / "students").glob("*/state.pt"))  # only the lock is node-local
    assert not list(Path(run_path).glob("_students/*/*/state.pt.*"))  # no stray parts


@pytest.mark.slow
@pytest.mark.long
def test_a_sweep_onto_s3_publishes_one_student_its_trials_read_back(s3_server, tmp_path):  # noqa: F811
    """``python -m raylab.tune admet_probe --storage s3://...`` in its own process (its own Ray,
    as a user runs it): the trials' student goes into the bucket, not onto the node's disk."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from scenarios.clusters.s3_store import keys

    storage, client = s3_server
    overrides = [
        "search.variant=[{features: student, student_teachers: [descriptors], probe: linear}]",
        f"config.store_root={tmp_path / 'stores'}",
        f"config.student_root={tmp_path / 'students'}",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "raylab.tune", "admet_probe", "--smoke", "--quiet", "--storage", storage]
        + ["--name", "probe-s3", *overrides],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stored = sorted(k for k in keys(client, "runs/probe-s3/_students/") if not k.endswith("/"))
    assert sorted(k.rsplit("/", 1)[1] for k in stored) == ["meta.json", "published.json", "state.pt"]
    assert len({k.split("/")[3] for k in stored}) == 1  # one student, one published copy
    trials = {k.split("/")[2] for k in keys(client, "runs/probe-s3/") if k.endswith(f"/{RESULT_FILE}")}
    assert len(trials) == 2  # split seeds 1 and 2, both finished on the one copy
    assert not list((tmp_path / "students").glob("*/state.pt"))
