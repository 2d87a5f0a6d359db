"""Victim neural subgraph matching (NSGM) models on dense batches of small graphs.

Graphs here have at most 20 nodes and the attacks edit adjacency entries, so every model works
on padded dense batches: ``adj [B, N, N]`` (0/1 floats, symmetric) and ``mask [B, N]``
(real nodes). Message passing uses torch-geometric's ``DenseGINConv``. Graphs are unlabelled:
every node starts from the same feature. A model maps a batch of (query, corpus) pairs to
relevance scores ``[B]``; higher means "the query is more likely a subgraph".

- ``NeuroMatch``: order embeddings (Ying et al. 2020, graph-level): a siamese GIN embeds both
  graphs and the score is the order-violation penalty ``-|| max(0, z_q - z_c) ||^2``.
- ``GMN`` (``gmn.py``): the graph matching network as IsoNet++ runs it (edge-aware messages,
  GRU update, cross-graph attention, gated-sum readout, L1 order score).
- ``IsoNetEdge`` (``gmn.py``, victim ``isonet``): IsoNet's edge alignment as published.
- ``IsoNetNode`` (victim ``isonet_node``): a node-alignment ablation: GIN node embeddings, a
  soft permutation ``P = Sinkhorn(f(H_q) f(H_c)^T / T)`` (10 iterations, no masking) over both
  graphs padded to ``n_nodes`` and ``-sum relu(H_q - P H_c)``.

``CrossEncoder`` (GMN-style propagation with residual MLP updates) is the criticality
classifier's encoder, not a victim.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import DenseGINConv

from trainers.seagram.gmn import GMN, IsoNetEdge

VICTIMS = ("gmn", "neuromatch", "isonet", "isonet_node")


def dense_batch(graphs: list[np.ndarray], n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad 0/1 adjacency matrices to ``[B, n, n]`` floats and a ``[B, n]`` node mask."""
    n = n or max(g.shape[0] for g in graphs)
    adj = np.zeros((len(graphs), n, n), dtype=np.float32)
    mask = np.zeros((len(graphs), n), dtype=bool)
    for i, g in enumerate(graphs):
        k = g.shape[0]
        adj[i, :k, :k] = g
        mask[i, :k] = True
    return torch.from_numpy(adj), torch.from_numpy(mask)


def _mlp(d_in: int, d_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def order_score(z_q: torch.Tensor, z_c: torch.Tensor) -> torch.Tensor:
    """``-|| max(0, z_q - z_c) ||^2``: zero when z_q <= z_c everywhere (q "fits inside" c)."""
    return -torch.relu(z_q - z_c).pow(2).sum(-1)


class GINEncoder(nn.Module):
    """Node embeddings from stacked ``DenseGINConv`` layers (constant input features)."""

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        self.inp = nn.Linear(1, hidden)
        self.convs = nn.ModuleList(DenseGINConv(_mlp(hidden, hidden, hidden)) for _ in range(layers))

    def forward(self, adj: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The node embeddings after each layer (input layer included), each ``[B, N, hidden]``."""
        m = mask.unsqueeze(-1).float()
        h = self.inp(torch.ones_like(m)) * m
        out = [h]
        for conv in self.convs:
            h = torch.relu(conv(h, adj, mask))
            out.append(h)
        return out


class NeuroMatch(nn.Module):
    """Order-embedding model: siamese GIN, sum pooling of all layers, order-violation score."""

    def __init__(self, hidden: int = 64, layers: int = 3):
        super().__init__()
        self.encoder = GINEncoder(hidden, layers)
        self.head = _mlp(hidden * (layers + 1), hidden, hidden)

    def embed(self, adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = torch.cat(self.encoder(adj, mask), dim=-1)
        return self.head(h.sum(1))

    def forward(self, q_adj, q_mask, c_adj, c_mask) -> torch.Tensor:
        return order_score(self.embed(q_adj, q_mask), self.embed(c_adj, c_mask))


class CrossEncoder(nn.Module):
    """GMN propagation: per layer, within-graph messages and cross-graph attention.

        m_i = sum_j A_ij MLP(h_j),   mu_i = h_i - sum_j softmax_j(h_i . h'_j) h'_j,
        h_i <- h_i + MLP([h_i, m_i, mu_i])

    with ``h'`` the other graph's node embeddings (its real nodes only). Returns the node
    embeddings of both graphs, ``[B, Nq, hidden]`` and ``[B, Nc, hidden]``.
    """

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        self.inp = nn.Linear(1, hidden)
        self.message = nn.ModuleList(_mlp(hidden, hidden, hidden) for _ in range(layers))
        self.update = nn.ModuleList(_mlp(3 * hidden, hidden, hidden) for _ in range(layers))

    @staticmethod
    def _cross(h, h_other, mask_other):
        logits = h @ h_other.transpose(1, 2)
        logits = logits.masked_fill(~mask_other.unsqueeze(1), float("-inf"))
        return h - torch.softmax(logits, dim=-1) @ h_other

    def forward(self, q_adj, q_mask, c_adj, c_mask) -> tuple[torch.Tensor, torch.Tensor]:
        mq, mc = q_mask.unsqueeze(-1).float(), c_mask.unsqueeze(-1).float()
        hq = self.inp(torch.ones_like(mq)) * mq
        hc = self.inp(torch.ones_like(mc)) * mc
        for message, update in zip(self.message, self.update):
            msg_q, msg_c = q_adj @ message(hq), c_adj @ message(hc)
            mu_q, mu_c = self._cross(hq, hc, c_mask), self._cross(hc, hq, q_mask)
            hq = (hq + update(torch.cat([hq, msg_q, mu_q], -1))) * mq
            hc = (hc + update(torch.cat([hc, msg_c, mu_c], -1))) * mc
        return hq, hc


def sinkhorn(log_alpha: torch.Tensor, iterations: int) -> torch.Tensor:
    """Alternate row and column normalization in log space: a soft permutation matrix."""
    for _ in range(iterations):
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-1, keepdim=True)
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-2, keepdim=True)
    return log_alpha.exp()


class IsoNetNode(nn.Module):
    """Node-alignment ablation: GIN node embeddings, Sinkhorn alignment, asymmetric hinge."""

    def __init__(
        self, hidden: int = 64, layers: int = 3, n_nodes: int = 20, sinkhorn_iters: int = 10, temperature: float = 0.1
    ):
        super().__init__()
        self.n_nodes = n_nodes
        self.encoder = GINEncoder(hidden, layers)
        self.align = _mlp(hidden, hidden, hidden)
        self.sinkhorn_iters = sinkhorn_iters
        self.temperature = temperature

    def forward(self, q_adj, q_mask, c_adj, c_mask) -> torch.Tensor:
        # Both graphs padded with isolated dummy nodes to one fixed size (as IsoNet does), so a
        # graph's score does not depend on how much its batch happened to be padded.
        n = max(self.n_nodes, q_adj.shape[1], c_adj.shape[1])
        q_adj, q_mask = _pad_to(q_adj, q_mask, n)
        c_adj, c_mask = _pad_to(c_adj, c_mask, n)
        hq = self.encoder(q_adj, q_mask)[-1]  # ReLU outputs, zero on padding nodes
        hc = self.encoder(c_adj, c_mask)[-1]
        log_alpha = self.align(hq) @ self.align(hc).transpose(1, 2) / self.temperature
        plan = sinkhorn(log_alpha, self.sinkhorn_iters)
        return -torch.relu(hq - plan @ hc).sum((1, 2))


def _pad_to(adj: torch.Tensor, mask: torch.Tensor, n: int):
    extra = n - adj.shape[1]
    if extra == 0:
        return adj, mask
    return (nn.functional.pad(adj, (0, extra, 0, extra)), nn.functional.pad(mask, (0, extra)))


def build_victim(name: str, hidden: int, layers: int, n_nodes: int = 20, max_edges: int = 30) -> nn.Module:
    """The victim model called ``name`` (one of ``VICTIMS``).

    ``hidden``: node state width, ``layers``: propagation steps (GMN, IsoNet) or layers;
    ``n_nodes``: largest graph size; ``max_edges``: IsoNet's edge slots (the most edges a graph,
    attacked included, can have).
    """
    if name == "gmn":
        return GMN(hidden, layers, n_nodes)
    if name == "neuromatch":
        return NeuroMatch(hidden, layers)
    if name == "isonet":
        return IsoNetEdge(hidden, layers, max_edges)
    if name == "isonet_node":
        return IsoNetNode(hidden, layers, n_nodes)
    raise ValueError(f"unknown victim {name!r}; valid: {', '.join(VICTIMS)}")


@torch.no_grad()
def score_pairs(
    model: nn.Module, queries: list[np.ndarray], corpus: list[np.ndarray], chunk: int = 4096
) -> torch.Tensor:
    """Scores of the pairs ``(queries[i], corpus[i])``, in chunks of ``chunk`` pairs."""
    out = []
    for s in range(0, len(queries), chunk):
        qa, qm = dense_batch(queries[s : s + chunk])
        ca, cm = dense_batch(corpus[s : s + chunk])
        out.append(model(qa, qm, ca, cm))
    return torch.cat(out) if out else torch.zeros(0)
