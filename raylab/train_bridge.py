"""How a Tune trial hears from the Ray Train run it drives: reduced metrics and checkpoints.

Ray Train calls ``ForwardToTrial.after_report`` on its controller with every rank's metrics
and the checkpoint it just stored. The callback reduces the metrics across ranks and hands
both to the trial's driver through a ``Mailbox`` actor, then waits until the driver has
passed them to Tune with ``tune.report(metrics, checkpoint=...)``: Tune copies the
checkpoint into the trial folder, so PBT can exploit it, ``--resume`` and downstream steps
find it where they find a plain Tune trial's, and Ray Train may prune its own copy.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
import ray.train

from raylab.rank_metrics import reduce_across_ranks

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


class ForwardToTrial(ray.train.UserCallback):
    """Runs on the Train controller: each report's rank-reduced metrics and checkpoint to the trial."""

    def __init__(self, mailbox):
        self._mailbox = mailbox

    def after_report(self, run_context, metrics: list[dict[str, Any]], checkpoint):
        ray.get(self._mailbox.send.remote((reduce_across_ranks(metrics), checkpoint)))
