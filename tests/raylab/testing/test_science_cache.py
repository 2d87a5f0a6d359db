"""``per_seed``: a long science test's per-seed results kept across runs, recomputed on change."""

from raylab.testing.science_cache import per_seed


def test_results_are_kept_per_seed_and_recomputed_when_source_or_settings_change(tmp_path, monkeypatch):
    source = tmp_path / "pkg"
    source.mkdir()
    (source / "loop.py").write_text("x = 1\n")
    calls = []

    def compute(seed):
        calls.append(seed)
        return {"seed": seed, "value": seed * 2.0}

    def run(seed, settings=("a", 1)):
        return per_seed("demo", seed, settings, [source], lambda: compute(seed))

    assert run(3) == {"seed": 3, "value": 6.0} and calls == [3]  # no cache folder: computed
    monkeypatch.setenv("RAYLAB_SCIENCE_CACHE", str(tmp_path / "cache"))
    run(3), run(4)
    assert calls == [3, 3, 4]
    assert run(3) == {"seed": 3, "value": 6.0} and run(4)["value"] == 8.0 and calls == [3, 3, 4]  # read back
    run(3, settings=("a", 2))  # other settings: recomputed
    (source / "loop.py").write_text("x = 2\n")  # the workload's code changed: recomputed
    run(4)
    assert calls == [3, 3, 4, 3, 4]
