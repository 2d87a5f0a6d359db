"""Solver cost against damage: SEAGRAM's and the solver-checked greedy attack's trade-off curves.

One process, one dataset, one trained victim (early stopping on validation MAP). Both attacks
hit the same (test query, corpus graph) pairs with the same flip budget, and each point of a
curve is one setting of a grid fixed here in advance (never chosen on the test pairs):

- greedy: ``greedy_max_checks`` in 1, 2, 4, 8 and unbounded (0; the reference point), solver
  calls all at attack time;
- SEAGRAM: ``al_budget`` (its training solver calls, no call at attack time) in the
  ``--al-budgets`` grid, threshold and everything else at the defaults;
- references: greedy_free (the largest-gain flips with no label check) and, at the largest
  al_budget, SEAGRAM conditioned on the victim's predicted labels (no test label used).

Damage is judged under the true labels after the attack, ``victim/map - attack/map_true_labels``
(a flip that breaks a pair's label earns nothing); the drop under the original labels is printed
beside it. Printed for each seed (``--seeds``: victim, sampling and classifier; the data fixed):
each point's solver calls (training and attack), true-label MAP drop, original-label drop and
labels kept; then the mean curve over seeds, how many seeds meet the target at each SEAGRAM
point, and the verdict on the mean curve: whether some SEAGRAM point spends at least 5x fewer
solver calls than the reference greedy at a true-label MAP drop of at least 0.8x greedy's. Both
attacks also use the test pairs' true labels, one solver call each at data generation (the same
for both: left out of the ratio). Throughput: graph pairs per second of victim training and
scoring.

    python benchmarks/seagram_cost.py [--victim gmn] [--budget 2] [--corpus 100] [--queries 60]
                                      [--al-budgets 75,150,300,600] [--seeds 0,1,2]
                                      [--dataset aids --attack-queries 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from raylab.config import from_dict
from trainers.seagram import attack as atk
from trainers.seagram.config import Config
from trainers.seagram.data import load_data
from trainers.seagram.loop import attacked_queries, run_attack, train_seagram, trained_victim

CALL_RATIO = 5.0
DROP_RATIO = 0.8
GREEDY_CHECKS = (1, 2, 4, 8, 0)


def scoring_rate(victim, cfg: Config, data, seconds: float = 3.0) -> float:
    """Graph pairs per second of victim scoring (no gradient) in chunks of 4096 pairs."""
    queries = attacked_queries(cfg, data)
    batch = atk.PairBatch.build(
        [data.queries[q] for q in queries for _ in data.corpus],
        [c for _ in queries for c in data.corpus],
        data.labels[queries].reshape(-1),
        cfg.query_nodes[1],
        cfg.corpus_nodes[1],
    )
    atk.pair_scores(victim, batch)  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        atk.pair_scores(victim, batch)
        done += len(batch)
    return done / (time.perf_counter() - started)


def meets(seagram_calls: int, seagram_drop: float, greedy_calls: int, greedy_drop: float) -> bool:
    """The target: ``CALL_RATIO`` x fewer solver calls at ``DROP_RATIO`` x greedy's MAP drop."""
    return seagram_calls * CALL_RATIO <= greedy_calls and greedy_drop > 0 and seagram_drop >= DROP_RATIO * greedy_drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victim", default="gmn", choices=["gmn", "neuromatch", "isonet", "isonet_node"])
    parser.add_argument("--budget", type=int, default=2)
    parser.add_argument("--dataset", default="", help="a released IsoNet split (aids, ...) in --data-dir")
    parser.add_argument("--corpus", type=int, default=100, help="corpus graphs (generated NCI data)")
    parser.add_argument("--queries", type=int, default=60, help="queries (25%% are attacked)")
    parser.add_argument("--attack-queries", type=int, default=0, help="test queries attacked (0: all)")
    parser.add_argument("--al-budgets", default="75,150,300,600", help="SEAGRAM's training solver calls")
    parser.add_argument("--victim-steps", type=int, default=400)
    parser.add_argument("--top-k", type=int, default=16)
    parser.add_argument("--data-dir", default="~/.cache/raylab/seagram")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--seeds", default="0,1,2", help="victim/sampling/classifier seeds (the data fixed)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    budgets = sorted(int(b) for b in args.al_budgets.split(","))

    seeds = [int(x) for x in args.seeds.split(",")]
    base = from_dict(
        Config,
        {
            "dataset": args.dataset,
            "source": "nci",
            "data_dir": args.data_dir,
            "n_corpus": args.corpus,
            "n_queries": args.queries,
            "attack_queries": args.attack_queries,
            "victim": args.victim,
            "victim_steps": args.victim_steps,
            "report_every": 100,
            "queries_per_step": 8,
            "budget": args.budget,
            "top_k": args.top_k,
            "al_budget": budgets[0],
            "al_init": max(1, budgets[0] // 4),
            "al_rounds": 4,
            "al_candidates": 1000,
            "clf_hidden": 32,
            "clf_batch": 32,
            "seed": seeds[0],
        },
        "benchmarks/seagram_cost.py",
    )
    started = time.perf_counter()
    data = load_data(base)
    print(
        f"data: {len(data.corpus)} corpus graphs, {len(data.queries)} queries "
        f"({args.dataset or 'generated from NCI'}), positive rate {data.stats['pos_rate']:.3f}; "
        f"labels: {data.stats['solver']['calls']} solver calls at generation "
        f"({time.perf_counter() - started:.1f} s to load here); seeds {seeds} (victim, sampling, "
        f"classifier; the data fixed)"
    )
    print(
        "MAP drop judged under the TRUE labels after the attack: victim/map - attack/map_true_labels "
        "(a flip that breaks a pair's label earns nothing); the drop under the original labels is "
        "shown beside it\n"
    )
    per_seed = [one_seed(dataclasses.replace(base, seed=seed), data, budgets) for seed in seeds]
    settings = [(name, setting) for name, setting, *_ in per_seed[0]]
    mean = {}
    for k, (name, setting) in enumerate(settings):
        cols = np.array([[r[k][2], r[k][3], r[k][4], r[k][5]] for r in per_seed])  # calls, true drop, drop, kept
        mean[(name, setting)] = cols.mean(0)
    greedy_key = ("greedy", "max_checks=inf")
    g_calls, g_true = mean[greedy_key][0], mean[greedy_key][1]
    print(f"\nmean curve over {len(seeds)} seeds")
    header(extra="seeds met")
    found = []
    for name, setting in settings:
        calls, true_drop, drop, kept = mean[(name, setting)]
        met = sum(
            meets(r[k][2], r[k][3], r[k_greedy(r)][2], r[k_greedy(r)][3])
            for r in per_seed
            for k in [settings.index((name, setting))]
        )
        line(
            name,
            setting,
            calls,
            true_drop,
            drop,
            kept,
            g_calls,
            g_true,
            extra=f"{met}/{len(seeds)}" if name == "seagram" else "",
        )
        if name == "seagram" and "victim labels" not in setting and meets(calls, true_drop, g_calls, g_true):
            found.append(setting)
    print(f"\nreference greedy (unbounded checks), mean: {g_calls:.0f} solver calls, true-label MAP drop {g_true:.3f}")
    print(
        f"verdict (mean curve): SEAGRAM at >= {CALL_RATIO:.0f}x fewer solver calls (training included) and "
        f"a true-label MAP drop >= {DROP_RATIO}x greedy's: "
        f"{'MET at ' + ', '.join(found) if found else 'NOT met at any grid point'}"
    )


def k_greedy(rows) -> int:
    """Index of the reference greedy (unbounded checks) in one seed's rows."""
    return next(k for k, r in enumerate(rows) if r[0] == "greedy" and r[1] == "max_checks=inf")


def header(extra: str = "") -> None:
    print(
        f"{'attack':<13}{'setting':<31}{'calls':>8}{'true drop':>10}{'x greedy':>9}{'orig drop':>10}"
        f"{'labels kept':>12}{'calls / greedy':>15}{extra:>10}"
    )


def line(name, setting, calls, true_drop, drop, kept, g_calls, g_true, extra: str = "") -> None:
    print(
        f"{name:<13}{setting:<31}{calls:>8.0f}{true_drop:>10.3f}"
        f"{true_drop / g_true if g_true else float('nan'):>9.2f}{drop:>10.3f}{kept:>12.3f}"
        f"{calls / max(g_calls, 1):>15.3f}{extra:>10}"
    )


def one_seed(base: Config, data, budgets: list[int]) -> list[tuple]:
    """One seed's curve: rows ``(attack, setting, solver calls, true-label drop, drop, kept)``,
    solver calls counting training and attack time; printed as it goes."""
    victim, clean = trained_victim(base, data)
    test_queries = attacked_queries(base, data)
    print(
        f"seed {base.seed}: victim {base.victim} clean test MAP {clean['map']:.3f} (best validation step "
        f"{clean['best_step']} of {clean['steps']}); budget {base.budget} flips per pair"
    )
    raw = []
    for checks in GREEDY_CHECKS:
        cfg = dataclasses.replace(base, greedy_max_checks=checks)
        raw.append(
            (
                "greedy",
                f"max_checks={checks or 'inf'}",
                0,
                run_attack(cfg, data, victim, None, test_queries, attack="greedy")[0],
            )
        )
    raw.append(
        (
            "greedy_free",
            "no label check",
            0,
            run_attack(base, data, victim, None, test_queries, attack="greedy_free")[0],
        )
    )
    for al_budget in budgets:
        cfg = dataclasses.replace(base, al_budget=al_budget, al_init=max(1, al_budget // 4))
        clf, cost = train_seagram(cfg, data, victim)
        raw.append(
            (
                "seagram",
                f"al_budget={al_budget}",
                cost["solver_calls"],
                run_attack(cfg, data, victim, clf, test_queries, attack="seagram")[0],
            )
        )
        if al_budget == budgets[-1]:
            nolabel = dataclasses.replace(cfg, label_source="victim")
            raw.append(
                (
                    "seagram",
                    f"al_budget={al_budget}, victim labels",
                    cost["solver_calls"],
                    run_attack(nolabel, data, victim, clf, test_queries, attack="seagram")[0],
                )
            )
    rows = [
        (
            name,
            setting,
            train_calls + m["attack/solver_calls_test"],
            clean["map"] - m["attack/map_true_labels"],
            m["attack/map_drop"],
            m["attack/label_preserved"],
        )
        for name, setting, train_calls, m in raw
    ]
    g = rows[k_greedy(rows)]
    header()
    for r in rows:
        line(*r, g[2], g[3])
    print(
        f"throughput ({torch.get_num_threads()} torch thread(s), CPU): victim training "
        f"{clean['pairs_per_s']:.0f} graph pairs/s, scoring {scoring_rate(victim, base, data):.0f} "
        f"graph pairs/s; {int(raw[0][3]['attack/pairs'])} attacked pairs\n"
    )
    return rows


if __name__ == "__main__":
    main()
