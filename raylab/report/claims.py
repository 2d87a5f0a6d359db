"""A paper's claims, declared as data next to a workload's figures (``Report(claims=...)``).

Each ``Claim`` is a statement and the statistic that tests it, computed per seed from a run's
trials; ``raylab.report.evidence`` turns it into an estimate over seeds with a 95% interval,
the number of seeds that agree, the state of the positive controls it rests on and a verdict::

    Claim("soft-linf reduces the worst-case Bellman residual relative to MSE",
          Contrast("bellman/residual_linf_exact", arm={"loss": "soft_linf"}, against={"loss": "mse"},
                   op="ratio", at="last_half", strata=("game",)),
          expect="<", threshold=1.0,
          controls=(Control("...", Contrast(...), expect="<", threshold=0.8),))

The statistics:

- ``Value(metric, arm)``: each trial of the arm gives one value.
- ``Contrast(metric, arm, against)``: each trial of the arm against the ``against`` trial of the
  same seed (and the same ``pair_on`` values): ``arm - against`` or ``arm / against``. With
  ``against=None`` the contrast is inside each trial: ``metric`` against ``against_metric``
  (or against the same metric at ``against_at``: the last report over the first). With
  ``before=Before(metric, reaches)`` both are read at the arm trial's last report before
  ``metric`` first reaches ``reaches``, the partner at the same step: an effect read before
  another one saturates (a backdoor's early fit, before its attack success reaches 0.5).
- ``Improvement(metric, arm, against)``: the probability that a seed of the arm beats a seed of
  the other arm, averaged over strata (rliable's probability of improvement).

An arm is a dict of config values a trial must have (a field the trial does not set counts at
its Config default); a value may be a predicate (``lambda p: p > 0``). Trials of an arm that
differ in swept keys the statistic does not name (soft-linf's ``beta``) give one row each.
``strata`` name the keys the bootstrap stratifies by (games, tasks): every stratum weighs the
same in the estimate. ``at`` reads a trial's metric: ``last``, ``first``, ``max``, ``min`` or
``last_half`` (the mean of the last half of the reports that have it: a time average).
A metric may be a tuple (the first one a trial reports: the exact residual where the model is
known, the held-out one on Atari) or a ``Derived`` quantity of several.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Union

from raylab.report.values import format_value

Op = Literal["difference", "ratio"]
Expect = Literal[">", "<", "within"]
_OPS = ("difference", "ratio")
_AT_WORDS = {
    "last": "at its last report",
    "first": "at its first report",
    "max": "max over reports",
    "min": "min over reports",
    "last_half": "mean over the last half of its reports",
}


def _tuple(value) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, (str, Derived)) else tuple(value)


@dataclass(frozen=True)
class Derived:
    """A quantity computed from several metrics of one trial (at the statistic's ``at``)."""

    name: str
    """How the report names it (``solver calls per MAP drop``)."""
    fn: Callable[..., float | None]
    """The values of ``metrics``, in order, to the quantity (None or NaN: undefined here)."""
    metrics: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "metrics", _tuple(self.metrics))


Metric = Union[str, tuple, Derived]


def metric_words(metric: Metric) -> str:
    """``bellman/residual_linf_exact or bellman/residual_linf_expected``; a Derived's name and inputs."""
    if isinstance(metric, Derived):
        return f"{metric.name} ({', '.join(metric.metrics)})"
    return " or ".join(_tuple(metric))


def metric_inputs(metric: Metric | None) -> tuple[str, ...]:
    """The reported metric names a statistic reads."""
    if metric is None:
        return ()
    if isinstance(metric, Derived):
        return metric.metrics
    return _tuple(metric)


def arm_words(arm: Mapping[str, Any]) -> str:
    """``loss=soft_linf``; a predicate reads as its declared name (``poison_ratio>0``)."""
    if not arm:
        return "every trial"
    parts = []
    for key, value in arm.items():
        if callable(value):
            parts.append(f"{key} {getattr(value, 'words', 'matching')}")
        else:
            parts.append(f"{key}={format_value(value)}")
    return ", ".join(parts)


def where(words: str, predicate: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A predicate on a config value that reads as ``words`` in the report (``where('> 0', f)``)."""
    predicate.words = words  # type: ignore[attr-defined]
    return predicate


@dataclass(frozen=True)
class Value:
    """Each trial of ``arm`` gives one value of ``metric``."""

    metric: Metric
    arm: Mapping[str, Any] = field(default_factory=dict)
    at: str = "last"
    strata: tuple[str, ...] = ()

    def __post_init__(self):
        _check_at(self, self.at)
        object.__setattr__(self, "strata", _tuple(self.strata))

    def words(self) -> str:
        scope = f" of [{arm_words(self.arm)}]" if self.arm else ""
        return f"{metric_words(self.metric)} ({_AT_WORDS[self.at]}) per trial{scope}{_strata_words(self.strata)}"

    def inputs(self) -> tuple[str, ...]:
        return metric_inputs(self.metric)


@dataclass(frozen=True)
class Before:
    """Where a paired ``Contrast`` is read: at the arm trial's last report before ``metric`` first
    reaches ``reaches`` (a missing or NaN value counts as below; a trial that never reaches it is
    read at its last report), and its partner at the same ``step``."""

    metric: str
    reaches: float
    step: str = "train/step"

    def words(self) -> str:
        return f"at the arm's last report before {self.metric} reaches {format_value(self.reaches)}, the partner at the same {self.step}"


@dataclass(frozen=True)
class Contrast:
    """``arm`` against ``against`` (paired by seed), or one metric against another inside each trial."""

    metric: Metric
    arm: Mapping[str, Any] = field(default_factory=dict)
    against: Mapping[str, Any] | None = None
    """The other arm; None: inside each trial of ``arm``."""
    op: Op = "difference"
    at: str = "last"
    against_metric: Metric | None = None
    """The other arm's metric (default ``metric``), or inside a trial the metric compared with."""
    against_at: str | None = None
    """Where ``against_metric`` is read (default ``at``)."""
    strata: tuple[str, ...] = ()
    pair_on: tuple[str, ...] | None = None
    """Keys an arm trial and its partner share besides the seed; None: the ``strata`` keys
    neither arm names."""
    baseline: Mapping[str, Any] | None = None
    """Where a stratum has no ``against`` trial of its own: the ``against`` trials that also
    match this (a clean arm trained once for several attacks) stand in, same seed."""
    before: Before | None = None
    """Read both trials at the arm trial's step ``before`` picks instead of ``at`` (paired only)."""

    def __post_init__(self):
        _check_at(self, self.at)
        if self.before is not None and (self.against is None or self.against_at is not None or self.at != "last"):
            raise ValueError("Contrast: before= reads a paired contrast at one step, without at= or against_at=")
        if self.against_at is not None:
            _check_at(self, self.against_at)
        if self.op not in _OPS:
            raise ValueError(f"Contrast: op must be one of {_OPS}, got {self.op!r}")
        if self.against is None and self.against_metric is None and self.against_at is None:
            raise ValueError("Contrast: inside a trial (against=None) it needs against_metric or against_at")
        object.__setattr__(self, "strata", _tuple(self.strata))
        if self.pair_on is not None:
            object.__setattr__(self, "pair_on", _tuple(self.pair_on))

    def pairing_keys(self) -> tuple[str, ...]:
        if self.pair_on is not None:
            return self.pair_on
        named = set(self.arm) | set(self.against or {})
        return tuple(k for k in self.strata if k not in named)

    def words(self) -> str:
        sign = "/" if self.op == "ratio" else "-"
        kind = "ratio" if self.op == "ratio" else "difference"
        at = _AT_WORDS[self.at]
        other_at = _AT_WORDS[self.against_at or self.at]
        if self.against is None:
            other = metric_words(self.against_metric or self.metric)
            scope = f" of [{arm_words(self.arm)}]" if self.arm else ""
            return (
                f"{kind} {metric_words(self.metric)} ({at}) {sign} {other} ({other_at}) inside each trial"
                f"{scope}{_strata_words(self.strata)}"
            )
        other_metric = "" if self.against_metric is None else f" ({metric_words(self.against_metric)})"
        pairing = " and ".join(("seed", *self.pairing_keys()))
        at = self.before.words() if self.before else at
        return (
            f"{kind} [{arm_words(self.arm)}] {sign} [{arm_words(self.against)}]{other_metric} of "
            f"{metric_words(self.metric)} ({at}), paired by {pairing}{_strata_words(self.strata)}"
        )

    def inputs(self) -> tuple[str, ...]:
        before = (self.before.metric,) if self.before else ()
        return tuple(dict.fromkeys((*metric_inputs(self.metric), *metric_inputs(self.against_metric), *before)))


@dataclass(frozen=True)
class Improvement:
    """The probability that a seed of ``arm`` scores higher than a seed of ``against`` on the same
    stratum, averaged over strata: ``P(X > Y)``, 0.5 when neither is better (rliable)."""

    metric: Metric
    arm: Mapping[str, Any]
    against: Mapping[str, Any]
    at: str = "last"
    strata: tuple[str, ...] = ()
    lower_is_better: bool = False
    """Compare ``-metric`` (a residual, an error)."""

    def __post_init__(self):
        _check_at(self, self.at)
        object.__setattr__(self, "strata", _tuple(self.strata))

    def pairing_keys(self) -> tuple[str, ...]:
        named = set(self.arm) | set(self.against)
        return tuple(k for k in self.strata if k not in named)

    def words(self) -> str:
        better = "lower" if self.lower_is_better else "higher"
        return (
            f"probability that a seed of [{arm_words(self.arm)}] has a {better} {metric_words(self.metric)} "
            f"({_AT_WORDS[self.at]}) than a seed of [{arm_words(self.against)}]"
            f"{_strata_words(self.strata, 'averaged over')}"
        )

    def inputs(self) -> tuple[str, ...]:
        return metric_inputs(self.metric)


Statistic = Union[Value, Contrast, Improvement]


@dataclass(frozen=True)
class Control:
    """A positive control: an effect known to be there that the claim's instrument must see on
    every seed of the run (one failing seed fails it)."""

    statement: str
    statistic: Statistic
    expect: Literal[">", "<"]
    threshold: float

    def __post_init__(self):
        if self.expect not in (">", "<"):
            raise ValueError(f"Control: expect must be '>' or '<', got {self.expect!r}")

    def words(self) -> str:
        return (
            f"{self.statement} ({self.expect} {format_value(self.threshold)} on every seed: {self.statistic.words()})"
        )


@dataclass(frozen=True)
class Claim:
    """One claim of the paper, and the statistic (per seed) that tests it."""

    statement: str
    """The claim in words, as a workload page's "What it reproduces" lists it."""
    statistic: Statistic
    expect: Expect
    """The side of ``threshold`` the claim puts the statistic on (``within``: inside a range)."""
    threshold: float | tuple[float, float]
    controls: tuple[Control, ...] = ()
    """The positive controls it rests on; a claim with a control that failed gets no verdict."""
    name: str = ""
    """A short id (``residual``) for report.json and tests; default: its position."""

    def __post_init__(self):
        object.__setattr__(self, "controls", tuple(self.controls))
        if self.expect not in (">", "<", "within"):
            raise ValueError(f"Claim: expect must be '>', '<' or 'within', got {self.expect!r}")
        if self.expect == "within":
            ok = (
                isinstance(self.threshold, tuple) and len(self.threshold) == 2 and self.threshold[0] < self.threshold[1]
            )
        else:
            ok = isinstance(self.threshold, (int, float))
        if not ok:
            raise ValueError(f"Claim: threshold {self.threshold!r} does not fit expect {self.expect!r}")
        if not self.statement.strip():
            raise ValueError("Claim: needs a statement")

    def expectation(self) -> str:
        """``claimed below 1``, ``claimed within [0.9, 1.1]``."""
        if self.expect == "within":
            low, high = self.threshold
            return f"claimed within [{format_value(low)}, {format_value(high)}]"
        return f"claimed {'above' if self.expect == '>' else 'below'} {format_value(self.threshold)}"

    def test_words(self) -> str:
        """The statistic and the claimed side, as the report and the workload page state them."""
        return f"{self.statistic.words()}; {self.expectation()}"

    def inputs(self) -> tuple[str, ...]:
        """Every metric the claim and its controls read."""
        names = [*self.statistic.inputs()]
        for control in self.controls:
            names += control.statistic.inputs()
        return tuple(dict.fromkeys(names))


def _strata_words(strata: tuple[str, ...], how: str = "stratified by") -> str:
    return f", {how} {', '.join(strata)}" if strata else ""


def _check_at(owner, at: str) -> None:
    if at not in _AT_WORDS:
        raise ValueError(f"{type(owner).__name__}: at must be one of {tuple(_AT_WORDS)}, got {at!r}")


def readme_lines(claims: tuple[Claim, ...]) -> list[str]:
    """The claims as a workload page's "What it reproduces" lists them (a numbered Markdown
    list: the statement, the statistic and the claimed side, the positive controls)."""
    lines = []
    for i, claim in enumerate(claims, start=1):
        lines.append(f"{i}. **{claim.statement}** Statistic: {claim.test_words()}.")
        for control in claim.controls:
            lines.append(f"   Positive control: {control.words()}.")
    return lines
