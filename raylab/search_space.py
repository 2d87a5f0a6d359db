"""The search-space DSL of experiment YAML files, turned into Ray Tune domains.

Under ``search:`` each key is a workload config field and each value one of::

    lr: [1e-4, 3e-4]                 # a list is a grid (every value, every trial)
    lr: {grid: [1e-4, 3e-4]}
    loss: {choice: [mse, huber]}     # sampled, one value per trial
    lr: {uniform: [1e-5, 1e-3]}
    lr: {loguniform: [1e-5, 1e-3]}
    width: {randint: [32, 257]}      # upper bound exclusive, as in numpy and Tune
    lr: {quniform: [0.1, 1.0, 0.1]}  # low, high, step
    lr: {qloguniform: [1e-5, 1e-2, 1e-5]}
    width: {qrandint: [32, 256, 32]} # upper bound inclusive, as in Tune

One key is not a field: ``variant``, a grid of groups of field values, for the conditional
sweeps a product cannot express (the temperature matters only for one loss)::

    variant:                         # each trial takes one group, crossed with the rest
      - {loss: mse}
      - {loss: soft_linf, beta: 3.0}
      - {loss: soft_linf, beta: 30.0}

Every grid or choice value, every variant, and both ends of a range, are checked against the
fields' types and ranges before anything starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raylab.config import VARIANT, from_dict
from raylab.errors import UserError

# Each range kind: its number of arguments (the Ray Tune sampler of the same name takes them);
# ray.tune is imported only by to_tune, so that loading and validating an experiment does not.
RANGES = {"uniform": (2,), "loguniform": (2,), "randint": (2,), "quniform": (3,), "qloguniform": (3,), "qrandint": (3,)}
KINDS = ("grid", "choice", *RANGES)


def normalize(spec: Any, source: str, key: str) -> dict[str, list]:
    """One search entry as ``{kind: args}``; a bare list means a grid."""
    if isinstance(spec, list):
        spec = {"grid": spec}
    if not isinstance(spec, dict) or len(spec) != 1:
        raise UserError(
            f"{source}: {key}: a search entry is a list (grid) or one of {{{', '.join(KINDS)}: ...}}, got {spec!r}"
        )
    ((kind, args),) = spec.items()
    if key.endswith(VARIANT) and (
        kind != "grid" or not all(isinstance(group, dict) and group for group in args or [None])
    ):
        raise UserError(
            f"{source}: {key}: a list of groups of field values, e.g. "
            f"[{{loss: mse}}, {{loss: soft_linf, beta: 3.0}}], got {spec!r}"
        )
    if kind not in KINDS:
        raise UserError(f"{source}: {key}: unknown search kind '{kind}'; valid: {', '.join(KINDS)}")
    if not isinstance(args, list) or not args:
        raise UserError(f"{source}: {key}: '{kind}' takes a non-empty list, got {args!r}")
    if kind in RANGES:
        arity = RANGES[kind][0]
        if len(args) != arity or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
            raise UserError(f"{source}: {key}: '{kind}' takes {arity} numbers, got {args!r}")
        if not args[0] < args[1]:
            raise UserError(f"{source}: {key}: '{kind}' needs low < high, got {args!r}")
        if kind in ("loguniform", "qloguniform") and args[0] <= 0:
            raise UserError(f"{source}: {key}: '{kind}' needs low > 0, got {args!r}")
    return {kind: args}


def validate(config_cls: type, fixed: dict, search: dict, source: str) -> None:
    """Check that every value the search can produce makes a valid config.

    Grid and choice values are each put into the fixed config and validated; for ranges the
    two ends are (with the right type: ints for ``randint``, floats otherwise).
    """
    fields = {f.name for f in dataclasses.fields(config_cls)}
    for key, spec in search.items():
        if key == VARIANT:
            _validate_variants(config_cls, fixed, search, spec["grid"], source, fields)
            continue
        if key not in fields:
            raise UserError(f"{source}: unknown key 'search.{key}'; valid keys: {', '.join(sorted(fields))}")
        ((kind, args),) = spec.items()
        values = args if kind in ("grid", "choice") else args[:2]
        if kind == "randint":
            values = [args[0], args[1] - 1]
        if kind in RANGES:
            values = [float(v) if kind in ("uniform", "loguniform") else v for v in values]
        for value in values:
            from_dict(config_cls, {**fixed, key: value}, f"{source} (search.{key}={value!r})", "config")


def _validate_variants(config_cls, fixed, search, groups, source, fields) -> None:
    for group in groups:
        for key in group:
            if key not in fields:
                raise UserError(
                    f"{source}: unknown key 'search.variant.{key}'; valid keys: {', '.join(sorted(fields))}"
                )
            if key in search or key in fixed:
                where = "search" if key in search else "config"
                raise UserError(f"{source}: search.variant sets '{key}', which {where} sets too; keep it in one place")
        from_dict(config_cls, {**fixed, **group}, f"{source} (search.variant={group!r})", "config")


def to_tune(search: dict) -> dict[str, Any]:
    """The normalized search entries as Ray Tune domains (``tune.grid_search`` etc.)."""
    from ray import tune

    space = {}
    for key, spec in search.items():
        ((kind, args),) = spec.items()
        if kind == "grid":
            space[key] = tune.grid_search(list(args))
        elif kind == "choice":
            space[key] = tune.choice(list(args))
        else:
            space[key] = getattr(tune, kind)(*args)
    return space


def grid_size(search: dict) -> int:
    """How many trials the grids in ``search`` expand to (1 if there are none)."""
    size = 1
    for spec in search.values():
        if "grid" in spec:
            size *= len(spec["grid"])
    return size
