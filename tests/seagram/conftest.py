"""seagram tests run torch on one thread: its graphs are tiny, and on a shared two-core machine
extra intra-op threads only contend (measured here: 25x slower classifier steps with two)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
