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
to stderr and every later call runs ``step()`` eagerly: the trial goes on.
"""

from __future__ import annotations

import sys
from typing import Callable

import torch


def warn(message: str) -> None:
    """One line on stderr (raylab.accel's form; its ``warn`` is not part of the workload API)."""
    print(f"raylab: warning: {message}", file=sys.stderr, flush=True)


class GraphedStep:
    def __init__(
        self,
        step: Callable[[], None],
        generators: tuple[torch.Generator, ...] = (),
        warmup: int = 3,
        name: str = "step",
    ):
        self.step, self.generators, self.warmup, self.name = step, generators, warmup, name
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.eager = False  # capture failed: eager from then on
        self._side: torch.cuda.Stream | None = None

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        elif self.eager:
            self.step()
        elif self.calls < self.warmup:
            self._warm_up()
        else:
            self._capture()
        self.calls += 1

    def _warm_up(self) -> None:
        if self._side is None:
            self._side = torch.cuda.Stream()
        self._side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._side):
            self.step()
        torch.cuda.current_stream().wait_stream(self._side)

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        entry = torch.cuda.current_stream()
        torch.cuda.synchronize()  # the warm-up's work done before the recording starts
        try:
            for gen in self.generators:  # before the capture begins, as torch requires
                graph.register_generator_state(gen)
            # thread_local: other threads' CUDA calls (none here) do not invalidate the capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.step()
        except Exception as error:  # noqa: BLE001 - any failure means: run eagerly
            torch.cuda.set_stream(entry)  # a failed capture_end leaves the capture stream current
            first = (str(error).strip().splitlines() or [""])[0][:200]
            warn(f"CUDA graph capture of the {self.name} failed ({type(error).__name__}: {first}); running it eagerly")
            self.eager = True
            torch.cuda.synchronize()
            self.step()  # the capture ran nothing: this call's step runs now
            return
        self.graph = graph
        graph.replay()  # the capture only recorded: this call's step runs now
