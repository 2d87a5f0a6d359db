"""benchmarks/torch_api_check.py: finds a torch attribute the running torch lacks, and none here."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("torch_api_check", REPO / "benchmarks" / "torch_api_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_chain_the_torch_lacks_is_reported():
    check = load()
    old_torch = types.SimpleNamespace(nn=types.SimpleNamespace(Linear=object), __name__="torch")
    absent = check.missing(old_torch, {"torch.nn.Linear": "a.py", "torch.nn.NewLayer": "b.py"})
    assert absent == [("torch.nn.NewLayer", "b.py")]


def test_every_chain_of_the_project_exists_in_the_installed_torch():
    import torch

    check = load()
    names = check.chains()
    assert len(names) > 50 and "torch.cuda.is_available" in names  # it reads the project's code
    assert check.missing(torch, names) == []
