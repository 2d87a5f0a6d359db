"""Pieces shared by the command-line entry points (``raylab.tune``, ``raylab.train``)."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from raylab import experiment as experiments
from raylab import workloads
from raylab.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one ``UserError`` line (exit code 2)."""

    def error(self, message: str):
        raise UserError(f"{message} (see {self.prog} --help)")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments that ``raylab.tune`` and ``raylab.train`` share."""
    parser.add_argument("experiment", nargs="?", help="experiment name in tune_configs/ or a YAML path")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value",
        help="overrides with dotted keys, values read as YAML: config.lr=3e-4 search.loss=[mse,huber]",
    )
    parser.add_argument("--smoke", action="store_true", help="apply the experiment's smoke section")
    parser.add_argument("--storage", default="results", help="results root: a path or s3://, gs:// URI")
    parser.add_argument("--name", help="run folder name (default: EXPERIMENT[-smoke]-TIMESTAMP)")
    parser.add_argument(
        "--configs", action="append", default=[], metavar="DIR",
        help="also find experiments in this folder of YAMLs (repeatable; or RAYLAB_CONFIGS)",
    )


def use_config_dirs(folders: list[str]) -> None:
    """Apply ``--configs DIR`` (each folder is searched for experiment YAMLs too)."""
    for folder in folders:
        experiments.add_config_dir(folder)


def list_experiments() -> str:
    """The ``--list`` text: experiments with their workload and metric, then workloads."""
    lines = ["experiments (origin: package = tune_configs/ shipped with raylab, else the folder):"]
    for name, (path, origin) in experiments.available_with_origin().items():
        try:
            exp = experiments.load(str(path))
            lines.append(f"  {name:<22} {exp.workload:<16} {exp.mode} {exp.metric}  {exp.description}"
                         f"  [{origin}]")
        except UserError as err:
            lines.append(f"  {name:<22} INVALID: {err}  [{origin}]")
    lines.append(f"workloads (entry points '{workloads.ENTRY_POINT_GROUP}'):")
    for name, workload in sorted(workloads.registry().items()):
        lines.append(f"  {name:<22} {workload.description}")
    return "\n".join(lines)


def quiet_third_party_warnings() -> None:
    """Keep the terminal for raylab's own output: named third-party noise only is hidden.

    Deprecations that raylab's own calls trigger stay visible (Python shows those raised from
    ``__main__``; the test run shows all of them), so an upgrade that will break raylab is seen.
    """
    warnings.filterwarnings("ignore", message=".*pkg_resources is deprecated", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="wandb.*")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")


def stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
