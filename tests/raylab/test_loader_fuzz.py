"""Property-based: generated YAML files and overrides give a valid experiment or a UserError."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylab import experiment as experiments
from raylab import yaml_io
from raylab.errors import UserError

KEYS = [
    "workload",
    "metric",
    "mode",
    "config",
    "search",
    "num_samples",
    "scheduler",
    "resources",
    "stop",
    "checkpoint",
    "failure",
    "smoke",
    "max_concurrent_trials",
    "description",
    "bogus",
]
FIELDS = [
    "steps",
    "lr",
    "seed",
    "batch_size",
    "dim",
    "noise",
    "report_every",
    "nope",
    "type",
    "workers",
    "gpus_per_worker",
    "every",
    "keep",
    "max_failures",
    "grid",
    "uniform",
    "choice",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(string.printable, max_size=12),
    st.sampled_from(["toy", "eval/mse", "min", "max", "fifo", "asha", "pbt", "1e-3", "[1, 2]"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4),
    ),
    max_leaves=12,
)
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=8)


def check(load) -> None:
    try:
        result = load()
    except UserError as err:
        assert str(err)
    else:
        assert isinstance(result, experiments.Experiment)


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents, base=st.booleans(), smoke=st.booleans())
def test_generated_documents(tmp_path_factory, doc, base, smoke):
    if base:  # start from a valid experiment so deeper keys get exercised
        doc = {"workload": "toy", "metric": "eval/mse", "mode": "min", **doc}
    path = tmp_path_factory.mktemp("fuzz") / "exp.yaml"
    path.write_text(yaml_io.dumps(doc))
    check(lambda: experiments.load(str(path), smoke=smoke))


@settings(max_examples=300, deadline=2000)
@given(text=st.text(string.printable, max_size=80))
def test_generated_yaml_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "exp.yaml"
    path.write_text(text)
    check(lambda: experiments.load(str(path)))


@settings(max_examples=300, deadline=2000)
@given(
    key=st.lists(st.sampled_from(KEYS + FIELDS + [""]), min_size=1, max_size=3).map(".".join),
    value=st.one_of(st.text(string.printable, max_size=20), values.map(lambda v: yaml_io.dumps(v).strip())),
)
def test_generated_overrides(key, value):
    check(lambda: experiments.load("toy", [f"{key}={value}"]))
