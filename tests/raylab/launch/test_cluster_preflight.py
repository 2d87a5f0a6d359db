"""``--dry-run --cluster`` runs the workload's preflight as the cluster's head would, in the
cluster's file set, and exits 2 when it refuses; this machine's memory is not counted."""

from __future__ import annotations

from pathlib import Path

from raylab import tune as raylab_tune
from raylab.data.cifar import write_synthetic_cifar

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = str(REPO / "cluster" / "gpu.yaml")


def test_data_only_on_this_machine_is_refused_for_the_cluster(tmp_path, monkeypatch, capsys):
    """CIFAR staged under ./data/cifar here: the local dry run's preflight passes, the cluster's
    refuses (the head's file set has no data/) and exits 2, naming the dataset."""
    monkeypatch.chdir(tmp_path)
    write_synthetic_cifar(tmp_path / "data" / "cifar", "cifar10", n_train=100, n_test=50)
    assert raylab_tune.main(["fair_adv", "--dry-run"]) in (0, 2)  # this machine has no GPU: resources refuse
    out = capsys.readouterr().out
    assert "# workload preflight: ok" in out.splitlines()
    assert raylab_tune.main(["fair_adv", "--dry-run", "--cluster", GPU_YAML]) == 2
    out, err = capsys.readouterr()
    (line,) = [ln for ln in out.splitlines() if ln.startswith("# workload preflight")]
    assert "on the cluster's head" in line and "cifar10 not found" in line and str(tmp_path) not in line
    assert "error: on the cluster's head" in err


def test_this_machines_memory_is_not_counted_for_the_cluster(monkeypatch, capsys):
    from trainers.dqn_softlinf import preflight

    monkeypatch.setattr(preflight, "available_memory", lambda: 10**9)  # 1 GB here
    assert raylab_tune.main(["dqn_softlinf", "--dry-run"]) == 2
    assert "this machine has 1.00 GB available" in capsys.readouterr().err
    assert raylab_tune.main(["dqn_softlinf", "--dry-run", "--cluster", GPU_YAML]) == 0
    out = capsys.readouterr().out
    assert "# workload preflight: ok" in out.splitlines()
    assert any(ln.startswith("# workload preflight, this machine's memory") for ln in out.splitlines())
