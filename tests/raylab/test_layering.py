"""raylab/ is laid out by where its code runs, and its imports say so (read from the source).

- The workload API, the experiment spec and ``run_folder`` (everything outside ``launch/`` but
  the commands) reach nothing in ``raylab.launch``, directly or through another module.
- ``raylab.launch`` reaches no command (``raylab.tune``, ``raylab.train``, ``raylab.report``).
- ``raylab.cluster`` (the cluster tooling: the ``--dry-run --cluster`` plan and its prices, the
  head's setup guard, the nodes' GPU check) reaches nothing in ``raylab.launch`` and no command;
  only the commands and ``raylab.launch`` (the sweep takes its spot failure budget from
  ``raylab.cluster.prices``) reach into it.
- No import cycle anywhere in raylab/, counting imports inside functions; none in trainers/.
- ``raylab.run_folder`` (where results live and how they read back) reaches only
  ``raylab.config``, ``raylab.yaml_io``, ``raylab.errors`` and ``raylab.files``: it knows files,
  not the experiment spec (the spec writes and reads itself, ``raylab.experiment``).
- Ray Tune's ``Tuner`` and schedulers and Ray Train's ``TorchTrainer`` are imported only under
  ``launch/``.

The graph is computed from the AST of every module: ``import a.b``, ``from a import b`` (the
module ``a.b`` when it is one, else ``a``), wherever in the file they stand. The last tests plant
each kind of violation in a copy of raylab/ and show the check names it.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "raylab"
COMMANDS = ("raylab.tune", "raylab.train", "raylab.report", "raylab.report.__main__", "raylab.testing")
"""The three commands, and the test plugin, which drives sweeps as the commands do: they may use
``raylab.launch``."""
LAUNCH = "raylab.launch"
CLUSTER = "raylab.cluster"
"""The cluster tooling: the commands and the driver may use it; it uses neither."""
RUN_FOLDER = "raylab.run_folder"
RUN_FOLDER_REACHES = ("raylab.config", "raylab.yaml_io", "raylab.errors", "raylab.files", "raylab")
"""All that ``raylab.run_folder`` may import of raylab, directly or not: those three, and
``raylab.files`` (which imports nothing of raylab) for refusing a storage URI that holds
credentials; ``raylab``: the package's face."""
TRAINERS = "trainers"
DRIVER_ONLY = ("ray.tune.Tuner", "ray.tune.schedulers", "ray.train.torch.TorchTrainer")
"""What only ``raylab.launch`` may import (a name, or everything under it)."""


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def parse_modules(root: Path, package: str = PACKAGE) -> dict[str, ast.Module]:
    """Every module of ``package`` under ``root`` (the folder holding it), by dotted name."""
    return {
        module_name(root, path): ast.parse(path.read_text(), str(path))
        for path in sorted((root / package).rglob("*.py"))
    }


def imported_names(tree: ast.Module) -> list[tuple[str, int]]:
    """``(dotted name, line)`` of every import in the file, module level or not: ``import a.b``
    gives ``a.b``, ``from a.b import c`` gives ``a.b.c``; and every attribute read through a
    name bound to a module (``tune.Tuner`` after ``from ray import tune``)."""
    found: list[tuple[str, int]] = []
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, node.lineno))
                bound[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found.append((f"{node.module}.{alias.name}", node.lineno))
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in bound:
                found.append((".".join([bound[inner.id], *reversed(chain)]), node.lineno))
    return found


def module_graph(modules: dict[str, ast.Module]) -> dict[str, dict[str, int]]:
    """``{module: {imported raylab module: line}}``; ``from a import b`` is the module ``a.b``
    when there is one, else ``a`` (an attribute of it)."""
    graph: dict[str, dict[str, int]] = {}
    for name, tree in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            for target in targets:
                while target and target not in modules:  # import a.b.c of a non-module c: a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def reachable(graph: dict[str, dict[str, int]], start: str) -> dict[str, list[str]]:
    """Every module ``start`` imports, directly or not, with one import chain to it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        current = todo.pop()
        for target in graph.get(current, {}):
            if target not in paths:
                paths[target] = [*paths[current], target]
                todo.append(target)
    del paths[start]
    return paths


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles: each strongly connected component of more than one module (Tarjan),
    or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, {}):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layering_violations(root: Path, package: str = PACKAGE) -> list[str]:
    """Each broken rule of this module's docstring in the package at ``root``, as one line."""
    modules = parse_modules(root, package)
    graph = module_graph(modules)
    problems = []
    for name in sorted(modules):
        if any(under(name, c) for c in COMMANDS):
            continue
        for target, chain in sorted(reachable(graph, name).items()):
            if (under(name, LAUNCH) or under(name, CLUSTER)) and any(under(target, c) for c in COMMANDS):
                problems.append(f"{name} reaches the command {target}: {' -> '.join(chain)}")
            elif (
                not under(name, LAUNCH)
                and not under(name, CLUSTER)
                and under(target, CLUSTER)
                and not any(under(step, LAUNCH) or under(step, CLUSTER) for step in chain[1:-1])
            ):  # first step into cluster/ from outside both rooms only
                problems.append(f"{name} reaches {target} in cluster/: {' -> '.join(chain)}")
            elif (
                not under(name, LAUNCH) and under(target, LAUNCH) and (len(chain) == 2 or not under(chain[-2], LAUNCH))
            ):  # first step into launch only
                problems.append(f"{name} reaches {target} in launch/: {' -> '.join(chain)}")
    problems += [f"import cycle: {' <-> '.join(component)}" for component in cycles(graph)]
    for target, chain in sorted(reachable(graph, RUN_FOLDER).items()):
        if target not in RUN_FOLDER_REACHES:
            problems.append(
                f"{RUN_FOLDER} reaches {target} (only config, yaml_io, errors, files): {' -> '.join(chain)}"
            )
    for name, tree in sorted(modules.items()):
        if under(name, LAUNCH):
            continue
        for imported, line in imported_names(tree):
            if any(under(imported, driver) for driver in DRIVER_ONLY):
                problems.append(f"{name}:{line} imports {imported}, which only launch/ may")
    return sorted(set(problems))


def trainers_cycles(root: Path) -> list[str]:
    """The import cycles among the modules of ``trainers/`` under ``root``, one line each."""
    graph = module_graph(parse_modules(root, TRAINERS))
    return [f"import cycle: {' <-> '.join(component)}" for component in cycles(graph)]


# ------------------------------------------------------------------------ the rules hold


def test_raylab_is_layered_by_where_its_code_runs():
    problems = layering_violations(REPO)
    assert not problems, "\n".join(problems)


def test_trainers_have_no_import_cycle():
    problems = trainers_cycles(REPO)
    assert not problems, "\n".join(problems)
    assert "trainers.seagram.data" in module_graph(parse_modules(REPO, TRAINERS))["trainers.seagram.preflight"]


def test_the_graph_sees_function_level_imports_and_the_layers_are_there():
    """The graph is not vacuous: the driver reaches the workload API, and a function-level import
    (the Tune trainable starts the Train path only when a trial needs it) is an edge."""
    graph = module_graph(parse_modules(REPO))
    assert "raylab.launch.train_path" in graph["raylab.launch.trainable"]  # inside make_trainable
    assert "raylab.session" in reachable(graph, "raylab.launch.sweep")
    assert "raylab.launch.sweep" in reachable(graph, "raylab.tune")
    assert not any(under(t, LAUNCH) for t in reachable(graph, "raylab.session"))
    assert "raylab.cluster.plan" in graph["raylab.tune"]  # inside main, for --dry-run --cluster
    assert "raylab.cluster.prices" in reachable(graph, "raylab.launch.sweep")


# ------------------------------------------------------------------------ planted violations


@pytest.fixture
def copy_of_raylab(tmp_path):
    shutil.copytree(REPO / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    assert layering_violations(tmp_path) == []
    return tmp_path


def plant(root: Path, module: str, code: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + "\n\n" + code)


def test_a_planted_upward_import_is_named_with_its_chain(copy_of_raylab):
    plant(copy_of_raylab, "raylab.checkpoint", "def _upward():\n    from raylab.launch import summary\n")
    problems = layering_violations(copy_of_raylab)
    assert (
        "raylab.checkpoint reaches raylab.launch.summary in launch/: raylab.checkpoint -> raylab.launch.summary"
        in problems
    ), problems
    # and what imports the checkpoint module (the session) is named too, with its chain
    assert any(p.startswith("raylab.session reaches raylab.launch.summary") for p in problems), problems


def test_a_planted_cycle_through_a_function_level_import_is_named(copy_of_raylab):
    plant(
        copy_of_raylab, "raylab.launch.trial", "def _back():\n    from raylab.launch.trainable import make_trainable\n"
    )
    problems = layering_violations(copy_of_raylab)
    assert "import cycle: raylab.launch.train_path <-> raylab.launch.trainable <-> raylab.launch.trial" in problems, (
        problems
    )


def test_a_planted_tuner_outside_launch_is_named(copy_of_raylab):
    plant(
        copy_of_raylab,
        "raylab.run_folder",
        "def _restorable(path):\n    from ray import tune\n\n    return tune.Tuner.can_restore(path)\n",
    )
    plant(copy_of_raylab, "raylab.experiment", "from ray.train.torch import TorchTrainer  # noqa: F401\n")
    problems = layering_violations(copy_of_raylab)
    assert any(p.startswith("raylab.run_folder:") and "ray.tune.Tuner.can_restore" in p for p in problems), problems
    assert any(p.startswith("raylab.experiment:") and "ray.train.torch.TorchTrainer" in p for p in problems), problems


def test_a_command_imported_by_launch_is_named(copy_of_raylab):
    plant(copy_of_raylab, "raylab.launch.summary", "def _report(path):\n    from raylab import report\n")
    problems = layering_violations(copy_of_raylab)
    assert any(p.startswith("raylab.launch.summary reaches the command raylab.report") for p in problems), problems


def test_a_planted_import_of_the_driver_by_cluster_tooling_is_named(copy_of_raylab):
    plant(copy_of_raylab, "raylab.cluster.setup_guard", "def _sweep():\n    from raylab.launch import summary\n")
    problems = layering_violations(copy_of_raylab)
    assert any(p.startswith("raylab.cluster.setup_guard reaches raylab.launch.summary in launch/") for p in problems), (
        problems
    )


def test_a_planted_import_of_cluster_tooling_by_the_experiment_spec_is_named(copy_of_raylab):
    plant(copy_of_raylab, "raylab.experiment", "def _cost(e):\n    from raylab.cluster import plan\n")
    problems = layering_violations(copy_of_raylab)
    assert (
        "raylab.experiment reaches raylab.cluster.plan in cluster/: raylab.experiment -> raylab.cluster.plan"
        in problems
    ), problems


def test_a_planted_spec_import_in_run_folder_is_named(copy_of_raylab):
    plant(copy_of_raylab, "raylab.run_folder", "def _saved(run):\n    from raylab.experiment import from_run\n")
    problems = layering_violations(copy_of_raylab)
    assert (
        "raylab.run_folder reaches raylab.experiment (only config, yaml_io, errors, files): "
        "raylab.run_folder -> raylab.experiment" in problems
    ), problems


@pytest.fixture
def copy_of_trainers(tmp_path):
    shutil.copytree(REPO / TRAINERS, tmp_path / TRAINERS, ignore=shutil.ignore_patterns("__pycache__"))
    assert trainers_cycles(tmp_path) == []
    return tmp_path


def test_a_planted_cycle_in_trainers_is_named(copy_of_trainers):
    plant(
        copy_of_trainers,
        "trainers.seagram.data",
        "def _victim(cfg):\n    from trainers.seagram.victims import find_victim\n",
    )
    assert trainers_cycles(copy_of_trainers) == ["import cycle: trainers.seagram.data <-> trainers.seagram.victims"]
