"""Science at small scale (offline NCI data, CPU): the paper's claims, with bounds over seeds.

NeuroMatch-named victim (raylab's GIN order embedding) with IsoNet++'s weight decay and early
stopping, budget 2, 60 corpus graphs, 299 training labels per SEAGRAM arm, at the defaults
(threshold 0.8, select safest, al_pool picks, al_random_frac 0.5). Seeds: ``RAYLAB_SCIENCE_SEEDS``
(comma-separated, ranges such as ``36-47`` allowed), default 24-35. The active-learning findings
need 12 seeds or more: at 6 (seeds 0-5), one influential seed carried two orderings that 12
fresh seeds did not repeat.

Asserted, each as a bound over seeds: SEAGRAM keeps most relevance labels (mean 0.82, 95% t lower
end 0.78) and removes most of greedy's MAP drop (share's lower end 0.75) with at least 5x fewer
solver calls (none at attack time); and the one active-learning claim this scale supports,
"active learning does not beat passive labelling at equal labels": neither active arm's held-out
AUROC minus passive's has a 95% t upper end at ``ACTIVE_NOT_ABOVE`` or above. Controls: a
trained victim on every seed, the labels-kept instrument separates greedy (every flip checked)
from greedy_free, the AUROC instrument sees training (every arm above an untrained classifier of
the same initialisation, on the mean), equal solver calls, working attacks; and the claim check
fails on a difference known to be positive (passive against untrained). The orderings among the
arms are printed, not asserted.

The bounds were last set on seeds 12-23 (``ACTIVE_NOT_ABOVE`` and the share, below); the test is
reported on 24-35 and 36-47, which nobody had run when they were set. Each run's findings go to
``docs/science/seagram/`` with ``RAYLAB_SCIENCE_RECORD=docs/science``, and the workload pages'
findings table is made from them (``tests/science_findings.py``). Seeds 0-5 and a reviewer's
50-61 are quoted in ``docs/workloads/seagram.md``.

Time: 2-4 min a seed on an idle two-core machine (24 min for 12 seeds), up to 14 min at load 16-39.
"""

from pathlib import Path

import numpy as np
import pytest
from science_findings import Line, record

from raylab.config import from_dict
from raylab.testing import science_seeds
from raylab.testing.science_cache import per_seed
from trainers.seagram.al_metrics import calls_to_match, paired_interval
from trainers.seagram.config import Config
from trainers.seagram.data import load_or_generate, spec_from_config
from trainers.seagram.loop import compare_attacks

# the fixture: 660-870 s per seed at load 16-39 on 2 shared cores (2026-12-03, two seeds at once;
# 3 seeds of fewer arms took 308-346 s at load ~2): twelve seeds need up to about 3 hours here
pytestmark = [pytest.mark.long, pytest.mark.timeout(4 * 3600)]

SCIENCE = dict(
    source="nci",
    n_corpus=60,
    n_queries=40,
    victim="neuromatch",
    hidden=32,
    layers=3,
    victim_steps=400,
    queries_per_step=8,
    budget=2,
    top_k=16,
    threshold=0.8,
    select="safest",
    al_budget=300,
    al_init=75,
    al_rounds=4,
    al_candidates=1000,
    al_pool="picks",
    al_strategy="uncertainty",
    al_random_frac=0.5,
    clf_hidden=32,
    clf_layers=3,
    clf_batch=32,
    eval_candidates=1000,
    eval_recall=0.5,
)
SEEDS = tuple(science_seeds(range(24, 36)))
REPO = Path(__file__).resolve().parents[3]
SOURCES = [REPO / "trainers" / "seagram", REPO / "raylab"]
"""What computes a seed's result: a cached seed is recomputed when any of it changes."""
AL_ARMS = {
    "uncertainty": {"al_random_frac": 0.0},  # pure uncertainty sampling over the picks pool
    "passive": {"al_strategy": "passive"},  # classifier-free: uniform flips of uniform train pairs
    # the active arms at half the label budget: the budget axis of calls-to-match-passive at 300
    "mixed_150": {"al_budget": 150},
    "uncertainty_150": {"al_random_frac": 0.0, "al_budget": 150},
}
"""The active-learning arms beside the default (``seagram``: half of each round at random, half
by uncertainty, over the flips the current classifier's attack would take), at equal labels."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("science-data")
    out = []
    attacks = ("random", "greedy", "greedy_free", "seagram")

    def one_seed(seed):
        cfg = from_dict(Config, {**SCIENCE, "seed": seed}, "science test")
        data = load_or_generate(spec_from_config(cfg), cache, cache)
        return compare_attacks(cfg, data, attacks=attacks, al_arms=AL_ARMS, judge=True)

    # with RAYLAB_SCIENCE_CACHE set, each seed's result is kept as it finishes (a cut-short run resumes)
    for seed in SEEDS:
        out.append(per_seed("seagram", seed, (SCIENCE, AL_ARMS, attacks), SOURCES, lambda: one_seed(seed)))
    record("seagram", SEEDS, findings(out))
    return out


def values(runs, attack, metric):
    return np.array([r[attack][f"attack/{metric}"] for r in runs])


@pytest.mark.slow
def test_seagram_keeps_most_labels_and_random_flips_fewer(runs):
    seagram = values(runs, "seagram", "label_preserved")
    # measured 0.803 / 0.824 / 0.917 (mean 0.848): threshold 0.8 trades labels for damage
    _, kept_lo, _ = paired_interval(seagram)  # a bound over seeds, not the worst seed
    assert seagram.mean() >= 0.82 and kept_lo >= 0.78, seagram
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
        assert r["greedy_free"]["attack/map_drop"] >= r["greedy"]["attack/map_drop"] - 0.01
    # measured 0.336 / 0.391 / 0.375 against greedy's 0.410 / 0.412 / 0.377: shares 0.82 / 0.95 / 0.99
    share = values(runs, "seagram", "map_drop") / values(runs, "greedy", "map_drop")
    # a bound over seeds, not seed by seed (seeds 12-23: shares 0.747-0.998, one seed at 0.747)
    mean_share, share_lo, _ = paired_interval(share)
    print(f"\nSEAGRAM's share of greedy's MAP drop: {mean_share:.3f}, 95% t lower end {share_lo:.3f}; per seed {share}")
    assert share_lo >= 0.75 and values(runs, "seagram", "map_drop").mean() >= 0.3, share
    ratio = values(runs, "seagram", "map_drop").mean() / values(runs, "greedy", "map_drop").mean()
    assert ratio >= 0.85, ratio  # measured 0.92


@pytest.mark.slow
def test_seagram_needs_at_least_5x_fewer_solver_calls(runs):
    for r in runs:
        assert r["seagram"]["attack/solver_calls_test"] == 0
        seagram_calls = r["seagram_train"]["solver_calls"]
        assert 0 < seagram_calls <= SCIENCE["al_budget"]
        assert r["greedy"]["attack/solver_calls_test"] >= 5 * seagram_calls


ARM_KEYS = {"mixed (default)": "seagram", "uncertainty": "seagram_uncertainty", "passive": "seagram_passive"}
"""The three arms at 300 labels: mixed (half random, half uncertainty), pure uncertainty, passive."""
AT_150 = {"mixed (default)": "seagram_mixed_150", "uncertainty": "seagram_uncertainty_150"}
"""The active arms at 150 labels: the budget axis of calls-to-match-passive."""
PAIRS = [("mixed (default)", "passive"), ("uncertainty", "passive"), ("mixed (default)", "uncertainty")]
METRICS = ("auroc", "prec_at_recall", "kept", "true_drop")


def arm_values(r: dict, key: str) -> dict[str, float]:
    m = r[key]
    return {
        "auroc": m["clf/auroc"],
        "prec_at_recall": m["clf/precision_at_recall"],
        "recall_at_t": m["clf/recall_at_threshold"],
        "kept": m["attack/label_preserved"],
        "drop": m["attack/map_drop"],
        "true_drop": r["victim"]["map"] - m["attack/map_true_labels"],
    }


def al_table(runs) -> dict[str, dict[str, np.ndarray]]:
    """Per arm (300 labels), per-seed held-out AUROC, precision at recall 0.5, recall at the
    attack's threshold, labels kept, MAP drop under the original and the true labels, and the
    training solver calls."""
    out = {}
    for arm, key in ARM_KEYS.items():
        train = "seagram_train" + key[len("seagram") :]
        rows = [arm_values(r, key) for r in runs]
        out[arm] = {name: np.array([row[name] for row in rows]) for name in rows[0]}
        out[arm]["calls"] = np.array([r[train]["solver_calls"] for r in runs])
    return out


def al_statistics(runs) -> dict:
    """Paired differences between arms (mean, 95% bootstrap interval over seeds, seeds > 0) and
    calls-to-match-passive at 300 labels (per seed: the label budget at which an active arm's AUROC
    reaches passive's at 300, on the axis 150 / 300, divided by 300; inf: not reached)."""
    table = al_table(runs)
    stats = {"table": table, "diffs": {}, "match": {}}
    for a, b in PAIRS:
        for metric in METRICS:
            d = table[a][metric] - table[b][metric]
            stats["diffs"][a, b, metric] = (d, *paired_interval(d))
    for arm, key in AT_150.items():
        curve = [[r[key]["clf/auroc"], r[ARM_KEYS[arm]]["clf/auroc"]] for r in runs]
        target = table["passive"]["auroc"]
        stats["match"][arm] = np.array([calls_to_match([150, 300], c, t) / 300 for c, t in zip(curve, target)])
    return stats


def print_statistics(runs, stats) -> None:
    table = stats["table"]
    cols = ("calls", "auroc", "prec_at_recall", "recall_at_t", "kept", "drop", "true_drop")
    print(f"\n{'arm':16s} {'seed':>4s} " + " ".join(f"{c:>14s}" for c in cols))
    for arm, t in table.items():
        for i, seed in enumerate(SEEDS):
            print(f"{arm:16s} {seed:4d} " + " ".join(f"{float(t[c][i]):14.3f}" for c in cols))
        print(f"{arm:16s} mean " + " ".join(f"{float(np.mean(t[c])):14.3f}" for c in cols))
    for (a, b, metric), (d, mean, lo, hi) in stats["diffs"].items():
        print(f"{a} - {b}, {metric}: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}], {int((d > 0).sum())}/{len(d)} seeds > 0")
    for arm, ratio in stats["match"].items():
        print(f"calls-to-match-passive @300, {arm}: per seed {np.round(ratio, 2).tolist()}")
    untrained = [r["heldout"]["untrained"]["clf/auroc"] for r in runs if "heldout" in r]
    if untrained:
        print(f"untrained classifier AUROC per seed: {np.round(untrained, 3).tolist()}")


@pytest.mark.slow
def test_active_learning_arms_at_equal_label_budgets(runs):
    # positive control: the labels-kept instrument separates an attack that checks every flip
    # (greedy, 1.0) from the same attack with no check (greedy_free)
    assert (values(runs, "greedy", "label_preserved") - values(runs, "greedy_free", "label_preserved") >= 0.2).all()
    print(
        f"\n{'attack':12s} {'seed':>4s} {'clean':>6s} {'kept':>6s} {'drop':>6s} {'true drop':>9s} {'test calls':>10s}"
    )
    for attack in ("random", "greedy", "greedy_free", "seagram"):
        for i, r in enumerate(runs):
            m = r[attack]
            print(
                f"{attack:12s} {SEEDS[i]:4d} {r['victim']['map']:6.3f} {m['attack/label_preserved']:6.3f} "
                f"{m['attack/map_drop']:6.3f} {r['victim']['map'] - m['attack/map_true_labels']:9.3f} "
                f"{m['attack/solver_calls_test']:10d}"
            )
    stats = al_statistics(runs)
    print_statistics(runs, stats)
    table = stats["table"]
    # positive control of the AUROC instrument: it sees training. Every arm's classifier ranks the
    # held-out flips above chance on the mean (measured 0.644-0.797 per seed on seeds 0-5), and
    # above an untrained one of the same initialisation on the mean, the interval above 0 (measured
    # +0.20 to +0.26, lower ends +0.03 to +0.12). Not seed by seed: an untrained classifier's random
    # weights read the structural features in either direction (measured AUROC 0.27-0.72, mean 0.50).
    untrained = np.array([r["heldout"]["untrained"]["clf/auroc"] for r in runs])
    for arm, cols in table.items():
        mean, lo, _ = paired_interval(cols["auroc"] - untrained)
        _, chance_lo, _ = paired_interval(cols["auroc"] - 0.5)
        assert chance_lo > 0 and mean >= 0.15 and lo > 0, (arm, cols["auroc"], untrained)
    for cols in table.values():  # equal label budgets: every arm spends the same solver calls
        assert (cols["calls"] == table["passive"]["calls"]).all() and (cols["calls"] <= SCIENCE["al_budget"]).all()
        assert cols["true_drop"].mean() >= 0.2  # every arm's classifier makes a working attack
    assert not check_findings(stats), check_findings(stats)


ACTIVE_NOT_ABOVE = 0.10
"""The claim's bound: an active arm's held-out AUROC minus passive's, 95% t upper end below it.

It was 0.05 until seeds 12-23, where mixed - passive came out +0.021 [-0.038, +0.080]: the
difference changes sign between 12-seed sets (-0.015 [-0.050, +0.022] on 50-61), so 0.05 was
narrower than the seed-to-seed spread of a 12-seed mean. 0.10 was set after seeing 12-23; the
test is reported on 24-35 and 36-47, which nobody had run then."""


def not_above_failures(diffs: dict[str, np.ndarray]) -> list[str]:
    """The claim check on per-seed AUROC differences ``{name: arm - passive}``: each 95% t interval
    over seeds ends below ``ACTIVE_NOT_ABOVE``. Returns what failed."""
    failures = []
    for name, d in diffs.items():
        mean, _, hi = paired_interval(d)
        if not hi < ACTIVE_NOT_ABOVE:
            failures.append(f"{name} AUROC {mean:+.3f}, 95% t upper end {hi:+.3f} >= {ACTIVE_NOT_ABOVE}")
    return failures


def check_findings(stats) -> list[str]:
    """The one claim asserted ("active learning does not beat passive labelling here"): for each
    active arm, the 95% t interval over seeds of its held-out AUROC minus passive's ends below
    ``ACTIVE_NOT_ABOVE``. Measured: mixed - passive -0.010 [-0.049, +0.023] (seeds 0-5,
    bootstrap) and -0.015 [-0.050, +0.022] (50-61); pure uncertainty - passive -0.055 [-0.095,
    -0.017] (0-5) and -0.023 [-0.070, +0.010] (50-61). The orderings are printed only."""
    return not_above_failures(
        {f"{arm} - passive": stats["diffs"][arm, "passive", "auroc"][0] for arm in ("mixed (default)", "uncertainty")}
    )


@pytest.mark.slow
def test_the_claim_check_fails_where_one_arm_is_known_better(runs):
    """Control case: the same check, on a difference known to be positive (a trained passive
    classifier against the untrained one of the same initialisation, measured +0.20 to +0.26 on
    the mean), must report it."""
    table = al_table(runs)
    untrained = np.array([r["heldout"]["untrained"]["clf/auroc"] for r in runs])
    failures = not_above_failures({"passive - untrained": table["passive"]["auroc"] - untrained})
    print("failures reported:", failures)
    assert failures


def level(name: str, v, bound: str = "", holds: bool | None = None) -> Line:
    mean, low, high = paired_interval(v)
    return Line(name, tuple(np.asarray(v, dtype=float)), mean, low, high, bound, holds, level=True)


def difference(name: str, d, bound: str = "", holds: bool | None = None) -> Line:
    return Line(name, tuple(np.asarray(d, dtype=float)), *paired_interval(d), bound, holds)


def findings(runs) -> list[Line]:
    """What the tests assert and print, as the lines of the workload pages' findings table."""
    kept = values(runs, "seagram", "label_preserved")
    _, kept_lo, _ = paired_interval(kept)
    share = values(runs, "seagram", "map_drop") / values(runs, "greedy", "map_drop")
    _, share_lo, _ = paired_interval(share)
    calls = np.array([r["greedy"]["attack/solver_calls_test"] / r["seagram_train"]["solver_calls"] for r in runs])
    stats = al_statistics(runs)
    untrained = np.array([r["heldout"]["untrained"]["clf/auroc"] for r in runs])
    control = stats["table"]["passive"]["auroc"] - untrained
    auroc = {arm: stats["diffs"][arm, "passive", "auroc"][0] for arm in ("mixed (default)", "uncertainty")}
    return [
        level(
            "victim: clean MAP (control)",
            [r["victim"]["map"] for r in runs],
            "0.45 or more, every seed",
            all(r["victim"]["map"] >= 0.45 for r in runs),
        ),
        level(
            "SEAGRAM: labels kept",
            kept,
            "mean 0.82 or more, 95% t lower end 0.78 or more",
            kept.mean() >= 0.82 and kept_lo >= 0.78,
        ),
        level("SEAGRAM: share of greedy's MAP drop", share, "95% t lower end 0.75 or more", share_lo >= 0.75),
        level(
            "greedy's solver calls at attack time / SEAGRAM's in training",
            calls,
            "5 or more, every seed",
            bool((calls >= 5).all()),
        ),
        *(
            difference(
                f"{arm} - passive: held-out AUROC at equal labels",
                d,
                f"95% t upper end below {ACTIVE_NOT_ABOVE}",
                not not_above_failures({arm: d}),
            )
            for arm, d in auroc.items()
        ),
        difference("mixed - uncertainty: held-out AUROC", stats["diffs"]["mixed (default)", "uncertainty", "auroc"][0]),
        difference("mixed - passive: labels kept", stats["diffs"]["mixed (default)", "passive", "kept"][0]),
        difference(
            "passive - untrained: held-out AUROC (the claim check's control)",
            control,
            "the claim check fails on it",
            bool(not_above_failures({"control": control})),
        ),
    ]
