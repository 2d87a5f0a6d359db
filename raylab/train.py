"""``python -m raylab.train NAME [key=value ...]``: one trial of an experiment, no search.

For debugging: the train loop runs in this process (breakpoints and ``pdb`` work, no Ray start
cost) with the same config validation, reporting and checkpoint format as a sweep. Search
fields take their first grid or choice value, or the middle of their range, unless pinned with
``config.FIELD=value``. Trials that ask for several workers run on Ray Train instead.

    python -m raylab.train dqn_softlinf config.seed=3
    python -m raylab.train dqn_softlinf --smoke --resume
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from raylab import checks, cli, provenance, ray_start, run_files, search_space, session, summary, sweep, workloads, yaml_io
from raylab import experiment as experiments
from raylab.errors import UserError, exit_on_user_error


def parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="python -m raylab.train", description=__doc__.split("\n")[0])
    cli.add_common_arguments(p)
    p.add_argument("--resume", action="store_true", help="continue the newest (or --name) trial")
    p.add_argument("--quiet", action="store_true", help="do not print each report")
    return p


def single_config(experiment: experiments.Experiment) -> tuple[dict[str, Any], dict[str, Any]]:
    """The experiment's fixed config plus one value per search field; and those picked values."""
    picked = {}
    for key, spec in experiment.search.items():
        (kind, args), = spec.items()
        if kind in ("grid", "choice"):
            picked[key] = args[0]
        elif "log" in kind:
            picked[key] = math.sqrt(args[0] * args[1])
        else:
            middle = (args[0] + args[1]) / 2
            picked[key] = int(middle) if "randint" in kind else middle
    return search_space.with_variant({**experiment.config, **picked}), picked


def run_local(
    experiment: experiments.Experiment, trial_dir: Path, config: dict[str, Any], verbose: bool = True
) -> list[dict[str, Any]]:
    """Run one trial in this process; return its reported rows (also in ``result.json``)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "params.json").write_text(json.dumps(config, indent=2))
    s = session.start(
        backend="local",
        checkpoint_every=experiment.checkpoint.every,
        keep=experiment.checkpoint.keep,
        trial_dir=trial_dir,
        stop=dict(experiment.stop),
        mode=experiment.mode,
        verbose=verbose,
    )
    loop = experiments.workloads.get(experiment.workload).train_loop()
    try:
        loop(dict(config))
    except session.StopTrial as reason:
        cli.stderr(f"stopped: {reason}")
    return s.history


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    cli.use_config_dirs(args.configs)
    cli.quiet_third_party_warnings()
    if not args.experiment:
        raise UserError("name an experiment (python -m raylab.tune --list shows them)")
    if args.resume and args.overrides:
        raise UserError("--resume continues a trial as it was started; drop the overrides")
    root = Path(args.storage)
    if args.resume:  # the run folder's own experiment (smoke or not), before any check
        name = Path(args.experiment).stem if args.experiment.endswith((".yaml", ".yml")) else args.experiment
        run_dir = _newest_run(root, name, args.smoke, args.name)
        experiment = sweep.saved_experiment(str(run_dir))
    else:
        experiment = experiments.load(args.experiment, args.overrides, smoke=args.smoke)
        run_dir = root / (args.name or sweep.default_run_name(experiment).replace(
            experiment.name, f"{experiment.name}-train", 1))
        if args.name:
            sweep.refuse_existing_run(str(root.absolute()), args.name)
    checks.check_storage(args.storage)
    checks.check_resources(experiment, ray_start.local_resources(), local=True)
    checks.preflight(experiment)
    config, picked = single_config(experiment)
    for key, value in picked.items():
        cli.stderr(f"search.{key}: using {value!r} (pin it with config.{key}=...)")
    if experiment.resources.workers > 1:
        raise UserError(
            f"{experiment.source}: {experiment.resources.workers} workers per trial need Ray Train; "
            f"run python -m raylab.tune {experiment.name} {' '.join(f'config.{k}={v}' for k, v in picked.items())}"
        )
    if not args.resume:
        saved = {**experiment.to_yaml_dict(),
                 "provenance": provenance.of_workload(workloads.get(experiment.workload))}
        run_files.write_text(str(run_dir.absolute()), run_files.EXPERIMENT_FILE, yaml_io.dumps(saved))
    else:
        sweep.update_provenance(str(run_dir.absolute()), resumed=provenance.now())
    history = run_local(experiment, run_dir / "trial", config, verbose=not args.quiet)
    sweep.update_provenance(str(run_dir.absolute()), ended=provenance.now())
    last = history[-1] if history else {}
    best_values = [r[experiment.metric] for r in history
                   if isinstance(r.get(experiment.metric), (int, float)) and math.isfinite(r[experiment.metric])]
    best = (max if experiment.mode == "max" else min)(best_values) if best_values else None
    print(summary.format_table([{
        "trial": run_dir.name, "iterations": last.get("training_iteration"),
        f"{experiment.metric} (last)": last.get(experiment.metric),
        f"{experiment.metric} ({experiment.mode})": best,
    }]))
    print(f"\nresults: {run_dir.absolute()}")
    return 0


def _newest_run(root: Path, experiment_name: str, smoke: bool, name: str | None) -> Path:
    if name:
        if not (root / name / run_files.EXPERIMENT_FILE).is_file():
            raise UserError(f"--resume: no trial run at {root / name}")
        return root / name
    prefix = f"{experiment_name}-train{'-smoke' if smoke else ''}-"
    runs = sorted(root.glob(f"{prefix}*"), reverse=True) if root.is_dir() else []
    runs = [r for r in runs if (r / run_files.EXPERIMENT_FILE).is_file()]
    if not runs:
        raise UserError(f"--resume: no run of '{prefix[:-1]}' in {root.absolute()}")
    return runs[0]


if __name__ == "__main__":
    sys.exit(main())
