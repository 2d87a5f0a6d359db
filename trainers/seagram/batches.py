"""The victim's training pairs, padded once on the training device and gathered there per step.

``loop.victim_batch`` draws a step's pairs (``queries_per_step`` train queries, each with
``pos_per_query`` relevant and ``neg_per_query`` irrelevant corpus graphs) and pads every
pair's two adjacency matrices on the host (``model.dense_batch``), then the step copies them to
the device: the training step waits on that collation. ``TrainPairs`` pads every query and
corpus graph once (``[n, N, N]`` adjacency and ``[n, N]`` masks, on ``device``) and keeps the
labels there; a step draws the same indices with the same random calls on the host (a few
hundred integers) and gathers its batch on the device: the same tensors ``victim_batch``
returns (tested), so training is unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

from raylab.accel import to_device
from trainers.seagram.model import dense_batch


class TrainPairs:
    """Every query and corpus graph of ``data`` padded once on ``device``, and the train split's
    relevant / irrelevant corpus graphs per query (``np.flatnonzero`` of its label row)."""

    def __init__(
        self,
        data,
        queries_per_step: int,
        pos_per_query: int,
        neg_per_query: int,
        n_query: int,
        n_corpus: int,
        device: torch.device | str = "cpu",
    ):
        self.train = data.splits["train"]
        self.sizes = (queries_per_step, pos_per_query, neg_per_query)
        self.pos = {q: np.flatnonzero(data.labels[q] == 1) for q in self.train.tolist()}
        self.neg = {q: np.flatnonzero(data.labels[q] == 0) for q in self.train.tolist()}
        self.device = torch.device(device)
        qa, qm = dense_batch(data.queries, n_query)
        ca, cm = dense_batch(data.corpus, n_corpus)
        labels = torch.from_numpy(data.labels.astype(np.int64))
        self.query_adj, self.query_mask, self.corpus_adj, self.corpus_mask, self.labels = (
            t.to(self.device)
            for t in (qa, qm, ca, cm, labels)  # copied once: not pinned (locked memory)
        )

    @classmethod
    def of(cls, data, cfg, device: torch.device | str = "cpu") -> "TrainPairs":
        """For a seagram ``Config``: its batch sizes and padded graph sizes."""
        return cls(
            data,
            cfg.queries_per_step,
            cfg.pos_per_query,
            cfg.neg_per_query,
            cfg.query_nodes[1],
            cfg.corpus_nodes[1],
            device,
        )

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One step's ``(query index, corpus index)`` per pair, drawn by exactly the calls of
        ``loop.victim_batch`` (the same random stream gives the same pairs)."""
        n_queries, n_pos, n_neg = self.sizes
        queries = rng.choice(self.train, size=n_queries)
        q_rows, c_rows = [], []
        for q in queries.tolist():
            picks = np.concatenate([rng.choice(self.pos[q], size=n_pos), rng.choice(self.neg[q], size=n_neg)])
            q_rows.append(np.full(len(picks), q))
            c_rows.append(picks)
        return np.concatenate(q_rows), np.concatenate(c_rows)

    def sample(self, rng: np.random.Generator):
        """``(query adj, query mask, corpus adj, corpus mask, labels [queries, pairs each])`` of
        one step, gathered on the device (one copy of the indices)."""
        q, c = self.draw(rng)
        index = to_device(torch.from_numpy(np.stack([q, c]).astype(np.int64)), self.device)
        qi, ci = index[0], index[1]
        labels = self.labels[qi, ci].view(self.sizes[0], -1)
        return self.query_adj[qi], self.query_mask[qi], self.corpus_adj[ci], self.corpus_mask[ci], labels
