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
    teacher's embedding space (it is dropped after distillation). A linear head (one layer, the
    default) makes the node embeddings encode the teacher's embedding linearly, which is what a
    linear probe of the pooled embedding can then read. With ``global_context`` the head also
    sees the molecule's mean node embedding: a teacher whose atom embeddings carry whole-molecule
    information (Boltz-2's trunk attends over all tokens; broadcast descriptors) can then be
    matched by a GNN whose receptive field is only ``depth`` bonds.
    """

    def __init__(
        self,
        width: int,
        depth: int,
        out_dim: int,
        dropout: float = 0.0,
        head_layers: int = 1,
        global_context: bool = True,
    ):
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
        self.global_context = global_context
        head_in = 2 * width if global_context else width
        hidden = [
            m for k in range(head_layers - 1) for m in (nn.Linear(head_in if k == 0 else width, width), nn.ReLU())
        ]
        self.head = nn.Sequential(*hidden, nn.Linear(width if head_layers > 1 else head_in, out_dim))

    def node_embeddings(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        h = self.atom_in(x)
        for conv, norm in zip(self.convs, self.norms):
            h = h + self.dropout(torch.relu(norm(conv(h, edge_index, edge_attr))))
        return h

    def forward(self, batch) -> torch.Tensor:
        """Per-atom predictions of the teacher's (standardized) embedding: [atoms, out_dim]."""
        h = self.node_embeddings(batch.x, batch.edge_index, batch.edge_attr)
        if self.global_context:
            pooled = global_mean_pool(h, batch.batch, size=batch.num_graphs)
            h = torch.cat([h, pooled[batch.batch]], dim=-1)
        return self.head(h)

    def pooled(self, batch) -> torch.Tensor:
        """One vector per molecule: the mean of its atoms' node embeddings, [molecules, width]."""
        h = self.node_embeddings(batch.x, batch.edge_index, batch.edge_attr)
        return global_mean_pool(h, batch.batch, size=batch.num_graphs)
