"""``python -m raylab.tune NAME [key=value ...]``: run an experiment as a Ray Tune sweep.

Examples::

    python -m raylab.tune --list
    python -m raylab.tune dqn_softlinf --dry-run
    python -m raylab.tune dqn_softlinf --smoke config.lr=3e-4 --num-samples 2
    python -m raylab.tune dqn_softlinf --resume
    python -m raylab.tune dqn_softlinf --address auto      # on a `ray up` cluster's head
"""

from __future__ import annotations

import sys

from raylab import checks, cli, loggers, ray_start, run_files, storage, summary, sweep, yaml_io
from raylab import experiment as experiments
from raylab import search_space
from raylab.errors import UserError, exit_on_user_error


def parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="python -m raylab.tune", description=__doc__.split("\n")[0])
    cli.add_common_arguments(p)
    p.add_argument("--list", action="store_true", help="list experiments and workloads")
    p.add_argument("--dry-run", action="store_true", help="print the resolved experiment; start nothing")
    p.add_argument("--resume", action="store_true", help="continue the newest (or --name) run")
    p.add_argument("--num-samples", type=int, help="override num_samples")
    p.add_argument("--address", help="join a running Ray cluster: auto or HOST:PORT")
    p.add_argument(
        "--shared-storage", action="store_true",
        help="a local --storage that every cluster node mounts at the same path (NFS)",
    )
    p.add_argument("--dashboard", action="store_true", help="local Ray with its dashboard on 127.0.0.1")
    p.add_argument("--report", action="store_true", help="write the figures report when the sweep ends")
    p.add_argument("--quiet", action="store_true", help="no progress table while the sweep runs")
    p.add_argument("--logger", action="append", default=[], metavar="NAME",
                   help="also log to mlflow, wandb or tensorboard (repeatable); see raylab/loggers.py")
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    cli.use_config_dirs(args.configs)
    log_to = loggers.check(args.logger)  # before Ray starts: a bad name is one line
    cli.quiet_third_party_warnings()
    if args.list:
        print(cli.list_experiments())
        return 0
    if not args.experiment:
        raise UserError("name an experiment (python -m raylab.tune --list shows them)")
    overrides = list(args.overrides)
    if args.num_samples is not None:
        overrides.append(f"num_samples={args.num_samples}")
    if args.resume and overrides:
        raise UserError("--resume continues a sweep as it was started; drop the overrides")
    experiment = experiments.load(args.experiment, overrides, smoke=args.smoke)

    if args.dry_run:
        print(dry_run_text(experiment))
        try:  # the checks a local run would make; a cluster may well pass where this machine fails
            checks.preflight(experiment)
            print("# preflight on this machine: ok")
        except UserError as err:
            print(f"# preflight on this machine: {err}")
        return 0

    checks.check_storage(args.storage)
    if args.resume:  # fail before Ray starts when there is nothing to resume
        sweep.find_run_to_resume(
            sweep.storage_root(args.storage), experiment.name, experiment.smoke, args.name
        )
    if not args.address:
        checks.check_resources(experiment, ray_start.local_resources(), local=True)
        checks.preflight(experiment)
    ray_info = ray_start.connect(
        args.address, dashboard=args.dashboard, state_api=experiment.resources.uses_ray_train
    )
    if ray_info["dashboard_url"]:
        cli.stderr(f"Ray dashboard: {ray_info['dashboard_url']}")
    if args.address:  # before any trial starts: a local folder must be one every node mounts
        import ray

        checks.check_storage(args.storage, joined=True, shared=args.shared_storage)
        checks.check_resources(experiment, ray.cluster_resources(), local=False)

    results, run_path, experiment = sweep.sweep(
        experiment, storage=args.storage, name=args.name, resume=args.resume,
        verbose=0 if args.quiet else 1, loggers=log_to, joined_cluster=bool(args.address),
    )
    table = summary.rows(results, experiment.metric, experiment.mode, list(experiment.search))
    csv_path = run_files.write_text(run_path, "summary.csv", summary.to_csv(table))
    print()
    print(summary.format_table(table))
    print(f"\nresults: {run_path}\nsummary: {csv_path}")
    if args.report:
        from raylab import report

        print(f"report: {report.write_report(run_path)}")
    unfinished = [row["trial"] for row in table if row["status"] not in ("TERMINATED", "ERROR")]
    if unfinished:
        run_name = storage.name_of(run_path)
        cli.stderr(
            f"sweep interrupted with {len(unfinished)} unfinished trial(s); continue it with: "
            f"python -m raylab.tune {experiment.name} --resume --name {run_name}"
            + (f" --storage {args.storage}" if args.storage != "results" else "")
        )
        return 130
    failed = [row["trial"] for row in table if row["status"] == "ERROR"]
    if failed:
        print(f"{len(failed)} trial(s) failed: {', '.join(failed)}; see their error.txt", file=sys.stderr)
        return 1
    return 0


def dry_run_text(experiment: experiments.Experiment) -> str:
    """The resolved experiment as YAML, with the trial count and the resources it needs."""
    trials = search_space.grid_size(experiment.search) * experiment.num_samples
    total = experiment.resources.total()
    path = "Ray Train workers" if experiment.resources.uses_ray_train else "Tune function trainable"
    return (
        f"# {experiment.source}{' (smoke)' if experiment.smoke else ''}\n"
        + yaml_io.dumps(experiment.to_yaml_dict())
        + f"# trials: {trials}; per trial: {total['CPU']:g} CPU, {total['GPU']:g} GPU ({path})"
    )


if __name__ == "__main__":
    sys.exit(main())
