"""From a run's trials to the evidence for each declared claim: per-seed values, the estimate over
seeds with a 95% interval, how many seeds agree, the positive controls' state, a verdict.

The estimate is the mean over strata of each stratum's mean over seeds; the interval a t
interval with Welch-Satterthwaite degrees of freedom (``estimators.strata_t_interval``: it covers
at five seeds, where a percentile bootstrap does not), and for a probability of improvement the
stratified percentile bootstrap (``raylab.report.estimators``).
The verdict, in words:

- ``not measured``: the run has no trials of an arm the statistic needs (says which);
- ``control failed`` / ``control not measured``: a positive control did not pass, or the run
  cannot show it; no verdict is given then;
- ``control not met``: the arm's trials are there but gave no value (a workload withholds a
  measurement, NaN, where its instrument cannot see: the ASR of a model at chance) and a
  positive control did not pass, the reason it was withheld;
- ``supported``: the whole interval is on the claimed side; ``not supported``: the whole
  interval is on the other side; ``inconclusive``: it straddles the threshold, or there are
  fewer than ``VERDICT_MIN_SEEDS`` seeds per stratum (no interval below 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raylab.report import estimators
from raylab.report.aggregate import (
    _hashable,
    conditions,
    label_of,
    resolve_metric,
    step_before,
    value_at,
    value_at_step,
)
from raylab.report.claims import Claim, Contrast, Control, Derived, Improvement, Value, _tuple, metric_words
from raylab.report.run_view import Run, Trial
from raylab.report.spec import Report, is_seed_key
from raylab.report.values import format_value, is_number


@dataclass
class Row:
    """One comparison of a claim (one per arm variant), its per-seed values by stratum."""

    variant: str = ""
    strata: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    """Stratum label -> [(seed label, value)]."""
    against: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    """Improvement only: the other arm's values by stratum."""
    missing: list[str] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    """The metric names the values came from."""

    def values(self) -> list[float]:
        return [v for units in self.strata.values() for _, v in units]


class RunTrials:
    """A run's trials with their full configs (Config defaults under params) and seed labels."""

    def __init__(self, run: Run, seeds, defaults: dict[str, Any]):
        self.run = run
        self.trials = [t for t in run.trials if t.rows]
        self.configs = {t.name: {**defaults, **t.config} for t in self.trials}
        self.conditions = conditions(run, seeds)
        swept_seeds = [k for k in run.swept if is_seed_key(k, seeds)]
        self.seed_keys = swept_seeds or (["seed"] if any("seed" in c for c in self.configs.values()) else [])

    def seed(self, trial: Trial) -> str:
        if not self.seed_keys:
            return trial.name
        return label_of(self.seed_keys, tuple(_hashable(self.configs[trial.name].get(k)) for k in self.seed_keys))

    def values(self, trial: Trial, keys) -> tuple:
        return tuple(_hashable(_plain(self.configs[trial.name].get(k))) for k in keys)

    def select(self, selection) -> list[Trial]:
        return [t for t in self.trials if selects(selection or {}, self.configs[t.name])]

    def variants(self, trials: list[Trial], fixed) -> dict[str, list[Trial]]:
        """Trials grouped by the swept keys that vary among them and are not in ``fixed``."""
        keys = [k for k in self.conditions if k not in fixed and len({self.values(t, [k]) for t in trials}) > 1]
        groups: dict[str, list[Trial]] = {}
        for trial in trials:
            label = label_of(keys, self.values(trial, keys)) if keys else ""
            groups.setdefault(label, []).append(trial)
        return groups


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def selects(selection, config: dict[str, Any]) -> bool:
    """Whether a trial's config is in an arm: every key equal (or its predicate true)."""
    for key, wanted in selection.items():
        value = config.get(key)
        if callable(wanted):
            try:
                ok = bool(wanted(value))
            except Exception:  # noqa: BLE001 - a predicate that cannot read a value does not select
                ok = False
        else:
            ok = _plain(value) == _plain(wanted)
        if not ok:
            return False
    return True


def metric_value(
    trial: Trial, metric, at: str, used: set[str] | None = None, step: tuple[str, float] | None = None
) -> float | None:
    """A trial's value of a statistic's metric: the first of a tuple that the trial reports, or a
    ``Derived`` quantity; None when it is missing or not a finite number. ``step``: (key, value)
    reads it at the trial's last report at or before that step instead of ``at``."""

    def read(name):
        return value_at(trial, name, at) if step is None else value_at_step(trial, name, step[1], step[0])

    if isinstance(metric, Derived):
        inputs = [read(m) for m in metric.metrics]
        if not all(is_number(v) for v in inputs):
            return None
        try:
            value = metric.fn(*inputs)
        except (ArithmeticError, ValueError):
            return None
        if used is not None:
            used.update(metric.metrics)
        return float(value) if is_number(value) and math.isfinite(value) else None
    for name in _tuple(metric):
        resolved = resolve_metric(name, trial)
        if resolved and resolved in trial.reported():
            value = read(name)
            if used is not None:
                used.add(resolved)
            return float(value) if is_number(value) and math.isfinite(value) else None
    return None


def _combine(a: float | None, b: float | None, op: str) -> float | None:
    if a is None or b is None:
        return None
    if op == "ratio":
        return a / b if b != 0 else None
    return a - b


# ------------------------------------------------------------------------ per-seed values


def rows_of(ctx: RunTrials, stat) -> tuple[list[Row], str]:
    """The statistic's rows (one per arm variant) and, when there are none, why."""
    if isinstance(stat, Improvement):
        return _improvement_rows(ctx, stat)
    arm = ctx.select(stat.arm)
    if not arm:
        return [], f"no trials with {_arm(stat.arm)} in this run"
    if isinstance(stat, Value) or stat.against is None:
        rows = []
        for label, members in ctx.variants(arm, {*stat.strata, *stat.arm}).items():
            row = Row(variant=label)
            for trial in members:
                if isinstance(stat, Value):
                    value = metric_value(trial, stat.metric, stat.at, row.used)
                else:
                    value = _combine(
                        metric_value(trial, stat.metric, stat.at, row.used),
                        metric_value(trial, stat.against_metric or stat.metric, stat.against_at or stat.at, row.used),
                        stat.op,
                    )
                _add(ctx, row, stat.strata, trial, value)
            rows.append(_averaged(row))
        return rows, ""
    return _contrast_rows(ctx, stat, arm)


def _arm(selection) -> str:
    from raylab.report.claims import arm_words

    return arm_words(selection)


def _add(ctx: RunTrials, row: Row, strata, trial: Trial, value: float | None, into: str = "strata") -> None:
    stratum = label_of(list(strata), ctx.values(trial, strata)) if strata else ""
    seed = ctx.seed(trial)
    if value is None:
        row.missing.append(f"{trial.name} ({seed}{', ' + stratum if stratum else ''}): no value")
        return
    getattr(row, into).setdefault(stratum, []).append((seed, value))


def _averaged(row: Row) -> Row:
    """Units of one (stratum, seed) from several trials (repeats) averaged into one."""
    for attr in ("strata", "against"):
        merged = {}
        for stratum, units in getattr(row, attr).items():
            by_seed: dict[str, list[float]] = {}
            for seed, value in units:
                by_seed.setdefault(seed, []).append(value)
            merged[stratum] = [(seed, float(np.mean(v))) for seed, v in by_seed.items()]
        setattr(row, attr, merged)
    return row


def _contrast_rows(ctx: RunTrials, stat: Contrast, arm: list[Trial]) -> tuple[list[Row], str]:
    against = [t for t in ctx.select(stat.against) if t not in arm]
    if not against:
        return [], f"no trials with {_arm(stat.against)} in this run"
    pair = stat.pairing_keys()
    fixed = {*stat.strata, *pair}
    base = [t for t in against if selects(stat.baseline or {}, ctx.configs[t.name])] if stat.baseline else []
    rows = []
    for arm_label, arm_members in ctx.variants(arm, fixed | set(stat.arm)).items():
        for other_label, others in ctx.variants(against, fixed | set(stat.against)).items():
            row = Row(variant=" vs ".join(x for x in (arm_label, other_label) if x))
            index: dict[tuple, list[Trial]] = {}
            for trial in others:
                index.setdefault((ctx.values(trial, pair), ctx.seed(trial)), []).append(trial)
            for trial in arm_members:
                partners = index.get((ctx.values(trial, pair), ctx.seed(trial)))
                if not partners and base:
                    partners = [t for t in base if ctx.seed(t) == ctx.seed(trial)]
                if not partners:
                    row.missing.append(f"{trial.name} ({ctx.seed(trial)}): no {_arm(stat.against)} trial to pair with")
                    continue
                step = None
                if stat.before is not None:
                    b = stat.before
                    step = (b.step, step_before(trial, b.metric, b.reaches, b.step))
                    if step[1] is None:
                        row.missing.append(
                            f"{trial.name} ({ctx.seed(trial)}): no report before {b.metric} reaches {b.reaches}"
                        )
                        continue
                mine = metric_value(trial, stat.metric, stat.at, row.used, step)
                theirs = [
                    metric_value(p, stat.against_metric or stat.metric, stat.against_at or stat.at, row.used, step)
                    for p in partners
                ]
                theirs = [v for v in theirs if v is not None]
                _add(ctx, row, stat.strata, trial, _combine(mine, float(np.mean(theirs)) if theirs else None, stat.op))
            rows.append(_averaged(row))
    return rows, ""


def _improvement_rows(ctx: RunTrials, stat: Improvement) -> tuple[list[Row], str]:
    arm, against = ctx.select(stat.arm), ctx.select(stat.against)
    for side, trials in ((stat.arm, arm), (stat.against, against)):
        if not trials:
            return [], f"no trials with {_arm(side)} in this run"
    sign = -1.0 if stat.lower_is_better else 1.0
    fixed = {*stat.strata}
    rows = []
    for arm_label, arm_members in ctx.variants(arm, fixed | set(stat.arm)).items():
        for other_label, others in ctx.variants(against, fixed | set(stat.against)).items():
            row = Row(variant=" vs ".join(x for x in (arm_label, other_label) if x))
            for members, into in ((arm_members, "strata"), (others, "against")):
                for trial in members:
                    value = metric_value(trial, stat.metric, stat.at, row.used)
                    _add(ctx, row, stat.strata, trial, None if value is None else sign * value, into)
            row = _averaged(row)
            for stratum in set(row.strata) ^ set(row.against):  # a stratum needs both arms
                row.missing.append(f"{stratum or 'the run'}: only one of the two arms")
                row.strata.pop(stratum, None)
                row.against.pop(stratum, None)
            rows.append(row)
    return rows, ""


# ------------------------------------------------------------------------ estimate, verdict


def _side(value: float, expect: str, threshold) -> bool:
    if expect == ">":
        return value > threshold
    if expect == "<":
        return value < threshold
    return threshold[0] < value < threshold[1]


def _opposite(low: float, high: float, expect: str, threshold) -> bool:
    if expect == ">":
        return high < threshold
    if expect == "<":
        return low > threshold
    return high < threshold[0] or low > threshold[1]


def estimate_row(row: Row, stat, expect: str, threshold) -> dict[str, Any]:
    """A row's estimate, interval, seed counts and agreement (no verdict yet)."""
    strata = [np.array([v for _, v in units]) for _, units in sorted(row.strata.items())]
    out: dict[str, Any] = {
        "variant": row.variant,
        "measured_on": sorted(row.used),
        "missing": row.missing,
        "strata": len(strata),
        "units": [
            {"stratum": s, "seed": seed, "value": v} for s, units in sorted(row.strata.items()) for seed, v in units
        ],
    }
    if not strata:
        return {
            **out,
            "n_seeds": 0,
            "n_units": 0,
            "estimate": None,
            "interval": None,
            "interval_note": "no values",
            "agree": 0,
            "agree_words": "",
        }
    if isinstance(stat, Improvement):
        others = [np.array([v for _, v in row.against[s]]) for s in sorted(row.strata)]
        n_seeds = min(min(len(a), len(b)) for a, b in zip(strata, others))
        estimate = estimators.improvement_over_strata(strata, others)
        paired = [(v, dict(row.against[s]).get(seed)) for s, units in row.strata.items() for seed, v in units]
        paired = [(a, b) for a, b in paired if b is not None]
        strict = expect != ">" or threshold >= 0.5
        agree = sum((a > b if strict else a >= b) if expect != "<" else a < b for a, b in paired)
        word = {True: "higher than", False: "at least as high as"}[strict] if expect != "<" else "lower than"
        out["agree_words"] = f"{agree} of {len(paired)} paired seeds {word} the other arm"
        out["against_units"] = [
            {"stratum": s, "seed": seed, "value": v} for s, units in sorted(row.against.items()) for seed, v in units
        ]
        interval_fn = lambda: estimators.improvement_interval(strata, others)  # noqa: E731
    else:
        n_seeds = min(len(v) for v in strata)
        estimate = estimators.mean_over_strata(strata)
        values = row.values()
        agree = sum(_side(v, expect, threshold) for v in values)
        unit = "seeds" if len(strata) == 1 else "(stratum, seed) pairs"
        out["agree_words"] = f"{agree} of {len(values)} {unit} on the claimed side"
        interval_fn = lambda: estimators.strata_t_interval(strata)  # noqa: E731
    interval, note = None, ""
    if n_seeds >= 2:
        interval = list(interval_fn())
        if n_seeds < estimators.WIDE_BELOW:
            note = f"wide: {n_seeds} seeds < {estimators.WIDE_BELOW}"
    else:
        note = "no interval: one seed" + (" in a stratum" if len(strata) > 1 else "")
    return {
        **out,
        "n_seeds": n_seeds,
        "n_units": sum(len(v) for v in strata),
        "estimate": estimate,
        "interval": interval,
        "interval_note": note,
        "agree": agree,
    }


def control_state(ctx: RunTrials, control: Control) -> dict[str, Any]:
    """Whether a positive control passed on every seed of the run."""
    rows, why = rows_of(ctx, control.statistic)
    values = [
        (", ".join(x for x in (row.variant, s) if x), seed, v)
        for row in rows
        for s, units in row.strata.items()
        for seed, v in units
    ]
    base = {
        "statement": control.statement,
        "words": control.words(),
        "metric": metric_words(control.statistic.metric),
        "expect": control.expect,
        "threshold": control.threshold,
        "threshold_words": f"{control.expect} {format_value(control.threshold)} on every seed",
    }
    if not values:
        return {**base, "state": "not measured", "detail": why or "no values in this run"}
    failing = [(s, seed, v) for s, seed, v in values if not _side(v, control.expect, control.threshold)]
    if failing:
        shown = "; ".join(f"{seed}{', ' + s if s else ''}: {format_value(v)}" for s, seed, v in failing[:3])
        more = f" and {len(failing) - 3} more" if len(failing) > 3 else ""
        return {**base, "state": "failed", "detail": f"failed on {len(failing)} of {len(values)} ({shown}{more})"}
    return {**base, "state": "passed", "detail": f"passed on {len(values)} of {len(values)}"}


def verdict(row: dict[str, Any], claim: Claim, controls: list[dict[str, Any]], why: str = "") -> tuple[str, str]:
    """``(verdict, words)`` of one row, after its controls."""
    failed = [c for c in controls if c["state"] == "failed"]
    if not row["n_units"] and row["missing"] and failed:  # trials there, values withheld
        return "control not met", "withheld: positive control not met (" + "; ".join(
            c["statement"] for c in failed
        ) + ")"
    if not row["n_units"]:
        return "not measured", f"not measured in this run: {why or 'no values'}"
    if failed:
        return "control failed", "no verdict: positive control did not pass (" + "; ".join(
            c["statement"] for c in failed
        ) + ")"
    unmeasured = [c for c in controls if c["state"] == "not measured"]
    if unmeasured:
        return "control not measured", "no verdict: positive control not measured in this run (" + "; ".join(
            c["statement"] for c in unmeasured
        ) + ")"
    n = row["n_seeds"]
    if row["interval"] is None or n < estimators.VERDICT_MIN_SEEDS:
        return "inconclusive", (
            f"inconclusive at {n} seed{'s' * (n != 1)} "
            f"(a verdict needs {estimators.VERDICT_MIN_SEEDS} or more per stratum)"
        )
    low, high = row["interval"]
    if all(_side(x, claim.expect, claim.threshold) for x in (low, high)):
        return "supported", "supported"
    if _opposite(low, high, claim.expect, claim.threshold):
        return "not supported", "not supported: the interval lies on the other side"
    return "inconclusive", f"inconclusive at {n} seeds: the interval includes the threshold"


def evaluate_claims(run: Run, spec: Report, defaults: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every declared claim of ``spec`` on ``run``: JSON-able, in declaration order."""
    ctx = RunTrials(run, spec.seeds, defaults or {})
    smoke = bool(run.experiment.get("smoke"))
    out = []
    for index, claim in enumerate(spec.claims, start=1):
        controls = [control_state(ctx, c) for c in claim.controls]
        for control in controls:  # a smoke run trains too little for a control to be expected to pass
            control["smoke_note"] = SMOKE_NOTE if smoke and control["state"] != "passed" else ""
        rows, why = rows_of(ctx, claim.statistic)
        estimated = [estimate_row(r, claim.statistic, claim.expect, claim.threshold) for r in rows] or [
            estimate_row(Row(), claim.statistic, claim.expect, claim.threshold)
        ]
        for row in estimated:
            row["verdict"], row["verdict_words"] = verdict(row, claim, controls, why or "; ".join(row["missing"][:2]))
        out.append(
            {
                "name": claim.name or f"claim{index}",
                "statement": claim.statement,
                "test": claim.test_words(),
                "metric": metric_words(claim.statistic.metric),
                "smoke": smoke,
                "expect": claim.expect,
                "threshold": claim.threshold,
                "controls": controls,
                "rows": estimated,
            }
        )
    return out


# ------------------------------------------------------------------------ words


def estimate_words(row: dict[str, Any]) -> str:
    """``0.83 [0.71, 0.95] (wide: 3 seeds < 5)``, or ``-`` when nothing was measured."""
    if row["estimate"] is None:
        return "-"
    text = format_value(float(row["estimate"]))
    if row["interval"]:
        text += f" [{format_value(row['interval'][0])}, {format_value(row['interval'][1])}]"
    return text + (f" ({row['interval_note']})" if row["interval_note"] else "")


SMOKE_NOTE = "expected at smoke size: a smoke run trains too little for its controls"


def control_words(control: dict[str, Any]) -> str:
    """``failed: the agent learns (> 0.5 on every seed; failed on 2 of 3 ...) [expected at smoke size ...]``."""
    threshold = control.get("threshold_words")
    text = f"{control['state']}: {control['statement']} ({threshold + '; ' if threshold else ''}{control['detail']})"
    return text + (f" [{control['smoke_note']}]" if control.get("smoke_note") else "")


def measured_words(claim: dict[str, Any], row: dict[str, Any]) -> str:
    """The metric(s) a row's values came from, else the claim's metric as declared."""
    return ", ".join(row.get("measured_on") or []) or claim.get("metric", "")


def controls_words(claim: dict[str, Any]) -> str:
    if not claim["controls"]:
        return "none declared"
    return "; ".join(control_words(c) for c in claim["controls"])


def claims_text(claims: list[dict[str, Any]], title: str = "") -> str:
    """The claims table as plain text (``python -m raylab.report NAME --claims``)."""
    import textwrap

    lines = [title] if title else []
    if not claims:
        return "\n".join([*lines, "this workload declares no claims"]) + "\n"
    width = 96
    table = [("#", "claim", "metric", "verdict", "estimate [95% interval]", "n", "variant")]
    for i, claim in enumerate(claims, start=1):
        for row in claim["rows"]:
            table.append(
                (
                    str(i),
                    claim["name"],
                    measured_words(claim, row),
                    row["verdict"],
                    estimate_words(row),
                    str(row["n_seeds"]),
                    row["variant"] or "-",
                )
            )
    widths = [max(len(r[j]) for r in table) for j in range(len(table[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    for i, claim in enumerate(claims, start=1):
        lines.append("")
        lines += textwrap.wrap(f"[{i}] {claim['statement']}", width, subsequent_indent="    ")
        lines += textwrap.wrap(f"test: {claim['test']}", width, initial_indent="    ", subsequent_indent="          ")
        lines += textwrap.wrap(
            f"control: {controls_words(claim)}", width, initial_indent="    ", subsequent_indent="             "
        )
        for row in claim["rows"]:
            head = f"    {row['variant']}: " if row["variant"] else "    "
            lines += textwrap.wrap(
                f"{head}estimate {estimate_words(row)}; n = {row['n_seeds']} seed{'s' * (row['n_seeds'] != 1)}"
                + (f" x {row['strata']} strata" if row["strata"] > 1 else "")
                + (f"; {row['agree_words']}" if row["agree_words"] else "")
                + f" -> {row['verdict_words']}",
                width,
                subsequent_indent="      ",
            )
    return "\n".join(lines) + "\n"
