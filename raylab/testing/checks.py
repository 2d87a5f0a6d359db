"""The checks of ``raylab.testing``: plain functions a lab's tests call; each raises
``AssertionError`` naming what is wrong."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Iterable


def validate_experiment(name: str) -> tuple[Any, Any]:
    """Check one experiment YAML against the contract; return its ``(full, smoke)`` Experiments.

    In both modes it loads, names a registered workload and a metric that workload declares,
    and its fixed values build the workload's Config. Its first line is the command that runs
    it, and its smoke mode asks one CPU worker (at most 2 CPUs, no GPU).
    """
    from raylab import experiment as experiments
    from raylab import workloads
    from raylab.errors import UserError

    loaded = []
    for smoke in (False, True):
        try:
            exp = experiments.load(name, smoke=smoke)
            workload = workloads.get(exp.workload)
            exp.resolved_config()
        except UserError as err:
            raise AssertionError(f"experiment '{name}'{' (smoke)' * smoke}: {err}") from None
        assert exp.metric in workload.metrics, (
            f"{exp.source}: metric '{exp.metric}' is not one workload '{exp.workload}' reports "
            f"({', '.join(workload.metrics)})"
        )
        loaded.append(exp)
    full, smoke_exp = loaded
    first = Path(full.source).read_text().splitlines()[0]
    assert first.startswith(f"# python -m raylab.tune {name}"), (
        f"{full.source}: the first line must be the command that runs it "
        f"('# python -m raylab.tune {name} ...'), not {first!r}"
    )
    r = smoke_exp.resources
    assert r.gpus_per_worker == 0 and r.workers == 1 and r.cpus_per_worker <= 2, (
        f"{full.source}: its smoke mode must run on one CPU worker with at most 2 CPUs; it asks "
        f"workers={r.workers}, cpus_per_worker={r.cpus_per_worker}, gpus_per_worker={r.gpus_per_worker}"
    )
    return full, smoke_exp


def validate_workload(name: str) -> None:
    """Check a registered workload: a frozen Config dataclass with a docstring under every
    field, valid at its defaults; declared metrics; a train loop that imports."""
    from raylab import workloads
    from raylab.config import field_docs

    workload = workloads.get(name)
    cls = workload.config_class()
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, (
        f"workload '{name}': {workload.config} is not a frozen dataclass"
    )
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"workload '{name}': Config fields without a docstring: {missing}"
    cls()  # the defaults are a valid config
    assert workload.metrics, f"workload '{name}' declares no metrics"
    assert callable(workload.train_loop()), f"workload '{name}': {workload.loop} is not callable"


def check_smoke_result(results, experiment) -> None:
    """Every trial of a smoke sweep (``smoke_sweep``'s result grid) ended without an error and
    reported the experiment's metric as a finite number at least once."""
    assert len(results) >= 1, f"{experiment.name}: the sweep ran no trial"
    for result in results:
        assert result.error is None, f"{experiment.name}: {result.path}: {result.error}"
        frame = result.metrics_dataframe
        assert frame is not None and experiment.metric in frame.columns, (
            f"{experiment.name}: {result.path}: metric '{experiment.metric}' was never reported"
        )
        values = frame[experiment.metric].dropna().tolist()
        assert values and all(math.isfinite(v) for v in values), (
            f"{experiment.name}: {result.path}: {experiment.metric} = {values}"
        )


def assert_finite_metrics(row: dict, names) -> None:
    """Every name in ``names`` is in ``row`` and is a finite number (or a list of them)."""
    for name in names:
        assert name in row, f"metric {name} was not reported; got {sorted(row)}"
        values = row[name] if isinstance(row[name], list) else [row[name]]
        for value in values:
            assert isinstance(value, (int, float)) and math.isfinite(value), f"{name} = {row[name]}"


SCIENCE_SEEDS_ENV = "RAYLAB_SCIENCE_SEEDS"
"""Comma-separated seeds a science test runs on instead of its default list."""


def science_seeds(default: Iterable[int]) -> list[int]:
    """The seeds a science test runs on: ``RAYLAB_SCIENCE_SEEDS`` (comma-separated integers or
    inclusive ranges, ``"50,51,52"`` or ``"50-52"``) where it is set and not empty, else
    ``default``. A science test asserts its claim over whatever seeds it is given, so the same
    test can be run on seeds nobody tuned on. A value that is not a list of distinct integers
    raises ``ValueError`` naming it."""
    raw = os.environ.get(SCIENCE_SEEDS_ENV, "").strip()
    if not raw:
        return list(default)
    hint = "expected distinct comma-separated integers or ranges such as 50,51,52 or 50-52"
    seeds: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in raw.split(","))):
            first, _, last = part.partition("-")
            seeds += range(int(first), int(last or first) + 1)
    except ValueError:
        raise ValueError(f"{SCIENCE_SEEDS_ENV}={raw!r}: {hint}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"{SCIENCE_SEEDS_ENV}={raw!r}: {hint}")
    return seeds


@contextlib.contextmanager
def torch_on_one_thread():
    """torch with one intra-op thread inside, its previous count restored after.

    Small models run fastest so, and stay steady on a busy two-core machine (Ray gives a
    one-CPU trial the same; two threads spin against other processes and run several times
    slower).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def raylab_imports(path: Path) -> list[tuple[str, str, int]]:
    """What a file takes from raylab: ``(module, name, line)``, with ``name`` ``""`` for a whole
    module. A module bound to a name (``from raylab import session``, ``import raylab.x as y``)
    counts each attribute the file reads from it (``session.report``) as a name taken."""
    tree = ast.parse(path.read_text(), str(path))
    taken: list[tuple[str, str, int]] = []
    bound: dict[str, str] = {}  # local name -> raylab module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "raylab":
                    taken.append((alias.name, "", node.lineno))
                    if alias.asname:
                        bound[alias.asname] = alias.name
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and not node.level
            and node.module.split(".")[0] == "raylab"
        ):
            for alias in node.names:
                taken.append((node.module, alias.name, node.lineno))
                if _is_module(f"{node.module}.{alias.name}"):
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            taken.append((bound[node.value.id], node.attr, node.lineno))
    return taken


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _allowed(module: str, name: str, api: dict[str, tuple[str, ...]]) -> bool:
    from raylab.workloads import ALL

    parts = module.split(".")
    if any(ALL in api.get(".".join(parts[:i]), ()) for i in range(1, len(parts) + 1)):
        return True  # the module is, or lies under, a package declared whole
    if not name:
        return module in api
    # ``from raylab import session`` takes the module raylab.session, declared itself
    return name in api.get(module, ()) or f"{module}.{name}" in api


def workload_api_violations(paths: Iterable[Path], api: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """Each use of raylab outside the declared workload API (``raylab.workloads.WORKLOAD_API``)
    in the given Python files, as ``file:line: raylab.module.name`` lines (none: all fine)."""
    if api is None:
        from raylab.workloads import WORKLOAD_API as api
    found = []
    for path in paths:
        for module, name, line in raylab_imports(Path(path)):
            if not _allowed(module, name, api):
                found.append(f"{path}:{line}: {module}{'.' + name if name else ''}")
    return found
