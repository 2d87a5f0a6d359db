"""The site's reference pages are generated from the code as it builds: a field added to a
workload's Config dataclass shows in the built experiment reference, with its docstring."""

from __future__ import annotations

import dataclasses
import importlib.util
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = '''
from dataclasses import dataclass

from trainers.toy.config import Config as ToyConfig


@dataclass(frozen=True)
class Config(ToyConfig):
    added_for_the_docs_test: int = 7
    """A field this test adds to toy's Config; the built reference must show it."""
'''


def hook_module():
    spec = importlib.util.spec_from_file_location("docs_references_hook", REPO / "docs" / "_hooks" / "references.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_config_field_added_shows_in_the_built_reference(tmp_path, monkeypatch):
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    from raylab import workloads

    (tmp_path / "docs_probe_config.py").write_text(textwrap.dedent(PROBE))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "added_for_the_docs_test" not in hook_module().experiments_page()  # the control
    real = workloads.registry()
    patched = {**real, "toy": dataclasses.replace(real["toy"], config="docs_probe_config:Config")}
    monkeypatch.setattr(workloads, "registry", lambda: patched)

    monkeypatch.chdir(REPO)
    build(load_config(str(REPO / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True))
    html = (tmp_path / "site" / "reference" / "experiments" / "index.html").read_text()
    toy = html[html.index('id="toy"') :]
    assert "config.added_for_the_docs_test" in toy and "the built reference must show it" in toy
    # and the other generated pages are there, rendered: the CLI's flags, the API's docstrings
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "--smoke" in cli and "python -m raylab.report" in cli
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert 'id="raylab.session.report"' in api and "checkpoint" in api


def test_every_command_is_documented_from_its_parser_and_one_without_is_refused(monkeypatch):
    hook = hook_module()
    page = hook.cli_page()
    for command, _ in hook.entry_points():
        assert f"## `python -m {command}`" in page
    # a command whose module has main() but no parser(): the build stops rather than run main()
    monkeypatch.setattr(hook, "entry_points", lambda: [("raylab.errors", "raylab.errors")])
    with pytest.raises(RuntimeError, match="has no parser"):
        hook.cli_page()
