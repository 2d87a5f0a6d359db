"""The Pareto front of a multi-objective sweep, against fronts worked out by hand."""

from __future__ import annotations

import math

from raylab.report.pareto import objectives, pareto_front


def test_the_front_holds_the_points_no_other_beats_on_every_objective():
    # (robust, clean), both maximized: (0.5, 0.9) and (0.6, 0.8) trade off; (0.4, 0.85) is
    # beaten by (0.5, 0.9); (0.6, 0.7) by (0.6, 0.8) (equal on one, better on the other)
    points = [(0.5, 0.9), (0.4, 0.85), (0.6, 0.8), (0.6, 0.7)]
    assert pareto_front(points, ["max", "max"]) == [0, 2]


def test_modes_turn_the_front_and_ties_and_nans_are_handled():
    # minimize loss, maximize accuracy: (0.1, 0.8) beats (0.2, 0.8); (0.3, 0.95) trades off
    assert pareto_front([(0.2, 0.8), (0.1, 0.8), (0.3, 0.95)], ["min", "max"]) == [1, 2]
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)], ["max", "max"]) == [0, 1]  # equal: neither dominates
    assert pareto_front([(math.nan, 2.0), (1.0, 1.0)], ["max", "max"]) == [1]


def test_objectives_come_from_the_saved_experiment():
    saved = {"metric": "a", "mode": "max", "search_alg": {"type": "optuna", "objectives": {"b": "min"}}}
    assert objectives(saved) == [("a", "max"), ("b", "min")]
    assert objectives({"metric": "a", "mode": "max", "search_alg": {"objectives": {}}}) == []
