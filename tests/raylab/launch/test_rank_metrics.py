"""Metrics of all Ray Train ranks reduce to the trial's row: mean by default, or as declared."""

import pytest

from raylab.launch.ranks import reduce_across_ranks
from raylab.session import REDUCE_KEY, check_reductions


def test_mean_by_default_is_the_global_loss_of_equal_shards():
    rows = [{"train/loss": 1.0, "train/step": 10}, {"train/loss": 3.0, "train/step": 10}]
    assert reduce_across_ranks(rows) == {"train/loss": 2.0, "train/step": 10}


def test_declared_sum_max_min_and_lists():
    declared = {"train/images_per_s": "sum", "mem/peak_gb": "max", "eval/acc_worst": "min"}
    rows = [
        {
            "train/images_per_s": 100.0,
            "mem/peak_gb": 2.0,
            "eval/acc_worst": 0.4,
            "acc/class": [1.0, 0.0],
            REDUCE_KEY: declared,
        },
        {
            "train/images_per_s": 120.0,
            "mem/peak_gb": 3.5,
            "eval/acc_worst": 0.3,
            "acc/class": [0.0, 1.0],
            REDUCE_KEY: declared,
        },
    ]
    out = reduce_across_ranks(rows)
    assert out == {"train/images_per_s": 220.0, "mem/peak_gb": 3.5, "eval/acc_worst": 0.3, "acc/class": [0.5, 0.5]}


def test_strings_and_metrics_of_some_ranks_take_the_first_value():
    rows = [{"node_id": "a", "train/loss": 1.0}, {"node_id": "b", "train/loss": 1.0, "eval/mse": 0.5}]
    assert reduce_across_ranks(rows) == {"node_id": "a", "train/loss": 1.0, "eval/mse": 0.5}


def test_unknown_reduction_is_refused():
    with pytest.raises(ValueError, match="median"):
        check_reductions({"train/loss": "median"})
