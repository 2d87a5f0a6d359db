"""Which operations of a training step would stop a GPU's queue, found on the CPU.

``trace_step(build, step)`` builds a workload's pieces (model, optimizer, batch) with
``build()`` inside torch's ``FakeTensorMode`` (tensors with shapes, dtypes and devices but no
data: no arithmetic is done, so a ResNet step costs milliseconds), then runs ``step(pieces)``
under ``HostSyncs``, a ``TorchDispatchMode`` that sees every aten operation the step
dispatches and notes, with the line of the workload that called it:

- ``read``: a device-to-host read of a value (``aten._local_scalar_dense``: ``.item()``,
  ``float(t)``, ``bool(t)``, ``.tolist()``, a Python branch on a tensor). On a GPU it waits for
  everything queued; a CUDA graph cannot hold it;
- ``shape``: an output whose shape depends on the data (``nonzero``, ``bincount``, ``unique``,
  ``masked_select``, boolean-mask indexing, ``repeat_interleave`` without ``output_size``...):
  the size is read back to the host, and neither a graph nor ``torch.compile`` holds it whole;
- ``host``: a tensor made from Python data inside the step (``aten.lift_fresh``:
  ``torch.tensor([...])``) or a real (host) tensor entering it (``torch.from_numpy``): on a GPU
  a host-to-device copy each step.

What torch itself does inside an operation (fused Adam's kernels, autograd) is seen as the
operation, not its parts. An optimizer's own bookkeeping (``torch.optim``'s ``step`` count:
a host tensor on a GPU unless the optimizer is ``capturable`` or ``fused``) is noted apart, as
kind ``optim``: on a GPU it reads no device memory. Fake CPU tensors stand in for the device's (a CPU build of torch
cannot fake CUDA tensors), so a copy the step makes to the host (``.cpu()``) is not seen here;
it is a ``read`` as soon as its value is used.
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode

READS = frozenset({"_local_scalar_dense", "item"})
"""aten operations that read a value back to the host."""
DATA_SHAPED = frozenset(
    {
        "nonzero",
        "bincount",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "masked_select",
        "histc",
        "argwhere",
    }
)
"""aten operations whose output shape depends on the data."""
HOST_MADE = frozenset({"lift_fresh", "lift_fresh_copy"})
"""aten operations that make a tensor from Python data."""
TORCH_DIRS = tuple({str(Path(torch.__file__).parent), str(Path(torch.__file__).resolve().parent)})


@dataclass(frozen=True)
class Flag:
    kind: str
    """``read``, ``shape``, ``host``; ``optim`` for an optimizer's host-side bookkeeping."""
    op: str
    where: str
    """``file:line`` of the innermost caller outside torch and this module."""

    def __str__(self) -> str:
        return f"{self.kind}: {self.op} at {self.where}"


OPTIM_DIRS = tuple(f"{d}/optim/" for d in TORCH_DIRS)


def in_optimizer(stack) -> bool:
    return any(frame.filename.startswith(OPTIM_DIRS) for frame in stack)


def caller(stack=None) -> str:
    """The innermost frame outside torch, contextlib and this file, as ``file:line``."""
    for frame in reversed(stack or traceback.extract_stack()[:-1]):
        name = frame.filename
        if name.startswith(TORCH_DIRS) or name == __file__ or name.endswith(("contextlib.py", "functools.py")):
            continue
        return f"{name}:{frame.lineno}"
    return "?"


def data_shaped(name: str, args: tuple, kwargs: dict) -> bool:
    if name in DATA_SHAPED:
        return True
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):  # a boolean mask among the indices
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())
    if name == "repeat_interleave":  # repeats as a tensor, without output_size
        return isinstance(args[0], torch.Tensor) and kwargs.get("output_size") is None and len(args) < 4
    return False


class HostSyncs(TorchDispatchMode):
    """Notes each flagged operation (``flags``); the step goes on where the fake tensors allow
    (a read or a data-shaped output cannot be faked: the step stops there with that flag)."""

    def __init__(self):
        super().__init__()
        self.flags: list[Flag] = []
        self.ops = 0

    def note(self, kind: str, op: str) -> None:
        stack = traceback.extract_stack()[:-1]
        self.flags.append(Flag("optim" if in_optimizer(stack) else kind, op, caller(stack)))

    def syncs(self) -> list[Flag]:
        """The flags that would stop a GPU's queue (all but ``optim``)."""
        return [f for f in self.flags if f.kind != "optim"]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        self.ops += 1
        if name in READS:
            self.note("read", name)
        elif data_shaped(name, args, kwargs):
            self.note("shape", name)
        elif name in HOST_MADE:
            self.note("host", name)
        elif any(
            isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) and a.dim() > 0
            for a in (*args, *kwargs.values())
        ):
            self.note("host", f"{name} of a host tensor")
        try:
            return func(*args, **kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as err:
            if not self.flags or self.flags[-1].op != name:
                self.note("read" if isinstance(err, DataDependentOutputException) else "shape", name)
            raise StepStopped(self.flags[-1]) from None


class StepStopped(Exception):
    """The fake step could not go on past a flagged operation."""

    def __init__(self, flag: Flag):
        super().__init__(str(flag))
        self.flag = flag


def trace_step(build: Callable[[], Any], step: Callable[[Any], Any], calls: int = 1) -> HostSyncs:
    """``step(build())`` ``calls`` times on fake tensors; returns the mode with its ``flags``
    and ``ops`` (aten operations dispatched)."""
    syncs = HostSyncs()
    with FakeTensorMode(allow_non_fake_inputs=True):
        pieces = build()
        with contextlib.suppress(StepStopped), syncs:
            for _ in range(calls):
                step(pieces)
    return syncs
