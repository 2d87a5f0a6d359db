"""The attacks' mechanics: budgets, label checks, solver accounting, certified labels."""

import numpy as np
import pytest
import torch

from trainers.seagram import attack as atk
from trainers.seagram import data as sgdata
from trainers.seagram.model import build_victim
from trainers.seagram.solver import SubgraphSolver

SPEC = sgdata.DataSpec(source="nci", n_corpus=16, n_queries=6, nci_max_molecules=600, seed=11)


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    data = sgdata.load_or_generate(SPEC, cache, cache)
    torch.manual_seed(0)
    victim = build_victim("neuromatch", 16, 2).eval()
    for p in victim.parameters():
        p.requires_grad_(False)
    return data, victim


def pairs(data, queries):
    return atk.PairBatch.build(
        [data.queries[q] for q in queries for _ in data.corpus],
        [c for _ in queries for c in data.corpus],
        data.labels[queries].reshape(-1),
        15,
        20,
    )


def test_random_attack_makes_exactly_budget_distinct_flips(setting):
    data, _ = setting
    batch = pairs(data, [0, 1])
    before = batch.c_adj.clone()
    out = atk.random_attack(batch, 3, np.random.default_rng(0))
    changed = (batch.c_adj != before).sum((1, 2)) // 2
    assert out.flips.tolist() == [3] * len(batch) and changed.tolist() == [3] * len(batch)
    assert torch.equal(batch.c_adj, batch.c_adj.transpose(1, 2))
    assert out.solver_calls == 0


def test_greedy_preserves_every_label_and_counts_its_calls(setting):
    data, victim = setting
    batch = pairs(data, [0, 1, 2])
    clean = atk.pair_scores(victim, batch)
    before = batch.c_adj.clone()
    solver = SubgraphSolver()
    out = atk.greedy_attack(victim, batch, 2, solver, top_k=6)
    assert out.solver_calls == solver.stats.calls >= int(out.flips.sum())
    assert out.flips.max() <= 2 and out.flips.sum() > 0
    changed = (batch.c_adj != before).sum((1, 2)) // 2
    assert torch.equal(changed, out.flips)
    after = atk.label_check(batch, out.flips, SubgraphSolver())
    assert torch.equal(after, batch.y)  # every label kept
    # the attack moved scores the attacker's way on every perturbed pair
    moved = atk.flip_gain(clean, atk.pair_scores(victim, batch), batch.y)
    assert (moved[out.flips > 0] > 0).all()


def test_seagram_uses_no_solver_and_respects_the_threshold(setting, monkeypatch):
    data, victim = setting
    torch.manual_seed(0)
    clf = atk.CriticalityClassifier(16, 2, members=2).eval()

    def forbidden(*args, **kwargs):
        raise AssertionError("SEAGRAM called the solver at attack time")

    monkeypatch.setattr(SubgraphSolver, "solve", forbidden)
    batch = pairs(data, [0, 1])
    out = atk.seagram_attack(victim, clf, batch, 2, threshold=1e-6, top_k=6)
    assert out.solver_calls == 0 and out.flips.sum() > 0
    batch = pairs(data, [0, 1])
    none = atk.seagram_attack(victim, clf, batch, 2, threshold=1 - 1e-7, top_k=6)
    probs = atk.noncritical_prob(
        clf,
        batch,
        *atk.candidates(
            batch, torch.ones(len(batch), dtype=torch.bool), torch.zeros_like(batch.c_adj, dtype=torch.bool)
        ),
    )
    assert none.flips.sum() == 0 or probs.max() >= 1 - 1e-7


def test_seagram_selection_rules(setting):
    data, victim = setting
    torch.manual_seed(1)
    clf = atk.CriticalityClassifier(16, 2).eval()
    batch = pairs(data, [0])
    done = torch.zeros_like(batch.c_adj, dtype=torch.bool)
    active = torch.ones(len(batch), dtype=torch.bool)
    p, u, v, gain = atk.scored_candidates(victim, batch, active, done, top_k=6)
    prob = atk.noncritical_prob(clf, batch, p, u, v)
    out = atk.seagram_attack(victim, clf, pairs(data, [0]), 1, threshold=0.0 + 1e-9, top_k=6, select="safest")
    for i in torch.nonzero(out.flips).flatten().tolist():
        rows = torch.nonzero((p == i) & (gain > 0)).flatten()
        best = rows[torch.argmax(prob[rows])]
        attacked = pairs(data, [0])
        atk.seagram_attack(victim, clf, attacked, 1, 1e-9, top_k=6, select="safest")
        assert attacked.c_adj[i, u[best], v[best]] != batch.c_adj[i, u[best], v[best]]
        break


def test_witness_labels_are_truly_noncritical(setting):
    data, victim = setting
    train = data.splits["train"]
    pool = atk.FlipPool([data.queries[q] for q in train], data.corpus, data.labels[train], 0.9)
    rng = np.random.default_rng(0)
    queried = pool.sample(rng, 40)
    solver = SubgraphSolver()
    rows, targets, calls = pool.label(queried, solver, witness_labels=5, rng=rng)
    assert calls == 40 == solver.stats.calls
    assert len(rows) > 40 and (targets[40:] == 1).all()
    check = SubgraphSolver()
    for q, c, u, v in rows[40:].tolist():
        verdict = check(pool.queries[q], atk.flipped(pool.corpus[c], u, v))
        assert int(verdict) == pool.labels[q, c] == 1
    for (q, c, u, v), t in zip(queried.tolist(), targets[:40].tolist()):
        assert t == int(int(check(pool.queries[q], atk.flipped(pool.corpus[c], u, v))) == pool.labels[q, c])


def test_pool_samples_are_valid_flips(setting):
    data, victim = setting
    train = data.splits["train"]
    pool = atk.FlipPool([data.queries[q] for q in train], data.corpus, data.labels[train], 0.5)
    rng = np.random.default_rng(0)
    for rows in (pool.sample(rng, 200), pool.sample_attack(rng, 60, victim, 12, 6, 15, 20)):
        sizes = np.array([data.corpus[c].shape[0] for c in rows[:, 1]])
        assert (rows[:, 2] < rows[:, 3]).all() and (rows[:, 3] < sizes).all()
    pos = pool.labels[rows[:, 0], rows[:, 1]]
    assert 0 < pos.mean() < 1


def test_classifier_fits_its_labels(setting):
    data, _ = setting
    train = data.splits["train"]
    pool = atk.FlipPool([data.queries[q] for q in train], data.corpus, data.labels[train], 0.5)
    rows = pool.sample(np.random.default_rng(0), 64)
    rows, targets, _ = pool.label(rows, SubgraphSolver())
    torch.manual_seed(0)
    clf = atk.CriticalityClassifier(16, 2)
    opt = torch.optim.Adam(clf.parameters(), 3e-3)
    batch = pool.batch(rows, 15, 20)
    args = (
        clf,
        opt,
        batch,
        torch.from_numpy(rows[:, 2]),
        torch.from_numpy(rows[:, 3]),
        torch.from_numpy(targets),
        1,
        16,
        torch.Generator().manual_seed(0),
    )
    first = atk.train_classifier(*args)
    for _ in range(40):
        last = atk.train_classifier(*args)
    assert last < 0.6 * first
