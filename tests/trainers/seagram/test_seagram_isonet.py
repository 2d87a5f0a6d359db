"""The released IsoNet splits (safe loading, checksums, errors), IsoNet's query filter, and the
IsoNet++ victims' pieces: GMN messages, Sinkhorn, IsoNet edge slots, early stopping."""

import os
import pickle

import networkx as nx
import numpy as np
import pytest
import torch

from raylab.config import from_dict
from raylab.errors import UserError
from trainers.seagram import isonet_data
from trainers.seagram.config import Config
from trainers.seagram.data import load_data, positives_range, preflight
from trainers.seagram.gmn import GMN, IsoNetEdge, Propagation, edge_slots, sinkhorn_iters
from trainers.seagram.loop import EarlyStopping, fit_threshold
from trainers.seagram.model import dense_batch


def _graphs(rng, count, lo, hi):
    out = []
    while len(out) < count:
        g = nx.gnp_random_graph(int(rng.integers(lo, hi + 1)), 0.3, seed=int(rng.integers(1 << 30)))
        if nx.is_connected(g):
            out.append(nx.to_numpy_array(g, dtype=np.uint8))
    return out


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Synthetic files in the released layout and format (12 corpus graphs, 4/2/3 queries)."""
    root = tmp_path_factory.mktemp("isonet")
    rng = np.random.default_rng(0)
    corpus = _graphs(rng, 12, 8, 10)
    queries = {s: _graphs(rng, n, 4, 6) for s, n in (("train", 4), ("val", 2), ("test", 3))}
    labels = {s: rng.integers(0, 2, size=(len(q), 12)).astype(np.int8) for s, q in queries.items()}
    isonet_data.write_released(root, "mutag", corpus, queries, labels)
    return root, corpus, queries, labels


def test_released_layout_loads_as_written(released):
    root, corpus, queries, labels = released
    cfg = from_dict(Config, {"dataset": "mutag", "data_dir": str(root), "verify_checksums": False}, "t")
    preflight(cfg)
    data = load_data(cfg)
    assert len(data.corpus) == 12 and all(np.array_equal(a, b) for a, b in zip(data.corpus, corpus))
    order = queries["train"] + queries["val"] + queries["test"]
    assert all(np.array_equal(a, b) for a, b in zip(data.queries, order))
    assert np.array_equal(data.labels, np.concatenate([labels[s] for s in ("train", "val", "test")]))
    assert [data.splits[s].tolist() for s in ("train", "val", "test")] == [[0, 1, 2, 3], [4, 5], [6, 7, 8]]
    assert data.stats["solver"]["calls"] == 9 * 12  # every released pair was labelled once
    assert set(data.stats["source_sha256"]) == set(isonet_data.released_paths("mutag").values())


def test_checksums_missing_files_and_unknown_names_are_clear_errors(released, tmp_path):
    root = released[0]
    cfg = from_dict(Config, {"dataset": "mutag", "data_dir": str(root)}, "t")
    with pytest.raises(UserError, match="SHA-256 .* is not the released file's"):
        load_data(cfg)  # synthetic files are not the released ones
    missing = from_dict(Config, {"dataset": "aids", "data_dir": str(tmp_path)}, "t")
    with pytest.raises(
        UserError,
        match=r"IsoNet dataset aids not found: no .*aids240k_corpus_subgraphs"
        r".*structlearning/isonetpp",
    ):
        preflight(missing)
    with pytest.raises(UserError, match="dataset"):
        from_dict(Config, {"dataset": "cora"}, "t")
    assert len(isonet_data.RELEASED_SHA256) == 42  # 6 datasets x (corpus + 3 splits x 2 files)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch should-not-exist",))


def test_unpickler_admits_only_graph_containers(tmp_path):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps([_Evil()]))
    with pytest.raises(UserError, match="not allowed"):
        isonet_data.safe_load(path)
    assert not (tmp_path / "should-not-exist").exists() and not os.path.exists("should-not-exist")
    g = nx.cycle_graph(4)
    path.write_bytes(pickle.dumps([g]))
    (state,) = isonet_data.safe_load(path)
    assert not isinstance(state, nx.Graph)  # a record of the state, no networkx code ran
    assert np.array_equal(isonet_data.graph_adjacency(state, path), nx.to_numpy_array(g, dtype=np.uint8))


def test_isonet_filter_is_a_ratio_of_relevant_to_irrelevant():
    # the released data: 73 relevant of 800 (73/727 >= 0.1) kept, 72 (72/728) not
    assert positives_range((0.1, 0.4), 800) == (73, 228)
    lo, hi = positives_range((0.1, 0.4), 800)
    assert 72 / 728 < 0.1 <= lo / (800 - lo) and hi / (800 - hi) <= 0.4 < (hi + 1) / (799 - hi)


def test_gmn_messages_equal_the_edge_list_form():
    torch.manual_seed(0)
    prop = Propagation(4)
    adj = torch.from_numpy(nx.to_numpy_array(nx.petersen_graph(), dtype=np.float32))[None]
    h = torch.randn(1, 10, 4)
    dense = prop.messages(h, adj)[0]
    # IsoNet++: each undirected edge once; forward net into `to`, the same net reversed into `from`
    expected = torch.zeros(10, 8)
    ones = torch.ones(1)
    for u, v in nx.petersen_graph().edges():
        expected[v] += prop.message(torch.cat([h[0, u], h[0, v], ones]))
        expected[u] += prop.message(torch.cat([h[0, v], h[0, u], ones]))
    assert torch.allclose(dense, expected, atol=1e-5)


def test_sinkhorn_is_doubly_stochastic_after_20_iterations():
    plan = sinkhorn_iters(0.1 * torch.randn(3, 6, 6, generator=torch.Generator().manual_seed(1)))
    assert torch.allclose(plan.sum(-1), torch.ones(3, 6), atol=1e-3)
    assert torch.allclose(plan.sum(-2), torch.ones(3, 6), atol=1e-5)


def test_isonet_edge_slots_and_score():
    adj = torch.from_numpy(nx.to_numpy_array(nx.cycle_graph(5), dtype=np.float32))[None]
    u, v, present, weight = edge_slots(adj, 7)
    assert int(present.sum()) == 5 and torch.equal(weight, present.float())
    assert all(adj[0, a, b] == 1 for a, b, p in zip(u[0], v[0], present[0]) if p)
    with pytest.raises(ValueError, match="max_edges=4"):
        edge_slots(adj, 4)
    torch.manual_seed(0)
    model = IsoNetEdge(dim=6, steps=3, max_edges=12).eval()
    q = nx.to_numpy_array(nx.path_graph(4), dtype=np.uint8)
    c = nx.to_numpy_array(nx.cycle_graph(8), dtype=np.uint8)
    with torch.no_grad():
        s = model(*dense_batch([q, c]), *dense_batch([c, c]))
    assert s.shape == (2,) and (s <= 0).all()
    gmn = GMN(dim=6, steps=3).eval()
    assert gmn(*dense_batch([q]), *dense_batch([c])).item() <= 0  # L1 order score


def test_early_stopping_keeps_and_restores_the_best_model():
    model = torch.nn.Linear(1, 1)
    stop = EarlyStopping(patience=2, tolerance=1e-4)
    for step, value in enumerate([0.3, 0.5, 0.50005, 0.4, 0.45], start=1):
        with torch.no_grad():
            model.weight.fill_(step)
        stop.check(value, step, model)
    assert stop.best_step == 2 and stop.bad == 3 and stop.stop
    stop.restore(model)
    assert model.weight.item() == 2


def test_fit_threshold_maximizes_accuracy():
    rng = np.random.default_rng(0)
    scores = torch.from_numpy(rng.normal(size=200))
    labels = (scores.numpy() + rng.normal(scale=0.7, size=200) > 0.5).astype(np.int8)
    t = fit_threshold(scores, labels)
    acc = ((scores.numpy() >= t) == labels).mean()
    best = max(((scores.numpy() >= c) == labels).mean() for c in np.append(scores.numpy(), np.inf))
    assert acc == pytest.approx(best)
