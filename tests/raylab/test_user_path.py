"""``UserPath`` config fields: ``from_dict`` resolves them once, as ``raylab.files.user_path``
resolves a path (``~`` expanded, a relative path from where the command ran), leaves a URI and
an empty value as they are, and the generated YAML reference still shows the field."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

from raylab.config import UserPath, from_dict
from raylab.errors import UserError
from raylab.files import LAUNCH_DIR_ENV

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Paths:
    data_dir: UserPath = "~/data"
    """Where the data lives."""
    cache_dir: UserPath = ""
    """Empty: unset."""
    checkpoint: UserPath | None = None
    """A checkpoint, or none."""
    extra: tuple[UserPath, ...] = ()
    """More folders."""
    name: str = "~/not-a-path"
    """A plain string: left alone."""


def test_a_home_path_comes_out_of_from_dict_resolved_and_a_uri_unchanged(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(LAUNCH_DIR_ENV, str(tmp_path / "launch"))
    cfg = from_dict(
        Paths,
        {"data_dir": "~/x", "checkpoint": "s3://bucket/run/trial?region=us-west-2", "extra": ["rel", "/abs"]},
        "paths.yaml",
    )
    assert cfg.data_dir == str(tmp_path / "home" / "x") and type(cfg.data_dir) is str
    assert cfg.checkpoint == "s3://bucket/run/trial?region=us-west-2"
    assert cfg.extra == (str(tmp_path / "launch" / "rel"), "/abs")  # relative: from where the sweep ran
    assert cfg.cache_dir == "" and cfg.name == "~/not-a-path"
    default = from_dict(Paths, {}, "paths.yaml")  # a default is resolved like a given value
    assert default.data_dir == str(tmp_path / "home" / "data") and default.checkpoint is None


def test_outside_a_trial_a_relative_path_is_taken_from_the_current_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(LAUNCH_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert from_dict(Paths, {"data_dir": "data/cifar"}, "x").data_dir == str(tmp_path / "data" / "cifar")


def test_a_bad_path_value_is_one_line_naming_the_file_and_key():
    with pytest.raises(UserError, match=r"^paths.yaml: data_dir: expected path, got 3 \(int\)$"):
        from_dict(Paths, {"data_dir": 3}, "paths.yaml")
    with pytest.raises(UserError, match=r"^paths.yaml: checkpoint: a s3:// URI holding credentials"):
        from_dict(Paths, {"checkpoint": "s3://KEY:SECRET@bucket/x"}, "paths.yaml")


def test_the_yaml_reference_renders_a_user_path_field():
    spec = importlib.util.spec_from_file_location("docs_references_hook", REPO / "docs" / "_hooks" / "references.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    rows = {name: (kind, default, doc) for name, kind, default, doc in hook.field_rows(Paths)}
    assert rows["data_dir"] == ("UserPath", "`'~/data'`", "Where the data lives.")
    assert rows["checkpoint"][0] == "UserPath | None"
    from trainers.seagram.config import Config

    table = hook.field_table(Config, "config.")
    assert "| `config.data_dir` | `UserPath` | `'~/.cache/raylab/seagram'` |" in table
