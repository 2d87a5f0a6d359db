"""The exact solver against brute force over all node maps, its witnesses, and its timeout."""

import itertools

import networkx as nx
import numpy as np
import pytest

from trainers.seagram.solver import SubgraphSolver, Verdict, is_embedding, to_nx


def brute_force(q: np.ndarray, c: np.ndarray, induced: bool) -> bool:
    """Try every injective map of query nodes to corpus nodes."""
    nq, nc = q.shape[0], c.shape[0]
    for image in itertools.permutations(range(nc), nq):
        sub = c[np.ix_(image, image)]
        if np.array_equal(sub, q) if induced else np.all(sub >= q):
            return True
    return False


def random_graph(rng, n, p):
    a = np.triu((rng.random((n, n)) < p).astype(np.uint8), 1)
    return a + a.T


@pytest.mark.parametrize("induced", [True, False])
def test_solver_matches_brute_force_on_small_graphs(induced):
    rng = np.random.default_rng(0)
    solver = SubgraphSolver(induced=induced, timeout_s=None)
    seen = {True: 0, False: 0}
    for _ in range(300):
        nq, nc = int(rng.integers(1, 5)), int(rng.integers(3, 7))
        q, c = random_graph(rng, nq, rng.random()), random_graph(rng, nc, rng.random())
        truth = brute_force(q, c, induced)
        verdict, mapping = solver.solve(q, c)
        assert verdict is (Verdict.YES if truth else Verdict.NO), (q, c)
        if truth:
            assert is_embedding(q, c, mapping, induced)
        seen[truth] += 1
    assert seen[True] > 30 and seen[False] > 30  # both outcomes well exercised
    assert solver.stats.calls == 300 and solver.stats.unknown == 0
    assert solver.stats.yes == seen[True] and solver.stats.no == seen[False]
    assert solver.stats.seconds > 0


def test_induced_and_monomorphism_differ_as_defined():
    path = nx.to_numpy_array(nx.path_graph(3), dtype=np.uint8)  # a-b-c
    triangle = nx.to_numpy_array(nx.complete_graph(3), dtype=np.uint8)
    # A path is a subgraph of a triangle (monomorphism) but not an induced one.
    assert SubgraphSolver(induced=False)(path, triangle) is Verdict.YES
    assert SubgraphSolver(induced=True)(path, triangle) is Verdict.NO
    assert brute_force(path, triangle, False) and not brute_force(path, triangle, True)


def test_accepts_networkx_graphs_and_adjacency_alike():
    c = nx.cycle_graph(6)
    q = nx.path_graph(4)
    solver = SubgraphSolver()
    assert solver(q, c) is Verdict.YES
    assert solver(nx.to_numpy_array(q), nx.to_numpy_array(c)) is Verdict.YES
    assert solver(nx.cycle_graph(5), c) is Verdict.NO
    assert to_nx(nx.to_numpy_array(c)).number_of_edges() == 6


def test_is_embedding_rejects_bad_maps():
    c = nx.to_numpy_array(nx.cycle_graph(4), dtype=np.uint8)
    q = nx.to_numpy_array(nx.path_graph(3), dtype=np.uint8)
    assert is_embedding(q, c, {0: 0, 1: 1, 2: 2}, induced=True)
    assert not is_embedding(q, c, {0: 0, 1: 1, 2: 1}, induced=True)  # not injective
    assert not is_embedding(q, c, {0: 0, 1: 2, 2: 1}, induced=False)  # 0-2 is not an edge
    assert not is_embedding(q, c, {0: 0, 1: 1}, induced=False)  # incomplete


def test_timeout_gives_unknown_and_is_counted():
    # K7 in the complete 6-partite graph K(5,...,5): no 7-clique exists, and VF2 wanders through
    # every 6-clique before it can say no: far longer than the limit.
    corpus = nx.complete_multipartite_graph(*[5] * 6)
    query = nx.complete_graph(7)
    solver = SubgraphSolver(induced=False, timeout_s=0.1)
    verdict, mapping = solver.solve(query, corpus)
    assert verdict is Verdict.UNKNOWN and mapping is None
    assert solver.stats.unknown == 1 and solver.stats.calls == 1
    assert solver.stats.yes == solver.stats.no == 0
    assert 0.1 <= solver.stats.seconds < 2.0  # the deadline is checked inside the search
    # An easy call on the same solver still answers exactly.
    assert solver(nx.complete_graph(6), corpus) is Verdict.YES
    assert solver.stats.calls == 2 and solver.stats.unknown == 1
