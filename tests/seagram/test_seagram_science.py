"""Science at small scale (offline NCI data, CPU): the paper's claims, with margins over seeds.

Measured here (seeds 0 / 1 / 2, NeuroMatch victim with IsoNet++'s weight decay and early
stopping, budget 2, 10 test queries x 60 corpus graphs, 299 training labels per SEAGRAM arm):

- clean test MAP 0.53 / 0.53 / 0.49;
- labels kept: SEAGRAM (uncertainty sampling, the default) 0.87 / 0.87 / 0.93, SEAGRAM with
  random sampling at the same 299 labels 0.87 / 0.95 / 0.93, random flips 0.79 / 0.75 / 0.77,
  unconstrained greedy 0.67 / 0.67 / 0.70, greedy 1.0 (checked);
- MAP drop: greedy 0.41 / 0.41 / 0.38 = unconstrained greedy; SEAGRAM 0.27 / 0.37 / 0.37
  (0.67 / 0.91 / 0.99 of greedy's), with random sampling 0.36 / 0.37 / 0.35;
- solver calls: SEAGRAM 299 (all in training) against greedy's 2182-2489 at attack time.

So SEAGRAM keeps most labels at most of greedy's damage for far fewer solver calls, but the
"at least 90% of labels" claim does not hold on every seed, and uncertainty sampling does not
beat random sampling at equal label budgets here: the assertions below say so.
"""

import numpy as np
import pytest

from raylab.config import from_dict
from trainers.seagram.config import Config
from trainers.seagram.data import load_or_generate, spec_from_config
from trainers.seagram.loop import compare_attacks

SCIENCE = dict(
    source="nci", n_corpus=60, n_queries=40, victim="neuromatch", hidden=32, layers=3,
    victim_steps=400, queries_per_step=8, budget=2, top_k=16, threshold=0.9, select="safest",
    al_budget=300, al_init=75, al_rounds=4, al_candidates=1000, al_pool="picks",
    al_strategy="uncertainty", al_random_frac=0.5, clf_hidden=32, clf_layers=3, clf_batch=32,
)
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("science-data")
    out = []
    for seed in SEEDS:
        cfg = from_dict(Config, {**SCIENCE, "seed": seed}, "science test")
        data = load_or_generate(spec_from_config(cfg), cache, cache)
        out.append(compare_attacks(cfg, data, attacks=("random", "greedy", "greedy_free", "seagram"),
                                   al_strategies=("random",)))
    return out


def values(runs, attack, metric):
    return np.array([r[attack][f"attack/{metric}"] for r in runs])


@pytest.mark.slow
def test_seagram_keeps_most_labels_and_random_flips_fewer(runs):
    seagram = values(runs, "seagram", "label_preserved")
    assert seagram.mean() >= 0.85 and seagram.min() >= 0.80, seagram  # not >= 0.9 on every seed
    assert values(runs, "greedy", "label_preserved").min() == 1.0  # checked flip by flip
    assert values(runs, "random", "label_preserved").mean() <= seagram.mean() - 0.05
    free = values(runs, "greedy_free", "label_preserved")
    assert free.max() <= 0.8, free  # the unconstrained attack breaks labels ...
    # ... so its MAP under the original labels overstates what it did
    assert (values(runs, "greedy_free", "map_true_labels") > values(runs, "greedy_free", "map")).all()


@pytest.mark.slow
def test_seagram_lowers_map_most_of_the_way_to_greedy(runs):
    for r in runs:
        assert r["victim"]["map"] >= 0.45  # a trained victim (random ranking: about 0.2)
        assert r["seagram"]["attack/map_drop"] >= 0.2
        assert r["seagram"]["attack/map_drop"] >= 0.6 * r["greedy"]["attack/map_drop"]
        assert r["greedy_free"]["attack/map_drop"] >= r["greedy"]["attack/map_drop"] - 0.01
    ratio = values(runs, "seagram", "map_drop").mean() / values(runs, "greedy", "map_drop").mean()
    assert ratio >= 0.75, ratio


@pytest.mark.slow
def test_seagram_needs_at_least_5x_fewer_solver_calls(runs):
    for r in runs:
        assert r["seagram"]["attack/solver_calls_test"] == 0
        seagram_calls = r["seagram_train"]["solver_calls"]
        assert 0 < seagram_calls <= SCIENCE["al_budget"]
        assert r["greedy"]["attack/solver_calls_test"] >= 5 * seagram_calls


@pytest.mark.slow
def test_uncertainty_sampling_does_not_beat_random_sampling_at_equal_labels(runs):
    for r in runs:  # the passive arm spends exactly the same solver calls
        assert r["seagram_train_random"]["solver_calls"] == r["seagram_train"]["solver_calls"]
    uncertainty = values(runs, "seagram", "label_preserved")
    passive = values(runs, "seagram_random", "label_preserved")
    assert uncertainty.mean() <= passive.mean() + 0.02, (uncertainty, passive)
    drop_u, drop_r = values(runs, "seagram", "map_drop"), values(runs, "seagram_random", "map_drop")
    assert drop_u.mean() <= drop_r.mean() + 0.03, (drop_u, drop_r)
