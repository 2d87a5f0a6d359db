"""Typed configs, YAML reading, overrides and the search-space DSL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest
from ray.tune.search.sample import Categorical, Float, Integer

from raylab import search_space, yaml_io
from raylab.config import check, field_docs, from_dict, to_dict, with_variant
from raylab.errors import UserError
from raylab.experiment import merge, parse_override


@dataclass(frozen=True)
class Example:
    lr: float = 1e-3
    """Learning rate."""
    steps: int = 10
    """Steps."""
    loss: Literal["mse", "huber"] = "mse"
    """Loss."""
    widths: tuple[int, ...] = (32, 32)
    """Layer widths."""
    tag: str | None = None
    """Optional tag."""
    flag: bool = False
    """A flag."""

    def __post_init__(self):
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")


def test_from_dict_builds_and_coerces():
    cfg = from_dict(Example, {"lr": 1, "widths": [8, 16], "tag": "a"}, "f.yaml", "config")
    assert cfg == Example(lr=1.0, widths=(8, 16), tag="a")
    assert isinstance(cfg.lr, float) and isinstance(cfg.widths, tuple)
    assert to_dict(cfg)["widths"] == [8, 16]


@pytest.mark.parametrize(
    "data, fragments",
    [
        ({"lrr": 1.0}, ["f.yaml", "unknown key 'config.lrr'", "valid keys: flag, loss, lr, steps, tag, widths"]),
        ({"lr": "fast"}, ["f.yaml", "config.lr", "expected float", "'fast'"]),
        ({"steps": 2.5}, ["config.steps", "expected int"]),
        ({"steps": True}, ["config.steps", "expected int"]),
        ({"flag": 1}, ["config.flag", "expected bool"]),
        ({"loss": "l1"}, ["config.loss", "'l1' is not one of 'mse', 'huber'"]),
        ({"widths": [8, "x"]}, ["config.widths[1]", "expected int"]),
        ({"lr": -1.0}, ["f.yaml", "config.lr: must be > 0, got -1.0"]),
    ],
)
def test_from_dict_errors_name_file_key_and_problem(data, fragments):
    with pytest.raises(UserError) as err:
        from_dict(Example, data, "f.yaml", "config")
    for fragment in fragments:
        assert fragment in str(err.value)


def test_field_docs_reads_docstrings_under_fields():
    docs = field_docs(Example)
    assert docs["lr"] == "Learning rate." and set(docs) == {"lr", "steps", "loss", "widths", "tag", "flag"}


def test_yaml_reads_scientific_notation_as_float_and_stays_safe():
    data = yaml_io.loads("a: 1e-4\nb: 3E5\nc: 1.5\nd: 7\ne: 1e4x\nf: .inf", "t")
    assert data == {"a": 1e-4, "b": 3e5, "c": 1.5, "d": 7, "e": "1e4x", "f": float("inf")}
    with pytest.raises(UserError, match="could not determine a constructor"):
        yaml_io.loads("x: !!python/object/apply:os.system ['true']", "t")


def test_yaml_syntax_error_names_file_and_line():
    with pytest.raises(UserError) as err:
        yaml_io.loads("a: 1\nb: [1, 2\nc: 3\n", "exp.yaml")
    assert str(err.value).startswith("exp.yaml:") and "YAML syntax error" in str(err.value)
    assert str(err.value).split(":")[1] in {"3", "4"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("config.lr=3e-4", {"config": {"lr": 3e-4}}),
        ("search.loss=[mse,soft_linf]", {"search": {"loss": ["mse", "soft_linf"]}}),
        ("num_samples=2", {"num_samples": 2}),
        ("stop.env/steps=1000", {"stop": {"env/steps": 1000}}),
        ("resources.gpus_per_worker=0.5", {"resources": {"gpus_per_worker": 0.5}}),
        ("config.tag=", {"config": {"tag": None}}),
    ],
)
def test_parse_override(text, expected):
    assert parse_override(text) == expected


@pytest.mark.parametrize("text", ["config.lr", "=3", "config..lr=1", "nope.lr=1", "config.lr=[1,"])
def test_parse_override_errors(text):
    with pytest.raises(UserError):
        parse_override(text)


def test_pinning_a_field_keeps_the_variants_that_agree():
    base = {
        "config": {},
        "search": {"variant": [{"loss": "mse"}, {"loss": "huber", "lr": 0.1}, {"loss": "huber", "lr": 0.2}]},
    }
    assert merge(base, {"config": {"loss": "huber"}})["search"]["variant"] == [{"lr": 0.1}, {"lr": 0.2}]
    assert "variant" not in merge(base, {"config": {"loss": "mse"}})["search"]
    assert "variant" not in merge(base, {"config": {"loss": "l1"}})["search"]


def test_merge_pins_and_unpins_search_fields():
    base = {"config": {"lr": 1.0, "seed": 0}, "search": {"loss": ["a", "b"]}, "stop": {"x": 1}}
    pinned = merge(base, {"config": {"loss": "a"}})
    assert pinned["config"]["loss"] == "a" and "loss" not in pinned["search"]
    swept = merge(base, {"search": {"lr": [1, 2]}})
    assert swept["search"]["lr"] == [1, 2] and "lr" not in swept["config"]
    assert merge(base, {"stop": {"y": 2}})["stop"] == {"x": 1, "y": 2}
    assert base["config"] == {"lr": 1.0, "seed": 0}  # not mutated


def test_search_space_kinds_become_tune_domains():
    search = {
        key: search_space.normalize(spec, "s", key)
        for key, spec in {
            "a": [1, 2, 3],
            "b": {"choice": ["x", "y"]},
            "c": {"uniform": [0, 1]},
            "d": {"loguniform": [1e-5, 1e-2]},
            "e": {"randint": [1, 10]},
            "f": {"quniform": [0, 1, 0.1]},
            "g": {"qloguniform": [1e-4, 1e-1, 1e-4]},
            "h": {"qrandint": [8, 64, 8]},
        }.items()
    }
    space = search_space.to_tune(search)
    assert space["a"] == {"grid_search": [1, 2, 3]}
    assert isinstance(space["b"], Categorical)
    assert isinstance(space["c"], Float) and isinstance(space["d"], Float)
    assert isinstance(space["e"], Integer) and isinstance(space["h"], Integer)
    assert search_space.grid_size(search) == 3


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"gird": [1]}, "unknown search kind 'gird'"),
        ({"uniform": [1, 0]}, "needs low < high"),
        ({"loguniform": [0, 1]}, "needs low > 0"),
        ({"uniform": [0]}, "takes 2 numbers"),
        ({"choice": []}, "non-empty list"),
        ("fast", "a search entry is a list"),
    ],
)
def test_search_space_errors(spec, fragment):
    with pytest.raises(UserError, match=fragment):
        search_space.normalize(spec, "s.yaml", "search.lr")


def test_search_values_validated_against_config():
    with pytest.raises(UserError, match=r"search.lr=-0.1.*must be > 0"):
        search_space.validate(Example, {}, {"lr": {"grid": [0.1, -0.1]}}, "s.yaml")
    with pytest.raises(UserError, match="'l1' is not one of"):
        search_space.validate(Example, {}, {"loss": {"choice": ["mse", "l1"]}}, "s.yaml")
    with pytest.raises(UserError, match="unknown key 'search.lrr'"):
        search_space.validate(Example, {}, {"lrr": {"grid": [1]}}, "s.yaml")
    search_space.validate(Example, {}, {"lr": {"loguniform": [1e-4, 1e-2]}}, "s.yaml")


def test_variant_groups_validate_and_merge():
    spec = search_space.normalize([{"loss": "huber"}, {"loss": "mse", "lr": 0.1}], "s", "search.variant")
    search = {"variant": spec, "steps": search_space.normalize([1, 2], "s", "search.steps")}
    search_space.validate(Example, {}, search, "s.yaml")
    assert search_space.grid_size(search) == 4
    assert with_variant({"steps": 1, "variant": {"lr": 0.1}}) == {"steps": 1, "lr": 0.1}
    assert with_variant({"steps": 1}) == {"steps": 1}


@pytest.mark.parametrize(
    "groups, fragment",
    [
        (["mse"], "a list of groups of field values"),
        ([{}], "a list of groups of field values"),
        ([{"lss": "mse"}], "unknown key 'search.variant.lss'"),
        ([{"loss": "l1"}], "'l1' is not one of"),
        ([{"lr": -1}], "config.lr: must be > 0"),
        ([{"steps": 3}], "search.variant sets 'steps', which search sets too"),
    ],
)
def test_variant_errors(groups, fragment):
    with pytest.raises(UserError, match=fragment):
        search = {"variant": search_space.normalize(groups, "s", "search.variant"), "steps": {"grid": [1]}}
        search_space.validate(Example, {}, search, "s.yaml")
