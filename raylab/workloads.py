"""The workload registry: names to a Config class and a train loop, imported on first use.

Workloads register through the ``raylab.workloads`` entry-point group (``registry``), so raylab
never imports a workload package by name; this module resolves their import paths lazily so
that listing or validating experiments stays fast.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from raylab.errors import UserError


@dataclass(frozen=True)
class Workload:
    """Where a workload's pieces live, as ``module:attribute`` import paths."""

    config: str
    """The frozen Config dataclass, e.g. ``trainers.dqn_softlinf.config:Config``."""
    loop: str
    """The ``train_loop(config: dict)`` that a Ray Tune trial or Ray Train worker runs."""
    metrics: tuple[str, ...] = ()
    """Metric names the loop reports; an experiment's ``metric`` must be one of them."""
    description: str = ""
    """One line for ``--list``."""
    preflight: str = ""
    """Optional ``module:function`` taking a built Config and raising ``UserError`` when this
    machine cannot run it (dataset missing or corrupted, replay buffer larger than memory).
    The CLI calls it before starting Ray on a local run; loops call it again at their start."""
    memory: str = ""
    """Optional ``module:function`` taking a built Config and returning the bytes of host
    memory one trial of it allocates (a replay buffer, a dataset held in memory);
    ``--dry-run --cluster`` packs trials on node types by it."""
    figures: str = ""
    """Optional ``module:attribute`` of the workload's ``raylab.report.spec.Report``: the
    figures and tables ``python -m raylab.report`` draws (``trainers/<name>/figures.py``)."""
    data_parallel: bool = False
    """Whether the loop shards its data across Ray Train workers, so that ``workers > 1``
    trains one model on more data per step; a workload that is not is refused for
    ``workers > 1`` at validation."""

    packages: tuple[str, ...] = ()
    """Distribution names whose installed versions a run records in its provenance, besides
    raylab, Ray and torch (e.g. ``("ale-py", "gymnasium")``)."""
    requires: tuple[str, ...] = ()
    """Top-level modules the workload imports on every run beyond raylab's own dependencies
    (e.g. ``("torch_geometric", "networkx")``); one missing is refused before Ray starts,
    naming it and ``extra``. Modules only some configs need are checked by the workload's
    preflight with ``require_modules``."""
    extra: str = ""
    """What installs ``requires``, as pip names it: ``raylab[seagram]`` (this repository's
    extras are named after their workload), or a lab package's own ``mylab[gnn]``."""

    def check_requires(self, name: str) -> None:
        """Refuse in one line when a module of ``requires`` does not import here."""
        require_modules(name, self.requires, self.extra)

    def config_class(self) -> type:
        return resolve(self.config)

    def preflight_check(self) -> Callable[[Any], None] | None:
        return resolve(self.preflight) if self.preflight else None

    def train_loop(self) -> Callable[[dict[str, Any]], None]:
        return resolve(self.loop)

    def report_spec(self) -> Any:
        """The declared ``Report`` (figures and tables), or None when there is none."""
        return resolve(self.figures) if self.figures else None


ALL = "*"
"""In ``WORKLOAD_API``: every public name of the module, and of every module under it."""

WORKLOAD_API: dict[str, tuple[str, ...]] = {
    "raylab.errors": ("UserError", "ThisMachine", "exit_on_user_error"),
    "raylab.config": ("from_dict", "check", "require_at_least", "require_positive", "with_variant", "UserPath"),
    "raylab.session": (
        "report",
        "restore",
        "device",
        "prepare_model",
        "world_rank",
        "world_size",
        "start",
        "run_folder",
    ),
    "raylab.checkpoint": (
        "rng_state",
        "set_rng_state",
        "save",
        "load_latest",
        "load_at",
        "LoopState",
        "GlobalRNG",
        "saved_only",
        "STATE_FILE",
        "on_device",
    ),
    "raylab.seeds": ("derive_seed",),
    "raylab.files": ("user_path", "user_location", "is_uri", "sha256_file", "write_atomic"),
    "raylab.run_folder": ("RunFolder", "TrialFolder"),
    "raylab.report.spec": ("Report", "Curve", "Bars", "Scatter", "Table", "Versus", "Only", "Aggregates", "Withheld"),
    "raylab.report.claims": ("Before", "Claim", "Contrast", "Control", "Derived", "Improvement", "Value", "where"),
    "raylab.experiment": ("load",),
    "raylab.accel": ("to_device", "fixed_shapes", "compiled", "enabled", "AUTO"),
    "raylab.workloads": ("Workload", "require_modules"),
    "raylab.launch.ray_start": ("connect",),
    "raylab.data": (ALL,),
    "raylab.models": (ALL,),
}
"""What a workload (``trainers/``, or a lab's own package) may import from raylab: module to
names, ``ALL`` for a whole package. The rest of raylab is the framework's inside and may change
without notice. This is the one list: ``raylab``'s own re-exports are computed from it.

One name of ``raylab.launch`` is in it, the one exception: ``ray_start.connect``, for a
workload's own Ray driver outside a sweep (boltz_distill's teacher embedding job,
``trainers/boltz_distill/teacher/ray_job.py``, starts or joins Ray to run its Ray tasks). A
trial's code never imports ``raylab.launch``; ``raylab`` does not re-export it. ``raylab.testing.workload_api_violations`` checks a package's imports against it
(``tests/raylab/test_public_ray_api.py`` runs it on ``trainers/``); a module renamed in
raylab is renamed here, once."""


def require_modules(
    workload: str, modules: tuple[str, ...] | list[str], extra: str | None = None, why: str = "", otherwise: str = ""
) -> None:
    """Raise ``UserError`` naming the first of ``modules`` that does not import here and the
    extra that installs it: ``seagram needs torch_geometric: pip install "raylab[seagram]"``.

    ``extra`` defaults to the one ``workload`` is registered with (``Workload.extra``).

    ``why`` follows the module's name (``for the held-out probe (config.heldout_size)``) and
    ``otherwise`` the install command (``or set heldout_size: 0``). The module is imported (a
    workload imports it next anyway), so an installed package whose import fails is named too,
    with its error.
    """
    if extra is None:
        extra = registry()[workload].extra if workload in registry() else ""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            absent = isinstance(err, ModuleNotFoundError) and err.name in (module, module.split(".")[0])
            install = f'pip install "{extra}"' if extra else f"pip install {module}"
            raise UserError(
                f"{workload} needs {module}{' ' + why if why else ''}"
                f"{'' if absent else f' (its import fails: {err})'}: {install}"
                + (f", {otherwise}" if otherwise else "")
            ) from None


def resolve(path: str) -> Any:
    """The object a ``module:attribute`` import path names (the module imported now)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


ENTRY_POINT_GROUP = "raylab.workloads"


@functools.cache
def registry() -> dict[str, Workload]:
    """All registered workloads by name, from the ``raylab.workloads`` entry-point group.

    An entry point names a ``Workload`` (registered under the entry point's name) or a mapping
    of names to ``Workload``s. This repository registers ``trainers:WORKLOADS``; a lab's own
    package adds its workloads the same way in its ``pyproject.toml``::

        [project.entry-points."raylab.workloads"]
        my_workload = "mylab.workload:WORKLOAD"
    """
    from importlib.metadata import entry_points

    found: dict[str, Workload] = {}
    origin: dict[str, str] = {}  # name -> the entry point that registered it
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            value = entry.load()
        except Exception as err:  # noqa: BLE001 - a broken plug-in is named, not a traceback
            raise UserError(
                f"entry point '{entry.name} = {entry.value}' ({ENTRY_POINT_GROUP}): cannot load it: {err}"
            ) from None
        items = value.items() if isinstance(value, Mapping) else [(entry.name, value)]
        for name, workload in items:
            if not isinstance(workload, Workload):
                raise UserError(
                    f"entry point '{entry.name} = {entry.value}' ({ENTRY_POINT_GROUP}): "
                    f"'{name}' is a {type(workload).__name__}, not a raylab Workload"
                )
            here = f"{entry.name} = {entry.value}"
            if name in found:
                raise UserError(
                    f"workload '{name}' is registered twice ({ENTRY_POINT_GROUP}): by "
                    f"entry point '{origin[name]}' and by '{here}'; rename one of them"
                )
            found[name], origin[name] = workload, here
    if not found:
        raise UserError(
            f"no workloads are registered (entry-point group '{ENTRY_POINT_GROUP}'); "
            "install the package with its entry points: pip install -e ."
        )
    return found


def get(name: str) -> Workload:
    """The workload called ``name``; a ``UserError`` listing the known ones otherwise."""
    workloads = registry()
    if name not in workloads:
        raise UserError(f"unknown workload '{name}'; available: {', '.join(sorted(workloads))}")
    return workloads[name]
