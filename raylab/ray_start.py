"""Starting a local Ray sized to this machine, or joining a cluster; what a local Ray would have."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from raylab.errors import UserError


def connect(
    address: str | None = None, dashboard: bool = False, state_api: bool = False
) -> dict[str, Any]:
    """Start a local Ray sized to this machine, or join ``address`` (``auto`` or ``HOST:PORT``).

    Returns what the caller may print: whether Ray was started here and the dashboard URL
    (with ``dashboard``). ``state_api`` starts the dashboard process without announcing it:
    Ray Train's controller polls Ray's state API, which that process serves. An address that
    does not answer fails within seconds.
    """
    import ray

    if ray.is_initialized():
        return {"started": False, "dashboard_url": None}
    if address:
        if address != "auto" and not address.startswith("ray://"):
            _check_reachable(address)
        try:
            context = ray.init(address=address, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise UserError(f"cannot join Ray cluster at '{address}': {err}") from None
        return {"started": False, "dashboard_url": context.dashboard_url}
    context = ray.init(
        include_dashboard=dashboard or state_api,
        dashboard_host="127.0.0.1",
        logging_level=logging.WARNING,
    )
    url = f"http://{context.dashboard_url}" if dashboard and context.dashboard_url else None
    return {"started": True, "dashboard_url": url}


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address '{address}': expected auto or HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise UserError(f"cannot reach Ray cluster at {address}: {err.strerror or err}") from None


def local_resources() -> dict[str, float]:
    """CPUs and GPUs of this machine, as a local Ray would see them (without starting Ray)."""
    import torch  # counts the GPUs Ray would see (CUDA_VISIBLE_DEVICES respected), publicly

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}
