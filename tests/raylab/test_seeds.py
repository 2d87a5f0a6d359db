"""``derive_seed``: the one way a trial's random streams get their seeds."""

import numpy as np
import torch

from raylab.seeds import derive_seed


def test_integer_streams_are_numpys_seed_sequence():
    # the formula DQN's sampling/acting streams and toy's per-step batches used before: bit-equal
    expected = int(np.random.SeedSequence([7, 3, 11]).generate_state(1, np.uint64)[0] >> 1)
    assert derive_seed(7, 3, 11) == expected


def test_streams_are_distinct_stable_and_fit_torch():
    seeds = {derive_seed(s, name) for s in range(20) for name in ("augment", "attack", "order")}
    assert len(seeds) == 60  # no stream of one seed is another seed's stream (unlike seed + 1)
    assert derive_seed(0, "order", 3) == derive_seed(0, "order", 3) != derive_seed(0, "order", 4)
    assert all(0 <= s < 2**63 for s in seeds)
    a = torch.Generator().manual_seed(derive_seed(5, "x"))
    b = torch.Generator().manual_seed(derive_seed(5, "x"))
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))
    np.random.default_rng(derive_seed(5, "x")).random()
