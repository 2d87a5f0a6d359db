"""benchmarks/seagram_tune.py run as a user runs it, at a tiny size: it attacks the validation
queries only, prints every setting per seed and the chosen one; its setting is the science
test's, so the defaults it picks are tuned where the science test does not look."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCIENCE = _load("_seagram_science", ROOT / "tests" / "trainers" / "seagram" / "test_seagram_science.py").SCIENCE
seagram_tune = _load("_seagram_tune", ROOT / "benchmarks" / "seagram_tune.py")


def test_tune_setting_is_the_science_tests_but_the_tuned_keys():
    assert set(seagram_tune.GRID_KEYS) <= set(SCIENCE)
    assert seagram_tune.SETTING == {k: v for k, v in SCIENCE.items() if k not in seagram_tune.GRID_KEYS}


@pytest.mark.skipif(
    os.environ.get("RAYLAB_SEAGRAM_TUNE_TEST") != "1",
    reason="runs the tuning script (407 s at load 45 on 2 cores); set RAYLAB_SEAGRAM_TUNE_TEST=1",
)
def test_tune_benchmark_attacks_validation_pairs_and_chooses(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tiny = [
        "n_corpus=16",
        "n_queries=12",
        "victim_steps=10",
        "al_budget=20",
        "al_init=10",
        "al_rounds=1",
        "al_candidates=40",
    ]
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "seagram_tune.py"),
            "--seeds",
            "0,1",
            "--thresholds",
            "0.5,0.9",
            "--random-fracs",
            "0.5",
            "--pools",
            "picks",
            "--selects",
            "safest",
            "--min-kept",
            "0",
            "--data-dir",
            str(tmp_path),
            *[a for kv in tiny for a in ("--set", kv)],
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    ).stdout
    print(out)
    lines = out.splitlines()
    # 12 queries split 60/15/25: the attacked queries are the validation ones, not the test ones
    assert "queries train/val/test 7/2/3; attacked: the 2 validation queries x the corpus" in lines[0]
    assert [line.split(":")[0] for line in lines if line.startswith("seed ")] == ["seed 0", "seed 1"]
    rows = [line.split() for line in lines if line.startswith("picks ")]
    assert len(rows) == 2 and {r[2] for r in rows} == {"0.50", "0.90"}
    for r in rows:  # two seeds, then their mean, for labels kept and for the true-label drop
        kept, drop = [float(x) for x in r[4:7]], [float(x) for x in r[7:10]]
        assert abs(kept[2] - (kept[0] + kept[1]) / 2) < 2e-3 and abs(drop[2] - (drop[0] + drop[1]) / 2) < 2e-3
        assert 0 <= kept[2] <= 1
    chosen = [line for line in lines if line.startswith("chosen: ")]
    best = max(rows, key=lambda r: float(r[9]))  # with --min-kept 0 every setting is eligible
    assert len(chosen) == 1 and f"threshold={float(best[2])}" in chosen[0], chosen
