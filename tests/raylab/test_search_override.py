"""``search.<field>=[...]`` over an experiment whose variant groups set that field keeps the
groups with those values: the experiments page's own ``search.loss=[mse,soft_linf]``
on dqn_softlinf runs only those arms; what cannot filter the groups is refused with the
``search.variant=[...]`` form, and that form works. ``raylab.train``'s hint pins what works."""

from __future__ import annotations

import re
from pathlib import Path

from raylab import experiment as experiments
from raylab import search_space
from raylab import train as raylab_train
from raylab import tune as raylab_tune

GPU_YAML = str(Path(__file__).resolve().parents[2] / "cluster" / "gpu.yaml")


def _groups(exp) -> list[dict]:
    return exp.search[search_space.VARIANT]["grid"]


def test_the_readme_example_runs_only_those_arms_in_the_dry_run(capsys):
    full = experiments.load("dqn_softlinf")
    argv = ["dqn_softlinf", "search.loss=[mse,soft_linf]", "--dry-run", "--cluster", GPU_YAML]
    assert raylab_tune.main(argv) == 0  # --cluster: this machine's own CPUs are not the question
    out = capsys.readouterr().out
    kept = [g for g in _groups(full) if g["loss"] in ("mse", "soft_linf")]
    assert len(kept) == 4 and len(_groups(full)) == 6  # mse and the three soft_linf temperatures
    games, seeds = (len(full.search[key]["grid"]) for key in ("game", "seed"))
    assert f"# trials: {len(kept) * games * seeds};" in out
    section = out[out.index("  variant:") : out.index("  game:")]
    assert re.findall(r"loss: (\w+)", section) == ["mse", "soft_linf", "soft_linf", "soft_linf"]
    # the same on the smoke section's own groups
    smoke = experiments.load("dqn_softlinf", ["search.loss=[soft_linf]"], smoke=True)
    assert _groups(smoke) == [{"loss": "soft_linf", "beta": 10.0}]


def test_a_field_some_groups_leave_alone_filters_only_the_groups_that_set_it():
    exp = experiments.load("dqn_softlinf", ["search.beta=[10.0]"])
    assert _groups(exp) == [{"loss": "mse"}, {"loss": "huber"}, {"loss": "l1"}, {"loss": "soft_linf", "beta": 10.0}]


def test_what_cannot_filter_the_groups_shows_the_variant_form_and_that_form_works(capsys):
    assert raylab_tune.main(["dqn_softlinf", "search.loss={choice: [mse]}", "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: command line: override 'search.loss={choice: [mse]}': search.loss:")
    form = re.search(r"(search\.variant=\[.*\])$", line).group(1)
    assert "Traceback" not in line and form == "search.variant=[{loss: mse},{loss: huber}]"
    assert raylab_tune.main(["dqn_softlinf", form, "--dry-run", "--cluster", GPU_YAML]) == 0
    assert _groups(experiments.load("dqn_softlinf", [form])) == [{"loss": "mse"}, {"loss": "huber"}]
    # a value no group sets: refused, and the form that adds it is shown
    assert raylab_tune.main(["dqn_softlinf", "search.loss=[mse,l2]", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "no group of search.variant sets loss: 'l2'" in err and "{loss: l2}]" in err


def test_raylab_trains_pin_hint_names_overrides_that_work():
    exp = experiments.load("dqn_softlinf", smoke=True)
    _, picked = raylab_train.single_config(exp)
    hint = raylab_train.pin_text(search_space.VARIANT, picked[search_space.VARIANT])
    assert hint == "config.loss=mse" and "config.variant" not in hint
    pinned = experiments.load("dqn_softlinf", hint.split(), smoke=True)
    assert search_space.VARIANT not in pinned.search and pinned.config["loss"] == "mse"
    group = {"loss": "soft_linf", "beta": 10.0}
    pinned = experiments.load("dqn_softlinf", raylab_train.pin_text("variant", group).split(), smoke=True)
    assert search_space.VARIANT not in pinned.search and pinned.config["beta"] == 10.0
