"""fair_adv tests run torch on one thread: tiny models are fastest that way, and immune to a
busy machine's thread contention."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
