"""Storage that is right or refused, queueing on clusters, GPU discipline: the rules, no Ray."""

from __future__ import annotations

import os

import pytest

from raylab import experiment as experiments
from raylab import run_folder, session
from raylab import tune as raylab_tune
from raylab.errors import UserError
from raylab.launch import checks, sweep, train_path, trainable
from raylab.run_folder import RunFolder

ENDPOINT = "s3://bucket/runs?endpoint_override=http://127.0.0.1:9000&scheme=http"


def test_join_keeps_the_query_string_at_the_end():
    assert run_folder.join(ENDPOINT, "toy-1", "_raylab/train") == (
        "s3://bucket/runs/toy-1/_raylab/train?endpoint_override=http://127.0.0.1:9000&scheme=http"
    )
    assert run_folder.join("s3://bucket/runs/", "toy-1") == "s3://bucket/runs/toy-1"
    assert run_folder.join("/data/results", "toy-1", "x.csv") == "/data/results/toy-1/x.csv"
    # a local folder may have a '?' in its name: it is a path there, not a query
    assert run_folder.join("/tmp/a?b", "run") == "/tmp/a?b/run"
    assert run_folder.name_of(run_folder.join(ENDPOINT, "toy-1")) == "toy-1"


def test_joined_paths_open_the_same_store_through_pyarrow():
    """What Ray and raylab do with a joined URI: pyarrow sees the endpoint and the full path."""
    import pyarrow.fs

    fs, path = run_folder.filesystem(run_folder.join(ENDPOINT, "toy-1"))
    assert isinstance(fs, pyarrow.fs.S3FileSystem) and path == "bucket/runs/toy-1"
    options = fs.__reduce__()[1][0]  # the options pyarrow would rebuild this filesystem with
    assert options["endpoint_override"] == "http://127.0.0.1:9000" and options["scheme"] == "http"


def test_a_local_folder_opens_on_the_local_filesystem_by_its_absolute_path(tmp_path, monkeypatch):
    import pyarrow.fs

    monkeypatch.chdir(tmp_path)
    fs, path = run_folder.filesystem("results/run-1")
    assert isinstance(fs, pyarrow.fs.LocalFileSystem) and path == str(tmp_path / "results" / "run-1")


def test_an_unwritable_local_storage_fails_with_one_line(tmp_path, capsys):
    assert raylab_tune.main(["toy", "--smoke", "--storage", "/proc/x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--storage /proc/x: '/proc' is not a writable directory" in err
    checks.check_storage(RunFolder.under(str(tmp_path / "new" / "results"), "run"))  # a writable parent is fine
    assert not list(tmp_path.iterdir()), "the probe leaves nothing behind"


def test_a_file_as_storage_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="is not a writable directory"):
        checks.check_storage(RunFolder.under(str(tmp_path / "f" / "results"), "run"))


def test_local_storage_on_a_joined_cluster_is_refused_unless_shared(tmp_path, capsys, monkeypatch):
    from raylab.launch import ray_start

    results = str(tmp_path / "results")
    # refused right after joining, before the sweep: the cluster itself is not needed here
    monkeypatch.setattr(ray_start, "connect", lambda *a, **k: {"started": False, "dashboard_url": None})
    assert raylab_tune.main(["toy", "--smoke", "--address", "auto", "--storage", results]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "trials on other nodes of the cluster cannot checkpoint there" in err
    assert "--storage s3://" in err and "--shared-storage" in err
    checks.check_storage(RunFolder.under(results, "run"), joined=True, shared=True)
    checks.refuse_unshared_local(ENDPOINT, shared=False)  # a URI is reachable from every node


@pytest.mark.parametrize("joined", [False, True])
def test_trials_queue_on_a_joined_cluster_and_fit_the_machine_locally(joined):
    # Ray Train trials (two one-GPU workers): their drivers hold no GPU, so locally the limit
    # is what fits the machine
    ddp = experiments.load("toy", ["resources.workers=2", "resources.gpus_per_worker=1"])
    four_gpus = {"CPU": 16, "GPU": 4}
    assert sweep.max_concurrent_trials(ddp, four_gpus, joined) == (None if joined else 2)
    # a fresh autoscaling cluster with no GPU node yet: nothing fits, yet every trial queues
    assert sweep.max_concurrent_trials(ddp, {"CPU": 8}, joined) == (None if joined else 1)
    capped = experiments.load("toy", ["resources.gpus_per_worker=1", "max_concurrent_trials=3"])
    assert sweep.max_concurrent_trials(capped, four_gpus, joined) == 3
    # single-worker trials, CPU or GPU, hold their own resources (the Tune path): Tune fits them
    gpu = experiments.load("toy", ["resources.gpus_per_worker=1", "resources.cpus_per_worker=1"])
    assert not gpu.resources.uses_ray_train and ddp.resources.uses_ray_train
    assert sweep.max_concurrent_trials(gpu, four_gpus, joined) is None
    cpu = experiments.load("toy")
    assert sweep.max_concurrent_trials(cpu, four_gpus, joined) is None


def test_distributed_backend_is_nccl_on_cuda_and_gloo_otherwise():
    assert train_path.distributed_backend(1, nccl_built=True) == "nccl"
    assert train_path.distributed_backend(0.5, nccl_built=True) == "nccl"
    assert train_path.distributed_backend(1, nccl_built=False) == "gloo"  # a GPU resource, no CUDA
    assert train_path.distributed_backend(0, nccl_built=True) == "gloo"
    assert train_path.distributed_backend(1) == "gloo"  # this machine's CPU torch has no nccl


def test_a_tune_trial_without_a_gpu_trains_on_the_cpu_whatever_the_machine_has():
    import torch

    session.start(backend="tune")
    try:
        assert session.device() == torch.device("cpu")
    finally:
        session.start()


def test_without_a_driver_resource_the_driver_asks_for_a_byte():
    # Whether or not an earlier test left Ray running, it has no trial_driver resource.
    assert trainable.driver_request() == {"CPU": 0, "memory": 1}


def test_hide_unreserved_gpus_empties_cuda_visible_devices(monkeypatch):
    import ray

    class Context:
        def __init__(self, gpus):
            self.gpus = gpus

        def get_accelerator_ids(self):
            return {"GPU": self.gpus}

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context(["1"]))
    session.hide_unreserved_gpus()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"  # Ray already narrowed it for a GPU worker
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context([]))
    session.hide_unreserved_gpus()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


UNREACHABLE = "s3://raylab/runs?endpoint_override=http://127.0.0.1:9&scheme=http"  # port 9: discard, closed


@pytest.fixture
def loopback_only_credentials(monkeypatch):
    """Test credentials and no EC2 metadata lookup: no request leaves 127.0.0.1."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)


def test_an_unreachable_storage_uri_is_refused_in_one_line_before_ray_starts(tmp_path, loopback_only_credentials):
    import subprocess
    import sys
    import time
    from pathlib import Path

    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--storage", UNREACHABLE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    took = time.monotonic() - start
    print(f"exit {done.returncode} after {took:.1f} s: {done.stderr.strip()}")
    assert done.returncode == 2 and took < 15
    err = done.stderr.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(f"error: --storage {UNREACHABLE}: ") and "127.0.0.1:9" in err
    assert not list(tmp_path.iterdir()), "nothing is created"


def test_dry_run_names_why_a_storage_uri_fails(loopback_only_credentials, capsys):
    assert raylab_tune.main(["toy", "--smoke", "--storage", UNREACHABLE, "--dry-run"]) == 2
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# storage:")]
    assert (
        line.startswith(f"# storage: --storage {UNREACHABLE}: ")
        and "cannot connect to its endpoint_override 127.0.0.1:9" in line
    ), line


def test_a_storage_uri_round_trip_leaves_nothing_and_a_missing_bucket_is_refused(s3_server):
    uri, client = s3_server

    def keys() -> set[str]:  # moto's store lives in this process: earlier tests' objects stay
        return {o["Key"] for o in client.list_objects_v2(Bucket="raylab").get("Contents", [])}

    before = keys()
    checks.check_storage(RunFolder.under(uri, "run"))
    assert keys() == before, "the marker was deleted"
    with pytest.raises(UserError, match="--storage s3://no-such-bucket/runs"):
        checks.check_storage(RunFolder.under(uri.replace("s3://raylab/", "s3://no-such-bucket/"), "run"))
    assert "nothing answers" in str(
        pytest.raises(UserError, checks.within, 0.2, "nothing answers", lambda: __import__("time").sleep(5)).value
    )
