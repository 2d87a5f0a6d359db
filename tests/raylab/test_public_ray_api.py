"""raylab/ and trainers/ use only Ray's public API, and raylab/ never imports trainers/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(REPO / "raylab").rglob("*.py"), *(REPO / "trainers").rglob("*.py")])


def imported_modules(path: Path) -> list[str]:
    """Every module a file imports (``import a.b``, ``from a.b import c`` gives ``a.b.c``)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def is_private_ray(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "ray" and any(p == "_private" or p == "_internal" for p in parts[1:])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_private_ray_imports(path):
    private = [m for m in imported_modules(path) if is_private_ray(m)]
    assert not private, f"{path.relative_to(REPO)} imports private Ray modules: {private}"


def test_the_check_catches_private_imports():
    assert is_private_ray("ray._private.accelerators.get_accelerator_manager_for_resource")
    assert is_private_ray("ray.train.v2._internal.constants")
    assert not is_private_ray("ray.train.UserCallback")


def test_raylab_never_imports_trainers():
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "raylab").rglob("*.py")
        if any(m == "trainers" or m.startswith("trainers.") for m in imported_modules(path))
    ]
    assert not offenders, f"raylab/ imports trainers/ in {offenders}; register through entry points"


WORKLOAD_SOURCES = sorted((REPO / "trainers").rglob("*.py"))


def test_trainers_import_only_the_declared_workload_api():
    from raylab.testing import workload_api_violations

    found = workload_api_violations(WORKLOAD_SOURCES)
    assert not found, (
        "trainers/ uses raylab beyond raylab.workloads.WORKLOAD_API (declare it there, "
        "or use a declared name):\n" + "\n".join(found)
    )


def test_the_workload_api_check_catches_undeclared_uses(tmp_path):
    from raylab.testing import workload_api_violations

    lab = tmp_path / "lab.py"
    lab.write_text(
        "from raylab import session\nfrom raylab.launch import sweep\nfrom raylab.errors import UserError\n"
        "import raylab.train_bridge\nfrom raylab.data.cifar import prepare_cifar\n"
        "session.report({})\nsession.snapshot()\nsweep.sweep(None)\n"
    )
    found = [line.split(": ", 1)[1] for line in workload_api_violations([lab])]
    assert found == [
        "raylab.launch.sweep",
        "raylab.train_bridge",
        "raylab.session.snapshot",
        "raylab.launch.sweep.sweep",
    ], found


def test_every_declared_workload_api_name_exists():
    """A module renamed in raylab fails here until ``WORKLOAD_API`` (one place) follows it."""
    import importlib

    from raylab.workloads import ALL, WORKLOAD_API

    missing = []
    for module, names in WORKLOAD_API.items():
        try:
            loaded = importlib.import_module(module)
        except ImportError as err:
            missing.append(f"{module} ({err})")
            continue
        missing += [f"{module}.{n}" for n in names if n != ALL and not hasattr(loaded, n)]
    assert not missing, f"raylab.workloads.WORKLOAD_API names what raylab lacks: {missing}"


def test_raylab_exports_the_workload_api():
    """``raylab.__all__`` is the workload API: each name resolves (to the object its module
    defines), and every name ``WORKLOAD_API`` declares outside ``raylab.launch`` is reachable
    from ``raylab``, itself or through a module ``raylab`` exports (``raylab.session.report``)."""
    import importlib

    import raylab
    from raylab.workloads import ALL, WORKLOAD_API

    exported = {}
    exec("from raylab import *", exported)  # the star import a user may write
    assert set(raylab.__all__) <= set(exported), sorted(set(raylab.__all__) - set(exported))
    for name in raylab.__all__:
        value = getattr(raylab, name)
        if isinstance(value, type(raylab)):
            assert value.__name__ == f"raylab.{name}", name
        else:  # the object its module defines (raylab.__init__ names the module)
            assert value is getattr(importlib.import_module(raylab._NAMES[name]), name), name
    unreachable = []
    for module, names in WORKLOAD_API.items():
        if module.startswith("raylab.launch."):
            continue  # a workload's own Ray job may join Ray as the commands do (teacher/ray_job.py)
        top = module.split(".")[1]
        for name in names:
            if name == ALL:
                reachable = top in raylab.__all__
            else:
                reachable = name in raylab.__all__ or (module.count(".") == 1 and top in raylab.__all__)
            if not reachable:
                unreachable.append(f"{module}.{name}")
    assert not unreachable, f"declared in WORKLOAD_API, not exported by raylab: {unreachable}"
