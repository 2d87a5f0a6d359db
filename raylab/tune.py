"""``python -m raylab.tune NAME [key=value ...]``: run an experiment as a Ray Tune sweep.

Examples::

    python -m raylab.tune --list
    python -m raylab.tune dqn_softlinf --dry-run
    python -m raylab.tune dqn_softlinf --smoke config.lr=3e-4 --num-samples 2
    python -m raylab.tune dqn_softlinf --resume
    python -m raylab.tune dqn_softlinf --address auto      # on a `ray up` cluster's head
"""

from __future__ import annotations

import math
import os
import shlex
import sys

from raylab.launch import ray_start

if __name__ == "__main__":  # before Ray is imported (below): where a local Ray listens
    ray_start.bind_to_loopback_unless_asked(sys.argv[1:])

from raylab import experiment as experiments
from raylab import search_space, yaml_io
from raylab.errors import UserError, exit_on_user_error
from raylab.files import is_uri
from raylab.launch import checks, cli, disk_full, searcher, storage_secrets, summary, sweep
from raylab.launch import progress as progress_text
from raylab.launch.trackers import logger_option
from raylab.run_folder import BEST_FILE, ERROR_FILE, SUMMARY_FILE, RunFolder


def parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(prog="python -m raylab.tune", description=__doc__.split("\n")[0])
    cli.add_common_arguments(p)
    p.add_argument("--list", action="store_true", help="list experiments and workloads")
    p.add_argument("--dry-run", action="store_true", help="print the resolved experiment; start nothing")
    p.add_argument(
        "--cluster", metavar="YAML", help="with --dry-run: the node types this cluster file launches, and the cost"
    )
    p.add_argument("--resume", action="store_true", help="continue the newest (or --name) run")
    p.add_argument("--num-samples", type=int, help="override num_samples")
    p.add_argument("--address", help="join a running Ray cluster: auto or HOST:PORT")
    p.add_argument(
        "--shared-storage",
        action="store_true",
        help="a local --storage that every cluster node mounts at the same path (NFS)",
    )
    p.add_argument("--dashboard", action="store_true", help="local Ray with its dashboard on 127.0.0.1")
    p.add_argument("--keep", action="store_true", help="with --dashboard: keep it up after the sweep until Ctrl-C")
    p.add_argument("--listen", action="store_true", help="local Ray listens on all interfaces, not only 127.0.0.1")
    p.add_argument("--report", action="store_true", help="write the figures report when the sweep ends")
    p.add_argument("--quiet", action="store_true", help="no progress lines while the sweep runs")
    p.add_argument(
        "--logger",
        action="append",
        default=[],
        metavar="NAME",
        help="also log to mlflow, wandb or tensorboard (repeatable); see raylab/launch/trackers/logger_option.py",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="Ray Tune's own progress tables and logs, tracebacks and the trials' own output too",
    )
    p.add_argument("--notes", default="", metavar="TEXT", help="a note saved with the run and sent to the trackers")
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="NAME",
        help="a tag saved with the run and sent to the trackers (repeatable); python -m raylab.runs --tag filters by it",
    )
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    cli.use_config_dirs(args.configs)
    log_to = logger_option.check(args.logger)  # before Ray starts: a bad name is one line
    cli.quiet_third_party_warnings(verbose=args.verbose)
    if args.list:
        print(cli.list_experiments())
        return 0
    if not args.experiment:
        raise UserError("name an experiment (python -m raylab.tune --list shows them)")
    checks.check_storage_syntax(args.storage)
    checks.check_name_syntax(args.name)
    args.address = ray_start.cluster_address(args.address)
    # On a joined cluster the storage keys go to trials through a file on each node, never
    # through this process's environment, which Ray Tune copies into each trial actor's listed
    # runtime_env (raylab/launch/storage_secrets.py); before anything reads the storage.
    secrets = ray_start.credential_env(args.storage) if args.address and not args.dry_run else {}
    if secrets and (warning := storage_secrets.token_lifetime_warning(secrets, None, "the sweep")):
        cli.stderr(warning)  # a token of unstated lifetime; the dry run with --cluster compares it with the plan
    storage_secrets.use_credentials_file(secrets)
    tags = check_tags(args.tag)
    if args.resume and (args.notes or tags):
        raise UserError("--notes and --tag are saved when a run starts; --resume continues it as it was started")
    if args.keep and not args.dashboard:
        raise UserError("--keep keeps the dashboard up after the sweep; it needs --dashboard")
    if args.listen and args.address:
        raise UserError("--listen is for the local Ray raylab starts; a joined cluster binds as it was started")
    if args.resume:  # the run folder is resolved here, once, and handed to the sweep
        run, experiment = run_to_resume(args)
        if run.finished:
            print(f"{run.name} has finished: every trial terminated; nothing to resume.\nresults: {run.location}")
            return 0
    else:
        experiment = experiments.load(args.experiment, overrides_of(args), smoke=args.smoke)
        checks.refuse_credential_values(experiment)
        run = RunFolder.under(args.storage, args.name or experiments.new_run_name(experiment))

    if args.dry_run:
        print(dry_run_text(experiment))
        print(cost_text(experiment))
        if not args.cluster:  # a cluster plan prints its own wall time, for the cluster's nodes
            print(wall_time_text(experiment, args.storage))
        refused = []
        if args.cluster:
            from raylab.cluster import plan

            figures = {}
            try:
                print(plan.plan_text(experiment, args.cluster, figures, live=True))
            except UserError as err:
                refused.append(str(err))
            if warning := storage_secrets.token_lifetime_warning(
                os.environ, figures.get("wall_hours"), "the plan's wall time at the cap"
            ):
                cli.stderr(warning)
        for check, problem in run_checks(args, experiment, run):
            print(f"# {check}: {problem or 'ok'}")
            # a plan for a cluster is not refused for what this machine lacks (its CPUs, GPUs, memory)
            if problem and not (args.cluster and check in LOCAL_CHECKS):
                refused.append(problem)
        for problem in refused:  # the plan or a check refuses, as the real command would: exit 2
            cli.stderr(f"error: {problem}")
        return 2 if refused else 0

    for _, problem in run_checks(args, experiment, run, stop_at_first=True):
        if problem:
            raise UserError(problem)
    if not args.resume:  # one run per folder: a second sweep of this name is refused here
        run.claim()
    try:
        ray_info = ray_start.connect(
            args.address,
            dashboard=args.dashboard,
            state_api=experiment.resources.uses_ray_train,
            listen=args.listen,
            quiet=not args.verbose,
            env_vars=secrets or None,
        )
        if args.address:  # before any trial starts: a local folder must be one every node mounts
            import ray

            checks.check_storage(run, joined=True, shared=args.shared_storage)
            checks.check_resources(experiment, ray.cluster_resources(), local=False)
    except BaseException:
        run.release()  # the run never began: no empty folder left behind
        raise
    if ray_info["dashboard_url"]:
        cli.stderr(ray_start.dashboard_text(ray_info))

    cli.stderr(f"run folder: {run.location}\n{cli.tensorboard_text(run.location)}")
    try:
        done = sweep.run(
            experiment,
            run,
            resume=args.resume,
            verbose=2 if args.verbose else 0,
            progress=not args.quiet,
            loggers=log_to,
            joined_cluster=bool(args.address),
            notes=args.notes,
            tags=tags,
        )
    except KeyboardInterrupt:  # a second Ctrl-C stops Tune at once: the resume command still counts
        cli.stderr(f"sweep interrupted; continue it with:\n  {resume_command(experiment.name, run.name, args)}")
        return 130
    except disk_full.DiskFull as err:  # one line, no restarts; the state is saved to resume
        raise disk_full.DiskFull(
            f"{err}; free space there, then continue with: {resume_command(experiment.name, run.name, args)}"
        ) from None
    csv_path = run.write_text(SUMMARY_FILE, summary.to_csv(done.rows))
    print()
    print(summary.format_table(done.rows, experiment.metric))
    print(f"\nresults: {run.location}\nsummary: {csv_path}")
    print(summary.best_text(done.best, list(experiment.search), run.join(BEST_FILE) if done.best else ""))
    if args.report:
        from raylab import report

        print(f"report: {report.write_report(run.location)}")
    if ray_info["dashboard_url"] and args.keep and not done.unfinished:
        ray_start.wait_for_ctrl_c(ray_info)
    # Tune creates trials lazily: those it had not made yet are unfinished too
    unfinished = done.unfinished + max(0, progress_text.trial_count(experiment) - len(done.rows))
    if unfinished:
        cli.stderr(
            f"sweep interrupted with {unfinished} unfinished trial(s); continue it with:\n"
            f"  {resume_command(experiment.name, run.name, args)}"
        )
        return 130
    if done.failed:
        print(f"{len(done.failed)} trial(s) failed: {', '.join(done.failed)}; see their {ERROR_FILE}", file=sys.stderr)
        return 1
    if done.rows and not any(row.get(f"{experiment.metric} ({experiment.mode})") is not None for row in done.rows):
        cli.stderr(
            f"error: every trial ended without a finite {experiment.metric} (NaN, infinite or never reported); "
            f"see the trials' metrics in {csv_path}"
        )
        return 1
    return 0


def check_tags(tags: list[str]) -> tuple[str, ...]:
    """``--tag`` values: each one printable, without a comma (one tag per flag); once each."""
    for tag in tags:
        if not tag.strip() or not tag.isprintable() or "," in tag:
            raise UserError(f"--tag {tag!r}: a tag is one printable word or phrase without a comma (repeat --tag)")
    return tuple(dict.fromkeys(tag.strip() for tag in tags))


def overrides_of(args) -> list[str]:
    overrides = cli.overrides_of(args)
    if args.num_samples is not None:
        overrides.append(f"num_samples={args.num_samples}")
    return overrides


def run_to_resume(args) -> tuple[RunFolder, experiments.Experiment]:
    """The run folder ``--resume`` continues and the experiment it saved (before Ray starts)."""
    if overrides_of(args):
        raise UserError("--resume continues a sweep as it was started; drop the overrides")
    name = cli.experiment_name(args.experiment)
    run = sweep.run_to_resume(args.storage, name, True if args.smoke else None, args.name)
    experiment = experiments.from_run(run)
    if experiment.name != name:
        raise UserError(f"--resume --name {args.name}: that run is of experiment '{experiment.name}', not '{name}'")
    if not args.name:
        cli.stderr(f"resuming {run.name}, the newest unfinished run of '{name}'")
    cli.note_changed_experiment(run, args.experiment, "raylab.tune")
    return run, experiment


def resume_command(experiment_name: str, run_name: str, args) -> str:
    """The command that continues this run, exactly as it must be typed."""
    command = f"python -m raylab.tune {shlex.quote(experiment_name)} --resume --name {shlex.quote(run_name)}"
    if args.storage != "results":
        command += f" --storage {shlex.quote(args.storage)}"
    if args.address:
        command += f" --address {shlex.quote(args.address)}"
    if args.shared_storage:
        command += " --shared-storage"
    return command


MACHINE_MEMORY = "workload preflight, this machine's memory (a cluster's nodes have their own)"
LOCAL_CHECKS = ("resources on this machine", MACHINE_MEMORY)
"""The checks of this machine's own CPUs and GPUs, which a ``--cluster`` plan does not count
against the run (the cluster's nodes have their own; the plan checks those). The workload's
preflight counts: with ``--cluster`` it runs as the head would, in the cluster's file set
(``checks.preflight(head=True)``), and only its refusals about this machine's memory are left
out."""


def run_checks(args, experiment, run: RunFolder, stop_at_first: bool = False):
    """The checks the sweep passes before Ray starts, as ``(check, problem or None)`` pairs.

    ``--dry-run`` runs them all and prints each; a real run stops at the first problem.
    """

    def name_is_free():
        if args.name and not args.resume:
            checks.check_run_name(run)

    def resources():
        if not args.address:
            checks.check_resources(experiment, ray_start.local_resources(), local=True)

    def workload_preflight():
        if not (args.cluster and args.dry_run):
            checks.preflight(experiment)
            return ""
        return checks.preflight(experiment, head=True)

    # a plan for a cluster is not held to this machine's free disk space (the head's is another)
    need = None if args.cluster else checks.storage_need(experiment, args.resume)
    steps = [
        ("storage", lambda: checks.check_storage(run, need=need)),
        *(
            [("loggers", lambda: logger_option.check_targets(logger_option.check(args.logger), run))]
            if args.logger
            else []
        ),
        ("run name", name_is_free),
        ("resources on the cluster (checked once joined)" if args.address else "resources on this machine", resources),
        ("workload preflight", workload_preflight),
    ]
    for check, step in steps:
        try:
            note = step()
            if note:  # the preflight on the head passed; this machine's memory would not
                yield check, None
                yield MACHINE_MEMORY, note
            else:
                yield check, None
        except UserError as err:
            yield check, str(err)
            if stop_at_first:
                return


def dry_run_text(experiment: experiments.Experiment) -> str:
    """The resolved experiment as YAML, with the trial count and the resources it needs."""
    trials = search_space.grid_size(experiment.search) * experiment.num_samples
    total = experiment.resources.total()
    path = "Ray Train workers" if experiment.resources.uses_ray_train else "Tune function trainable"
    resolved = experiment.to_yaml_dict()
    return (
        f"# {experiment.source}{' (smoke)' if experiment.smoke else ''}\n"
        + yaml_io.dumps(resolved)
        + f"# trials: {trials}; per trial: {total['CPU']:g} CPU, {total['GPU']:g} GPU ({path})\n"
        + searcher.describe(experiment)
        + auto_switches_text(resolved["config"], total["GPU"] > 0)
    )


def trial_time(experiment: experiments.Experiment, storage: str) -> tuple[float, str] | None:
    """Seconds one trial takes and where that figure comes from: the median trial of the
    newest earlier run of this experiment (smoke or not, as this one) under ``storage``, else
    the file's ``estimate`` (steps of a trial over ``estimate.steps_per_s``; full-size runs
    only); None without either."""
    import statistics

    from raylab.run_folder import newest_run

    try:
        earlier = None if is_uri(storage) else newest_run(storage, experiment.name, smoke=experiment.smoke)
    except (OSError, UserError):
        earlier = None
    if earlier is not None:
        times = [
            rows[-1]["time_total_s"]
            for trial in earlier.trials()
            if (rows := trial.rows()) and isinstance(rows[-1].get("time_total_s"), (int, float))
        ]
        if times:
            return statistics.median(times), f"the median of {len(times)} trial(s) of the earlier run {earlier.name}"
    length = experiment.trial_length()
    # the file's estimate describes its full-size trials (on the hardware it names), not the smoke ones
    if length and experiment.estimate.steps_per_s and not experiment.smoke:
        key, steps = length
        rate = experiment.estimate.steps_per_s
        basis = experiment.estimate.rate_basis or "rate stated in the file"
        return steps / rate, f"{steps:,.0f} {key} at {rate:,.4g} {key}/s, estimate.steps_per_s: {basis}"
    return None


def wall_time_text(experiment: experiments.Experiment, storage: str) -> str:
    """``# wall time: about 5000 trials x 12 s / 2 at once = 8.3 h (trial time: ...)``: the
    sweep's expected wall time on this machine, W = N x T / C, with the trial count N from the
    search space, the trial time T (``trial_time``) and C the trials that run at once here."""
    trials = search_space.grid_size(experiment.search) * experiment.num_samples
    at_once = experiment.max_concurrent_trials or checks.fitting_trials(experiment, ray_start.local_resources())
    where = "max_concurrent_trials" if experiment.max_concurrent_trials else "what fits on this machine"
    timed = trial_time(experiment, storage)
    if timed is None:
        return (
            f"# wall time: {trials} trials x ? s / {at_once} at once ({where}); no trial time known yet: once a run "
            "of it has trials, dry runs take their median time"
            + ("" if experiment.smoke else "; or state estimate.steps_per_s in the file")
        )
    seconds, basis = timed
    waves = math.ceil(trials / at_once)
    return (
        f"# wall time: about {trials} trials x {progress_text.duration(seconds)} / {at_once} at once ({where}) = "
        f"{progress_text.duration(waves * seconds)} (trial time: {basis})"
    )


def auto_switches_text(config: dict, gpu: bool) -> str:
    """What the config's ``auto`` speed switches (``raylab.accel.enabled``) are on these trials:
    on where the trial's device is CUDA, that is where it reserves a GPU."""
    auto = [key for key, value in config.items() if value == "auto"]
    if not auto:
        return ""
    where = "on: each trial reserves a GPU (CUDA)" if gpu else "off: the trials reserve no GPU (CPU)"
    return f"\n# {', '.join(auto)}: auto -> {where}"


def cost_text(experiment: experiments.Experiment) -> str:
    """The sweep's size: trials x steps, GPU-hours at the file's stated rate, checkpoint bytes."""
    trials = search_space.grid_size(experiment.search) * experiment.num_samples
    estimate = experiment.estimate
    lines = []
    if length := experiment.trial_length():
        key, steps = length
        lines.append(
            f"# cost: {trials} trials x {steps:,.0f} {key} = {trials * steps:,.0f} {key}"
            + ("" if experiment.stop else " (estimate.trial_steps: the loop's own end)")
        )
        if estimate.steps_per_s:
            hours = trials * steps / estimate.steps_per_s / 3600
            gpus = experiment.resources.total()["GPU"]
            lines.append(
                f"#   at {estimate.steps_per_s:,.4g} {key}/s per trial ({estimate.rate_basis or 'rate stated in the file'}): "
                f"{hours:,.1f} trial-hours"
                + (f", {hours * gpus:,.1f} GPU-hours" if gpus else "")
                + f", {hours * experiment.resources.total()['CPU']:,.1f} CPU-hours"
            )
    else:
        lines.append(
            f"# cost: {trials} trials; no stop criterion or estimate.trial_steps, so no step count to multiply"
        )
    if need := checks.checkpoint_need(experiment):  # the storage probe compares the same total
        lines.append(
            f"#   checkpoints kept: {need.trials} trials x {need.kept if need.kept is not None else 'all (at least 1)'} x "
            f"{_bytes(need.checkpoint_bytes)} = {_bytes(need.total)}"
        )
    if not estimate.steps_per_s or not estimate.checkpoint_bytes:
        lines.append(
            "#   (the file states no "
            + " or ".join(
                name
                for name, value in (
                    ("steps_per_s", estimate.steps_per_s),
                    ("checkpoint_bytes", estimate.checkpoint_bytes),
                )
                if not value
            )
            + " in its estimate: section)"
        )
    return "\n".join(lines)


_bytes = checks.human_bytes


if __name__ == "__main__":
    sys.exit(main())
