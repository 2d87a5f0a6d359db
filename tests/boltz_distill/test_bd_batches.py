"""``GraphBank``: molecules packed once on the device and gathered there give exactly the batch
torch-geometric's host collation gives, so the training step no longer waits on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from trainers.boltz_distill.batches import GraphBank
from trainers.boltz_distill.chem import nci_smiles_path, read_smiles_file
from trainers.boltz_distill.featurize import graphs_from_smiles


@pytest.fixture(scope="module")
def graphs():
    smiles = read_smiles_file(nci_smiles_path(), limit=40) + ["C", "O", "[Na+].[Cl-]"]  # bond-free ones too
    graphs, _, _ = graphs_from_smiles(smiles)
    generator = torch.Generator().manual_seed(0)
    for graph in graphs:  # float16-exact targets, as the teachers' stores hold
        graph.y = torch.randn(graph.num_nodes, 5, generator=generator).half().float()
    return graphs


def test_gathered_batches_equal_pyg_collation(graphs):
    bank = GraphBank(graphs)
    assert bank.tensors["y"].dtype == torch.float16 and bank.tensors["x"].dtype == torch.float32
    assert any(g.edge_index.shape[1] == 0 for g in graphs)
    rng = np.random.default_rng(0)
    orders = [rng.permutation(len(graphs))[:k].tolist() for k in (1, 7, 16, len(graphs))]
    orders += [[len(graphs) - 1, 0, len(graphs) - 2], [3, 3, 5]]  # bond-free last; repeats
    for order in orders:
        ours, pyg = bank.batch(order), Batch.from_data_list([graphs[i] for i in order])
        for name in ("x", "edge_index", "edge_attr", "y", "batch"):
            a, b = getattr(ours, name), getattr(pyg, name)
            assert a.dtype == b.dtype and torch.equal(a, b), (name, order)
        assert ours.num_graphs == pyg.num_graphs and ours.num_nodes == pyg.num_nodes
        assert bank.atoms(order) == pyg.num_nodes


def test_inexact_targets_stay_float32(graphs):
    wide = [g.clone() for g in graphs[:3]]
    for g in wide:
        g.y = g.y + 1e-4  # not representable in float16
    bank = GraphBank(wide)
    assert bank.tensors["y"].dtype == torch.float32
    assert torch.equal(bank.batch([2, 0]).y, Batch.from_data_list([wide[2], wide[0]]).y)
