"""seagram tests run torch on one thread: its graphs are tiny, and on a shared two-core machine
extra intra-op threads only contend (measured here: 25x slower classifier steps with two)."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_thread_module):
    """Every test module of this folder runs torch on one thread."""
