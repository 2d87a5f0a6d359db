"""raylab: research training workloads as Ray Tune sweeps of Ray Train workers.

The package is laid out by where its code runs. Its top level is what a workload's code imports
(the workload API, which runs inside a trial) and the three commands (``python -m raylab.tune``,
``raylab.train``, ``raylab.report``); the experiment spec (``experiment``, ``search_space``,
``yaml_io``) and where results live (``run_folder``) sit beside them. ``raylab.launch`` is the
driver once Ray is up: Ray start, the checks, the sweep, the Tune and Train paths, the callbacks.

The workload API is re-exported here::

    from raylab import session, from_dict, check, UserError, rng_state, set_rng_state

Its names are ``raylab.workloads.WORKLOAD_API``'s (computed from it, not listed again here); each
is imported on first use, so ``import raylab`` stays cheap (no torch, no Ray).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"


def _api() -> tuple[tuple[str, ...], dict[str, str]]:
    """The modules and names re-exported here, computed from ``raylab.workloads.WORKLOAD_API``
    (the one list): each ``raylab.X`` module of it, and each name it lists with its module.
    Left out: the names of ``raylab.launch`` (a workload's own Ray driver imports them from
    there; a trial's code never does) and a name that is also a module of raylab (``report``:
    ``raylab.report`` is the report package, ``raylab.session.report`` stays in its module)."""
    import pkgutil

    from raylab.workloads import ALL, WORKLOAD_API

    own = {m.name for m in pkgutil.iter_modules(__path__)}
    modules = tuple(dict.fromkeys(m.split(".")[1] for m in WORKLOAD_API if m.count(".") == 1))
    names: dict[str, str] = {}
    for module, listed in WORKLOAD_API.items():
        if module.startswith("raylab.launch."):
            continue
        for name in listed:
            if name != ALL and name not in own:
                names.setdefault(name, module)
    return modules, names


_MODULES, _NAMES = _api()
"""Modules of the workload API (``from raylab import session``), and its names, each with the
module that defines it (``from raylab import check``)."""

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
