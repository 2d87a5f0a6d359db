"""ASR is reported only where the model has learned the task (``probe.reported_asr``): a model at
chance that predicts the target class everywhere has ASR 1 with no backdoor. The loop withholds
it (NaN), the report says so in a note and the claims on ASR read "control not met"; the
``backdoor_digits`` smoke sweep learns, so its own result.json shows clean accuracy above the
floor and an ASR gap between its arms."""

import math
from pathlib import Path

import pytest
import torch

from raylab.config import with_variant
from raylab.report import status_notes
from raylab.report.evidence import evaluate_claims
from raylab.report.run_view import load_run
from raylab.run_folder import TrialFolder
from tests.raylab.report.test_report_units import write_run
from trainers.backdoor import probe
from trainers.backdoor.config import Config
from trainers.backdoor.figures import REPORT
from trainers.backdoor.loop import asr_floor, build_data, evaluate


class Constant(torch.nn.Module):
    """A network at chance: it predicts ``label`` for every image."""

    def __init__(self, label: int, classes: int = 10):
        super().__init__()
        self.logits = torch.nn.functional.one_hot(torch.tensor(label), classes).float()

    def forward(self, x):
        return self.logits.expand(len(x), -1)


def test_reported_asr_is_nan_at_or_below_the_floor():
    assert probe.clean_acc_floor(2.0, 10) == pytest.approx(0.2) and probe.clean_acc_floor(2.0, 100) == 0.02
    assert math.isnan(probe.reported_asr(1.0, 0.1, 0.2)) and math.isnan(probe.reported_asr(1.0, 0.2, 0.2))
    assert probe.reported_asr(0.97, 0.85, 0.2) == 0.97
    assert probe.reported_asr(1.0, 0.1, 0.0) == 1.0  # floor 0: every ASR reported


def test_asr_is_withheld_for_a_model_at_chance(tmp_path):
    cfg = Config(
        synthetic_data=True,
        data_dir=str(tmp_path / "d"),
        synthetic_train_size=128,
        synthetic_test_size=64,
        probe_size=8,
        coherence_size=4,
        finetune_fraction=0.25,
    )
    data = build_data(cfg, torch.device("cpu"))
    at_chance = Constant(cfg.target_class)
    shown = evaluate(at_chance, data, cfg)
    assert asr_floor(cfg) == pytest.approx(0.2) and shown["clean_acc"] < 0.2
    assert math.isnan(shown["asr"])  # withheld: the default floor, 2x chance
    unfloored = evaluate(at_chance, data, Config(**{**cfg.__dict__, "clean_acc_floor_x_chance": 0.0}))
    assert unfloored["asr"] == 1.0  # what it would have shown: "ASR 1" with no backdoor at all
    assert unfloored["clean_acc"] == shown["clean_acc"] and unfloored["ra"] == shown["ra"]


def backdoor_run(tmp_path: Path, clean_acc: dict, asr: dict, name: str) -> Path:
    """A hand-written backdoor run: BadNets 0% and 10% x seeds 0, 1 (``clean_acc``/``asr`` by ratio)."""
    trials = [
        {
            "params": {"attack": "badnets", "poison_ratio": p, "seed": s},
            "rows": [{"eval/clean_acc": clean_acc[p], "eval/clean_acc_floor": 0.2, "eval/asr": asr[p] + s / 100}],
        }
        for p in (0.0, 0.1)
        for s in (0, 1)
    ]
    return write_run(
        tmp_path,
        {"poison_ratio": [0.0, 0.1], "seed": [0, 1]},
        trials,
        name=name,
        workload="backdoor",
        metric="eval/asr",
    )


def test_the_report_withholds_asr_at_chance_and_shows_it_where_learned(tmp_path):
    chance = load_run(str(backdoor_run(tmp_path, {0.0: 0.1, 0.1: 0.1}, {0.0: math.nan, 0.1: math.nan}, "chance")))
    notes = [n for n in status_notes(chance, REPORT, []) if "withheld" in n]
    assert len(notes) == 4 and "clean accuracy 0.100 is not above the floor 0.200" in notes[0]
    claims = {c["name"]: c for c in evaluate_claims(chance, REPORT, {})}
    planted = claims["backdoor_planted"]
    assert planted["controls"][0]["state"] == "failed"  # the task is not learned
    assert planted["rows"][0]["verdict"] == "control not met" and planted["rows"][0]["estimate"] is None

    learned = load_run(str(backdoor_run(tmp_path, {0.0: 0.93, 0.1: 0.85}, {0.0: 0.0, 0.1: 0.98}, "learned")))
    assert not [n for n in status_notes(learned, REPORT, []) if "withheld" in n]
    planted = {c["name"]: c for c in evaluate_claims(learned, REPORT, {})}["backdoor_planted"]
    assert planted["controls"][0]["state"] == "passed"
    assert planted["rows"][0]["estimate"] == pytest.approx(0.98) and planted["rows"][0]["agree"] == 2


@pytest.mark.slow
def test_digits_smoke_sweep_learns_and_shows_the_backdoor_over_two_seeds(smoke_sweep, tmp_path):
    """``backdoor_digits --smoke`` over seeds 0 and 1 (4 trials): clean accuracy above the floor
    in every trial and ASR of the poisoned arm above the clean arm's on each seed, read from
    each trial's result.json; the report's ASR claim then has both seeds and its control passed."""
    results, run_path, _ = smoke_sweep("backdoor_digits", "search.seed=[0,1]")
    assert len(results) == 4
    last = {}
    for result in results:
        assert result.error is None, result.error
        row = TrialFolder.at(result.path).rows()[-1]
        config = with_variant(result.config)
        last[(config["seed"], config["poison_ratio"])] = row
        print(
            f"seed {config['seed']} poison_ratio {config['poison_ratio']}: clean_acc {row['eval/clean_acc']:.3f} "
            f"asr {row['eval/asr']:.3f} (floor {row['eval/clean_acc_floor']:.2f})"
        )
        assert row["eval/clean_acc"] > row["eval/clean_acc_floor"] == pytest.approx(0.2)
        assert math.isfinite(row["eval/asr"])
    for seed in (0, 1):
        gap = last[(seed, 0.1)]["eval/asr"] - last[(seed, 0.0)]["eval/asr"]
        assert gap > 0.5, f"seed {seed}: ASR gap {gap:.3f}"
    run = load_run(run_path)
    planted = {c["name"]: c for c in evaluate_claims(run, REPORT, {})}["backdoor_planted"]
    assert planted["controls"][0]["state"] == "passed" and planted["rows"][0]["n_seeds"] == 2
    assert not [n for n in status_notes(run, REPORT, []) if "withheld" in n]
