"""``TrainPairs``: the victim's training batches gathered on the device from graphs padded once
are exactly the batches the host collation (``loop.victim_batch``) builds, from the same random
stream, so training is unchanged and the step no longer waits on the collation."""

from __future__ import annotations

import numpy as np
import torch

from trainers.seagram.batches import TrainPairs
from trainers.seagram.config import Config
from trainers.seagram.data import RetrievalData
from trainers.seagram.loop import victim_batch


def random_graph(rng: np.random.Generator, n: int) -> np.ndarray:
    upper = np.triu(rng.random((n, n)) < 0.4, 1)
    return (upper | upper.T).astype(np.float32)


def small_data() -> RetrievalData:
    rng = np.random.default_rng(0)
    corpus = [random_graph(rng, int(n)) for n in rng.integers(5, 9, size=30)]
    queries = [random_graph(rng, int(n)) for n in rng.integers(3, 6, size=12)]
    labels = (rng.random((12, 30)) < 0.3).astype(np.int8)
    labels[:, 0], labels[:, 1] = 1, 0  # every query has relevant and irrelevant graphs
    splits = {"train": np.arange(8), "val": np.arange(8, 10), "test": np.arange(10, 12)}
    return RetrievalData(corpus, queries, labels, splits, stats={}, spec=None)


def test_device_gather_equals_host_collation():
    data = small_data()
    cfg = Config(queries_per_step=3, pos_per_query=2, neg_per_query=4, query_nodes=(3, 6), corpus_nodes=(5, 9))
    feed = TrainPairs.of(data, cfg)
    host, device = np.random.default_rng(7), np.random.default_rng(7)
    for _ in range(5):
        expected = victim_batch(data, cfg, host, cfg.query_nodes[1], cfg.corpus_nodes[1])
        got = feed.sample(device)
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    assert host.bit_generator.state == device.bit_generator.state  # the same draws, in order
