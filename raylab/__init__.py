"""raylab: research training workloads as Ray Tune sweeps of Ray Train workers.

The package is laid out by where its code runs. Its top level is what a workload's code imports
(the workload API, which runs inside a trial) and the three commands (``python -m raylab.tune``,
``raylab.train``, ``raylab.report``); the experiment spec (``experiment``, ``search_space``,
``yaml_io``) and where results live (``run_folder``) sit beside them. ``raylab.launch`` is the
driver once Ray is up: Ray start, the checks, the sweep, the Tune and Train paths, the callbacks.

The workload API is re-exported here::

    from raylab import session, from_dict, require, UserError, rng_state, set_rng_state

Each name is imported on first use, so ``import raylab`` stays cheap (no torch, no Ray).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_MODULES = ("session", "checkpoint", "config", "errors", "accel", "files", "workloads", "data", "models", "experiment")
"""Modules of the workload API (``from raylab import session``); ``experiment`` for a workload's
own runner that reads a shipped experiment file (``experiment.load``)."""

_NAMES = {
    "UserError": "raylab.errors",
    "ThisMachine": "raylab.errors",
    "exit_on_user_error": "raylab.errors",
    "from_dict": "raylab.config",
    "require": "raylab.config",
    "require_at_least": "raylab.config",
    "require_positive": "raylab.config",
    "rng_state": "raylab.checkpoint",
    "set_rng_state": "raylab.checkpoint",
    "LoopState": "raylab.checkpoint",
    "GlobalRNG": "raylab.checkpoint",
    "saved_only": "raylab.checkpoint",
    "on_device": "raylab.checkpoint",
    "load_at": "raylab.checkpoint",
    "derive_seed": "raylab.seeds",
    "user_path": "raylab.files",
    "user_location": "raylab.files",
    "with_variant": "raylab.search_space",
    "sha256_file": "raylab.files",
    "write_atomic": "raylab.files",
    "RunFolder": "raylab.run_folder",
    "TrialFolder": "raylab.run_folder",
    "Workload": "raylab.workloads",
    "to_device": "raylab.accel",
    "fixed_shapes": "raylab.accel",
    "compiled": "raylab.accel",
    "enabled": "raylab.accel",
    "AUTO": "raylab.accel",
    "Report": "raylab.report.spec",
    "Curve": "raylab.report.spec",
    "Bars": "raylab.report.spec",
    "Scatter": "raylab.report.spec",
    "Table": "raylab.report.spec",
    "Versus": "raylab.report.spec",
    "Only": "raylab.report.spec",
    "Aggregates": "raylab.report.spec",
    "Withheld": "raylab.report.spec",
    "Claim": "raylab.report.claims",
    "Contrast": "raylab.report.claims",
    "Control": "raylab.report.claims",
    "Derived": "raylab.report.claims",
    "Improvement": "raylab.report.claims",
    "Value": "raylab.report.claims",
    "where": "raylab.report.claims",
}
"""Names of the workload API, each with the module that defines it."""

__all__ = [*_MODULES, *_NAMES]


def __getattr__(name: str):
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
