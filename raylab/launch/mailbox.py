"""The ``Mailbox`` actor between a Ray Train run's controller and the Tune trial driving it.

Kept in a module that imports nothing but Ray, so the actor's process (one per Ray Train trial)
does not import Ray Train, pandas and Ray Data as well: ``import raylab.launch.mailbox`` takes 0.7 s
here, ``import raylab.launch.train_path`` 1.8 s. The process still costs about 2.5 CPU seconds to
start, as any Ray actor's does on this 2-core machine (``benchmarks/trial_overhead.py
--cpu-by-process``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

DONE = "raylab-train-run-done"
"""What the driver receives once the Train run has ended (well or not)."""


@ray.remote(num_cpus=0)
class Mailbox:
    """One item at a time from the Train controller to the trial driver, with an answer."""

    def __init__(self):
        self._items: asyncio.Queue = asyncio.Queue(maxsize=1)
        self._answers: asyncio.Queue = asyncio.Queue(maxsize=1)

    async def send(self, item: Any) -> None:
        """Deliver ``item`` and return once the driver has handled it (``done``)."""
        await self._items.put(item)
        await self._answers.get()

    async def receive(self) -> Any:
        return await self._items.get()

    async def done(self) -> None:
        await self._answers.put(None)
