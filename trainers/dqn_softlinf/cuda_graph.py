"""One training step captured as a CUDA graph and replayed: one launch instead of about a hundred.

``GraphedStep(step, generators)`` calls ``step()`` eagerly ``warmup`` times on a side stream
(the optimizer's state, cuBLAS's workspaces and autograd's streams are made there, as
``torch.cuda.graph`` requires), then captures one call as a ``torch.cuda.CUDAGraph`` and from
then on replays it. Every call, warm-up or replay, is one real step. What ``step`` may do,
because a replay repeats the captured kernels on the same memory and nothing else:

- read and write only tensors that live as long as the graph, in place (the replay ring, the
  parameters and optimizer state, running sums), and read no value on the host (no
  ``.item()``, no boolean indexing, no Python branch on a tensor);
- draw random numbers only from ``generators`` (registered with the graph, so each replay
  advances their offsets as an eager call would) or the default CUDA generator;
- set gradients to None first (``zero_grad(set_to_none=True)``), so that backward allocates
  them in the graph's memory and each replay overwrites them.

If the capture fails (an operation a graph cannot hold, an old torch), one warning line goes
to stderr and every later call runs ``step()`` eagerly: the trial goes on. With
``RAYLAB_CUDA_GRAPH_STRICT=1`` (the device check sets it) a failed capture is an error
instead (``CaptureFailed``), so a check cannot pass on the eager path. ``replaying`` says
whether calls replay a graph (the loop reports it as ``perf/cuda_graph``).

A graph replays the kernels it recorded on the tensors it recorded them with, and a learning
rate is a number baked into the optimizer's kernel. So ``reset()`` drops the graph (the next
calls warm up and capture again), and it is called by every ``load_state_dict`` of the
optimizers given (their state tensors are replaced), and before any call whose
``signature()`` (host values: learning rates, the batch size) differs from the capture's.

``simulated=True`` (a device without CUDA: the device rehearsal, ``RAYLAB_SIMULATED_GPUS=1``)
keeps the control flow and checks what a capture would refuse: the capture call runs the
step eagerly under a dispatch mode that raises on a device read or a data-dependent shape
(``NoHostRead``), and every later call runs it eagerly.

``RAYLAB_CUDA_GRAPH_FAULT=1`` plants a failure in every capture (the device check's tests
use it to see that a failed capture fails the check).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Hashable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

STRICT_ENV, FAULT_ENV = "RAYLAB_CUDA_GRAPH_STRICT", "RAYLAB_CUDA_GRAPH_FAULT"
HOST_READS = frozenset({"_local_scalar_dense", "nonzero", "bincount", "unique", "_unique2", "masked_select"})
"""aten operations a CUDA graph cannot record: a read of a value, an output sized by the data."""


def warn(message: str) -> None:
    """One line on stderr (raylab.accel's form; its ``warn`` is not part of the workload API)."""
    print(f"raylab: warning: {message}", file=sys.stderr, flush=True)


class CaptureFailed(RuntimeError):
    """A capture failed where ``RAYLAB_CUDA_GRAPH_STRICT=1`` forbids the eager fallback."""


class NoHostRead(TorchDispatchMode):
    """Raises on an operation a CUDA graph cannot record (``HOST_READS``)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if name in HOST_READS:
            raise RuntimeError(f"aten.{name} reads the device (a CUDA graph cannot record it)")
        return func(*args, **(kwargs or {}))


class GraphedStep:
    def __init__(
        self,
        step: Callable[[], None],
        generators: tuple[torch.Generator, ...] = (),
        warmup: int = 3,
        name: str = "step",
        *,
        optimizers: tuple[torch.optim.Optimizer, ...] = (),
        signature: Callable[[], Hashable] | None = None,
        simulated: bool = False,
    ):
        self.step, self.generators, self.warmup, self.name = step, generators, warmup, name
        self.signature, self.simulated = signature, simulated
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.eager = False  # capture failed: eager from then on
        self.captures = 0
        self._side: torch.cuda.Stream | None = None
        self._captured_with: Hashable = None
        for optimizer in optimizers:  # its state tensors are replaced: the graph's are stale
            optimizer.register_load_state_dict_post_hook(lambda _opt: self.reset())

    @property
    def replaying(self) -> bool:
        """Whether calls replay a captured graph (a simulated one without CUDA)."""
        return self.graph is not None

    def reset(self) -> None:
        """Drop the graph: the next calls warm up and capture again (a failed capture, too, is
        tried again)."""
        self.graph, self.eager, self.calls, self._captured_with = None, False, 0, None

    def __call__(self) -> None:
        if self.signature is not None and self.graph is not None and self.signature() != self._captured_with:
            self.reset()  # a learning rate or a batch shape changed since the capture
        if self.simulated and self.graph is not None:
            self.step()
        elif self.graph is not None:
            self.graph.replay()
        elif self.eager:
            self.step()
        elif self.calls < self.warmup:
            self._warm_up()
        else:
            self._capture()
        self.calls += 1

    def _warm_up(self) -> None:
        if self.simulated:
            self.step()
            return
        if self._side is None:
            self._side = torch.cuda.Stream()
        self._side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._side):
            self.step()
        torch.cuda.current_stream().wait_stream(self._side)

    def _capture(self) -> None:
        self.captures += 1
        self._captured_with = self.signature() if self.signature is not None else None
        if self.simulated:
            try:
                self._plant()
            except RuntimeError as error:
                self._failed(error, ran=False)
                return
            try:
                with NoHostRead():
                    self.step()  # this call's step, checked as a capture would check it
            except Exception as error:  # noqa: BLE001 - any failure means: run eagerly
                self._failed(error, ran=True)  # stopped part-way: not run again (a rehearsal only)
                return
            self.graph = "simulated"
            return
        graph = torch.cuda.CUDAGraph()
        entry = torch.cuda.current_stream()
        torch.cuda.synchronize()  # the warm-up's work done before the recording starts
        try:
            self._plant()
            for gen in self.generators:  # before the capture begins, as torch requires
                graph.register_generator_state(gen)
            # thread_local: other threads' CUDA calls (none here) do not invalidate the capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.step()
        except Exception as error:  # noqa: BLE001 - any failure means: run eagerly
            torch.cuda.set_stream(entry)  # a failed capture_end leaves the capture stream current
            torch.cuda.synchronize()
            self._failed(error, ran=False)
            return
        self.graph = graph
        graph.replay()  # the capture only recorded: this call's step runs now

    def _plant(self) -> None:
        if os.environ.get(FAULT_ENV) == "1":
            raise RuntimeError(f"a capture failure planted by {FAULT_ENV}=1")

    def _failed(self, error: Exception, ran: bool) -> None:
        first = (str(error).strip().splitlines() or [""])[0][:200]
        what = f"CUDA graph capture of the {self.name} failed ({type(error).__name__}: {first})"
        if os.environ.get(STRICT_ENV) == "1":
            raise CaptureFailed(f"{what}; {STRICT_ENV}=1 forbids running it eagerly") from error
        warn(f"{what}; running it eagerly")
        self.eager = True
        if not ran:
            self.step()  # the capture ran nothing: this call's step runs now
