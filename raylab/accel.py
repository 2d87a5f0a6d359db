"""GPU speed options shared by the workloads: host-to-device copies, cuDNN autotuning, and
``torch.compile`` with a fallback to eager mode.

Each is a no-op on the CPU, so a loop calls them unconditionally:

- ``to_device(x, device)``: a batch made on the host (numpy replay samples, graph batches)
  goes to a CUDA device from pinned memory with ``non_blocking=True``, so the copy does not
  stall the host (a copy from pageable memory waits until it is done); on the CPU it is
  ``x.to(device)``.
- ``fixed_shapes(device)``: ``torch.backends.cudnn.benchmark = True`` on CUDA, for loops whose
  input shapes never change (image batches): cuDNN times its kernels once per shape. With
  ``RAYLAB_DETERMINISTIC=1`` in the environment it calls ``deterministic()`` instead.
- ``deterministic()``: deterministic kernels (``torch.use_deterministic_algorithms``, cuDNN's
  deterministic algorithms, no autotuning, ``CUBLAS_WORKSPACE_CONFIG``), so that two runs on
  one GPU, or a run and its resume, can be compared bit for bit; slower, for checks only.
- ``compiled(module, enabled)``: ``torch.compile(module)`` when enabled. Compilation can fail
  where a GPU check runs (no C compiler, an unsupported op, an old Triton): ``torch.compile``
  itself raising, or the first call raising while it compiles. Either way one line goes to
  stderr and the module runs eagerly; the trial goes on.
- ``enabled(switch, device)``: a speed switch of a workload's config (``amp_bf16``,
  ``channels_last``, ``compile``: ``true``, ``false`` or ``"auto"``) on this device. ``"auto"``
  is on where the trial's device is CUDA and off elsewhere, so one experiment file trains at
  bfloat16 on its GPU nodes and at float32 in its CPU smoke and science runs.
  ``python -m raylab.tune NAME --dry-run`` prints what ``auto`` resolves to for the experiment's
  trials (on when they reserve a GPU).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch


def to_device(x: Any, device: torch.device, dtype: torch.dtype | None = None) -> Any:
    """``x`` (a tensor, or an object with ``pin_memory``/``to``, e.g. a PyG ``Batch``) on
    ``device``: pinned and ``non_blocking`` when ``device`` is CUDA and ``x`` is on the host."""
    args = (device,) if dtype is None else (device, dtype)
    if torch.device(device).type != "cuda":
        return x.to(*args)
    on_host = getattr(x, "device", torch.device("cpu")).type == "cpu" if torch.is_tensor(x) else True
    if on_host:
        x = x.pin_memory()
    return x.to(*args, non_blocking=True)


AUTO = "auto"
"""A speed switch's value that follows the device: on for CUDA, off elsewhere."""


def enabled(switch: bool | str, device: torch.device | str) -> bool:
    """Whether a speed switch (``True``, ``False`` or ``"auto"``) is on for ``device``:
    ``"auto"`` is on exactly when ``device`` is CUDA."""
    if switch == AUTO:
        return torch.device(device).type == "cuda"
    if not isinstance(switch, bool):
        raise ValueError(f"a speed switch is true, false or {AUTO!r}, got {switch!r}")
    return switch


DETERMINISTIC_ENV = "RAYLAB_DETERMINISTIC"
"""``RAYLAB_DETERMINISTIC=1``: ``fixed_shapes`` turns deterministic mode on instead of autotuning."""
CUBLAS_WORKSPACE = ":4096:8"
"""cuBLAS's deterministic workspace setting (CUDA >= 10.2 needs one for reproducible GEMMs)."""


def fixed_shapes(device: torch.device) -> None:
    """Let cuDNN pick its fastest kernels once per input shape (CUDA only; a no-op elsewhere);
    with ``RAYLAB_DETERMINISTIC=1``, ``deterministic()`` instead."""
    if os.environ.get(DETERMINISTIC_ENV) == "1":
        deterministic()
    elif torch.device(device).type == "cuda":
        torch.backends.cudnn.benchmark = True


def deterministic() -> None:
    """Deterministic kernels wherever torch has them, for bit-for-bit comparisons of two runs.

    ``torch.use_deterministic_algorithms(True, warn_only=True)``: an op with no deterministic
    CUDA kernel warns (naming itself) rather than stopping the run, so a comparison that then
    differs can say which op it was; cuDNN's deterministic algorithms with autotuning off; and
    ``CUBLAS_WORKSPACE_CONFIG`` (set here when unset, which takes effect only if no cuBLAS
    handle exists yet: set it in the environment of the process to be sure)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def warn(message: str) -> None:
    print(f"raylab: warning: {message}", file=sys.stderr, flush=True)


class Compiled(torch.nn.Module):
    """``module`` run through ``torch.compile``, falling back to eager on the first failure.

    A module wrapping ``module`` (``parameters()``, ``train()``/``eval()`` reach it); save
    ``module.state_dict()``, not this one's (its keys carry a ``module.`` prefix).

    Compilation happens at a call (``torch.compile`` only wraps; the first call compiles the
    forward and backward graphs, a call with new shapes may compile again, before anything
    runs), so a call that raises is run again eagerly, and every later call is eager. An error
    of the model itself then raises from the eager call. ``eager`` tells which one runs.
    """

    def __init__(self, module: torch.nn.Module, name: str = "model"):
        super().__init__()
        self.module, self.name, self.eager = module, name, False
        try:  # not a submodule: parameters, train()/eval() and state_dict() go through .module
            object.__setattr__(self, "_fn", torch.compile(module))
        except Exception as error:  # noqa: BLE001 - any failure means: run eagerly
            self._fall_back(error)

    def _fall_back(self, error: BaseException) -> None:
        first = (str(error).strip().splitlines() or [""])[0][:200]
        warn(f"torch.compile of the {self.name} failed ({type(error).__name__}: {first}); running it eagerly")
        object.__setattr__(self, "_fn", self.module)
        self.eager = True

    def forward(self, *args, **kwargs):
        if self.eager:
            return self.module(*args, **kwargs)
        try:
            return self._fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - a recompilation (new shape) can fail too
            self._fall_back(error)
            return self.module(*args, **kwargs)  # a genuine error in the model raises here


def compiled(module: torch.nn.Module, enabled: bool, name: str = "model"):
    """``Compiled(module)`` when ``enabled``, else ``module`` itself."""
    return Compiled(module, name) if enabled else module
