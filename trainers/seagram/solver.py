"""The exact solver: is the query a subgraph of the corpus graph? VF2 with counting and a timeout.

One wrapper around networkx's VF2 ``GraphMatcher``. The relation is *induced* subgraph
isomorphism by default (the query is isomorphic to a node-induced subgraph of the corpus
graph: edges and non-edges both preserved), *monomorphism* as an option (only the query's
edges need to be present). Every call is counted and timed.

networkx's VF2 has no limit of its own. ``SubgraphSolver`` gives every call a budget that the
search itself checks: ``_DeadlineMatcher`` overrides ``syntactic_feasibility``, which VF2 calls
for every candidate node pair it tries (a *node expansion*), and aborts the search once it has
made ``max_expansions`` of them (deterministic: the same call gives the same verdict on any
machine) or, optionally, once the wall clock passes a deadline (``timeout_s``: the verdict then
depends on machine load). An aborted search returns ``Verdict.UNKNOWN``, which is counted separately and is
never turned into a label: callers must decide what an unknown means for them (data generation
drops the query, the greedy attack treats the flip as not label-preserving, evaluation reports
it).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

import networkx as nx
import numpy as np
from networkx.algorithms.isomorphism import GraphMatcher


class Verdict(enum.IntEnum):
    """The outcome of one solver call."""

    NO = 0
    YES = 1
    UNKNOWN = -1


class _DeadlineExceeded(Exception):
    pass


class _DeadlineMatcher(GraphMatcher):
    """VF2 that raises ``_DeadlineExceeded`` after ``max_expansions`` feasibility tests, or
    once ``time.perf_counter()`` passes ``deadline``.

    The clock is read every ``check_every`` feasibility tests (a clock read costs about as much
    as a feasibility test), so a call overruns its deadline by at most that many tests.
    """

    def __init__(self, g1, g2, deadline: float, max_expansions: float = float("inf"), check_every: int = 64):
        super().__init__(g1, g2)
        self.deadline = deadline
        self.max_expansions = max_expansions
        self.check_every = check_every
        self.ticks = 0

    def syntactic_feasibility(self, g1_node, g2_node):
        self.ticks += 1
        if self.ticks > self.max_expansions:
            raise _DeadlineExceeded
        if self.ticks % self.check_every == 0 and time.perf_counter() > self.deadline:
            raise _DeadlineExceeded
        return super().syntactic_feasibility(g1_node, g2_node)


def to_nx(adj: np.ndarray) -> nx.Graph:
    """A networkx graph from a symmetric 0/1 adjacency matrix (nodes 0..n-1)."""
    adj = np.asarray(adj)
    g = nx.Graph()
    g.add_nodes_from(range(adj.shape[0]))
    rows, cols = np.nonzero(np.triu(adj, 1))
    g.add_edges_from(zip(rows.tolist(), cols.tolist()))
    return g


@dataclass
class SolverStats:
    """What a solver has spent: calls, seconds and outcomes."""

    calls: int = 0
    seconds: float = 0.0
    yes: int = 0
    no: int = 0
    unknown: int = 0
    expansions: int = 0

    def as_dict(self) -> dict[str, float]:
        return {
            "calls": self.calls,
            "seconds": self.seconds,
            "yes": self.yes,
            "no": self.no,
            "unknown": self.unknown,
            "expansions": self.expansions,
        }

    def state_dict(self) -> dict[str, float]:
        """What a checkpoint keeps of them (``as_dict``)."""
        return self.as_dict()

    def load_state_dict(self, state: dict[str, float]) -> None:
        for key, value in state.items():
            setattr(self, key, value)


class SubgraphSolver:
    """Exact subgraph test (VF2) with call counting and a per-call timeout.

    ``solver(query, corpus)`` answers whether ``query`` is isomorphic to an induced subgraph of
    ``corpus`` (``induced=False``: to a subgraph, i.e. a monomorphism exists). Graphs are
    networkx graphs or 0/1 adjacency matrices. ``max_expansions`` bounds each call's search by
    node expansions (VF2 feasibility tests; deterministic) and ``timeout_s`` by wall seconds
    (``None`` or 0: no limit of that kind); a call that runs out returns ``Verdict.UNKNOWN``.
    ``stats.expansions`` sums the expansions of every call.
    """

    def __init__(self, induced: bool = True, timeout_s: float | None = None, max_expansions: int | None = 200_000):
        self.induced = induced
        self.timeout_s = timeout_s if timeout_s else None
        self.max_expansions = max_expansions if max_expansions else None
        self.stats = SolverStats()

    @classmethod
    def from_config(cls, cfg) -> "SubgraphSolver":
        """The solver a seagram config asks for (``induced``, ``solver_budget``, ``solver_timeout_s``)."""
        return cls(induced=cfg.induced, timeout_s=cfg.solver_timeout_s, max_expansions=cfg.solver_budget)

    def __call__(self, query, corpus) -> Verdict:
        return self.solve(query, corpus)[0]

    def solve(self, query, corpus) -> tuple[Verdict, dict[int, int] | None]:
        """The verdict and, for ``YES``, one witness: a map from query nodes to corpus nodes."""
        start = time.perf_counter()
        verdict, mapping = self._solve(_as_graph(query), _as_graph(corpus), start)
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - start
        if verdict is Verdict.YES:
            self.stats.yes += 1
        elif verdict is Verdict.NO:
            self.stats.no += 1
        else:
            self.stats.unknown += 1
        return verdict, mapping

    def _solve(self, q: nx.Graph, c: nx.Graph, start: float) -> tuple[Verdict, dict | None]:
        # Necessary conditions for both relations, sound and cheap.
        if q.number_of_nodes() > c.number_of_nodes() or q.number_of_edges() > c.number_of_edges():
            return Verdict.NO, None
        deadline = start + self.timeout_s if self.timeout_s is not None else float("inf")
        limit = self.max_expansions if self.max_expansions is not None else float("inf")
        matcher = _DeadlineMatcher(c, q, deadline, limit)  # GraphMatcher(G1, G2) looks for G2 in G1
        search = matcher.subgraph_isomorphisms_iter() if self.induced else matcher.subgraph_monomorphisms_iter()
        try:
            found = next(search)  # corpus node -> query node
            return Verdict.YES, {q_node: c_node for c_node, q_node in found.items()}
        except StopIteration:
            return Verdict.NO, None
        except _DeadlineExceeded:
            return Verdict.UNKNOWN, None
        finally:
            self.stats.expansions += min(matcher.ticks, limit)


def is_embedding(query: np.ndarray, corpus: np.ndarray, mapping: dict[int, int], induced: bool) -> bool:
    """Whether ``mapping`` (query node -> corpus node) embeds ``query`` in ``corpus``.

    Injective, every query edge onto a corpus edge, and (``induced``) every query non-edge onto
    a corpus non-edge. A direct check, independent of the search that found the map.
    """
    n = query.shape[0]
    if sorted(mapping) != list(range(n)) or len(set(mapping.values())) != n:
        return False
    idx = np.array([mapping[i] for i in range(n)])
    if idx.min() < 0 or idx.max() >= corpus.shape[0]:
        return False
    image = np.asarray(corpus)[np.ix_(idx, idx)]
    q = np.asarray(query)
    return bool(np.array_equal(image, q) if induced else np.all(image >= q))


def _as_graph(graph) -> nx.Graph:
    return graph if isinstance(graph, nx.Graph) else to_nx(graph)
