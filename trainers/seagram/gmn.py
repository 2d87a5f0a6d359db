"""GMN propagation as IsoNet++ runs it, and the two victims built on it: GMN and IsoNet (edge).

Dense re-statements, on padded batches ``adj [B, N, N]`` / ``mask [B, N]``, of the modules of
``structlearning/isonetpp`` (``GMN/graphembeddingnetwork.py``, ``GMN/graphmatchingnetwork.py``,
``subgraph_matching/models/{gmn_baseline,isonet}.py``, ``utils/model_utils.py``) at its
configuration (``configs/module_configs/*.yaml``): node state ``d = 10``, messages of size
``2d = 20``, one propagation layer applied ``steps = 5`` times (shared parameters), GRU update.

Propagation (one step, node ``i``, neighbours ``j``; edge features are the constant 1):

    m_i = sum_j A_ij f([h_j, h_i, 1])          f: one Linear(2d + 1 -> 2d), used both ways
    h_i <- GRU(input = [m_i] (embedding) or [m_i, h_i - a_i] (matching), state = h_i)

Each undirected edge is listed once in IsoNet++'s batches and messages run both ways through
the same net, so node ``i`` receives ``f([h_j, h_i, 1])`` from each neighbour ``j``. ``f`` is
linear, so ``m_i = (A (h W_a^T))_i + deg_i (W_b h_i + w_e + b)`` exactly (``W = [W_a, W_b, w_e]``),
which keeps the adjacency a differentiable input for the attacks' first-order prefilter.
"""

from __future__ import annotations

import torch
from torch import nn


def _pad_nodes(x: torch.Tensor, mask: torch.Tensor, n: int):
    extra = n - x.shape[1]
    if extra <= 0:
        return x, mask
    return nn.functional.pad(x, (0, 0, 0, extra)), nn.functional.pad(mask, (0, extra))


def cross_attention(hq, mq, hc, mc, n_nodes: int, temperature: float = 0.1):
    """IsoNet++'s ``attention`` interaction: both graphs' masked node states padded to
    ``n_nodes`` slots, ``S = h_q h_c^T / T``, ``a_q = softmax_rows(S) h_c``,
    ``a_c = softmax_cols(S)^T h_q``. Padding slots stay in the softmax (state 0, logit 0), as
    in the reference's unmasked ``attention``. Returns ``a_q [B, Nq, d]``, ``a_c [B, Nc, d]``.
    """
    nq, nc = hq.shape[1], hc.shape[1]
    n = max(n_nodes, nq, nc)
    pq, _ = _pad_nodes(hq * mq.unsqueeze(-1), mq, n)
    pc, _ = _pad_nodes(hc * mc.unsqueeze(-1), mc, n)
    logits = pq @ pc.transpose(1, 2) / temperature
    att_q = torch.softmax(logits, dim=-1) @ pc
    att_c = torch.softmax(logits, dim=-2).transpose(1, 2) @ pq
    return att_q[:, :nq], att_c[:, :nc]


class Propagation(nn.Module):
    """One GMN propagation layer (``GraphPropLayer`` / ``GraphPropMatchingLayer``, GRU update)."""

    def __init__(self, dim: int = 10, matching: bool = False):
        super().__init__()
        self.dim = dim
        self.encoder = nn.Linear(1, dim)
        self.message = nn.Linear(2 * dim + 1, 2 * dim)
        self.gru = nn.GRUCell((3 if matching else 2) * dim, dim)

    def initial(self, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(self.encoder.weight.dtype)
        return self.encoder(torch.ones_like(m)) * m

    def messages(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        """``m_i = sum_j A_ij f([h_j, h_i, 1])`` (``[B, N, 2d]``)."""
        d = self.dim
        w, b = self.message.weight, self.message.bias
        from_part = h @ w[:, :d].T
        to_part = h @ w[:, d : 2 * d].T + w[:, 2 * d] + b
        return adj @ from_part + adj.sum(-1, keepdim=True) * to_part

    def edge_messages(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        """IsoNet's edge embedding ``f([h_u, h_v, 1]) + f([h_v, h_u, 1])`` of edges ``(u, v)``."""
        ones = torch.ones_like(h_u[..., :1])
        return self.message(torch.cat([h_u, h_v, ones], -1)) + self.message(torch.cat([h_v, h_u, ones], -1))

    def update(self, h: torch.Tensor, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        shape = h.shape
        out = self.gru(inputs.reshape(-1, inputs.shape[-1]), h.reshape(-1, shape[-1])).view(shape)
        return out * mask.unsqueeze(-1).to(out.dtype)


class GraphAggregator(nn.Module):
    """GMN's gated sum readout: ``g = MLP2( sum_i sigmoid(W_g h_i) * (W_v h_i) )``."""

    def __init__(self, dim: int = 10):
        super().__init__()
        self.dim = dim
        self.mlp1 = nn.Linear(dim, 2 * dim)
        self.mlp2 = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = self.mlp1(h)
        gated = torch.sigmoid(z[..., : self.dim]) * z[..., self.dim :]
        return self.mlp2((gated * mask.unsqueeze(-1).to(gated.dtype)).sum(1))


class GMN(nn.Module):
    """Graph matching network as IsoNet++'s GMN baseline runs it.

    ``steps`` shared matching propagation steps with the cross-graph attention of
    ``cross_attention`` applied after messaging (``interaction_when: post``), the gated-sum
    readout and the L1 order score ``s = -sum relu(g_q - g_c)``.
    """

    def __init__(self, dim: int = 10, steps: int = 5, n_nodes: int = 20, temperature: float = 0.1):
        super().__init__()
        self.prop = Propagation(dim, matching=True)
        self.aggregator = GraphAggregator(dim)
        self.steps = steps
        self.n_nodes = n_nodes
        self.temperature = temperature

    def forward(self, q_adj, q_mask, c_adj, c_mask) -> torch.Tensor:
        hq, hc = self.prop.initial(q_mask), self.prop.initial(c_mask)
        for _ in range(self.steps):
            msg_q, msg_c = self.prop.messages(hq, q_adj), self.prop.messages(hc, c_adj)
            att_q, att_c = cross_attention(hq, q_mask, hc, c_mask, self.n_nodes, self.temperature)
            hq, hc = (
                self.prop.update(hq, torch.cat([msg_q, hq - att_q], -1), q_mask),
                self.prop.update(hc, torch.cat([msg_c, hc - att_c], -1), c_mask),
            )
        g_q, g_c = self.aggregator(hq, q_mask), self.aggregator(hc, c_mask)
        return -torch.relu(g_q - g_c).sum(-1)


def sinkhorn_iters(log_alpha: torch.Tensor, temperature: float = 0.1, iterations: int = 20) -> torch.Tensor:
    """IsoNet's Sinkhorn: ``log_alpha / T``, then ``iterations`` row and column normalizations
    in log space (Gumbel noise factor 0, IsoNet++'s setting); returns the soft permutation."""
    log_alpha = log_alpha / temperature
    for _ in range(iterations):
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-1, keepdim=True)
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-2, keepdim=True)
    return log_alpha.exp()


def edge_slots(adj: torch.Tensor, max_edges: int):
    """The edges of each graph packed into ``max_edges`` slots: ``(u, v, present, weight)``.

    ``u, v [B, max_edges]`` are node indices (``u < v``, any order; padding slots hold some
    non-edge), ``present`` marks real edges, ``weight = A_uv`` at the slot (1 on edges: it
    carries the adjacency's gradient to the edge features). Raises when a graph has more edges.
    """
    n = adj.shape[1]
    iu, ju = torch.triu_indices(n, n, 1, device=adj.device)
    values = adj[:, iu, ju]
    present = values > 0.5
    if int(present.sum(1).max()) > max_edges:
        raise ValueError(f"a graph has {int(present.sum(1).max())} edges, more than the model's max_edges={max_edges}")
    order = torch.sort((~present).to(torch.int8), dim=1, stable=True).indices[:, :max_edges]
    if order.shape[1] < max_edges:
        order = nn.functional.pad(order, (0, max_edges - order.shape[1]))
        keep = torch.arange(max_edges, device=adj.device) < len(iu)
    else:
        keep = torch.ones(max_edges, dtype=torch.bool, device=adj.device)
    pres = present.gather(1, order) & keep
    return iu[order], ju[order], pres, values.gather(1, order) * pres


class IsoNetEdge(nn.Module):
    """IsoNet (edge alignment) as published and as IsoNet++ runs it.

    GMN embedding propagation (``steps`` shared steps, GRU, no cross-graph interaction); each
    edge ``(u, v)`` is embedded by the propagation layer's message net both ways,
    ``e_uv = f([h_u, h_v, 1]) + f([h_v, h_u, 1])`` (``2d``); edges are packed into
    ``max_edges`` slots (zero rows for padding); ``F = LRL(e)`` (Linear, ReLU, Linear to
    ``feature_dim = 16``) masked to the real edges; the soft permutation
    ``P = Sinkhorn(F_q F_c^T)`` (temperature 0.1, 20 iterations); score
    ``s = -sum relu(E_q - P E_c)`` over slots and features.
    """

    def __init__(
        self,
        dim: int = 10,
        steps: int = 5,
        max_edges: int = 30,
        feature_dim: int = 16,
        temperature: float = 0.1,
        sinkhorn_iterations: int = 20,
    ):
        super().__init__()
        self.prop = Propagation(dim, matching=False)
        self.steps = steps
        self.max_edges = max_edges
        self.temperature = temperature
        self.sinkhorn_iterations = sinkhorn_iterations
        self.features = nn.Sequential(nn.Linear(2 * dim, feature_dim), nn.ReLU(), nn.Linear(feature_dim, feature_dim))

    def edges(self, adj: torch.Tensor, mask: torch.Tensor):
        """Edge embeddings ``[B, max_edges, 2d]`` (zero on padding slots) and the slot mask."""
        h = self.prop.initial(mask)
        for _ in range(self.steps):
            h = self.prop.update(h, self.prop.messages(h, adj), mask)
        u, v, present, weight = edge_slots(adj, self.max_edges)
        take = lambda idx: h.gather(1, idx.unsqueeze(-1).expand(-1, -1, h.shape[-1]))  # noqa: E731
        e = self.prop.edge_messages(take(u), take(v)) * weight.unsqueeze(-1)
        return e, present

    def forward(self, q_adj, q_mask, c_adj, c_mask) -> torch.Tensor:
        e_q, p_q = self.edges(q_adj, q_mask)
        e_c, p_c = self.edges(c_adj, c_mask)
        f_q = self.features(e_q) * p_q.unsqueeze(-1).to(e_q.dtype)
        f_c = self.features(e_c) * p_c.unsqueeze(-1).to(e_c.dtype)
        plan = sinkhorn_iters(f_q @ f_c.transpose(1, 2), self.temperature, self.sinkhorn_iterations)
        return -torch.relu(e_q - plan @ e_c).sum((1, 2))
