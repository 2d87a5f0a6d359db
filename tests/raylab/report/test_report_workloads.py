"""The report of one real smoke sweep of each workload: declared figures drawn, tables exact, every
declared claim stated with its estimate, interval, seeds agreeing and controls' state."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from raylab import report, workloads
from raylab.report import estimators
from raylab.run_folder import RunFolder
from tests.raylab.report.conftest import check_figures, check_tables

# One experiment per workload: the cheapest smoke that sweeps the keys its figures use, shared
# with the workload's own smoke test where it has one (backdoor_theory, fair_adv, boltz_distill).
# The backdoor smoke trains two ResNet-18s; a quarter of the standard width keeps it to seconds.
# dqn_softlinf_small's FeatureMDP trials take seconds: 3 seeds give its claims intervals and its
# aggregates (the browser test reads the same sweep). seagram's claims need SEAGRAM trials: its
# own smoke test (tests/trainers/seagram/test_seagram_smoke.py) checks the report of its sweep with
# ``check_report``; admet_probe's smoke (18 trials) is long: tests/trainers/boltz_distill/test_bd_smoke.py
# checks its claims.
EXPERIMENTS = {
    "backdoor_theory": ("backdoor_theory",),
    "backdoor": ("backdoor_resnet", "config.model_width=16"),
    "dqn_softlinf": ("dqn_softlinf_small", "search.seed=[0,1,2]"),
    "fair_adv": ("fair_adv", "config.data_dir={shared}/fair_adv-data"),
    "boltz_distill": ("boltz_distill", "config.store_root={shared}/stores"),
}
VERDICTS = {
    "supported",
    "not supported",
    "inconclusive",
    "control failed",
    "control not measured",
    "control not met",
    "not measured",
}


def check_claims(content: dict, spec) -> int:
    """Every declared claim is there, in order, with its numbers consistent with its per-seed
    values; returns how many rows (claim x variant) were measured."""
    claims = content["claims"]
    assert [c["statement"] for c in claims] == [c.statement for c in spec.claims]
    measured = 0
    for claim, declared in zip(claims, spec.claims):
        assert claim["test"] == declared.test_words()
        assert [c["statement"] for c in claim["controls"]] == [c.statement for c in declared.controls]
        for control in claim["controls"]:
            assert control["state"] in ("passed", "failed", "not measured") and control["detail"]
        assert claim["rows"]
        for row in claim["rows"]:
            assert row["verdict"] in VERDICTS, row
            if not row["n_units"]:
                assert row["verdict"] in ("not measured", "control not met") and row["estimate"] is None
                continue
            measured += 1
            strata: dict[str, list[float]] = {}
            for unit in row["units"]:
                strata.setdefault(unit["stratum"], []).append(unit["value"])
            assert row["n_units"] == len(row["units"]) and row["n_seeds"] == min(len(v) for v in strata.values())
            if "against_units" not in row:  # Improvement rows estimate from both arms
                assert row["estimate"] == pytest.approx(statistics.fmean(statistics.fmean(v) for v in strata.values()))
            assert (row["interval"] is not None) == (row["n_seeds"] >= 2)
            if row["interval"]:
                assert row["interval"][0] <= row["estimate"] <= row["interval"][1]
                assert row["interval_note"].startswith("wide") == (row["n_seeds"] < estimators.WIDE_BELOW)
            assert row["agree_words"].startswith(f"{row['agree']} of ")
            states = {c["state"] for c in claim["controls"]}
            if "failed" in states:
                assert row["verdict"] == "control failed"
            elif "not measured" in states:
                assert row["verdict"] == "control not measured"
            elif row["n_seeds"] < estimators.VERDICT_MIN_SEEDS:
                assert row["verdict"] == "inconclusive"
    return measured


def check_report(workload: str, run_path: str) -> dict:
    """Write the report of a real run of ``workload`` and check it: every declared figure drawn
    or said why not, every table cell against the result files, every claim consistent and in
    the HTML, the sweep view there. Returns the report's content."""
    path = Path(report.write_report(run_path))
    content = json.loads((path.parent / "report.json").read_text())
    spec = workloads.get(workload).report_spec()

    assert len(content["figures"]) == len(spec.figures())
    drawn = check_figures(Path(run_path), path.parent, content)
    assert drawn >= 1
    assert check_tables(Path(run_path), content) >= 1
    html = path.read_text()
    extra = sum(bool(a["file"]) for a in content["aggregates"]) + sum(
        bool(content["sweep"].get(k, {}).get("file")) for k in ("parallel", "curves")
    )
    assert html.count("<img ") == drawn + extra
    assert not content["failed"]

    # the claims section: every declared claim, consistent, and in the HTML
    assert check_claims(content, spec) >= 1, f"{workload}: its smoke sweep measures none of its claims"
    for claim in content["claims"]:
        assert claim["statement"].replace("'", "&#x27;") in html
    assert html.index('id="claims"') < html.index("<h2>Figures</h2>")
    # the sweep view of a run with a search space
    assert content["sweep"]["shown"] and content["sweep"]["parallel"]["configurations"] >= 1
    return content


@pytest.mark.slow
@pytest.mark.parametrize("workload", sorted(EXPERIMENTS))
def test_smoke_sweep_report_has_every_declared_figure_exact_tables_and_claims(workload, shared_smoke_sweep):
    results, run_path, experiment = shared_smoke_sweep(*EXPERIMENTS[workload])
    assert experiment.workload == workload
    assert all(r.error is None for r in results), [str(r.error)[:300] for r in results if r.error]
    check_report(workload, run_path)


@pytest.mark.slow
def test_dqn_claims_against_an_oracle_of_the_result_files(shared_smoke_sweep, capsys):
    """The residual claim recomputed here from result.json with plain Python (the last-half mean
    of each trial's sup-norm residual, soft-linf over MSE on each seed), the claims table of the
    CLI, and the aggregates of 3 seeds of one game."""
    _, run_path, _ = shared_smoke_sweep(*EXPERIMENTS["dqn_softlinf"])
    final: dict[tuple[str, int], dict[str, float]] = {}
    for trial in RunFolder(run_path).trials():
        params, rows = trial.params(), trial.rows()

        def last_half(key):
            values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
            tail = values[len(values) // 2 :]
            return sum(tail) / len(tail)

        final[params["loss"], params["seed"]] = {
            "res": last_half("bellman/residual_linf_exact"),
            "ins": last_half("bellman/residual_linf_insample"),
            "return": rows[-1]["eval/return_mean"],
        }
    seeds = sorted({s for _, s in final})
    assert seeds == [0, 1, 2]
    ratios = [final["soft_linf", s]["res"] / final["mse", s]["res"] for s in seeds]
    control = [final["soft_linf", s]["ins"] / final["mse", s]["ins"] for s in seeds]

    capsys.readouterr()
    assert report.main([run_path, "--claims", "--format", "json"]) == 0
    claims = {c["name"]: c for c in json.loads(capsys.readouterr().out)["claims"]}
    (row,) = claims["residual"]["rows"]
    assert row["estimate"] == pytest.approx(statistics.fmean(ratios), rel=1e-9)
    assert sorted(u["value"] for u in row["units"]) == pytest.approx(sorted(ratios), rel=1e-9)
    assert row["agree"] == sum(r < 1 for r in ratios) and row["n_seeds"] == 3
    assert row["interval_note"] == "wide: 3 seeds < 5"
    control_state = claims["residual"]["controls"][0]["state"]
    assert control_state == ("passed" if all(c < 0.8 for c in control) else "failed")
    low, high = row["interval"]
    expected = (
        "control failed"
        if control_state == "failed"
        else "supported"
        if high < 1
        else "not supported"
        if low > 1
        else "inconclusive"
    )
    assert row["verdict"] == expected

    assert report.main([run_path, "--claims"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("claims of dqn_softlinf, run ")
    assert "1  residual" in text and "2  returns" in text and "wide: 3 seeds < 5" in text

    content = json.loads((Path(report.write_report(run_path, fmt="json"))).read_text())
    (agg,) = content["aggregates"]
    assert agg["shown"] and agg["seeds"] == 3 and agg["tasks"] == ["raylab/FeatureMDP-v0"]
    assert agg["kind"].startswith("raw eval/return_mean")  # FeatureMDP has no human scores
    mse = next(a for a in agg["arms"] if a["arm"] == "loss=mse")
    assert mse["mean"]["estimate"] == pytest.approx(statistics.fmean(final["mse", s]["return"] for s in seeds))
    wins = sum(
        (a > b) + 0.5 * (a == b)
        for a in (final["soft_linf", s]["return"] for s in seeds)
        for b in (final["mse", s]["return"] for s in seeds)
    )
    assert agg["improvement"][0]["estimate"] == pytest.approx(wins / 9)
    print(f"\nsoft-linf / mse residual per seed {[round(r, 3) for r in ratios]}: {row['verdict']}")
