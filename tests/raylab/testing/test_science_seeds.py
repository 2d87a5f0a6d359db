"""``science_seeds``: a science test's seeds from ``RAYLAB_SCIENCE_SEEDS``, else its default."""

import pytest

from raylab.testing import science_seeds


def test_default_when_unset_or_empty(monkeypatch):
    monkeypatch.delenv("RAYLAB_SCIENCE_SEEDS", raising=False)
    assert science_seeds(range(3)) == [0, 1, 2]
    monkeypatch.setenv("RAYLAB_SCIENCE_SEEDS", " ")
    assert science_seeds((4,)) == [4]


def test_the_environment_names_the_seeds(monkeypatch):
    monkeypatch.setenv("RAYLAB_SCIENCE_SEEDS", "60, 61,62,")
    assert science_seeds(range(5)) == [60, 61, 62]


def test_ranges_are_inclusive_and_mix_with_single_seeds(monkeypatch):
    monkeypatch.setenv("RAYLAB_SCIENCE_SEEDS", "20-23, 7")
    assert science_seeds(range(5)) == [20, 21, 22, 23, 7]


@pytest.mark.parametrize("value", ["5,x", "1,1", ",", "3-1", "1-3,2", "1-x"])
def test_a_bad_value_is_named(monkeypatch, value):
    monkeypatch.setenv("RAYLAB_SCIENCE_SEEDS", value)
    with pytest.raises(ValueError, match="RAYLAB_SCIENCE_SEEDS"):
        science_seeds(range(5))
