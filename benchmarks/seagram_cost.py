"""Solver cost of SEAGRAM against the solver-checked greedy attack, and NSGM throughput.

One process, one dataset, one trained victim: the greedy attack (every candidate flip checked
with the exact VF2 solver until one keeps the label) and SEAGRAM (active-learned classifier,
no solver at attack time) attack the same (test query, corpus graph) pairs with the same flip
budget. Printed: solver calls and seconds of each (SEAGRAM's are all spent in training),
wall times, the label preservation and MAP they reach, the ratio of solver calls (target: at
least 5x fewer for SEAGRAM), and graph pairs per second for victim training and for scoring.

    python benchmarks/seagram_cost.py [--victim gmn] [--budget 2] [--corpus 100] [--queries 60]
                                      [--al-budget 300] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from raylab.config import from_dict
from trainers.seagram import attack as atk
from trainers.seagram.config import Config
from trainers.seagram.data import data_dirs, load_or_generate, spec_from_config
from trainers.seagram.loop import compare_attacks
from trainers.seagram.model import build_victim

TARGET = 5.0


def scoring_rate(cfg: Config, data, seconds: float = 3.0) -> float:
    """Graph pairs per second of victim scoring (no gradient) in chunks of 4096 pairs."""
    torch.manual_seed(cfg.seed)
    victim = build_victim(cfg.victim, cfg.hidden, cfg.layers, cfg.corpus_nodes[1]).eval()
    queries = data.splits["test"]
    batch = atk.PairBatch.build([data.queries[q] for q in queries for _ in data.corpus],
                                [c for _ in queries for c in data.corpus],
                                data.labels[queries].reshape(-1), cfg.query_nodes[1], cfg.corpus_nodes[1])
    atk.pair_scores(victim, batch)  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        atk.pair_scores(victim, batch)
        done += len(batch)
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victim", default="gmn", choices=["gmn", "neuromatch", "isonet"])
    parser.add_argument("--budget", type=int, default=2)
    parser.add_argument("--corpus", type=int, default=100, help="corpus graphs")
    parser.add_argument("--queries", type=int, default=60, help="queries (25%% are attacked)")
    parser.add_argument("--al-budget", type=int, default=300, help="SEAGRAM's training solver calls")
    parser.add_argument("--victim-steps", type=int, default=400)
    parser.add_argument("--top-k", type=int, default=16)
    parser.add_argument("--data-dir", default="~/.cache/raylab/seagram")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = from_dict(Config, {
        "source": "nci", "data_dir": args.data_dir, "n_corpus": args.corpus, "n_queries": args.queries,
        "victim": args.victim, "hidden": 32, "layers": 3, "victim_steps": args.victim_steps,
        "queries_per_step": 8, "budget": args.budget, "top_k": args.top_k,
        "al_budget": args.al_budget, "al_init": max(1, args.al_budget // 4), "al_rounds": 4,
        "al_candidates": 1000, "clf_hidden": 32, "clf_batch": 32, "seed": args.seed,
    }, "benchmarks/seagram_cost.py")
    data_dir, cache_dir = data_dirs(cfg)
    started = time.perf_counter()
    data = load_or_generate(spec_from_config(cfg), data_dir, cache_dir)
    print(f"data: {args.corpus} corpus graphs, {args.queries} queries (NCI), positive rate "
          f"{data.stats['pos_rate']:.3f}; generation {data.stats['solver']['calls']} solver calls "
          f"({time.perf_counter() - started:.1f} s here, cached after the first run)")
    out = compare_attacks(cfg, data, attacks=("greedy", "seagram"))
    greedy, seagram, train = out["greedy"], out["seagram"], out["seagram_train"]
    pairs = int(greedy["attack/pairs"])
    print(f"victim {args.victim}: clean test MAP {out['victim']['map']:.3f}; {pairs} attacked pairs, "
          f"budget {args.budget} flips each\n")
    rows = [
        ("greedy (solver-checked)", 0, 0.0, 0.0, greedy),
        ("SEAGRAM (active learning)", train["solver_calls"], train["solver_s"], train["seconds"], seagram),
    ]
    print(f"{'attack':<27}{'solver calls':>13}{'solver s':>10}{'train s':>9}{'attack s':>10}"
          f"{'MAP':>7}{'labels kept':>13}{'flips':>7}")
    for name, train_calls, train_solver_s, train_s, m in rows:
        calls = train_calls + m["attack/solver_calls_test"]
        solver_s = train_solver_s + m["attack/solver_s_test"]
        print(f"{name:<27}{calls:>13}{solver_s:>10.2f}{train_s:>9.1f}{m['attack/test_s']:>10.1f}"
              f"{m['attack/map']:>7.3f}{m['attack/label_preserved']:>13.3f}{m['attack/flips_mean']:>7.2f}")
    greedy_calls = greedy["attack/solver_calls_test"]
    seagram_calls = train["solver_calls"] + seagram["attack/solver_calls_test"]
    ratio = greedy_calls / max(seagram_calls, 1)
    print(f"\nsolver calls, greedy / SEAGRAM (training + attack): {ratio:.1f}x "
          f"(target >= {TARGET:.0f}x: {'met' if ratio >= TARGET else 'NOT met'})")
    print(f"solver calls at attack time: greedy {greedy_calls}, SEAGRAM "
          f"{seagram['attack/solver_calls_test']}; per attacked pair: greedy {greedy_calls / pairs:.2f}")
    total_greedy = greedy["attack/test_s"]
    total_seagram = train["seconds"] + seagram["attack/test_s"]
    print(f"wall time, greedy / SEAGRAM: attack only {total_greedy / seagram['attack/test_s']:.1f}x, "
          f"with SEAGRAM's training {total_greedy / total_seagram:.2f}x")
    print(f"MAP drop: greedy {greedy['attack/map_drop']:.3f}, SEAGRAM {seagram['attack/map_drop']:.3f}")
    print(f"\nthroughput ({torch.get_num_threads()} torch thread(s), CPU): victim training "
          f"{out['victim']['pairs_per_s']:.0f} graph pairs/s, scoring {scoring_rate(cfg, data):.0f} "
          f"graph pairs/s")


if __name__ == "__main__":
    main()
