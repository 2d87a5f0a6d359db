"""The student: a GINE graph encoder with a per-atom head that regresses teacher embeddings."""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GINEConv, global_mean_pool

from trainers.boltz_distill.featurize import ATOM_DIM, BOND_DIM


class GINEStudent(nn.Module):
    """GINE layers (Hu et al. 2020) with residual connections and LayerNorm.

    ``node_embeddings`` are the representation that is distilled and later probed (mean-pooled
    over atoms by ``pooled``); ``forward`` adds the per-atom head that maps them to the
    teacher's embedding space (it is dropped after distillation).
    """

    def __init__(self, width: int, depth: int, out_dim: int, dropout: float = 0.0):
        super().__init__()
        self.atom_in = nn.Linear(ATOM_DIM, width)
        self.convs = nn.ModuleList(
            GINEConv(
                nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)),
                edge_dim=BOND_DIM,
            )
            for _ in range(depth)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(depth))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, out_dim))

    def node_embeddings(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        h = self.atom_in(x)
        for conv, norm in zip(self.convs, self.norms):
            h = h + self.dropout(torch.relu(norm(conv(h, edge_index, edge_attr))))
        return h

    def forward(self, batch) -> torch.Tensor:
        """Per-atom predictions of the teacher's (standardized) embedding: [atoms, out_dim]."""
        return self.head(self.node_embeddings(batch.x, batch.edge_index, batch.edge_attr))

    def pooled(self, batch) -> torch.Tensor:
        """One vector per molecule: the mean of its atoms' node embeddings, [molecules, width]."""
        h = self.node_embeddings(batch.x, batch.edge_index, batch.edge_attr)
        return global_mean_pool(h, batch.batch, size=batch.num_graphs)
