"""Tune SEAGRAM's attack defaults on validation pairs only (never on the test pairs).

The setting is the science test's (``tests/trainers/seagram/test_seagram_science.py``: NCI data, 60
corpus graphs, 40 queries split 24 / 6 / 10, the NeuroMatch-named victim, budget 2, 300 labels).
The attacked pairs here are the **validation** queries x the corpus (6 x 60 = 360 pairs), a split
disjoint from the test queries the science test asserts on; the victim's clean MAP is measured
on them too. Per seed (victim, sampling, classifier; the data fixed), one victim is trained, one
classifier per (``al_pool``, ``al_random_frac``) at the same ``al_budget``, and each classifier
attacks at every (``threshold``, ``select``). Printed: every setting's per-seed labels kept and
true-label MAP drop (``victim/map - attack/map_true_labels``: a flip that breaks a label earns
nothing), their means, and the chosen setting: the largest mean true-label drop among settings
whose mean labels kept is at least ``--min-kept`` (0.85, the science test's bound).

    python benchmarks/seagram_tune.py [--seeds 0,1,2] [--thresholds 0.8,0.9,0.95]
                                      [--random-fracs 0,0.5,1] [--pools picks,attack]
                                      [--selects safest,gain] [--jobs 3] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import multiprocessing as mp
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

from raylab.config import from_dict
from trainers.seagram.config import Config
from trainers.seagram.data import load_or_generate, spec_from_config
from trainers.seagram.loop import run_attack, train_seagram, trained_victim

SETTING = dict(
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
    al_budget=300,
    al_init=75,
    al_rounds=4,
    al_candidates=1000,
    al_strategy="uncertainty",
    clf_hidden=32,
    clf_layers=3,
    clf_batch=32,
    eval_candidates=1000,
    eval_recall=0.5,
)
"""The science test's ``SCIENCE`` without the four tuned keys (a test checks they agree)."""
GRID_KEYS = ("al_pool", "al_random_frac", "threshold", "select")
"""The tuned keys, in the order of a setting's key."""


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def one_seed(job) -> tuple:
    """One seed's victim, its classifiers and their attacks on the validation pairs."""
    setting, seed, val, arms, attacks = job
    torch.set_num_threads(1)
    started = time.perf_counter()
    cfg = from_dict(Config, {**setting, "seed": seed}, "seagram_tune")
    victim, clean = trained_victim(cfg, val)
    out = {}
    for pool, frac in arms:
        arm_cfg = dataclasses.replace(cfg, al_pool=pool, al_random_frac=frac)
        clf, _ = train_seagram(arm_cfg, val, victim)
        for threshold, select in attacks:
            m = run_attack(
                dataclasses.replace(arm_cfg, threshold=threshold, select=select),
                val,
                victim,
                clf,
                val.splits["test"],
                attack="seagram",
            )[0]
            out[pool, frac, threshold, select] = (
                m["attack/label_preserved"],
                clean["map"] - m["attack/map_true_labels"],
            )
    return seed, clean["map"], time.perf_counter() - started, out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--thresholds", default="0.8,0.9,0.95")
    ap.add_argument("--random-fracs", default="0,0.5,1")
    ap.add_argument("--pools", default="picks,attack")
    ap.add_argument("--selects", default="safest,gain")
    ap.add_argument("--jobs", type=int, default=1, help="seeds run in parallel processes")
    ap.add_argument("--min-kept", type=float, default=0.85)
    ap.add_argument("--data-dir", default="", help="cache of the generated data (default: a temporary folder)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the setting (the tiny test shrinks it)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    setting = dict(SETTING)
    for item in args.set:
        key, value = item.split("=", 1)
        setting[key] = type(SETTING[key])(value)
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = list(itertools.product(args.pools.split(","), floats(args.random_fracs)))
    attacks = list(itertools.product(floats(args.thresholds), args.selects.split(",")))
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="seagram-tune-")
    base = from_dict(Config, {**setting, "seed": seeds[0]}, "seagram_tune")
    data = load_or_generate(spec_from_config(base), data_dir, data_dir)
    val = dataclasses.replace(data, splits={**data.splits, "test": data.splits["val"]})
    print(
        f"data: {len(data.corpus)} corpus graphs, queries train/val/test "
        f"{len(data.splits['train'])}/{len(data.splits['val'])}/{len(data.splits['test'])}; "
        f"attacked: the {len(val.splits['test'])} validation queries x the corpus"
    )
    kept: dict[tuple, list[float]] = {}
    drop: dict[tuple, list[float]] = {}
    started = time.perf_counter()
    jobs = [(setting, seed, val, arms, attacks) for seed in seeds]
    if args.jobs > 1:
        with ProcessPoolExecutor(min(args.jobs, len(seeds)), mp_context=mp.get_context("spawn")) as pool:
            results = list(pool.map(one_seed, jobs))
    else:
        results = [one_seed(job) for job in jobs]
    for seed, clean_map, seconds, per_key in results:  # in seed order
        print(f"seed {seed}: victim validation MAP {clean_map:.3f}, {seconds:.0f} s")
        for key, (k, d) in per_key.items():
            kept.setdefault(key, []).append(k)
            drop.setdefault(key, []).append(d)
    print(
        f"\n{'al_pool':8s} {'rand_frac':>9s} {'threshold':>9s} {'select':>7s}  "
        f"{'kept per seed':>{7 * len(seeds)}s} {'mean':>6s}  {'true drop per seed':>{7 * len(seeds)}s} {'mean':>6s}"
    )
    for key in sorted(kept, key=lambda k: -np.mean(drop[k])):
        pool, frac, threshold, select = key
        print(
            f"{pool:8s} {frac:9.2f} {threshold:9.2f} {select:>7s}  "
            f"{' '.join(f'{v:6.3f}' for v in kept[key])} {np.mean(kept[key]):6.3f}  "
            f"{' '.join(f'{v:6.3f}' for v in drop[key])} {np.mean(drop[key]):6.3f}"
        )
    eligible = [k for k in kept if np.mean(kept[k]) >= args.min_kept]
    chosen = max(eligible, key=lambda k: np.mean(drop[k])) if eligible else None
    if chosen is None:
        print(f"\nchosen: none (no setting keeps >= {args.min_kept} of labels on the mean)")
    else:
        print(
            "\nchosen: "
            + ", ".join(f"{k}={v}" for k, v in zip(GRID_KEYS, chosen))
            + f" (mean kept {np.mean(kept[chosen]):.3f}, mean true drop {np.mean(drop[chosen]):.3f})"
        )
    print(f"seconds: {time.perf_counter() - started:.0f}")
    return {"kept": kept, "drop": drop, "chosen": chosen}


if __name__ == "__main__":
    main()
