"""seagram's preflight, before Ray starts and again at a trial's start: its data
(``data.preflight``: present, and an attack that fits in memory) and, with ``victim_from``, the
victim run (``victims.find_victim``: it holds this trial's dataset, victim and seed).

Its own module, so that ``data`` and ``victims`` do not import each other.
"""

from __future__ import annotations

from trainers.seagram import data, victims
from trainers.seagram.config import Config


def preflight(cfg: Config) -> None:
    """Raise ``UserError`` in one line when this machine cannot run ``cfg``."""
    data.preflight(cfg)
    if cfg.victim_from:
        victims.find_victim(cfg)  # the run holds this trial's (dataset, victim, seed), with edge slots enough
