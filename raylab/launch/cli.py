"""Pieces shared by the command-line entry points (``raylab.tune``, ``raylab.train``)."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import warnings
from pathlib import Path

from raylab import experiment as experiments
from raylab import workloads
from raylab.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one ``UserError`` line (exit code 2).

    Flags must be spelled out: ``--smok`` is an error, not ``--smoke``.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        if kwargs.get("description"):  # a module docstring's first line, shown without its RST
            kwargs["description"] = plain_text(kwargs["description"])
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UserError(f"{message} (see {self.prog} --help)")


def plain_text(rst: str) -> str:
    """A docstring line for a terminal: ````code```` markup dropped."""
    return rst.replace("``", "")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments that ``raylab.tune`` and ``raylab.train`` share."""
    parser.add_argument("experiment", nargs="?", help="experiment name in tune_configs/ or a YAML path")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="overrides with dotted keys, values read as YAML: config.lr=3e-4 search.loss=[mse,huber]",
    )
    parser.add_argument("--smoke", action="store_true", help="apply the experiment's smoke section")
    parser.add_argument(
        "--spot",
        action="store_true",
        help="run trials on spot (preemptible) nodes: resources.spot=true (a cluster with spot node types)",
    )
    parser.add_argument("--storage", default="results", help="results root: a path or s3://, gs:// URI")
    parser.add_argument("--name", help="run folder name (default: EXPERIMENT[-smoke]-TIMESTAMP)")
    parser.add_argument(
        "--configs",
        action="append",
        default=[],
        metavar="DIR",
        help="also find experiments in this folder of YAMLs (repeatable; or RAYLAB_CONFIGS)",
    )


def overrides_of(args: argparse.Namespace) -> list[str]:
    """The command line's ``key=value`` overrides, with ``--spot`` as ``resources.spot=true``."""
    return [*args.overrides, *(["resources.spot=true"] if args.spot else [])]


def experiment_name(name_or_path: str) -> str:
    """An experiment's name as run folders save it: a YAML path's stem, or the name given."""
    return Path(name_or_path).stem if name_or_path.endswith((".yaml", ".yml")) else name_or_path


def use_config_dirs(folders: list[str]) -> None:
    """Apply ``--configs DIR`` (each folder is searched for experiment YAMLs too)."""
    for folder in folders:
        experiments.add_config_dir(folder)


def list_experiments() -> str:
    """The ``--list`` text: experiments with their workload and metric, then workloads."""
    lines = [
        "experiments (origin: package NAME = the folder of a package registered in raylab.experiments, "
        "else the folder given with --configs):"
    ]
    for name, (path, origin) in experiments.available_with_origin().items():
        try:
            exp = experiments.load(str(path))
            lines.append(f"  {name:<22} {exp.workload:<16} {exp.mode} {exp.metric}  {exp.description}  [{origin}]")
        except UserError as err:
            lines.append(f"  {name:<22} INVALID: {err}  [{origin}]")
    lines.append(f"workloads (entry points '{workloads.ENTRY_POINT_GROUP}'):")
    for name, workload in sorted(workloads.registry().items()):
        lines.append(f"  {name:<22} {workload.description}")
    return "\n".join(lines)


def quiet_third_party_warnings(verbose: bool = False) -> None:
    """Keep the terminal for raylab's own output: named third-party noise only is hidden.

    Deprecations that raylab's own calls trigger stay visible (Python shows those raised from
    ``__main__``; the test run shows all of them), so an upgrade that will break raylab is seen.
    Unless ``verbose``, Ray's advice to call ``Tuner.restore(...)`` is dropped (raylab prints
    the command that resumes a run), and so is Ray Tune's own progress output.
    """
    warnings.filterwarnings("ignore", message=".*pkg_resources is deprecated", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="wandb.*")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    nan_logger = logging.getLogger("tensorboardX.x2num")
    if _label_tensorboardx_nan not in nan_logger.filters:
        nan_logger.addFilter(_label_tensorboardx_nan)
    if not verbose:
        logging.getLogger("ray.tune.tune").addFilter(_drop_ray_resume_advice)
        # Ray Tune's new output engine prints its configuration box and a TensorBoard hint
        # into Ray's temp folder even at verbose=0; the legacy one is silent there.
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")


TENSORBOARDX_NAN = "NaN or Inf found in input tensor."


def _label_tensorboardx_nan(record: logging.LogRecord) -> bool:
    """tensorboardX's bare ``NaN or Inf found in input tensor.`` (its ``x2num.check_nan``, on a
    metric written to the TensorBoard events, by Ray Tune's logger or ``raylab.train``), said
    with where it comes from and what it means."""
    if record.getMessage() == TENSORBOARDX_NAN:
        record.msg = (
            "TensorBoard events (tensorboardX): a metric is NaN or infinite in this row "
            "(a metric not measured yet, or a diverging trial); written as is"
        )
        record.args = ()
    return True


def _drop_ray_resume_advice(record: logging.LogRecord) -> bool:
    return "Tuner.restore(" not in record.getMessage()


def note_changed_experiment(run, name_or_path: str, module: str) -> None:
    """On ``--resume``: one line when the experiment file has changed since ``run`` started
    (``RunFolder.source_changed``). The run continues the experiment it saved; the line says
    how to run the edited file instead."""
    from raylab.run_folder import EXPERIMENT_FILE

    try:
        current = experiments.find(name_or_path)
    except UserError:
        return
    if run.source_changed(current):
        stderr(
            f"note: {current} has changed since {run.name} started; --resume continues the experiment the run "
            f"saved ({run.join(EXPERIMENT_FILE)}); to run the edited file, start a new run: "
            f"python -m {module} {shlex.quote(name_or_path)}"
        )


def tensorboard_text(location: str) -> str:
    """``TensorBoard: tensorboard --logdir RUN``, and how to get the viewer where it is missing
    (it comes with raylab's ``dev`` and ``loggers`` extras, not with the framework itself)."""
    import importlib.util

    text = f"TensorBoard: tensorboard --logdir {shlex.quote(location)}"
    if importlib.util.find_spec("tensorboard") is None:
        text += "  (not installed here: pip install tensorboard)"
    return text


def stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
