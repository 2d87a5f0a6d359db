"""What a workload's report shows, declared as data next to the workload's code.

A workload's ``figures.py`` holds one ``Report`` and its registry entry names it
(``figures="trainers.toy.figures:REPORT"``)::

    REPORT = Report(items=(
        Curve(("train/loss", "eval/mse"), x="train/step", logy=True),
        Versus("lr", "eval/mse"),
        Table(("eval/mse", "train/loss")),
    ))

How every item reads a sweep:

- Trials are grouped by the swept config keys (``search:`` of the experiment) other than the
  seed keys; each group's values are the mean and the sample standard deviation over its
  trials (seeds and repeats). Seed keys are ``seed`` and names ending in ``_seed`` unless
  ``Report.seeds`` names them.
- ``by`` picks the swept keys whose values make the series (lines, bar colours, points);
  ``None`` means every swept non-seed key. The swept keys left over make one panel each.
- A metric name may hold ``{key}`` (filled from the trial's config) and ``*`` (matched against
  the names the trial reported): ``probe/{task}/*`` is each trial's own task metric.
- ``at`` says which report of a trial a figure or table uses: ``last`` (the last report that
  has the metric), ``first``, ``max`` or ``min`` (over all reports), ``last_half`` (the mean
  of the last half of its reports).

Axes, legends and default titles show ``Report.labels`` (``{"eval/asr": "Attack success rate"}``)
instead of metric names and config keys; the band or error bar around a mean is
``Report.uncertainty`` (``std``, ``sem`` or ``ci95``; ``python -m raylab.report --uncertainty``
overrides it).

A report also states the paper's claims (``claims``: ``raylab.report.claims``) and, for a
benchmark suite of tasks, rliable-style aggregates (``aggregates``: ``Aggregates``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Literal, Mapping, Sequence, Union

from raylab.report import uncertainty as _uncertainty

At = Literal["last", "max", "min", "first", "last_half"]
_AT = ("last", "max", "min", "first", "last_half")


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _check(ok: bool, item, message: str) -> None:
    if not ok:
        raise ValueError(f"{type(item).__name__}: {message}")


class _Item:
    """Shared normalizing: string-or-sequence fields become tuples."""

    _tuples: tuple[str, ...] = ()

    def __post_init__(self):
        for name in self._tuples:
            object.__setattr__(self, name, _as_tuple(getattr(self, name)))
        if getattr(self, "by", None) is not None:
            object.__setattr__(self, "by", _as_tuple(self.by))
        if hasattr(self, "at"):
            _check(self.at in _AT, self, f"at must be one of {_AT}, got {self.at!r}")

    @property
    def kind(self) -> str:
        return type(self).__name__

    def metric_names(self) -> tuple[str, ...]:
        """The metric names (or patterns) this item reads."""
        return tuple(m for f in ("y", "x", "metrics") if f in self._metric_fields for m in _as_tuple(getattr(self, f)))

    _metric_fields: tuple[str, ...] = ()

    def plotted(self) -> list[str]:
        """The metrics whose values a figure draws (not its x counter)."""
        names = list(_as_tuple(getattr(self, "y", ())))
        return [self.x, *names] if isinstance(self, Scatter) else names

    def file_stem(self, index: int) -> str:
        """The PNG/CSV file name (without extension) of this item."""
        if self.name:
            return self.name
        words = "_".join(_as_tuple(getattr(self, "y", ())) or _as_tuple(getattr(self, "metrics", ())))
        stem = "".join(c if c.isalnum() else "_" for c in f"{self.kind.lower()}_{words}")
        return f"{index:02d}_{stem.strip('_')[:60]}"

    def heading(self, label: Callable[[str], str] = str) -> str:
        """The title shown above the figure or table; names shown through ``label`` (the
        workload's ``Report.labels``). A declared title says ``{x}`` (and ``{y}``) where it
        names the axes' quantities, so title and axis read the same words from one place."""
        described = {f.name: getattr(self, f.name) for f in fields(self)}
        y = ", ".join(map(label, _as_tuple(described.get("y") or described.get("metrics"))))
        x = described.get("x")
        if self.title:
            return self.title.replace("{x}", _in_sentence(label(x)) if x else "").replace("{y}", _in_sentence(y))
        return f"{y} vs {label(x)}" if x and self.kind in ("Curve", "Versus", "Scatter") else y


def _in_sentence(words: str) -> str:
    """A label as it reads inside a title: ``Agent steps`` -> ``agent steps`` (``AUC`` stays)."""
    return words[:1].lower() + words[1:] if words[1:2].islower() else words


@dataclass(frozen=True)
class Curve(_Item):
    """Metrics against a reported counter, one line per series, shaded over seeds (mean ± std)."""

    y: tuple[str, ...] | str
    """Metrics to draw: one panel each, or all on one axes with ``together``."""
    x: str = "training_iteration"
    """The reported counter on the x axis (``train/step``, ``env/steps``...)."""
    by: tuple[str, ...] | str | None = None
    """Swept keys whose values make the lines; None: every swept non-seed key."""
    together: bool = False
    """Draw all ``y`` metrics on one axes (lines labelled by metric and series)."""
    logy: bool = False
    """Logarithmic y axis."""
    skip_repeats: bool = False
    """Leave out reports whose value repeats the previous one: loops that carry a metric's
    latest value into every later report (a measurement of an early phase) draw only the
    reports that measured it."""
    title: str = ""
    name: str = ""

    _tuples = ("y",)
    _metric_fields = ("y", "x")

    def __post_init__(self):
        super().__post_init__()
        _check(bool(self.y), self, "needs at least one y metric")


@dataclass(frozen=True)
class Versus(_Item):
    """Metrics (at ``at``) against a swept config key, one line per series, std error bars."""

    x: str
    """A config key on the x axis (``poison_ratio``, ``budget``)."""
    y: tuple[str, ...] | str
    """Metrics to draw: one panel each, or on one axes with ``together``."""
    by: tuple[str, ...] | str | None = None
    """Swept keys whose values make the lines; None: every swept non-seed key but ``x``."""
    at: At = "last"
    together: bool = False
    logx: bool | None = None
    """Logarithmic x axis; None: when positive values span more than two decades."""
    logy: bool = False
    baseline: dict[str, Any] | None = None
    """Swept values of one arm that stands at its ``x`` value for every series without trials
    of its own there: a clean arm trained once for several series. With
    ``{"poison_ratio": 0.0, "attack": "badnets"}``, blended at 0% shows BadNets' clean trials
    (nothing is triggered at 0%, so both attacks train that model); wanet keeps its own. The
    figure's caption names the series that borrow it."""
    title: str = ""
    name: str = ""

    _tuples = ("y",)
    _metric_fields = ("y",)

    def __post_init__(self):
        super().__post_init__()
        _check(bool(self.y), self, "needs at least one y metric")
        _check(
            self.baseline is None or (isinstance(self.baseline, dict) and self.x in self.baseline),
            self,
            f"baseline must be a dict of swept values that holds x ({self.x!r}), got {self.baseline!r}",
        )


@dataclass(frozen=True)
class Bars(_Item):
    """Grouped bars (mean, std error bars): one cluster per scalar metric or per vector entry."""

    y: tuple[str, ...] | str
    """Scalar metrics (a cluster each) or one per-class vector metric (a cluster per class)."""
    by: tuple[str, ...] | str | None = None
    """Swept keys whose values make the bar colours; None: every swept non-seed key."""
    at: At = "last"
    labels: tuple[str, ...] = ()
    """Names of the vector's entries (class names); default 0, 1, 2..."""
    labels_from: Callable[[dict[str, Any]], Sequence[str]] | None = None
    """The workload's hook naming the vector's entries from a trial's config (e.g. the class
    names of its ``dataset``), used when ``labels`` is empty; None: 0, 1, 2..."""
    title: str = ""
    name: str = ""

    _tuples = ("y", "labels")
    _metric_fields = ("y",)

    def __post_init__(self):
        super().__post_init__()
        _check(bool(self.y), self, "needs at least one y metric")


@dataclass(frozen=True)
class Scatter(_Item):
    """One point per trial: metric ``y`` against metric ``x`` (at ``at``), coloured by series."""

    x: str
    y: str
    by: tuple[str, ...] | str | None = None
    at: At = "last"
    diagonal: bool = False
    """Draw the line y = x (a prediction against its measurement)."""
    title: str = ""
    name: str = ""

    _metric_fields = ("y", "x")


@dataclass(frozen=True)
class Table(_Item):
    """Mean ± std (n) over seeds.

    Without ``rows``: one row per group (swept non-seed values), one column per metric.
    With ``rows`` (a swept key) and ``columns`` (swept keys): a pivot of one metric, and one
    table per value of the swept keys left over.
    """

    metrics: tuple[str, ...] | str
    rows: str = ""
    columns: tuple[str, ...] | str = ()
    at: At = "last"
    best: Literal["", "max", "min"] = ""
    """Mark the best cell of each row (pivot) or each column (group rows)."""
    lower_is_better: tuple[str, ...] | str = ()
    """Metric name patterns (``*/mae``) whose best is the minimum, overriding ``best``."""
    title: str = ""
    name: str = ""

    _tuples = ("metrics", "columns", "lower_is_better")
    _metric_fields = ("metrics",)

    def __post_init__(self):
        super().__post_init__()
        _check(bool(self.metrics), self, "needs at least one metric")
        _check(self.best in ("", "max", "min"), self, f"best must be '', max or min, got {self.best!r}")
        _check(not self.rows or len(self.metrics) == 1, self, "a pivot (rows=...) shows one metric")
        _check(bool(self.rows) or not self.columns, self, "columns=... needs rows=...")


@dataclass(frozen=True)
class Only:
    """Metrics a workload reports under some configs only: the exact ones on an environment
    with a known model, the held-out probe on Atari. In a run where ``when`` holds for no
    trial's config they are not missing: the status notes leave them out, and a figure or
    table of only such metrics says it does not apply here instead of being drawn empty."""

    metrics: tuple[str, ...] | str
    when: Callable[[dict[str, Any]], bool]
    """Whether a trial's config (its ``params.json``) is one that reports ``metrics``."""
    where: str
    """The configs in words, for the report: ``Atari``, ``known-model environments``."""

    def __post_init__(self):
        object.__setattr__(self, "metrics", _as_tuple(self.metrics))


@dataclass(frozen=True)
class Withheld:
    """A metric a workload reports as NaN where its instrument cannot measure it (the ASR of a
    model at chance): each trial whose last report has it NaN gets one status note saying why."""

    metric: str
    why: Callable[[dict[str, Any]], str]
    """The trial's last report to the reason in words (``clean accuracy 0.1 <= floor 0.2``)."""


@dataclass(frozen=True)
class Aggregates:
    """Aggregate performance over a suite of tasks (games), rliable-style: per arm, the IQM,
    median, mean and optimality gap of the (normalised) scores with stratified bootstrap
    intervals, performance profiles, and each arm's probability of improvement over
    ``reference``. Shown when a run has two or more tasks or three or more seeds.

    Scores are ``metric`` at ``at`` per trial, normalised per task by ``normalize``: a task
    without a row there is left out when the run has several tasks; a run of one task that has
    none is aggregated in raw units (no optimality gap then)."""

    metric: str
    """The per-trial score (``eval/return_mean``)."""
    task: str
    """The config key whose value is the task (``game``)."""
    by: tuple[str, ...] | str
    """Swept keys whose values make the arms (``loss``, ``beta``)."""
    reference: dict[str, Any] | None = None
    """The arm the others' probability of improvement is measured against; None: the first."""
    normalize: Callable[[str], tuple[float, float] | None] | None = None
    """A task's ``(low, high)`` scores (random, human): normalised = (x - low) / (high - low)."""
    normalized: str = "normalised score"
    """What a normalised score is called (``human-normalised score``)."""
    source: str = ""
    """Where the normalising table comes from (shown under the figure)."""
    at: At = "last"
    gamma: float = 1.0
    """The optimality gap's target, in normalised units (1: human level)."""
    title: str = ""
    name: str = "aggregates"

    def __post_init__(self):
        object.__setattr__(self, "by", _as_tuple(self.by))
        _check(self.at in _AT, self, f"at must be one of {_AT}, got {self.at!r}")
        _check(bool(self.by), self, "needs the keys that make the arms (by=...)")

    def heading(self) -> str:
        return self.title or f"aggregate {self.metric} over {self.task}s (rliable-style)"


Item = Union[Curve, Versus, Bars, Scatter, Table]
FIGURE_KINDS = (Curve, Versus, Bars, Scatter)


@dataclass(frozen=True)
class Report:
    """A workload's figures and tables, in the order the report shows them."""

    items: tuple[Item, ...] = ()
    seeds: tuple[str, ...] | None = None
    """Config keys averaged over (replicates); None: ``seed`` and keys ending in ``_seed``."""
    only: tuple[Only, ...] = ()
    """Metrics reported under some configs only (``Only``)."""
    claims: tuple[Any, ...] = ()
    """The paper's claims (``raylab.report.claims.Claim``), in the order the report states them."""
    aggregates: tuple[Aggregates, ...] = ()
    """Aggregates over a suite of tasks (``Aggregates``)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """What axes, legends and default titles call a metric or config key:
    ``{"eval/asr": "Attack success rate", "poison_ratio": "Poison ratio"}``. A key may be a
    pattern (``probe/*/mae``, ``probe/{task}/*``); a name without a label is shown as is."""
    uncertainty: str = _uncertainty.DEFAULT
    """The band of curves and error bars of Versus points and bars: ``std`` (one sample
    standard deviation over seeds), ``sem`` (standard error) or ``ci95`` (95% interval: a t
    interval on curves, the percentile bootstrap over seeds on points and bars)."""
    withheld: tuple[Withheld, ...] = ()
    """Metrics reported as NaN where they cannot be measured (``Withheld``): a note per trial."""

    def __post_init__(self):
        from raylab.report.claims import Claim

        _check(
            isinstance(self.labels, Mapping), self, f"labels must be a mapping of name -> label, got {self.labels!r}"
        )
        object.__setattr__(self, "labels", dict(self.labels))
        _check(
            self.uncertainty in _uncertainty.UNCERTAINTIES,
            self,
            f"uncertainty must be one of {', '.join(_uncertainty.UNCERTAINTIES)}, got {self.uncertainty!r}",
        )
        object.__setattr__(self, "items", tuple(self.items))
        object.__setattr__(self, "only", tuple(self.only))
        object.__setattr__(self, "claims", tuple(self.claims))
        object.__setattr__(self, "aggregates", tuple(self.aggregates))
        object.__setattr__(self, "withheld", tuple(self.withheld))
        for claim in self.claims:
            _check(isinstance(claim, Claim), self, f"not a Claim: {claim!r}")
        for agg in self.aggregates:
            _check(isinstance(agg, Aggregates), self, f"not an Aggregates: {agg!r}")
        if self.seeds is not None:
            object.__setattr__(self, "seeds", _as_tuple(self.seeds))
        for item in self.items:
            _check(isinstance(item, (*FIGURE_KINDS, Table)), self, f"not a figure or table: {item!r}")

    def figures(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if isinstance(i, FIGURE_KINDS))

    def tables(self) -> tuple[Table, ...]:
        return tuple(i for i in self.items if isinstance(i, Table))

    def metric_names(self) -> tuple[str, ...]:
        """Every metric name or pattern the items read, in order, without repeats."""
        return tuple(dict.fromkeys(m for item in self.items for m in item.metric_names()))

    def claim_metrics(self) -> tuple[str, ...]:
        """Every metric the claims, their controls and the aggregates read."""
        names = [m for claim in self.claims for m in claim.inputs()]
        return tuple(dict.fromkeys([*names, *(a.metric for a in self.aggregates)]))

    def not_applicable(self, configs: list[dict[str, Any]]) -> dict[str, str]:
        """``{metric: where}`` for the ``only`` metrics that no config in ``configs`` reports."""
        out: dict[str, str] = {}
        for only in self.only:
            if not any(only.when(config) for config in configs):
                out.update(dict.fromkeys(only.metrics, only.where))
        return out


def is_seed_key(key: str, seeds: tuple[str, ...] | None) -> bool:
    """Whether a swept config key is a replicate (averaged over) rather than a condition."""
    if seeds is not None:
        return key in seeds
    return key == "seed" or key.endswith("_seed")
