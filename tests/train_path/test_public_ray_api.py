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
        str(path.relative_to(REPO)) for path in (REPO / "raylab").rglob("*.py")
        if any(m == "trainers" or m.startswith("trainers.") for m in imported_modules(path))
    ]
    assert not offenders, f"raylab/ imports trainers/ in {offenders}; register through entry points"
