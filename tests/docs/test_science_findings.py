"""The science findings tables in the workload pages are what the recorded test runs give."""

import math

import science_findings as sf


def test_every_findings_block_is_what_the_records_give():
    stale = [str(page.relative_to(sf.REPO)) for page in sf.pages() if sf.rewrite(page.read_text()) != page.read_text()]
    assert not stale, f"run `python tests/science_findings.py` to rewrite {stale} from docs/science/"


def test_every_recorded_test_has_its_block_in_a_readme_and_its_page():
    recorded = sorted(p.name for p in sf.RECORDS.iterdir() if p.is_dir())
    assert recorded, "no science record in docs/science/"
    for name in recorded:
        marker = f"<!-- science-findings: {name} -->"
        holders = [p for p in sf.pages() if marker in p.read_text()]
        assert {p.name for p in holders} >= {"README.md"} and len(holders) == 2, (name, holders)


def test_a_recorded_run_is_rendered_into_its_block(tmp_path):
    lines = [
        sf.Line("a - b: accuracy", (0.1, 0.2, -0.05), 0.0833, -0.23, 0.40, "lower end above 0", False),
        sf.Line("a: accuracy", (0.5, 0.7, 0.6), 0.6, level=True),
    ]
    assert sf.record("toy", [7, 8, 9], lines, folder=str(tmp_path)) == tmp_path / "toy" / "7-9.json"
    sf.record("toy", [3, 5], lines[:1], folder=str(tmp_path))
    page = "before\n<!-- science-findings: toy -->\nold table\n<!-- /science-findings -->\nafter\n"
    text = sf.rewrite(page, tmp_path)
    assert "old table" not in text and text.startswith("before\n") and text.endswith("after\n")
    header = "| statistic | asserted | seeds 3,5 | seeds 7-9 |"  # sets in order of their first seed
    assert header in text, text
    row = next(r for r in text.splitlines() if r.startswith("| a - b"))
    assert "+0.083 [-0.230, +0.400], 2/3 above 0: **fails**" in row
    level = next(r for r in text.splitlines() if r.startswith("| a: accuracy"))
    assert "| not recorded | 0.600, 0.500 to 0.700 per seed |" in level, level
    assert sf.rewrite(text, tmp_path) == text  # rewriting is idempotent
    assert math.isnan(sf.read("toy", tmp_path)["7-9"][1].low)


def test_nothing_is_written_without_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(sf.RECORD_ENV, raising=False)
    assert sf.record("toy", [1], []) is None
    monkeypatch.setenv(sf.RECORD_ENV, str(tmp_path))
    assert sf.record("toy", [1], []).exists()
