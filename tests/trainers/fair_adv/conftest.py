"""fair_adv tests run torch on one thread: tiny models are fastest that way, and immune to a
busy machine's thread contention."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_thread_module):
    """Every test module of this folder runs torch on one thread."""
