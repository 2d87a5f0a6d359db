"""Exposure: no eval/exec, safe loaders only, crafted data files cannot run code."""

from __future__ import annotations

import ast
import os
import pickle
from pathlib import Path

import pytest

from raylab.data import cifar
from raylab.errors import UserError

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("raylab", "trainers", "benchmarks") for p in (REPO / d).rglob("*.py"))


def calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else (f"{getattr(func.value, 'id', '?')}.{func.attr}" if isinstance(func, ast.Attribute) else "")
            )
            yield name, node


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_code_execution_from_input(path):
    for name, node in calls(path):
        assert name not in {"eval", "exec", "pickle.load", "pickle.loads", "marshal.loads"}, (
            f"{path}:{node.lineno}: {name}"
        )
        if name == "yaml.load":
            loader = {k.arg: k.value for k in node.keywords}.get("Loader")
            assert isinstance(loader, ast.Name) and loader.id == "_Loader", f"{path}:{node.lineno}"
        if name == "torch.load":
            assert "weights_only" in {k.arg for k in node.keywords}, f"{path}:{node.lineno}"


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_crafted_cifar_batch_is_refused():
    payload = pickle.dumps({b"data": _Exploit(), b"labels": [0]}, protocol=2)
    with pytest.raises(UserError, match="refusing to load posix.system"):
        cifar._unpickle(payload, "data_batch_1")
