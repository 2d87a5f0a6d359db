"""Claims, aggregates and the sweep view on hand-written run folders (no Ray): planted effects the
statistics must find, controls that fail, too few seeds, the CLI's claims table, a workload page that
lists every claim as its report states it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from raylab import report, workloads
from raylab.report import estimators
from raylab.report import writer as report_writer
from raylab.report.claims import Claim, Contrast, Control, Improvement, Value, readme_lines, where
from raylab.report.evidence import evaluate_claims
from raylab.report.run_view import load_run
from raylab.report.spec import Aggregates, Report, Table
from raylab.run_folder import RunFolder
from tests.raylab.report.test_report_units import write_run

REPO = Path(__file__).resolve().parents[3]


def planted_run(tmp_path: Path, seeds=5, games=("Pong", "Breakout"), ratio=0.5, betas=(10.0,), name="run"):
    """MSE and soft-linf (at ``betas``) x games x seeds; soft-linf's residual is ``ratio`` x MSE's
    on each seed (with per-seed noise), its in-sample residual 0.4x; returns differ by noise only."""
    rng = np.random.default_rng(0)
    trials = []
    for game in games:
        for seed in range(seeds):
            mse_res = 1.0 + rng.uniform(0, 0.5)
            ret = 10.0 + rng.normal()
            trials.append(
                {
                    "params": {"variant": {"loss": "mse"}, "game": game, "seed": seed},
                    "rows": [
                        {"res": 9.0, "ins": 9.0, "ret": 0.0, "env/steps": 1},
                        {"res": mse_res, "ins": 1.0, "ret": ret, "env/steps": 2},
                    ],
                }
            )
            for beta in betas:
                soft = mse_res * ratio * (1 + 0.05 * rng.normal())
                trials.append(
                    {
                        "params": {"variant": {"loss": "soft_linf", "beta": beta}, "game": game, "seed": seed},
                        "rows": [
                            {"res": 99.0, "ins": 9.0, "ret": 0.0, "env/steps": 1},
                            {"res": soft, "ins": 0.4, "ret": ret + 0.1 * rng.normal(), "env/steps": 2},
                        ],
                    }
                )
    search = {
        "variant": [{"loss": "mse"}, *({"loss": "soft_linf", "beta": b} for b in betas)],
        "game": list(games),
        "seed": list(range(seeds)),
    }
    run = write_run(tmp_path, {}, trials, name=name, metric="ret")
    experiment = run / "experiment.yaml"
    import yaml

    exp = yaml.safe_load(experiment.read_text())
    exp["search"] = {
        "variant": {"grid": search["variant"]},
        "game": {"grid": search["game"]},
        "seed": {"grid": search["seed"]},
    }
    experiment.write_text(yaml.safe_dump(exp, sort_keys=False))
    return run


SOFT, MSE = {"loss": "soft_linf"}, {"loss": "mse"}
CONTROL = Control(
    "in-sample bias seen",
    Contrast("ins", arm=SOFT, against=MSE, op="ratio", strata=("game",)),
    expect="<",
    threshold=0.8,
)
RESIDUAL = Claim(
    "soft-linf lowers the residual",
    Contrast("res", arm=SOFT, against=MSE, op="ratio", strata=("game",)),
    expect="<",
    threshold=1.0,
    controls=(CONTROL,),
    name="residual",
)


def evaluate(run: Path, *claims: Claim, defaults=None) -> list[dict]:
    return evaluate_claims(load_run(str(run)), Report(claims=claims), defaults or {"beta": 10.0})


def test_a_planted_ratio_is_found_paired_by_seed_and_stratified_by_game(tmp_path):
    (claim,) = evaluate(planted_run(tmp_path), RESIDUAL)
    (row,) = claim["rows"]
    assert row["n_seeds"] == 5 and row["strata"] == 2 and row["n_units"] == 10 and not row["missing"]
    assert row["estimate"] == pytest.approx(0.5, abs=0.03)
    low, high = row["interval"]
    assert low < row["estimate"] < high < 1.0 and row["interval_note"] == ""  # 5 seeds: not wide
    assert row["agree"] == 10 and row["agree_words"] == "10 of 10 (stratum, seed) pairs on the claimed side"
    assert claim["controls"][0]["state"] == "passed" and row["verdict"] == "supported"
    assert row["measured_on"] == ["res"]
    # each stratum weighs the same, as does each seed in it
    ratios = {}
    for unit in row["units"]:
        ratios.setdefault(unit["stratum"], []).append(unit["value"])
    assert row["estimate"] == pytest.approx(np.mean([np.mean(v) for v in ratios.values()]))
    # no planted effect: the same claim, inconclusive or not supported, never supported
    (null,) = evaluate(planted_run(tmp_path, ratio=1.0, name="null"), RESIDUAL)
    assert null["rows"][0]["verdict"] in ("inconclusive", "not supported")
    (worse,) = evaluate(planted_run(tmp_path, ratio=1.5, name="worse"), RESIDUAL)
    assert worse["rows"][0]["verdict"] == "not supported"


def test_last_half_is_a_time_average_and_first_reads_the_first_report(tmp_path):
    run = write_run(
        tmp_path,
        {"seed": [0]},
        [{"params": {"seed": 0}, "rows": [{"m": 10.0}, {"m": 4.0}, {"m": 2.0}, {"m": 0.0}, {"m": 1.0}]}],
    )
    trial = load_run(str(run)).trials[0]
    from raylab.report.aggregate import value_at

    assert value_at(trial, "m", "last_half") == pytest.approx(1.0)  # mean of the last 3 of 5
    assert value_at(trial, "m", "first") == 10.0
    (claim,) = evaluate(run, Claim("falls", Contrast("m", against_at="first", op="ratio"), expect="<", threshold=1))
    assert claim["rows"][0]["estimate"] == pytest.approx(0.1)


def test_few_seeds_give_wide_intervals_and_no_verdict(tmp_path):
    (three,) = evaluate(planted_run(tmp_path, seeds=3, name="three"), RESIDUAL)
    assert three["rows"][0]["interval_note"] == "wide: 3 seeds < 5"
    assert three["rows"][0]["verdict"] == "supported"  # 3 seeds: a verdict, its interval labelled wide
    (two,) = evaluate(planted_run(tmp_path, seeds=2, name="two"), RESIDUAL)
    assert two["rows"][0]["interval"] and two["rows"][0]["verdict"] == "inconclusive"
    assert "a verdict needs 3 or more" in two["rows"][0]["verdict_words"]
    (one,) = evaluate(planted_run(tmp_path, seeds=1, name="one"), RESIDUAL)
    assert one["rows"][0]["interval"] is None and one["rows"][0]["interval_note"].startswith("no interval")
    assert estimators.VERDICT_MIN_SEEDS == 3 and estimators.WIDE_BELOW == 5


def test_a_failed_or_unmeasured_control_replaces_the_verdict(tmp_path):
    run = planted_run(tmp_path)
    strict = Control("in-sample bias below 0.1x", CONTROL.statistic, expect="<", threshold=0.1)
    (failed,) = evaluate(run, Claim("x", RESIDUAL.statistic, "<", 1.0, controls=(strict,)))
    assert failed["controls"][0]["state"] == "failed" and "failed on 10 of 10" in failed["controls"][0]["detail"]
    assert failed["rows"][0]["verdict"] == "control failed"
    assert failed["rows"][0]["estimate"] == pytest.approx(0.5, abs=0.03)  # the numbers are still shown
    absent = Control("needs huber", Value("res", arm={"loss": "huber"}), expect="<", threshold=1.0)
    (unmeasured,) = evaluate(run, Claim("x", RESIDUAL.statistic, "<", 1.0, controls=(absent,)))
    assert unmeasured["controls"][0]["state"] == "not measured"
    assert "no trials with loss=huber" in unmeasured["controls"][0]["detail"]
    assert unmeasured["rows"][0]["verdict"] == "control not measured"
    (missing,) = evaluate(run, Claim("x", Contrast("res", arm={"loss": "l1"}, against=MSE), "<", 1.0))
    assert missing["rows"][0]["verdict"] == "not measured"
    assert "no trials with loss=l1" in missing["rows"][0]["verdict_words"]


def test_each_soft_linf_beta_is_its_own_row_against_the_mse_arm_at_its_default_beta(tmp_path):
    (claim,) = evaluate(planted_run(tmp_path, betas=(3.0, 30.0)), RESIDUAL)
    assert [r["variant"] for r in claim["rows"]] == ["beta=3", "beta=30"]
    assert all(r["n_units"] == 10 and r["verdict"] == "supported" for r in claim["rows"])


def test_a_shared_clean_arm_stands_in_where_a_stratum_has_none(tmp_path):
    """BadNets' clean trials (poison_ratio 0) serve Blended, which has no clean trial of its own."""
    trials = [
        {
            "params": {"variant": {"attack": a, "poison_ratio": p}, "seed": s},
            "rows": [{"gap": (1.0 if p > 0 else 0.0) + 0.1 * s}],
        }
        for a, p in (("badnets", 0.0), ("badnets", 0.1), ("blended", 0.1))
        for s in range(3)
    ]
    run = write_run(tmp_path, {"seed": [0, 1, 2]}, trials)
    statistic = Contrast(
        "gap",
        arm={"poison_ratio": where("> 0", lambda p: p > 0)},
        against={"poison_ratio": 0.0},
        strata=("attack", "poison_ratio"),
        pair_on=("attack",),
        baseline={"attack": "badnets"},
    )
    (claim,) = evaluate(run, Claim("poison widens the gap", statistic, ">", 0.0))
    row = claim["rows"][0]
    assert row["strata"] == 2 and row["n_units"] == 6 and all(u["value"] == pytest.approx(1.0) for u in row["units"])
    assert "poison_ratio > 0" in claim["test"]
    without = Contrast(
        "gap", arm=statistic.arm, against=statistic.against, strata=statistic.strata, pair_on=("attack",)
    )
    (claim,) = evaluate(run, Claim("x", without, ">", 0.0))
    assert claim["rows"][0]["n_units"] == 3 and len(claim["rows"][0]["missing"]) == 3


def test_probability_of_improvement_claim_moves_with_a_planted_difference(tmp_path):
    """Positive control of the Improvement statistic: equal returns put P(X > Y) near 0.5 with
    an interval holding it; a planted gain moves the estimate and the interval above 0.5."""
    claim = Claim("matches", Improvement("ret", arm=SOFT, against=MSE, strata=("game",)), ">", 0.4)
    (equal,) = evaluate(planted_run(tmp_path, seeds=8), claim)
    row = equal["rows"][0]
    assert 0.3 < row["estimate"] < 0.7 and row["interval"][0] < 0.5 < row["interval"][1]
    better = planted_run(tmp_path, seeds=8, name="better")
    for trial in RunFolder(better).trials():
        if "soft_linf" in json.dumps(trial.params()):
            rows = trial.rows()
            rows[-1]["ret"] += 5.0
            trial.write_rows(rows)
    (gain,) = evaluate(better, claim)
    row = gain["rows"][0]
    assert row["estimate"] > 0.95 and row["interval"][0] > 0.5 and row["verdict"] == "supported"
    assert row["agree_words"] == "16 of 16 paired seeds at least as high as the other arm"


def test_claims_cli_prints_the_table_and_json(tmp_path, capsys, monkeypatch):
    run = planted_run(tmp_path)
    monkeypatch.setattr(report_writer, "declared_report", lambda r: (Report(claims=(RESIDUAL,)), ""))
    monkeypatch.setattr(report_writer, "config_defaults", lambda r: {"beta": 10.0})
    assert report.main([str(run), "--claims"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^1\s+residual\s+\S+\s+supported\s+0\.\d+ \[0\.\d+, 0\.\d+\]\s+5\s+-$", text, re.M), text
    assert re.search(r"control: passed: in-sample bias seen \([<>] \S+ on every seed; passed on 10 of 10\)", text), text
    assert not (run / "report").exists()  # --claims writes nothing
    assert report.main([str(run), "--claims", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (claim,) = data["claims"]
    assert claim["name"] == "residual" and claim["rows"][0]["verdict"] == "supported"
    assert len(claim["rows"][0]["interval"]) == 2
    assert report.main([str(run), "--format", "json"]) == 0
    assert capsys.readouterr().out.strip() == f"report: {run / 'report' / 'report.json'}"
    assert not (run / "report" / "report.html").exists()


def test_best_is_not_marked_on_a_difference_inside_its_interval(tmp_path):
    overlapping = [
        {"params": {"m": m, "seed": s}, "rows": [{"score": v}]}
        for m, values in (("a", [1.0, 3.0, 2.0]), ("b", [1.5, 2.5, 2.2]))
        for s, v in enumerate(values)
    ]
    run = load_run(str(write_run(tmp_path, {"m": ["a", "b"], "seed": [0, 1, 2]}, overlapping)))
    from raylab.report.aggregate import table_blocks

    (block,) = table_blocks(run, Table("score", rows="m", best="max"), None)
    assert block.best == []  # nothing but one pivot row per method here: a column each
    (block,) = table_blocks(run, Table(("score",), best="max"), None)
    assert block.best == [] and "includes 0" in block.best_notes[0]
    apart = [
        {"params": {"m": m, "seed": s}, "rows": [{"score": v + (5.0 if m == "b" else 0.0)}]}
        for m in ("a", "b")
        for s, v in enumerate([1.0, 1.2, 0.9])
    ]
    run = load_run(str(write_run(tmp_path / "apart", {"m": ["a", "b"], "seed": [0, 1, 2]}, apart)))
    (block,) = table_blocks(run, Table(("score",), best="max"), None)
    assert block.best == [(1, 0)] and block.best_notes == []


# ------------------------------------------------------------------------ aggregates, sweep view

HUMAN = {"Pong": (-20.7, 14.6), "Breakout": (1.7, 30.5), "Seaquest": (68.4, 42054.7)}


def atari_run(tmp_path: Path, seeds=3) -> Path:
    """3 games x (mse, soft_linf) x seeds; soft-linf scores about 0.3 human-normalised higher."""
    rng = np.random.default_rng(1)
    trials = []
    for game, (low, high) in HUMAN.items():
        for loss, level in (("mse", 0.5), ("soft_linf", 0.8)):
            for seed in range(seeds):
                score = low + (level + 0.05 * rng.normal()) * (high - low)
                trials.append(
                    {
                        "params": {"loss": loss, "game": game, "seed": seed},
                        "rows": [{"ret": low, "env/steps": 1}, {"ret": score, "env/steps": 2}],
                    }
                )
    return write_run(
        tmp_path, {"loss": ["mse", "soft_linf"], "game": list(HUMAN), "seed": list(range(seeds))}, trials, metric="ret"
    )


def test_atari_aggregates_are_human_normalised_with_intervals_and_a_figure(tmp_path):
    from trainers.dqn_softlinf.human_scores import SOURCE, random_and_human

    agg = Aggregates(
        "ret",
        task="game",
        by=("loss",),
        reference={"loss": "mse"},
        normalize=random_and_human,
        normalized="human-normalised score",
        source=SOURCE,
    )
    run = atari_run(tmp_path)
    content = report.build(load_run(str(run)), Report(items=(), aggregates=(agg,)), tmp_path / "out")
    (out,) = content["aggregates"]
    assert out["shown"] and out["tasks"] == ["Breakout", "Pong", "Seaquest"] and out["seeds"] == 3
    assert out["normalizers"]["Pong"] == [-20.7, 14.6] and "Agent57" in out["source"]
    arms = {a["arm"]: a for a in out["arms"]}
    for arm, level in (("loss=mse", 0.5), ("loss=soft_linf", 0.8)):
        for fn in ("mean", "median", "iqm"):
            entry = arms[arm][fn]
            assert entry["estimate"] == pytest.approx(level, abs=0.06), (arm, fn)
            assert entry["interval"][0] <= entry["estimate"] <= entry["interval"][1]
        assert arms[arm]["optimality_gap"]["estimate"] == pytest.approx(1 - level, abs=0.06)
    (improvement,) = out["improvement"]
    assert improvement["arm"] == "loss=soft_linf" and improvement["estimate"] == 1.0
    assert (tmp_path / "out" / out["file"]).stat().st_size > 10_000 and out["note"] == "wide: 3 seeds < 5"
    # one game, one seed: not shown, and says why
    one = write_run(
        tmp_path / "one",
        {"loss": ["mse"], "game": ["Pong"], "seed": [0]},
        [{"params": {"loss": "mse", "game": "Pong", "seed": 0}, "rows": [{"ret": 1.0}]}],
        metric="ret",
    )
    content = report.build(load_run(str(one)), Report(items=(), aggregates=(agg,)), tmp_path / "out1")
    assert not content["aggregates"][0]["shown"]
    assert (
        content["aggregates"][0]["note"]
        == "aggregates need 2 or more games or 3 or more seeds: this run has 1 game x 1 seed"
    )


def test_sweep_view_finds_the_planted_hyperparameter_and_keeps_the_seed_as_noise_floor(tmp_path):
    """lr sets the metric (x10 per decade), the seed adds noise, width does nothing: lr must
    have the largest importance, width less than the seed's."""
    rng = np.random.default_rng(3)
    trials = []
    for lr in (1e-4, 1e-3, 1e-2):
        for width in (16, 64):
            for seed in range(3):
                score = 10 * np.log10(lr) + rng.normal(0, 0.5)
                trials.append(
                    {
                        "params": {"lr": lr, "width": width, "seed": seed},
                        "rows": [
                            {"score": score - 5 + i, "train/step": 10 * (i + 1), "time_total_s": 1.0 + i}
                            for i in range(3)
                        ],
                    }
                )
    run = write_run(tmp_path, {"lr": [1e-4, 1e-3, 1e-2], "width": [16, 64], "seed": [0, 1, 2]}, trials)
    content = report.build(load_run(str(run)), Report(items=()), tmp_path / "out")
    sweep = content["sweep"]
    rows = {r["key"]: r for r in sweep["importance"]["rows"]}
    assert sweep["importance"]["rows"][0]["key"] == "lr" and rows["lr"]["variance_share"] > 0.9
    assert rows["width"]["variance_share"] < 0.02 and rows["seed"]["variance_share"] < 0.02  # both noise
    assert rows["lr"]["permutation"] > 10 * max(rows["width"]["permutation"], rows["seed"]["permutation"])
    assert sweep["parallel"]["configurations"] == 6 and sweep["parallel"]["rows"][0]["values"]["lr"] == 1e-2
    assert sweep["curves"]["x"] == ["training_iteration", "time_total_s"]
    for key in ("parallel", "curves"):
        assert (tmp_path / "out" / sweep[key]["file"]).stat().st_size > 10_000
    html = report.render.to_html(content, tmp_path / "out")
    assert "Hyperparameter importance" in html and html.count("<img ") == 2


# ----------------------------------------------------------- workload pages against declarations

READMES = {
    "dqn_softlinf": "docs/workloads/dqn_softlinf.md",
    "backdoor": "docs/workloads/backdoor.md",
    "backdoor_theory": "docs/workloads/backdoor.md",
    "fair_adv": "docs/workloads/fair_adv.md",
    "boltz_distill": "docs/workloads/boltz_distill.md",
    "admet_probe": "docs/workloads/boltz_distill.md",
    "seagram": "docs/workloads/seagram.md",
}


@pytest.mark.parametrize("name", sorted(READMES))
def test_readme_lists_each_claim_as_the_report_states_it(name):
    """The workload page's "What it reproduces" holds the lines ``readme_lines`` makes from the running
    declaration: each claim's statement, statistic, claimed side and controls."""
    spec = workloads.get(name).report_spec()
    assert spec.claims, f"{name} declares no claims"
    text = (REPO / READMES[name]).read_text()
    section = text[text.index("## What it reproduces") :]
    section = section[: section.find("\n## ", 3)]
    for line in readme_lines(spec.claims):
        text = re.sub(r"^\s*(\d+\. )?", "", line)  # the list's numbering and indent may differ
        assert text in section, f"{READMES[name]} lacks: {text}"


@pytest.mark.parametrize("name", sorted(READMES))
def test_claims_read_reported_metrics_and_config_fields(name):
    import dataclasses
    import fnmatch

    workload = workloads.get(name)
    spec = workload.report_spec()
    reported = set(workload.metrics)
    for metric in spec.claim_metrics():
        pattern = re.sub(r"\{\w+\}", "*", metric)
        assert any(fnmatch.fnmatchcase(m, pattern) for m in reported), f"{name}: {metric} is never reported"
    fields = {f.name for f in dataclasses.fields(workload.config_class())}
    for claim in spec.claims:
        for statistic in (claim.statistic, *(c.statistic for c in claim.controls)):
            keys = [*statistic.arm, *(getattr(statistic, "against", None) or {}), *statistic.strata]
            for key in keys:
                assert key in fields, f"{name}: {claim.name} uses '{key}', not a config field"
