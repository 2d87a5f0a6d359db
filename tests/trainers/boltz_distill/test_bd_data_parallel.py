"""Data-parallel distillation: 1 and 2 workers (torch.distributed, gloo, two processes)
take the same steps, so the trained student does not depend on the world size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainers.boltz_distill.batches import GraphBank
from trainers.boltz_distill.chem import nci_smiles_path, read_smiles_file
from trainers.boltz_distill.config import Config
from trainers.boltz_distill.featurize import graphs_from_smiles
from trainers.boltz_distill.loop import init_training, train_step

CFG = Config(teachers=("descriptors",), width=16, depth=2, batch_size=7, lr=3e-3, seed=0)
BATCHES = [[0, 5, 9, 2, 11, 3, 7], [1, 4], [6, 8, 10, 12, 13, 14, 15], [16]]  # uneven; one smaller than the world


def data():
    graphs, _, _ = graphs_from_smiles(read_smiles_file(nci_smiles_path(), limit=20))
    generator = torch.Generator().manual_seed(0)
    for graph in graphs:
        graph.y = torch.randn(graph.num_nodes, 6, generator=generator)
    all_y = torch.cat([g.y for g in graphs])
    return graphs, all_y.mean(0), all_y.std(0)


def run(rank: int, world: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.set_num_threads(1)
    graphs, mean, std = data()
    model, optimizer, _ = init_training(CFG, 6, torch.device("cpu"))
    bank = GraphBank(graphs)
    losses = [
        float(train_step(model, optimizer, bank, idx, mean, std, CFG, torch.device("cpu"), rank, world))
        for idx in BATCHES
    ]
    return losses, {k: v.clone() for k, v in model.state_dict().items()}


def _worker(rank: int, world: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = run(rank, world)
    finally:
        dist.destroy_process_group()
    torch.save(result, f"{out}.{rank}")


@pytest.mark.slow
def test_two_workers_train_the_same_student_as_one(tmp_path, one_thread):
    single_losses, single = run(0, 1)
    out = str(tmp_path / "result")
    here = Path(__file__).resolve()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here.parent), str(here.parents[3])]),
        "OMP_NUM_THREADS": "1",
    }
    code = f"from {here.stem} import _worker; import sys; _worker(int(sys.argv[1]), 2, {str(tmp_path / 'init')!r}, {out!r})"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(rank)], env=env, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    for rank in (0, 1):
        losses, state = torch.load(f"{out}.{rank}", weights_only=True)
        assert losses == pytest.approx(single_losses, rel=1e-5, abs=1e-6)
        for key, value in single.items():
            assert torch.allclose(state[key], value, rtol=1e-5, atol=1e-6), key
    # the steps moved the model (the comparison is not between two untrained copies)
    fresh = init_training(CFG, 6, torch.device("cpu"))[0].state_dict()
    assert max((fresh[k] - single[k]).abs().max().item() for k in single) > 1e-3


def test_world_size_one_is_the_plain_mean_loss(one_thread):
    """With one worker the step's loss is the global batch's mean distillation loss itself."""
    from torch_geometric.data import Batch

    from trainers.boltz_distill.loss import distill_loss, standardize

    graphs, mean, std = data()
    model, optimizer, _ = init_training(CFG, 6, torch.device("cpu"))
    batch = Batch.from_data_list([graphs[i] for i in BATCHES[0]])
    with torch.no_grad():
        expected, _ = distill_loss(model(batch), standardize(batch.y, mean, std))
    got = float(train_step(model, optimizer, GraphBank(graphs), BATCHES[0], mean, std, CFG, torch.device("cpu")))
    assert got == pytest.approx(expected.item(), rel=1e-6)
    assert os.environ.get("WORLD_SIZE") in (None, "1")
