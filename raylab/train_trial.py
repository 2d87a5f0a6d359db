"""How a Tune trial hears from the Ray Train run it drives: reduced metrics and checkpoints.

Ray Train calls ``ForwardToTrial.after_report`` on its controller with every rank's metrics
and the checkpoint it just stored. The callback reduces the metrics across ranks and hands
both to the trial's driver through a ``raylab.mailbox.Mailbox`` actor, then waits until the driver has
passed them to Tune with ``tune.report(metrics, checkpoint=...)``: Tune copies the
checkpoint into the trial folder, so PBT can exploit it, ``--resume`` and downstream steps
find it where they find a plain Tune trial's, and Ray Train may prune its own copy.
"""

from __future__ import annotations

from typing import Any

import ray
import ray.train

from raylab.rank_metrics import reduce_across_ranks


class ForwardToTrial(ray.train.UserCallback):
    """Runs on the Train controller: each report's rank-reduced metrics and checkpoint to the trial."""

    def __init__(self, mailbox):
        self._mailbox = mailbox

    def after_report(self, run_context, metrics: list[dict[str, Any]], checkpoint):
        ray.get(self._mailbox.send.remote((reduce_across_ranks(metrics), checkpoint)))
