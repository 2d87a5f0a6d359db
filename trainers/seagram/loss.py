"""Training loss and retrieval metric of the victim models: ranking hinge loss, AP and MAP."""

from __future__ import annotations

import torch


def ranking_hinge_loss(scores: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """Pairwise ranking hinge loss of graph retrieval (as in IsoNet and GMN):

        L = (1 / |P|) sum_q sum_{c+ in pos(q)} sum_{c- in neg(q)} [margin + s(q, c-) - s(q, c+)]_+

    where ``P`` is the set of all (q, c+, c-) triples. ``scores`` and ``labels`` are
    ``[Q, C]``: each query's scores for C corpus graphs and their 0/1 relevance. Queries without
    a positive or without a negative contribute no triple. Returns a scalar (0 when no triple:
    the masked sum is 0, divided by ``max(|P|, 1)`` without reading ``|P|`` on the host).
    """
    pos = labels.bool()
    pair_mask = pos[:, :, None] & ~pos[:, None, :]  # [Q, C+, C-]
    hinge = torch.relu(margin + scores[:, None, :] - scores[:, :, None])
    return (hinge * pair_mask).sum() / pair_mask.sum().clamp(min=1)


def average_precision(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Average precision of one ranking (higher score ranks first):

        AP = sum_t (R_t - R_{t-1}) P_t

    over the distinct score thresholds t in decreasing order, with P_t and R_t the precision and
    recall of everything scored >= t. Tied scores form one threshold (the convention of
    scikit-learn's ``average_precision_score``), so a tie between a positive and a negative
    never earns credit from the order the items happen to be listed in. Without positives the
    AP is undefined: NaN.
    """
    scores = scores.detach().double().flatten()
    labels = labels.detach().double().flatten()
    n_pos = labels.sum()
    if n_pos == 0:
        return float("nan")
    order = torch.argsort(scores, descending=True, stable=True)
    s, y = scores[order], labels[order]
    tp = torch.cumsum(y, 0)
    seen = torch.arange(1, len(y) + 1, dtype=torch.float64)
    last_of_tie = torch.ones_like(s, dtype=torch.bool)
    last_of_tie[:-1] = s[1:] != s[:-1]
    tp, seen = tp[last_of_tie], seen[last_of_tie]
    precision = tp / seen
    recall = tp / n_pos
    d_recall = torch.diff(recall, prepend=torch.zeros(1, dtype=torch.float64))
    return float((d_recall * precision).sum())


def mean_average_precision(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """MAP = mean over queries (rows of ``[Q, C]``) of their AP over the corpus (columns).

    Queries without a positive are left out of the mean (the data protocol keeps none).
    """
    aps = [average_precision(s, y) for s, y in zip(scores, labels)]
    aps = [a for a in aps if a == a]
    return float(sum(aps) / len(aps)) if aps else float("nan")
