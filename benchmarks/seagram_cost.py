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

Printed: each point's solver calls, MAP drop, labels kept; then whether some SEAGRAM point
spends at least 5x fewer solver calls (training included) than the reference greedy at a MAP
drop of at least 0.8x greedy's. Both attacks also use the test pairs' true labels, one solver
call each at data generation (the same for both: listed, left out of the ratio). Throughput:
graph pairs per second of victim training and scoring.

    python benchmarks/seagram_cost.py [--victim gmn] [--budget 2] [--corpus 100] [--queries 60]
                                      [--al-budgets 75,150,300,600] [--dataset aids --attack-queries 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

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
    batch = atk.PairBatch.build([data.queries[q] for q in queries for _ in data.corpus],
                                [c for _ in queries for c in data.corpus],
                                data.labels[queries].reshape(-1), cfg.query_nodes[1], cfg.corpus_nodes[1])
    atk.pair_scores(victim, batch)  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        atk.pair_scores(victim, batch)
        done += len(batch)
    return done / (time.perf_counter() - started)


def meets(seagram_calls: int, seagram_drop: float, greedy_calls: int, greedy_drop: float) -> bool:
    """The target: ``CALL_RATIO`` x fewer solver calls at ``DROP_RATIO`` x greedy's MAP drop."""
    return (seagram_calls * CALL_RATIO <= greedy_calls and greedy_drop > 0
            and seagram_drop >= DROP_RATIO * greedy_drop)


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
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    budgets = sorted(int(b) for b in args.al_budgets.split(","))

    base = from_dict(Config, {
        "dataset": args.dataset, "source": "nci", "data_dir": args.data_dir, "n_corpus": args.corpus,
        "n_queries": args.queries, "attack_queries": args.attack_queries, "victim": args.victim,
        "victim_steps": args.victim_steps, "report_every": 100,
        "queries_per_step": 8, "budget": args.budget, "top_k": args.top_k, "al_budget": budgets[0],
        "al_init": max(1, budgets[0] // 4), "al_rounds": 4, "al_candidates": 1000, "clf_hidden": 32,
        "clf_batch": 32, "seed": args.seed,
    }, "benchmarks/seagram_cost.py")
    started = time.perf_counter()
    data = load_data(base)
    print(f"data: {len(data.corpus)} corpus graphs, {len(data.queries)} queries "
          f"({args.dataset or 'generated from NCI'}), positive rate {data.stats['pos_rate']:.3f}; "
          f"labels: {data.stats['solver']['calls']} solver calls at generation "
          f"({time.perf_counter() - started:.1f} s to load here)")
    victim, clean = trained_victim(base, data)
    test_queries = attacked_queries(base, data)
    print(f"victim {args.victim}: clean test MAP {clean['map']:.3f} (best validation step "
          f"{clean['best_step']} of {clean['steps']}); budget {args.budget} flips per pair\n")

    rows = []
    for checks in GREEDY_CHECKS:
        cfg = dataclasses.replace(base, greedy_max_checks=checks)
        m = run_attack(cfg, data, victim, None, test_queries, attack="greedy")[0]
        rows.append(("greedy", f"max_checks={checks or 'inf'}", 0, m))
    free = run_attack(base, data, victim, None, test_queries, attack="greedy_free")[0]
    rows.append(("greedy_free", "no label check", 0, free))
    for al_budget in budgets:
        cfg = dataclasses.replace(base, al_budget=al_budget, al_init=max(1, al_budget // 4))
        clf, cost = train_seagram(cfg, data, victim)
        m = run_attack(cfg, data, victim, clf, test_queries, attack="seagram")[0]
        rows.append(("seagram", f"al_budget={al_budget}", cost["solver_calls"], m))
        if al_budget == budgets[-1]:
            nolabel = dataclasses.replace(cfg, label_source="victim")
            m = run_attack(nolabel, data, victim, clf, test_queries, attack="seagram")[0]
            rows.append(("seagram", f"al_budget={al_budget}, victim labels", cost["solver_calls"], m))

    pairs = int(rows[0][3]["attack/pairs"])
    reference = rows[len(GREEDY_CHECKS) - 1][3]
    greedy_calls, greedy_drop = reference["attack/solver_calls_test"], reference["attack/map_drop"]
    print(f"{pairs} attacked pairs; every attack but random and the victim-label variant also uses "
          f"the {pairs} test labels the solver made at generation\n")
    print(f"{'attack':<13}{'setting':<31}{'train calls':>12}{'test calls':>11}{'MAP drop':>10}"
          f"{'x greedy':>9}{'labels kept':>12}{'calls / greedy':>15}")
    found = []
    for name, setting, train_calls, m in rows:
        calls = train_calls + m["attack/solver_calls_test"]
        drop = m["attack/map_drop"]
        print(f"{name:<13}{setting:<31}{train_calls:>12}{m['attack/solver_calls_test']:>11}{drop:>10.3f}"
              f"{drop / greedy_drop if greedy_drop else float('nan'):>9.2f}"
              f"{m['attack/label_preserved']:>12.3f}{calls / max(greedy_calls, 1):>15.3f}")
        if name == "seagram" and "victim labels" not in setting and meets(calls, drop, greedy_calls, greedy_drop):
            found.append(setting)
    print(f"\nreference greedy (unbounded checks): {greedy_calls} solver calls, MAP drop {greedy_drop:.3f}")
    print(f"SEAGRAM at >= {CALL_RATIO:.0f}x fewer solver calls (training included) and a MAP drop >= "
          f"{DROP_RATIO}x greedy's: {'met at ' + ', '.join(found) if found else 'NOT met at any grid point'}")
    print(f"\nthroughput ({torch.get_num_threads()} torch thread(s), CPU): victim training "
          f"{clean['pairs_per_s']:.0f} graph pairs/s, scoring {scoring_rate(victim, base, data):.0f} "
          f"graph pairs/s")


if __name__ == "__main__":
    main()
