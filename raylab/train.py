"""``python -m raylab.train NAME [key=value ...]``: one trial of an experiment, no search.

For debugging: the train loop runs in this process (breakpoints and ``pdb`` work, no Ray start
cost) with the same config validation, reporting and checkpoint format as a sweep. Search
fields take their first grid or choice value, or the middle of their range, unless pinned with
``config.FIELD=value``. Trials that ask for several workers run on Ray Train instead.

    python -m raylab.train dqn_softlinf config.seed=3
    python -m raylab.train dqn_softlinf --smoke --resume
"""

from __future__ import annotations

import csv
import io
import math
import shlex
import sys
from typing import Any

from raylab import experiment as experiments
from raylab import files, provenance, search_space, session, workloads, yaml_io
from raylab.config import with_variant
from raylab.errors import UserError, exit_on_user_error
from raylab.launch import checks, cli, disk_full, ray_start, summary
from raylab.run_folder import (
    EXPERIMENT_FILE,
    TRAIN_RUN,
    TRAIN_TRIAL,
    RunFolder,
    TrialFolder,
    newest_run,
)


def parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="python -m raylab.train", description=__doc__.split("\n")[0])
    cli.add_common_arguments(p)
    p.add_argument("--resume", action="store_true", help="continue the newest (or --name) trial")
    p.add_argument("--quiet", action="store_true", help="do not print each report")
    p.add_argument(
        "--variant", type=int, default=None, metavar="K", help="take group K (1, 2, ...) of the search's variant list"
    )
    return p


def single_config(experiment: experiments.Experiment, variant: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """The experiment's fixed config plus one value per search field; and those picked values.

    ``variant``: which group of ``search.variant`` (1-based) the trial takes."""
    picked = {}
    for key, spec in experiment.search.items():
        ((kind, args),) = spec.items()
        if key == search_space.VARIANT:
            if not 1 <= variant <= len(args):
                raise UserError(
                    f"--variant {variant}: {experiment.source} has {len(args)} variant(s), 1 to {len(args)}"
                )
            picked[key] = args[variant - 1]
        elif kind in ("grid", "choice"):
            picked[key] = args[0]
        elif "log" in kind:
            picked[key] = math.sqrt(args[0] * args[1])
        else:
            middle = (args[0] + args[1]) / 2
            picked[key] = int(middle) if "randint" in kind else middle
    return with_variant({**experiment.config, **picked}), picked


def pin_text(key: str, value: Any) -> str:
    """The overrides that pin a searched field to ``value`` on the command line: for the
    ``variant`` key, its group's fields (``config.loss=soft_linf config.beta=3.0``)."""
    pairs = value.items() if key == search_space.VARIANT and isinstance(value, dict) else [(key, value)]
    return " ".join(f"config.{k}={yaml_io.dumps(v).strip().removesuffix('...').strip()}" for k, v in pairs)


def run_local(
    experiment: experiments.Experiment, trial: TrialFolder, config: dict[str, Any], verbose: bool = True
) -> list[dict[str, Any]]:
    """Run one trial in this process, in the (local) trial folder ``trial``; return its reported
    rows (also in the folder, as a sweep's trial keeps them)."""
    trial.write_params(config)
    beside = TrialFiles(trial)
    s = session.start(
        backend="local",
        checkpoint_every=experiment.checkpoint.every,
        keep=experiment.checkpoint.keep,
        trial=trial,
        stop=dict(experiment.stop),
        mode=experiment.mode,
        metric=experiment.metric,
        verbose=verbose,
        on_row=beside.write,
    )
    loop = workloads.get(experiment.workload).train_loop()
    try:
        loop(dict(config))
    except session.StopTrial as reason:  # a stop criterion reached: the trial's end, as in Tune
        cli.stderr(f"stopped: {reason}")
    finally:
        beside.close()
    trial.run.mark_ended(trial.name)  # its loop returned: the trial is finished (``Trial.finished``)
    return s.history


PROGRESS_FILE = "progress.csv"


class TrialFiles:
    """What Tune writes beside a trial's ``result.json``, for a ``raylab.train`` trial:
    ``progress.csv`` (every reported row; a column per metric, in the order first reported)
    and TensorBoard events (each number at step ``training_iteration``), when tensorboardX
    (which Ray Tune installs) imports."""

    def __init__(self, trial: TrialFolder):
        self.trial = trial
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            self.events = None
        else:
            self.events = SummaryWriter(str(trial.path), flush_secs=30)

    def write(self, row: dict[str, Any]) -> None:
        rows = self.trial.rows()  # a resumed trial's earlier rows too
        columns = list(dict.fromkeys(key for r in rows for key in r if not isinstance(r[key], (list, dict))))
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        files.write_atomic(self.trial.path / PROGRESS_FILE, out.getvalue().encode())
        if self.events is not None:
            step = int(row.get("training_iteration", len(rows)))
            for key, value in row.items():
                # NaN (a metric not measured yet) stays in progress.csv; in the events it would only
                # make tensorboardX warn, once per row, without naming the metric
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self.events.add_scalar(key, value, global_step=step)

    def close(self) -> None:
        if self.events is not None:
            self.events.close()


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    cli.use_config_dirs(args.configs)
    cli.quiet_third_party_warnings()
    if not args.experiment:
        raise UserError("name an experiment (python -m raylab.tune --list shows them)")
    checks.check_storage_syntax(args.storage)
    checks.check_name_syntax(args.name)
    if args.resume and cli.overrides_of(args):
        raise UserError("--resume continues a trial as it was started; drop the overrides")
    if args.resume:  # the run folder's own experiment (smoke or not), before any check
        run = trial_run_to_resume(args.storage, cli.experiment_name(args.experiment), args.smoke, args.name)
        experiment = experiments.from_run(run)
        cli.note_changed_experiment(run, args.experiment, "raylab.train")
    else:
        experiment = experiments.load(args.experiment, cli.overrides_of(args), smoke=args.smoke)
        checks.refuse_credential_values(experiment)
        run = RunFolder.under(args.storage, args.name or experiments.new_run_name(experiment, TRAIN_RUN))
        if args.name:
            checks.check_run_name(run)
    if run.is_uri:
        raise UserError(
            f"--storage {args.storage}: python -m raylab.train runs in this process and "
            "writes a local folder; use python -m raylab.tune for a cloud --storage"
        )
    checks.check_storage(run, need=checks.storage_need(experiment, args.resume, trials=1))
    checks.check_resources(experiment, ray_start.local_resources(), local=True)
    checks.preflight(experiment)
    variants = experiment.search.get(search_space.VARIANT, {}).get("grid", [])
    if args.variant is not None and not variants:
        raise UserError(f"--variant {args.variant}: {experiment.source} has no search.variant list")
    if args.resume and variants and args.variant is None:  # the variant the trial started with
        saved = next((t.config for t in run.read_trials() if t.name == TRAIN_TRIAL), {})
        args.variant = next(
            (k for k, group in enumerate(variants, 1) if all(saved.get(f) == v for f, v in group.items())), None
        )
    config, picked = single_config(experiment, args.variant or 1)
    for key, value in picked.items():
        if key == search_space.VARIANT:
            others = ", ".join(
                f"{k} {variants[k - 1]!r}" for k in range(1, len(variants) + 1) if k != (args.variant or 1)
            )
            cli.stderr(
                f"search.variant: using variant {args.variant or 1} of {len(variants)}, {value!r}"
                + (f"; pick another with --variant K: {others}" if others else "")
            )
            continue
        cli.stderr(f"search.{key}: using {value!r} (pin it with {pin_text(key, value)}, or another value)")
    if experiment.resources.workers > 1:
        raise UserError(
            f"{experiment.source}: {experiment.resources.workers} workers per trial need Ray Train; "
            f"run python -m raylab.tune {experiment.name} {' '.join(pin_text(k, v) for k, v in picked.items())}"
        )
    if args.resume:
        run.record(resumed=provenance.now())
    else:
        run.claim()
        experiment.write_to(run, TRAIN_RUN)
    try:
        history = run_local(experiment, run.trial(TRAIN_TRIAL), config, verbose=not args.quiet)
    except OSError as err:
        if not disk_full.is_disk_full(err):
            raise
        raise disk_full.DiskFull(
            disk_full.message(run.location, f"{err}").replace("the sweep stopped", "the trial stopped")
            + f"; free space there, then continue with: python -m raylab.train {experiment.name} --resume "
            f"--name {shlex.quote(run.name)}"
            + (f" --storage {shlex.quote(args.storage)}" if args.storage != "results" else "")
        ) from None
    run.record(ended=provenance.now())
    last = history[-1] if history else {}
    best_values = [
        r[experiment.metric]
        for r in history
        if isinstance(r.get(experiment.metric), (int, float)) and math.isfinite(r[experiment.metric])
    ]
    best = (max if experiment.mode == "max" else min)(best_values) if best_values else None
    print(
        summary.format_table(
            [
                {
                    "trial": run.name,
                    "iterations": last.get("training_iteration"),
                    f"{experiment.metric} (last)": last.get(experiment.metric),
                    f"{experiment.metric} ({experiment.mode})": best,
                }
            ]
        )
    )
    print(f"\nresults: {run.location}\n{cli.tensorboard_text(run.location)}")
    return 0


def trial_run_to_resume(storage: str, experiment_name: str, smoke: bool, name: str | None) -> RunFolder:
    """The ``python -m raylab.train`` run ``--resume`` continues: ``--name``, else the newest."""
    if name:
        run = RunFolder.under(storage, name)
        if run.kind(EXPERIMENT_FILE) != "file":
            raise UserError(f"--resume: no trial run at {run.location}")
        return run
    run = newest_run(storage, experiment_name, smoke=True if smoke else None, train=True)
    if run is None:
        kind = f"{experiment_name}-train{'-smoke' if smoke else ''}"
        raise UserError(f"--resume: no run of '{kind}' in {RunFolder(storage).location}")
    return run


if __name__ == "__main__":
    sys.exit(main())
