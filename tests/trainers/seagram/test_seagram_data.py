"""Retrieval data: labels re-checked by an independent matcher, splits, cache, TU loader."""

from pathlib import Path

import numpy as np
import pytest

from raylab.config import from_dict
from raylab.errors import UserError
from trainers.seagram import data as sgdata
from trainers.seagram.config import Config

SPEC = sgdata.DataSpec(source="nci", n_corpus=24, n_queries=10, nci_max_molecules=800, seed=3)


def embeds(q: np.ndarray, c: np.ndarray, induced: bool) -> bool:
    """Plain backtracking over query nodes in BFS order; independent of networkx's VF2."""
    nq, nc = q.shape[0], c.shape[0]
    q_adj = [set(np.flatnonzero(q[i]).tolist()) for i in range(nq)]
    c_adj = [set(np.flatnonzero(c[i]).tolist()) for i in range(nc)]
    order, seen = [], set()
    for start in range(nq):
        if start in seen:
            continue
        seen.add(start)
        queue = [start]
        while queue:
            x = queue.pop(0)
            order.append(x)
            for y in sorted(q_adj[x]):
                if y not in seen:
                    seen.add(y)
                    queue.append(y)
    mapping: dict[int, int] = {}

    def extend(k: int) -> bool:
        if k == nq:
            return True
        x = order[k]
        for y in range(nc):
            if y in mapping.values() or len(c_adj[y]) < len(q_adj[x]):
                continue
            ok = True
            for x2, y2 in mapping.items():
                edge_q, edge_c = x2 in q_adj[x], y2 in c_adj[y]
                if (edge_q and not edge_c) or (induced and edge_c and not edge_q):
                    ok = False
                    break
            if ok:
                mapping[x] = y
                if extend(k + 1):
                    return True
                del mapping[x]
        return False

    return extend(0)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return sgdata.load_or_generate(SPEC, cache, cache), cache


def test_every_label_is_rechecked_independently(generated):
    data, _ = generated
    assert data.labels.shape == (10, 24)
    for i, q in enumerate(data.queries):
        for j, c in enumerate(data.corpus):
            assert bool(data.labels[i, j]) == embeds(q, c, induced=True), (i, j)


def test_protocol_sizes_connectivity_and_positive_rate(generated):
    data, _ = generated
    import networkx as nx

    from trainers.seagram.solver import to_nx

    assert all(16 <= g.shape[0] <= 20 for g in data.corpus)
    assert all(7 <= g.shape[0] <= 15 for g in data.queries)
    assert all(nx.is_connected(to_nx(g)) for g in data.corpus + data.queries)
    assert all(np.array_equal(g, g.T) and not g.diagonal().any() for g in data.corpus + data.queries)
    pos = data.labels.sum(1)
    ratio = pos / (data.labels.shape[1] - pos)  # IsoNet's filter: relevant:irrelevant in [0.1, 0.4]
    assert np.all((ratio >= 0.1 - 1e-9) & (ratio <= 0.4 + 1e-9))
    assert data.stats["pos_rate"] == pytest.approx(data.labels.mean())
    assert data.stats["solver"]["unknown"] == 0 and data.stats["solver"]["calls"] > 0


def test_splits_are_disjoint_and_cover_all_queries(generated):
    data, _ = generated
    parts = [set(data.splits[k].tolist()) for k in ("train", "val", "test")]
    assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
    assert set.union(*parts) == set(range(10))
    assert [len(p) for p in parts] == [6, 2, 2]  # 60/15/25 of 10, rounded


def test_cache_hit_miss_and_corruption(generated, monkeypatch):
    data, cache = generated
    path = cache / f"{SPEC.key()}.npz"
    assert path.is_file() and path.with_suffix(".json").is_file()

    def no_generation(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(sgdata, "generate", no_generation)
    again = sgdata.load_or_generate(SPEC, cache, cache)
    assert np.array_equal(again.labels, data.labels)
    assert all(np.array_equal(a, b) for a, b in zip(again.corpus, data.corpus))
    assert all(np.array_equal(a, b) for a, b in zip(again.queries, data.queries))
    assert sgdata.DataSpec(**{**SPEC.__dict__, "seed": 4}).key() != SPEC.key()
    corrupted = cache / "copy"
    corrupted.mkdir()
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (corrupted / path.name).write_bytes(bytes(raw))
    (corrupted / path.with_suffix(".json").name).write_text(path.with_suffix(".json").read_text())
    with pytest.raises(UserError, match="checksum"):
        sgdata.load_or_generate(SPEC, corrupted, corrupted)


def test_unknown_solver_verdicts_drop_the_query(monkeypatch):
    from trainers.seagram.solver import SubgraphSolver, Verdict

    real = SubgraphSolver.solve
    calls = {"n": 0}

    def flaky(self, query, corpus):
        calls["n"] += 1
        if calls["n"] in (3, 30, 60):  # three calls "time out"
            self.stats.calls += 1
            self.stats.unknown += 1
            return Verdict.UNKNOWN, None
        return real(self, query, corpus)

    monkeypatch.setattr(SubgraphSolver, "solve", flaky)
    spec = sgdata.DataSpec(
        source="nci", n_corpus=12, n_queries=4, nci_max_molecules=400, seed=5, max_query_attempts=500
    )
    data = sgdata.generate(spec, sgdata.nci_graphs(400))
    assert data.stats["queries_dropped_unknown"] == 3
    assert data.stats["solver"]["unknown"] == 3
    monkeypatch.setattr(SubgraphSolver, "solve", real)
    for i, q in enumerate(data.queries):  # the kept labels are exact
        for j, c in enumerate(data.corpus):
            assert bool(data.labels[i, j]) == embeds(q, c, induced=True)


def write_tu(root: Path, name: str, graphs: list[np.ndarray]) -> None:
    """The TU text format: 1-based edge list (both directions) and node-to-graph indicator."""
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    edges, indicator, offset = [], [], 0
    for gi, g in enumerate(graphs, start=1):
        for u, v in zip(*np.nonzero(g)):
            edges.append(f"{u + 1 + offset}, {v + 1 + offset}")
        indicator += [str(gi)] * g.shape[0]
        offset += g.shape[0]
    (raw / f"{name}_A.txt").write_text("\n".join(edges) + "\n")
    (raw / f"{name}_graph_indicator.txt").write_text("\n".join(indicator) + "\n")
    (raw / f"{name}_graph_labels.txt").write_text("\n".join("1" for _ in graphs) + "\n")


def test_tu_dataset_loader_reads_raw_files(tmp_path):
    graphs = [g for g in sgdata.nci_graphs(300) if g.shape[0] >= 20][:30]
    write_tu(tmp_path, "FAKETU", graphs)
    loaded = sgdata.tu_graphs(tmp_path, "FAKETU", download=False)
    assert len(loaded) == len(graphs)
    assert all(np.array_equal(a, b) for a, b in zip(loaded, graphs))
    spec = sgdata.DataSpec(source="FAKETU", n_corpus=10, n_queries=4, seed=1)
    data = sgdata.load_or_generate(spec, tmp_path, tmp_path / "cache")
    assert data.labels.shape == (4, 10)
    assert any("FAKETU_A.txt" in k for k in data.stats["source_sha256"])


def test_missing_tu_dataset_fails_before_anything_runs(tmp_path):
    cfg = from_dict(Config, {"source": "MUTAG", "data_dir": str(tmp_path), "n_queries": 20, "n_corpus": 30}, "test")
    with pytest.raises(UserError, match=r"MUTAG.*MUTAG_A\.txt"):
        sgdata.preflight(cfg)
    with pytest.raises(UserError, match="download"):
        sgdata.tu_graphs(tmp_path, "MUTAG", download=False)


def test_preflight_refuses_an_attack_that_cannot_fit_in_memory(tmp_path):
    cfg = from_dict(
        Config, {"data_dir": str(tmp_path), "n_corpus": 200000, "n_queries": 40000, "corpus_nodes": [60, 64]}, "test"
    )
    with pytest.raises(UserError, match="attack_queries"):
        sgdata.preflight(cfg)


def test_bfs_sample_is_connected_and_induced():
    rng = np.random.default_rng(0)
    import networkx as nx

    from trainers.seagram.solver import to_nx

    g = nx.to_numpy_array(nx.grid_2d_graph(5, 5), dtype=np.uint8)
    for n in (3, 10, 25):
        s = sgdata.bfs_sample(g, n, rng)
        assert s.shape == (n, n) and nx.is_connected(to_nx(s))
    assert sgdata.bfs_sample(g, 26, rng) is None
    two = np.zeros((6, 6), dtype=np.uint8)
    two[0, 1] = two[1, 0] = two[3, 4] = two[4, 3] = 1
    assert sgdata.bfs_sample(two, 4, rng) is None  # components of 2 and 1 nodes
