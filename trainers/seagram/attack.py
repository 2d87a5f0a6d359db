"""Edit attacks on corpus graphs: random flips, solver-checked greedy, and SEAGRAM.

An attack perturbs the corpus graph of every test pair (q, c) with at most ``budget`` edge flips
(a flip toggles the adjacency entry of a node pair: it inserts or deletes an edge). Its aim is
to worsen the victim's ranking: lower the score of relevant pairs and raise it for irrelevant
ones, while the true relevance label (is q a subgraph of c?) stays what it was. The gain of a
flip is

    gain(q, c, f) = sign(y) * ( s(q, c) - s(q, c xor f) ),   sign(y) = +1 if y = 1 else -1,

with ``s`` the victim's score, computed exactly by scoring every flipped graph. Each step of an
attack takes the allowed flip of largest positive gain (no step when none has positive gain):

- ``random``: ``budget`` uniformly random flips, no gain, no label check;
- ``greedy``: allowed = label-preserving, checked with the exact solver in decreasing order of
  gain until one preserves the label: the best label-preserving flip, at up to one solver call
  per candidate (the solver-heavy reference);
- ``seagram``: allowed = ``p_noncritical(q, c, y, f) >= threshold`` from a learned classifier:
  zero solver calls at attack time.

The classifier (``CriticalityClassifier``) is trained by active learning with uncertainty
sampling: from a random seed set of labelled flips, each round scores a random candidate set of
the pool (train queries x corpus x node pairs), sends the ``k`` most uncertain flips to the
solver and retrains. A flip's label is 1 ("non-critical") when the solver says the flipped pair
keeps its relevance label, 0 when it changes; a solver timeout gives no label.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from trainers.seagram.model import CrossEncoder, _mlp
from trainers.seagram.solver import SolverStats, SubgraphSolver, Verdict

# ------------------------------------------------------------------------ pure functions


def flip_gain(score_clean: torch.Tensor, score_flipped: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """``gain = sign(y) * (s(q, c) - s(q, c xor f))``, ``sign(y) = 2y - 1``.

    Positive when the flip moves the score the attacker's way: down for a relevant pair (y = 1),
    up for an irrelevant one (y = 0). All arguments broadcast; returns their shape.
    """
    return (2 * label.to(score_clean.dtype) - 1) * (score_clean - score_flipped)


def choose_flip(gain: torch.Tensor, allowed: torch.Tensor) -> int:
    """Index of the allowed flip of largest positive gain; -1 when there is none."""
    best = choose_flips(gain, allowed, torch.zeros(len(gain), dtype=torch.long), 1)
    return int(best[0])


def choose_flips(gain: torch.Tensor, allowed: torch.Tensor, group: torch.Tensor, groups: int) -> torch.Tensor:
    """Per group (pair), the row of largest positive gain among the allowed rows, or -1.

    ``gain``, ``allowed`` and ``group`` are per candidate row; ties go to the first row.
    """
    masked = torch.where(allowed & (gain > 0), gain, torch.full_like(gain, -torch.inf))
    best = torch.full((groups,), -torch.inf, dtype=gain.dtype).scatter_reduce(0, group, masked, "amax")
    hit = torch.isfinite(masked) & (masked == best[group])
    rows = torch.arange(len(gain))
    first = torch.full((groups,), len(gain), dtype=torch.long).scatter_reduce(0, group[hit], rows[hit], "amin")
    return torch.where(first < len(gain), first, torch.full_like(first, -1))


def uncertainty(p: torch.Tensor) -> torch.Tensor:
    """Uncertainty of a binary prediction: ``1 - |2p - 1|`` (1 at p = 0.5, 0 at p in {0, 1})."""
    return 1 - (2 * p - 1).abs()


def select_uncertain(p: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` most uncertain predictions (ties: lower index first)."""
    order = torch.argsort(-uncertainty(p), stable=True)
    return order[:k]


def pair_index(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All node pairs ``u < v`` of an ``n``-node graph (the candidate flips)."""
    u, v = np.triu_indices(n, 1)
    return u, v


def flipped(adj: np.ndarray, u: int, v: int) -> np.ndarray:
    """A copy of ``adj`` with the pair (u, v) toggled."""
    out = adj.copy()
    out[u, v] = out[v, u] = 1 - out[u, v]
    return out


def certified_noncritical(
    corpus: np.ndarray, image_adj_pairs: np.ndarray, mapped: np.ndarray, induced: bool
) -> np.ndarray:
    """Node pairs of ``corpus`` whose toggle provably keeps a known embedding valid.

    ``mapped`` marks the corpus nodes in the embedding's image, ``image_adj_pairs`` the corpus
    pairs that are images of query edges. Induced: a toggle keeps the embedding iff not both
    ends are in the image. Monomorphism: iff it is not the deletion of an image edge.
    Returns a ``[n, n]`` bool matrix (symmetric, False on the diagonal).
    """
    if induced:
        out = ~(mapped[:, None] & mapped[None, :])
    else:
        out = ~(image_adj_pairs.astype(bool) & corpus.astype(bool))
    out = out.copy()
    np.fill_diagonal(out, False)
    return out


# ------------------------------------------------------------------------ batched scoring


def _device(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def _to(device: torch.device, *tensors: torch.Tensor):
    return [t.to(device) for t in tensors]


@dataclass
class PairBatch:
    """The attacked pairs as padded tensors; ``c_adj`` is edited in place by the attacks."""

    q_adj: torch.Tensor
    q_mask: torch.Tensor
    c_adj: torch.Tensor
    c_mask: torch.Tensor
    y: torch.Tensor
    sizes: torch.Tensor

    @classmethod
    def build(
        cls, queries: list[np.ndarray], corpus: list[np.ndarray], labels: np.ndarray, n_query: int, n_corpus: int
    ) -> "PairBatch":
        from trainers.seagram.model import dense_batch

        qa, qm = dense_batch(queries, n_query)
        ca, cm = dense_batch(corpus, n_corpus)
        return cls(
            qa, qm, ca, cm, torch.as_tensor(labels, dtype=torch.long), torch.tensor([c.shape[0] for c in corpus])
        )

    def __len__(self) -> int:
        return len(self.y)

    def graph(self, i: int) -> np.ndarray:
        n = int(self.sizes[i])
        return self.c_adj[i, :n, :n].numpy().astype(np.uint8)

    def query(self, i: int) -> np.ndarray:
        n = int(self.q_mask[i].sum())
        return self.q_adj[i, :n, :n].numpy().astype(np.uint8)


def candidates(batch: PairBatch, active: torch.Tensor, done: torch.Tensor):
    """Candidate flips of the active pairs: ``(pair, u, v)`` rows, pairs not flipped before."""
    n = batch.c_adj.shape[1]
    u, v = (torch.from_numpy(a) for a in pair_index(n))
    pairs = torch.nonzero(active).flatten()
    p = pairs.repeat_interleave(len(u))
    uu, vv = u.repeat(len(pairs)), v.repeat(len(pairs))
    keep = (vv < batch.sizes[p]) & ~done[p, uu, vv]
    return p[keep], uu[keep], vv[keep]


@torch.no_grad()
def flipped_scores(victim: nn.Module, batch: PairBatch, p, u, v, chunk: int = 4096) -> torch.Tensor:
    """Victim scores of pair ``p`` with its corpus graph's (u, v) toggled, for every row."""
    out = []
    dev = _device(victim)
    for s in range(0, len(p), chunk):
        pp, uu, vv = p[s : s + chunk], u[s : s + chunk], v[s : s + chunk]
        adj = batch.c_adj[pp].clone()
        rows = torch.arange(len(pp))
        val = 1 - adj[rows, uu, vv]
        adj[rows, uu, vv] = val
        adj[rows, vv, uu] = val
        out.append(victim(*_to(dev, batch.q_adj[pp], batch.q_mask[pp], adj, batch.c_mask[pp])).cpu())
    return torch.cat(out) if out else torch.zeros(0)


def first_order_gain(victim: nn.Module, batch: PairBatch, p, u, v, chunk: int = 1024) -> torch.Tensor:
    """First-order estimate of ``flip_gain`` from the score's gradient in the adjacency:

        s(c xor f) - s(c) ~ (dS/dA_uv + dS/dA_vu) * (1 - 2 A_uv)

    One forward and backward pass per pair instead of one forward pass per flip.
    """
    pairs = torch.unique(p)
    grad = torch.zeros_like(batch.c_adj)
    dev = _device(victim)
    for s in range(0, len(pairs), chunk):
        sel = pairs[s : s + chunk]
        qa, qm, cm = _to(dev, batch.q_adj[sel], batch.q_mask[sel], batch.c_mask[sel])
        adj = batch.c_adj[sel].to(dev).requires_grad_(True)
        with torch.enable_grad():
            score = victim(qa, qm, adj, cm).sum()
            grad[sel] = torch.autograd.grad(score, adj)[0].cpu()
    a = batch.c_adj[p, u, v]
    delta = (grad[p, u, v] + grad[p, v, u]) * (1 - 2 * a)
    return -(2 * batch.y[p].to(delta.dtype) - 1) * delta


def top_per_group(value: torch.Tensor, group: torch.Tensor, k: int) -> torch.Tensor:
    """Row indices of the ``k`` largest values of each group (groups sorted ascending)."""
    order = torch.argsort(-value, stable=True)
    order = order[torch.argsort(group[order], stable=True)]
    g = group[order]
    start = torch.searchsorted(g, g, right=False)
    rank = torch.arange(len(g)) - start
    return torch.sort(order[rank < k]).values


def scored_candidates(victim: nn.Module, batch: PairBatch, active: torch.Tensor, done: torch.Tensor, top_k: int = 0):
    """Candidate flips of the active pairs with their exact gains: ``(p, u, v, gain)``.

    ``top_k`` > 0 keeps, per pair, the ``top_k`` flips of largest first-order gain before the
    exact scoring (a prefilter that makes an attack step cost ``top_k`` forward passes per pair
    instead of one per node pair); 0 scores every node pair exactly.
    """
    clean = pair_scores(victim, batch)
    p, u, v = candidates(batch, active, done)
    if top_k > 0 and len(p):
        keep = top_per_group(first_order_gain(victim, batch, p, u, v), p, top_k)
        p, u, v = p[keep], u[keep], v[keep]
    gain = flip_gain(clean[p], flipped_scores(victim, batch, p, u, v), batch.y[p])
    return p, u, v, gain


@torch.no_grad()
def pair_scores(victim: nn.Module, batch: PairBatch, chunk: int = 4096) -> torch.Tensor:
    """Victim scores of the pairs as they are now."""
    dev = _device(victim)
    out = [
        victim(
            *_to(
                dev,
                batch.q_adj[s : s + chunk],
                batch.q_mask[s : s + chunk],
                batch.c_adj[s : s + chunk],
                batch.c_mask[s : s + chunk],
            )
        ).cpu()
        for s in range(0, len(batch), chunk)
    ]
    return torch.cat(out) if out else torch.zeros(0)


# ------------------------------------------------------------------------ the classifier


RING_SIZES = (3, 4, 5, 6, 7, 8)
"""Cycle lengths the classifier's structural features distinguish (rings of molecules)."""


def all_pairs_dist(adj: np.ndarray) -> np.ndarray:
    """Hop distances ``[..., n, n]`` (inf when disconnected), Floyd-Warshall over the batch."""
    adj = np.asarray(adj, dtype=bool)
    n = adj.shape[-1]
    d = np.where(adj, 1.0, np.inf)
    d[..., np.arange(n), np.arange(n)] = 0
    for k in range(n):
        d = np.minimum(d, d[..., :, k, None] + d[..., None, k, :])
    return d


def flip_cycle_length(adj: np.ndarray) -> np.ndarray:
    """For every node pair, the length of the shortest cycle its toggle creates or destroys.

    A non-edge (u, v) closes a cycle of length ``dist(u, v) + 1``; an edge (u, v) lies on
    shortest cycles of length ``dist_{G - uv}(u, v) + 1``. 0 where no cycle is involved
    (different components, a bridge). Message-passing GNNs cannot measure these lengths,
    and rings are what the subgraph relation of molecules turns on. Returns ``[n, n]``.
    """
    adj = np.asarray(adj, dtype=bool)
    dist = all_pairs_dist(adj)
    out = np.where(np.isfinite(dist), dist + 1, 0)
    eu, ev = np.nonzero(np.triu(adj, 1))
    if len(eu):
        cut = np.repeat(adj[None], len(eu), 0)
        rows = np.arange(len(eu))
        cut[rows, eu, ev] = cut[rows, ev, eu] = False
        alt = all_pairs_dist(cut)[rows, eu, ev] + 1
        out[eu, ev] = out[ev, eu] = np.where(np.isfinite(alt), alt, 0)
    np.fill_diagonal(out, 0)
    return out


def ring_profile(adj: np.ndarray, cycle: np.ndarray) -> np.ndarray:
    """Fraction of a graph's edges whose shortest cycle has each length in ``RING_SIZES``."""
    edges = np.triu(np.asarray(adj, dtype=bool), 1)
    lengths = cycle[edges]
    return np.array([(lengths == k).sum() for k in RING_SIZES], dtype=np.float32) / max(len(lengths), 1)


@functools.lru_cache(maxsize=1 << 16)
def _graph_structure(adj_bytes: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Flip-cycle lengths and ring profile of one padded graph, memoized on its adjacency."""
    adj = np.frombuffer(adj_bytes, dtype=np.uint8).reshape(n, n)
    cycle = flip_cycle_length(adj)
    return cycle.astype(np.int64), ring_profile(adj, cycle)


def structure(q_adj: torch.Tensor, c_adj: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per pair: corpus flip-cycle lengths ``[P, N, N]`` and both graphs' ring profiles ``[P, 6]``.

    Padding nodes are isolated, so they change none of these; results are memoized per graph
    (the pool's graphs repeat, and an attack step changes one pair of one graph).
    """
    cyc, qp, cp = [], [], []
    n, nq = c_adj.shape[-1], q_adj.shape[-1]
    for q, c in zip(q_adj.numpy().astype(np.uint8), c_adj.numpy().astype(np.uint8)):
        cc, c_prof = _graph_structure(c.tobytes(), n)
        cyc.append(cc)
        cp.append(c_prof)
        qp.append(_graph_structure(q.tobytes(), nq)[1])
    return {
        "cycle": torch.from_numpy(np.stack(cyc)),
        "q_rings": torch.from_numpy(np.stack(qp)),
        "c_rings": torch.from_numpy(np.stack(cp)),
    }


def flip_features(c_adj: torch.Tensor, struct: dict[str, torch.Tensor], p, u, v) -> torch.Tensor:
    """Structural features of toggling (u, v) in pair p's corpus graph, ``[rows, 22]``.

    ``[A_uv, deg_u + deg_v, |deg_u - deg_v|, onehot(cycle length: 3..8 or other), q_rings,
    c_rings, q_rings[L], c_rings[L]]`` with degrees / 4 and L the flip's cycle length.
    """
    deg = c_adj.sum(-1) / 4
    du, dv = deg[p, u], deg[p, v]
    length = struct["cycle"][p, u, v]
    slot = torch.clamp(length - RING_SIZES[0], min=-1)
    slot = torch.where((slot < 0) | (slot >= len(RING_SIZES)), len(RING_SIZES), slot)
    onehot = nn.functional.one_hot(slot, len(RING_SIZES) + 1).float()
    qr, cr = struct["q_rings"][p], struct["c_rings"][p]
    pad = torch.zeros(len(p), 1, device=c_adj.device)
    at_q = torch.cat([qr, pad], 1).gather(1, slot[:, None])
    at_c = torch.cat([cr, pad], 1).gather(1, slot[:, None])
    return torch.cat([torch.stack([c_adj[p, u, v], du + dv, (du - dv).abs()], -1), onehot, qr, cr, at_q, at_c], -1)


N_FLIP_FEATURES = 3 + len(RING_SIZES) + 1 + 2 * len(RING_SIZES) + 2


class CriticalityClassifier(nn.Module):
    """``p_noncritical(q, c, y, (u, v))``: will toggling (u, v) in c keep the label y of (q, c)?

    An ensemble of ``members`` independently initialized networks. In each, a ``CrossEncoder``
    (GMN propagation with cross-graph attention) embeds the nodes of both graphs; a node pair is
    described by ``[h_u + h_v, h_u * h_v, g_q, g_c, flip_features]`` (``g`` = mean node
    embedding of a graph; ``flip_features``: edge or not, degrees, the length of the cycle the
    toggle creates or destroys, both graphs' ring profiles) and an MLP with one output per
    relevance label y gives the logit of "non-critical" (relevant and irrelevant pairs have
    different critical flips: deletions inside the match versus insertions that complete it).
    The ensemble's probability is the minimum over members (``aggregate="min"``): a flip counts
    as non-critical only when every member agrees.
    """

    def __init__(self, hidden: int = 64, layers: int = 3, members: int = 1):
        super().__init__()
        self.encoders = nn.ModuleList(CrossEncoder(hidden, layers) for _ in range(members))
        self.heads = nn.ModuleList(_mlp(4 * hidden + N_FLIP_FEATURES, 2, hidden) for _ in range(members))

    def encode(self, q_adj, q_mask, c_adj, c_mask):
        """Per member: corpus node embeddings and both graphs' mean embeddings."""
        out = []
        for encoder in self.encoders:
            hq, hc = encoder(q_adj, q_mask, c_adj, c_mask)
            out.append((hc, hq.sum(1) / q_mask.sum(1, keepdim=True), hc.sum(1) / c_mask.sum(1, keepdim=True)))
        return out

    def pair_logits(self, encoded, feats, y, p, u, v) -> torch.Tensor:
        """Logits ``[members, rows]`` for rows ``(p, u, v)`` of the encoded pairs."""
        out = []
        for (hc, gq, gc), head in zip(encoded, self.heads):
            hu, hv = hc[p, u], hc[p, v]
            logits = head(torch.cat([hu + hv, hu * hv, gq[p], gc[p], feats], -1))
            out.append(logits.gather(1, y[p].long()[:, None]).squeeze(1))
        return torch.stack(out)

    def forward(self, q_adj, q_mask, c_adj, c_mask, y, u, v, struct) -> torch.Tensor:
        """One flip per pair: logits ``[members, B]`` for toggling ``(u[i], v[i])`` of pair i."""
        encoded = self.encode(q_adj, q_mask, c_adj, c_mask)
        rows = torch.arange(len(u), device=u.device)
        return self.pair_logits(encoded, flip_features(c_adj, struct, rows, u, v), y, rows, u, v)


@torch.no_grad()
def noncritical_prob(
    clf: CriticalityClassifier, batch: PairBatch, p, u, v, aggregate: str = "min", chunk: int = 1024
) -> torch.Tensor:
    """``p_noncritical`` for rows ``(p, u, v)`` (ensemble ``min`` or ``mean``); pairs encoded once."""
    out = torch.empty(len(p))
    pairs = torch.unique(p)
    for s in range(0, len(pairs), chunk):
        sel = pairs[s : s + chunk]
        dev = _device(clf)
        struct = {k: t.to(dev) for k, t in structure(batch.q_adj[sel], batch.c_adj[sel]).items()}
        qa, qm, c_adj, cm, y = _to(
            dev, batch.q_adj[sel], batch.q_mask[sel], batch.c_adj[sel], batch.c_mask[sel], batch.y[sel]
        )
        encoded = clf.encode(qa, qm, c_adj, cm)
        local = torch.full((len(batch),), -1, dtype=torch.long)
        local[sel] = torch.arange(len(sel))
        rows = torch.nonzero(local[p] >= 0).flatten()
        lp, uu, vv = _to(dev, local[p[rows]], u[rows], v[rows])
        feats = flip_features(c_adj, struct, lp, uu, vv)
        probs = torch.sigmoid(clf.pair_logits(encoded, feats, y, lp, uu, vv)).cpu()
        out[rows] = probs.min(0).values if aggregate == "min" else probs.mean(0)
    return out


# ------------------------------------------------------------------------ the attacks


@dataclass
class AttackOutcome:
    """What an attack did to a ``PairBatch``: flips per pair, solver use, wall time."""

    flips: torch.Tensor
    solver_calls: int = 0
    solver_unknown: int = 0
    solver_seconds: float = 0.0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def random_attack(batch: PairBatch, budget: int, rng: np.random.Generator) -> AttackOutcome:
    """``budget`` distinct uniformly random flips per pair (no gain, no label check)."""
    start = time.perf_counter()
    flips = torch.zeros(len(batch), dtype=torch.long)
    for i in range(len(batch)):
        u, v = pair_index(int(batch.sizes[i]))
        for k in rng.choice(len(u), size=min(budget, len(u)), replace=False):
            val = 1 - batch.c_adj[i, u[k], v[k]]
            batch.c_adj[i, u[k], v[k]] = batch.c_adj[i, v[k], u[k]] = val
            flips[i] += 1
    return AttackOutcome(flips, seconds=time.perf_counter() - start)


def greedy_attack(
    victim: nn.Module, batch: PairBatch, budget: int, solver: SubgraphSolver | None, max_checks: int = 0, top_k: int = 0
) -> AttackOutcome:
    """Per step and pair, the flip of largest positive gain that the solver says keeps the label.

    Candidates are checked in decreasing gain; ``max_checks`` > 0 caps the checks per step. A
    solver "unknown" counts as "not preserving" (the flip is skipped), never as a label.
    ``solver=None``: the unconstrained greedy attack, the largest positive gain flip with no
    label check (an upper bound on damage that may break labels).
    """
    start = time.perf_counter()
    if solver is None:
        solver = _NoSolver()
    calls0, unknown0, sec0 = solver.stats.calls, solver.stats.unknown, solver.stats.seconds
    done = torch.zeros_like(batch.c_adj, dtype=torch.bool)
    flips = torch.zeros(len(batch), dtype=torch.long)
    active = torch.ones(len(batch), dtype=torch.bool)
    for _ in range(budget):
        p, u, v, gain = scored_candidates(victim, batch, active, done, top_k)
        starts = torch.searchsorted(p, torch.arange(len(batch) + 1))
        for i in torch.nonzero(active).flatten().tolist():
            rows = torch.arange(int(starts[i]), int(starts[i + 1]))
            rows = rows[gain[rows] > 0]
            rows = rows[torch.argsort(-gain[rows], stable=True)]
            if max_checks > 0:
                rows = rows[:max_checks]
            query, graph, target = batch.query(i), batch.graph(i), int(batch.y[i])
            chosen = int(rows[0]) if isinstance(solver, _NoSolver) and len(rows) else -1
            for r in rows.tolist() if chosen < 0 else []:
                verdict = solver(query, flipped(graph, int(u[r]), int(v[r])))
                if verdict is not Verdict.UNKNOWN and int(verdict) == target:
                    chosen = r
                    break
            if chosen < 0:
                active[i] = False
                continue
            _apply(batch, done, i, int(u[chosen]), int(v[chosen]))
            flips[i] += 1
        if not active.any():
            break
    return AttackOutcome(
        flips,
        solver.stats.calls - calls0,
        solver.stats.unknown - unknown0,
        solver.stats.seconds - sec0,
        time.perf_counter() - start,
    )


class _NoSolver:
    """The unconstrained greedy attack's stand-in: no calls, nothing spent."""

    stats = SolverStats()


def seagram_attack(
    victim: nn.Module,
    clf: CriticalityClassifier,
    batch: PairBatch,
    budget: int,
    threshold: float,
    top_k: int = 0,
    select: str = "gain",
) -> AttackOutcome:
    """Per step and pair, one flip with positive gain and ``p_noncritical >= threshold``.

    ``select="gain"``: the one of largest gain; ``"safest"``: the one of largest
    ``p_noncritical`` (the classifier's most confident call; gain breaks ties). Uses no solver.
    """
    start = time.perf_counter()
    done = torch.zeros_like(batch.c_adj, dtype=torch.bool)
    flips = torch.zeros(len(batch), dtype=torch.long)
    active = torch.ones(len(batch), dtype=torch.bool)
    for _ in range(budget):
        p, u, v, gain = scored_candidates(victim, batch, active, done, top_k)
        prob = noncritical_prob(clf, batch, p, u, v)
        allowed = (prob >= threshold) & (gain > 0)
        rank = gain if select == "gain" else prob + 1e-6 * torch.sigmoid(gain)
        best = choose_flips(rank, allowed, p, len(batch))
        for i in torch.nonzero(active).flatten().tolist():
            r = int(best[i])
            if r < 0:
                active[i] = False
                continue
            _apply(batch, done, i, int(u[r]), int(v[r]))
            flips[i] += 1
        if not active.any():
            break
    return AttackOutcome(flips, seconds=time.perf_counter() - start)


def _apply(batch: PairBatch, done: torch.Tensor, i: int, u: int, v: int) -> None:
    val = 1 - batch.c_adj[i, u, v]
    batch.c_adj[i, u, v] = batch.c_adj[i, v, u] = val
    done[i, u, v] = done[i, v, u] = True


def label_check(batch: PairBatch, flips: torch.Tensor, solver: SubgraphSolver) -> torch.Tensor:
    """The solver's verdict on every perturbed pair (pairs without flips: their label, no call).

    Returns ``[P]`` long: 1 / 0 the true label after the attack, -1 unknown (timeout).
    """
    out = batch.y.clone()
    for i in torch.nonzero(flips > 0).flatten().tolist():
        out[i] = int(solver(batch.query(i), batch.graph(i)))
    return out


# ------------------------------------------------------------------------ active learning


@dataclass
class FlipPool:
    """The active-learning pool: every node pair of every (train query, corpus graph) pair."""

    queries: list[np.ndarray]
    corpus: list[np.ndarray]
    labels: np.ndarray
    """``[n_train_queries, n_corpus]`` relevance of the pool's pairs."""
    pos_frac: float = 0.5
    """Fraction of sampled flips that come from relevant pairs."""
    induced: bool = True
    """The relevance relation: induced subgraph isomorphism (True) or monomorphism."""

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` random flips as rows ``(query, corpus, u, v)``, stratified by relevance."""
        pos = np.argwhere(self.labels == 1)
        neg = np.argwhere(self.labels == 0)
        n_pos = int(round(count * self.pos_frac)) if len(pos) and len(neg) else (count if len(pos) else 0)
        picks = np.concatenate(
            [
                pos[rng.integers(len(pos), size=n_pos)] if n_pos else np.zeros((0, 2), int),
                neg[rng.integers(len(neg), size=count - n_pos)] if count - n_pos else np.zeros((0, 2), int),
            ]
        )
        sizes = np.array([self.corpus[c].shape[0] for c in picks[:, 1]])
        u = np.floor(rng.random(count) * sizes).astype(int)
        v = np.floor(rng.random(count) * (sizes - 1)).astype(int)
        v = v + (v >= u)  # uniform over ordered pairs u != v
        rows = np.stack([picks[:, 0], picks[:, 1], np.minimum(u, v), np.maximum(u, v)], 1)
        return rows.astype(np.int64)

    def sample_pairs(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` random (query, corpus) pairs, a ``pos_frac`` share of them relevant."""
        rows = self.sample(rng, count)
        return rows[:, :2]

    def sample_attack(
        self,
        rng: np.random.Generator,
        count: int,
        victim: nn.Module,
        n_pairs: int,
        top_k: int,
        n_query: int,
        n_corpus: int,
    ) -> np.ndarray:
        """``count`` flips among those the attack would consider on ``n_pairs`` random pairs.

        The candidates of a pair are its flips of positive exact gain against ``victim`` after
        the ``top_k`` first-order prefilter, exactly as an attack step sees them.
        """
        pairs = self.sample_pairs(rng, n_pairs)
        batch = self.batch(np.concatenate([pairs, np.zeros((len(pairs), 2), int)], 1), n_query, n_corpus)
        done = torch.zeros_like(batch.c_adj, dtype=torch.bool)
        p, u, v, gain = scored_candidates(victim, batch, torch.ones(len(batch), dtype=torch.bool), done, top_k)
        keep = torch.nonzero(gain > 0).flatten().numpy()
        if len(keep) > count:
            keep = np.sort(rng.choice(keep, size=count, replace=False))
        return np.stack(
            [pairs[p[keep].numpy(), 0], pairs[p[keep].numpy(), 1], u[keep].numpy(), v[keep].numpy()], 1
        ).astype(np.int64)

    def sample_picks(
        self,
        rng: np.random.Generator,
        count: int,
        victim: nn.Module,
        clf: "CriticalityClassifier",
        top_k: int,
        n_query: int,
        n_corpus: int,
        select: str = "safest",
    ) -> np.ndarray:
        """The flips the SEAGRAM attack would take on ``count`` random pairs (one per pair).

        Labelling these checks the classifier exactly where its mistakes become label flips:
        the attack's argmax over many candidates seeks out confident errors.
        """
        pairs = self.sample_pairs(rng, count)
        batch = self.batch(np.concatenate([pairs, np.zeros((len(pairs), 2), int)], 1), n_query, n_corpus)
        done = torch.zeros_like(batch.c_adj, dtype=torch.bool)
        p, u, v, gain = scored_candidates(victim, batch, torch.ones(len(batch), dtype=torch.bool), done, top_k)
        prob = noncritical_prob(clf, batch, p, u, v)
        rank = gain if select == "gain" else prob + 1e-6 * torch.sigmoid(gain)
        best = choose_flips(rank, gain > 0, p, len(batch))
        keep = best[best >= 0]
        return np.stack(
            [pairs[p[keep].numpy(), 0], pairs[p[keep].numpy(), 1], u[keep].numpy(), v[keep].numpy()], 1
        ).astype(np.int64)

    def batch(self, rows: np.ndarray, n_query: int, n_corpus: int) -> PairBatch:
        return PairBatch.build(
            [self.queries[q] for q in rows[:, 0]],
            [self.corpus[c] for c in rows[:, 1]],
            self.labels[rows[:, 0], rows[:, 1]],
            n_query,
            n_corpus,
        )

    def label(
        self, rows: np.ndarray, solver: SubgraphSolver, witness_labels: int = 0, rng: np.random.Generator | None = None
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Solver labels of the flips ``rows``, plus labels certified by the solver's witnesses.

        A flip's label is 1 when toggling it keeps the pair's relevance label, 0 when not, -1
        unknown (timeout). With ``witness_labels`` > 0, each "yes" answer on a relevant pair
        also yields up to that many further flips of the same pair labelled 1 at no extra
        solver call: the witness embedding found in the flipped graph is, when the queried flip
        does not touch it, an embedding of the unflipped graph too, and every flip that leaves
        it intact (``certified_noncritical``) keeps the pair relevant.
        Returns ``(rows, labels, calls)``: the queried rows first, then the certified ones.
        """
        from trainers.seagram.solver import is_embedding

        out = np.empty(len(rows), dtype=np.int64)
        extra_rows, calls = [], 0
        for k, (q, c, u, v) in enumerate(rows.tolist()):
            query, graph = self.queries[q], self.corpus[c]
            verdict, mapping = solver.solve(query, flipped(graph, u, v))
            calls += 1
            out[k] = -1 if verdict is Verdict.UNKNOWN else int(int(verdict) == self.labels[q, c])
            if not (witness_labels and mapping is not None and self.labels[q, c] == 1):
                continue
            if not is_embedding(query, graph, mapping, self.induced):
                continue  # the witness uses the queried flip: it certifies nothing about c
            idx = np.array([mapping[i] for i in range(query.shape[0])])
            mapped = np.zeros(graph.shape[0], dtype=bool)
            mapped[idx] = True
            image_edges = np.zeros_like(graph)
            image_edges[np.ix_(idx, idx)] = query
            safe = np.triu(certified_noncritical(graph, image_edges, mapped, self.induced), 1)
            safe[u, v] = False
            su, sv = np.nonzero(safe)
            if len(su):
                pick = rng.choice(len(su), size=min(witness_labels, len(su)), replace=False)
                extra_rows += [(q, c, int(su[i]), int(sv[i])) for i in pick]
        extra = np.array(extra_rows, dtype=np.int64).reshape(-1, 4)
        return (np.concatenate([rows, extra]), np.concatenate([out, np.ones(len(extra), np.int64)]), calls)


def train_classifier(
    clf: CriticalityClassifier,
    optimizer: torch.optim.Optimizer,
    batch: PairBatch,
    u: torch.Tensor,
    v: torch.Tensor,
    target: torch.Tensor,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
) -> float:
    """BCE training of every member on the labelled flips (one per row of ``batch``).

    Returns the last epoch's mean loss.
    """
    clf.train()
    dev = _device(clf)
    struct = {k: t.to(dev) for k, t in structure(batch.q_adj, batch.c_adj).items()}
    q_adj, q_mask, c_adj, c_mask, y, u, v, target = _to(
        dev, batch.q_adj, batch.q_mask, batch.c_adj, batch.c_mask, batch.y, u, v, target
    )
    loss_sum = torch.zeros((), device=dev)
    for _ in range(epochs):
        order = torch.randperm(len(target), generator=generator).to(dev)
        loss_sum, seen = torch.zeros((), device=dev), 0
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            logits = clf(
                q_adj[idx],
                q_mask[idx],
                c_adj[idx],
                c_mask[idx],
                y[idx],
                u[idx],
                v[idx],
                {k: t[idx] for k, t in struct.items()},
            )
            loss = nn.functional.binary_cross_entropy_with_logits(logits, target[idx].float().expand_as(logits))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum = loss_sum + loss.detach() * len(idx)
            seen += len(idx)
        loss_sum = loss_sum / max(seen, 1)
    clf.eval()
    return float(loss_sum)
