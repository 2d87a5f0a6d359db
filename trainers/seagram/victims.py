"""The victim stage: victims trained once per (victim, dataset, seed), loaded by every attack trial.

``python -m raylab.tune seagram_victims --name seagram_victims`` trains each (victim, dataset,
seed) once (``attack: none``: the loop stops after the victim phase) and its checkpoint lands
in the run's storage, as every trial's does (a local folder or a URI such as ``s3://``). The
attack experiments (``seagram``, ``seagram_baselines``, ``seagram_no_labels``) set
``victim_from: RUN`` and load the best-validation victim of the matching trial instead of
training one per trial; a run without the (victim, dataset, seed) asked is refused before Ray
starts, with one line naming what the run holds.

A victim is identified by ``VICTIM_KEYS`` and its dataset (``dataset_key``: the released split's
name, or the generation spec's hash). Where the victims run swept ``margin`` (or any other
training key), the candidates of one (dataset, victim) are compared on validation MAP averaged
over their seeds, and the best margin's trial serves every seed (``choose``): the margin is
chosen per dataset and victim on validation, never on test.

``python -m trainers.seagram.victims RUN`` prints the run's victims: validation and clean test
MAP per dataset, victim, margin and seed, and which margin each (dataset, victim) uses.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys

from raylab import checkpoint as ckpt
from raylab.config import from_dict
from raylab.errors import UserError, exit_on_user_error
from raylab.files import user_location
from raylab.run_folder import RunFolder, TrialFolder
from trainers.seagram.config import Config

VICTIM_KEYS = ("victim", "hidden", "layers", "seed")
"""Config fields that, with the dataset, name one victim."""
FINAL_PHASE = 2
"""``train/phase`` of a trial's last row once its loop has finished."""


@dataclasses.dataclass(frozen=True)
class VictimTrial:
    """One finished trial of a victims run."""

    name: str
    """Its trial folder's name."""
    config: Config
    map_val: float
    """Best validation MAP (the restored model's)."""
    map_test: float
    """Clean test MAP of that model, on every test query."""

    @property
    def identity(self) -> tuple:
        return identity(self.config)


def dataset_key(cfg: Config) -> str:
    """The dataset a config reads: the released split's name, or the generated data's spec key."""
    if cfg.dataset:
        return cfg.dataset
    from trainers.seagram.data import spec_from_config

    return spec_from_config(cfg).key()


def identity(cfg: Config) -> tuple:
    """``(dataset key, victim, hidden, layers, seed)``: what names one victim."""
    return (dataset_key(cfg), *(getattr(cfg, k) for k in VICTIM_KEYS))


def identity_words(key: tuple) -> str:
    return f"dataset {key[0]}, " + ", ".join(f"{k} {v}" for k, v in zip(VICTIM_KEYS, key[1:]))


def run_location(run: str) -> str:
    """A run given as a path (relative to where the command ran) or a URI."""
    return user_location(run)


@functools.lru_cache(maxsize=8)
def run_victims(run: str) -> tuple[VictimTrial, ...]:
    """The finished victim trials of the run ``run`` (their last row is the final one), by name.

    Trials still running, stopped or failed are left out: their checkpoint is not a finished
    victim. Cached per run location for the preflight, which asks once per grid combination.
    """
    folder = RunFolder(run_location(run))
    if folder.kind() != "dir":
        raise UserError(
            f"config.victim_from: {folder} is not a run folder (train the victims first: "
            f"python -m raylab.tune seagram_victims --name seagram_victims)"
        )
    names = {f.name for f in dataclasses.fields(Config)}
    found = []
    for trial in folder.read_trials():
        if not trial.finished or not trial.checkpoints:
            continue
        where = folder.join(trial.name)
        cfg = from_dict(Config, {k: v for k, v in trial.config.items() if k in names}, where)
        if cfg.attack != "none":
            continue
        last = trial.last
        found.append(VictimTrial(trial.name, cfg, float(last["victim/map_val"]), float(last["victim/map"])))
    return tuple(found)


def choose(trials: tuple[VictimTrial, ...], asked: Config) -> VictimTrial | None:
    """The trial whose victim serves ``asked``, or None when the run has none of its identity.

    Candidates share the asked identity; when they differ in a training key (a swept
    ``margin``), every seed of the same (dataset, victim) votes: the setting with the best mean
    validation MAP over its seeds wins (ties: the first by name), and its trial of the asked
    seed is returned. Test MAP plays no part.
    """
    key = identity(asked)
    if not any(t.identity == key for t in trials):
        return None
    peers = [t for t in trials if t.identity[:-1] == key[:-1]]  # every seed of this victim

    def setting(t: VictimTrial) -> tuple:
        values = dataclasses.asdict(t.config)
        return tuple(sorted((k, repr(v)) for k, v in values.items() if k not in ("seed", "data_seed")))

    scores: dict[tuple, list[float]] = {}
    for t in peers:
        scores.setdefault(setting(t), []).append(t.map_val)
    have = {setting(t) for t in trials if t.identity == key}
    best = max(sorted(have), key=lambda s: sum(scores[s]) / len(scores[s]))
    return min((t for t in trials if t.identity == key and setting(t) == best), key=lambda t: t.name)


def find_victim(cfg: Config) -> VictimTrial:
    """The victim trial of ``cfg.victim_from`` that serves ``cfg``; a ``UserError`` naming what the
    run holds when it has none of the asked identity, or when its edge slots are too few."""
    trials = run_victims(cfg.victim_from)
    found = choose(trials, cfg)
    if found is None:
        held = sorted({identity_words(t.identity) for t in trials})
        raise UserError(
            f"config.victim_from: {cfg.victim_from} has no finished victim for {identity_words(identity(cfg))}; "
            f"it holds: {'; '.join(held) or 'none'}"
        )
    if cfg.budget > found.config.budget:
        raise UserError(
            f"config.budget: {cfg.budget} flips need more edge slots than the victim of {cfg.victim_from}/"
            f"{found.name} has (trained with budget {found.config.budget}); train victims with budget >= {cfg.budget}"
        )
    return found


def load_victim_state(cfg: Config) -> tuple[dict, VictimTrial]:
    """The checkpointed state of the victim that serves ``cfg`` (its newest good checkpoint,
    read where the run is stored: a local folder or a URI), and its trial."""
    run_victims.cache_clear()  # the run as it is now, not as a preflight in this process saw it
    found = find_victim(cfg)
    trial = TrialFolder(RunFolder(run_location(cfg.victim_from)), found.name)
    loaded = ckpt.load_at(trial.location)
    if loaded is None:
        raise UserError(f"config.victim_from: no readable checkpoint in {trial.location}")
    state = loaded[0]
    if state.get("phase") != "done":
        raise UserError(f"config.victim_from: {loaded[1]} is not a finished victim (phase {state.get('phase')})")
    return state, found


def victims_table(run: str) -> list[dict]:
    """One row per finished victim trial: dataset, victim, margin, seed, validation and test
    MAP, and whether ``choose`` takes its setting for its (dataset, victim)."""
    trials = run_victims(run)
    rows = []
    for t in sorted(trials, key=lambda t: (t.identity, t.config.margin)):
        chosen = choose(trials, t.config)
        rows.append(
            {
                "dataset": t.identity[0],
                "victim": t.config.victim,
                "margin": t.config.margin,
                "seed": t.config.seed,
                "map_val": t.map_val,
                "map_test": t.map_test,
                "chosen": chosen is not None and chosen.name == t.name,
                "trial": t.name,
            }
        )
    return rows


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    p = argparse.ArgumentParser(prog="python -m trainers.seagram.victims", description=__doc__.split("\n")[0])
    p.add_argument("run", help="a seagram_victims run folder (a path or a URI)")
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rows = victims_table(args.run)
    if not rows:
        raise UserError(f"{args.run}: no finished victim trial (attack: none, final row written)")
    print(f"{'dataset':16s} {'victim':12s} {'margin':>6s} {'seed':>4s} {'val MAP':>8s} {'test MAP':>8s}  chosen")
    for r in rows:
        print(
            f"{r['dataset']:16s} {r['victim']:12s} {r['margin']:6g} {r['seed']:4d} {r['map_val']:8.3f} "
            f"{r['map_test']:8.3f}  {'*' if r['chosen'] else ''}"
        )
    chosen: dict[tuple, list[float]] = {}
    for r in rows:
        if r["chosen"]:
            chosen.setdefault((r["dataset"], r["victim"], r["margin"]), []).append(r["map_test"])
    print("\nchosen on validation (mean clean test MAP over seeds):")
    for (dataset, victim, margin), maps in sorted(chosen.items()):
        mean = sum(maps) / len(maps)
        sd = math.sqrt(sum((m - mean) ** 2 for m in maps) / max(len(maps) - 1, 1))
        print(f"  {dataset} {victim}: margin {margin:g}, test MAP {mean:.3f} (sd {sd:.3f}, {len(maps)} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
