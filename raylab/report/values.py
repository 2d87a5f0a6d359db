"""How the report tells and labels values: numbers, vectors of numbers, short labels.

Imports nothing of raylab, so that ``raylab.report.claims`` (what a workload's ``figures.py``
declares claims with) stays light."""

from __future__ import annotations

import math
from typing import Any


def format_value(value: Any) -> str:
    """A config value as a short label."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "+".join(format_value(v) for v in value) or "[]"
    return str(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_vector(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(is_number(v) for v in value)


def finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)
