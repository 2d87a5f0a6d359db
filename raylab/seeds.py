"""Seeds of a trial's random streams: one function, so every stream is derived the same way."""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(seed: int, *stream: int | str) -> int:
    """The 63-bit seed of the random stream ``stream`` of a trial seeded ``seed``.

    seed' = SeedSequence([seed, w_1, ..., w_k]).generate_state(1, uint64)[0] >> 1, where
    w_i = stream_i for an integer and the first 8 bytes of SHA-256(stream_i) (little-endian)
    for a string. Different streams give unrelated seeds (not ``seed + 1``, whose stream is
    another trial's ``seed + 0`` stream), the same arguments give the same seed on every machine,
    and a stream indexed by a step (``derive_seed(seed, "order", epoch)``) needs no checkpointed
    generator: a resumed trial draws exactly what it would have drawn. The result fits
    ``torch.Generator.manual_seed`` and ``numpy.random.default_rng``.
    """
    words = [
        part if isinstance(part, int) else int.from_bytes(hashlib.sha256(part.encode()).digest()[:8], "little")
        for part in stream
    ]
    return int(np.random.SeedSequence([seed, *words]).generate_state(1, np.uint64)[0] >> 1)
