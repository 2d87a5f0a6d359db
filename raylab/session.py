"""What a workload's ``train_loop`` calls to talk to raylab: report, restore, rank, device.

One small API for three places a train loop runs:

- ``tune``: a Ray Tune function trainable (the fast path: one CPU worker per trial);
- ``train``: a Ray Train worker (more than one worker, or GPUs), inside a Tune trial;
- ``local``: in this process, for ``python -m raylab.train`` and tests.

A loop looks like this::

    def train_loop(config: dict) -> None:
        cfg = from_dict(Config, config, "trial config")
        state = session.restore()            # the last checkpoint's dict, or None
        ...
        session.report({"train/loss": loss}, state=lambda: {"model": model.state_dict(), ...})

``state`` is a dict or a function returning one: it is only built when a checkpoint is due
(every ``checkpoint.every`` reports, or when ``checkpoint=True`` is passed).
"""

from __future__ import annotations

import functools
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from raylab import checkpoint as ckpt
from raylab.run_folder import RunFolder, TrialFolder

State = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


class StopTrial(Exception):
    """Raised by ``report`` in a local session once a stop criterion is met."""


@dataclass
class Session:
    """The state of the trial running in this process."""

    backend: Literal["local", "tune", "train"] = "local"
    checkpoint_every: int = 1
    keep: int | None = 2
    trial: TrialFolder | None = None
    """Local trials: the (local) trial folder their rows and checkpoints go to."""
    run: str = ""
    """The run folder (a path or a storage URI) the trial belongs to; empty outside a run."""
    stop: dict[str, float] = field(default_factory=dict)
    mode: Literal["min", "max"] = "max"
    metric: str = ""
    """The experiment's metric: local trials' console lines show it first (``verbose``)."""
    verbose: bool = False
    reports: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    gauges: Any = None
    """The trial's ``raylab.launch.gauges.TrialGauges`` where this process reports its rows (Tune)."""
    resume: Any = None
    """Ray Train workers: the Tune trial's checkpoint to start from (a ``ray.train.Checkpoint``
    the trial driver hands over: its latest, or a PBT donor's), used when Ray Train has none."""
    checkpoint_base: int = 0
    """Local trials: the highest checkpoint number already in ``trial`` when this run started,
    so that a resumed run's checkpoints sort after (and prune) the earlier ones."""
    on_row: Callable[[dict[str, Any]], None] | None = None
    """Local trials: called with each reported row once it is in ``trial`` (``python -m
    raylab.train`` writes ``progress.csv`` and TensorBoard events from it, as Tune does)."""


_session = Session()


def start(**settings: Any) -> Session:
    """Begin a trial in this process. raylab's launchers call it; a workload's own science
    runner that calls its loop in-process (``session.start(backend="local").history`` then
    collects the reported rows) may too. A train loop never does."""
    global _session
    _session = Session(**settings)
    if _session.trial is not None:
        _session.trial.path.mkdir(parents=True, exist_ok=True)
        _session.checkpoint_base = _session.trial.last_checkpoint_number()
        _session.run = _session.run or _session.trial.run.location
    return _session


def run_folder() -> RunFolder | None:
    """The folder of the run this trial belongs to: the sweep's run under ``--storage`` (a local
    folder or a storage URI such as ``s3://...``: where every trial of the run writes, on any
    node), or a ``python -m raylab.train`` run's; None where the loop runs outside a run (a
    workload's own runner, ``session.start(backend="local")`` without a trial folder).

    For what trials of one run share and make once (a student distilled inside a sweep): write
    it into the folder, never to one node's disk."""
    return RunFolder(_session.run) if _session.run else None


def current() -> Session:
    """The session of the trial running in this process."""
    return _session


def report(
    metrics: Mapping[str, Any],
    state: State | None = None,
    *,
    checkpoint: bool | None = None,
    reduce: Mapping[str, str] | None = None,
) -> None:
    """Report one row of metrics; with ``state``, save a checkpoint if one is due.

    Metric values may be Python or NumPy numbers, 0-d tensors, or lists of numbers. A
    checkpoint is due every ``checkpoint.every`` reports (from the experiment YAML), or when
    ``checkpoint=True``; ``checkpoint=False`` never saves. Every rank of a multi-worker trial
    reports; the trial's row is the mean over ranks of each metric, or the ``reduce`` given
    for it (``sum``, ``max``, ``min``: see ``raylab.launch.ranks``).
    """
    s = _session
    s.reports += 1
    metrics = {k: _plain(v) for k, v in metrics.items()}
    metrics.update(gpu_memory())
    if reduce and s.backend == "train":
        metrics[REDUCE_KEY] = check_reductions(reduce)
    due = checkpoint if checkpoint is not None else s.reports % s.checkpoint_every == 0
    stopping = s.backend == "local" and _stop_reason(s, metrics)
    due = due or (stopping and checkpoint is not False)  # a stopped local trial can continue
    state_dict = None
    if state is not None and due and world_rank() == 0:
        state_dict = state() if callable(state) else state
    if s.backend == "local":
        _report_local(s, metrics, state_dict)
    else:
        _report_ray(s, metrics, state_dict)


def gpu_memory() -> dict[str, float]:
    """``gpu/mem_allocated_mib`` and ``gpu/mem_peak_mib`` of this process, where it uses CUDA.

    Read from the CUDA caching allocator's host-side counters (no device sync): what this
    process's tensors hold on its GPU now, and the most they held. Empty where this process
    never initialised CUDA (a CPU trial), so a trial that reports them did touch its GPU.
    """
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    return {
        "gpu/mem_allocated_mib": torch.cuda.memory_allocated() / 2**20,
        "gpu/mem_peak_mib": torch.cuda.max_memory_allocated() / 2**20,
    }


def restore() -> dict[str, Any] | None:
    """The state dict of the trial's latest good checkpoint, or ``None`` on a fresh start.

    A corrupted latest checkpoint is named in a warning and the one before it is used.
    """
    s = _session
    if s.backend == "local":
        if s.trial is None:
            return None
        found = ckpt.load_latest(s.trial.checkpoint_paths())
        return found[0] if found else None
    if s.backend == "tune":
        from ray import tune

        checkpoint = tune.get_checkpoint()
    else:
        import ray.train

        checkpoint = ray.train.get_checkpoint() or s.resume
    if checkpoint is None:
        return None
    # Read where it is stored (local or cloud), so that the folders beside it are found too.
    found = ckpt.load_newest_good(checkpoint.path, checkpoint.filesystem)
    return found[0] if found else None


def world_rank() -> int:
    """This worker's rank among the trial's Ray Train workers (0 outside Ray Train)."""
    if _session.backend != "train":
        return 0
    import ray.train

    return ray.train.get_context().get_world_rank()


def world_size() -> int:
    """How many Ray Train workers the trial has (1 outside Ray Train)."""
    if _session.backend != "train":
        return 1
    import ray.train

    return ray.train.get_context().get_world_size()


def device():
    """The torch device this worker should train on: the GPU Ray assigned it, else the CPU.

    A Tune function trial (a single-worker trial) and a Ray Train worker both get the GPU (or
    GPU share) Ray assigned their process, and only that one: Ray narrows
    ``CUDA_VISIBLE_DEVICES`` to it, so it is ``cuda:0`` there. One that reserved no GPU trains
    on the CPU, even on a GPU node. Only a local run (``python -m raylab.train``) takes
    whatever GPU this machine has.

    A worker that reserved a GPU where torch sees no CUDA device raises
    ``GPUUnavailableError`` (one line naming the node) rather than train on the CPU; a
    simulated cluster whose GPUs are only resource labels says so with
    ``RAYLAB_SIMULATED_GPUS=1`` in its nodes' environment, and its workers use the CPU.
    """
    import torch

    if _session.backend == "train":
        import ray.train.torch

        assigned = ray.train.torch.get_device()
        return checked_device(assigned, torch.cuda.is_available())
    if _session.backend == "tune":
        if not reserved_gpus():
            return torch.device("cpu")
        return checked_device(torch.device("cuda", 0), torch.cuda.is_available())
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def reserved_gpus() -> list[str]:
    """The ids of the GPUs Ray assigned this worker process (empty: it reserved none, or this
    process is no Ray worker: asking Ray's context there would start a local Ray)."""
    import ray

    if not ray.is_initialized():
        return []
    return list(ray.get_runtime_context().get_accelerator_ids().get("GPU") or [])


class GPUUnavailableError(RuntimeError):
    """A worker reserved a GPU, and torch on its node sees no CUDA device."""


def checked_device(assigned, cuda_available: bool, node: str | None = None):
    """``assigned`` when it can be used; the CPU on a simulated cluster; else an error.

    ``assigned`` is the device Ray gave this worker (``cuda`` when it reserved a GPU).
    """
    import os

    import torch

    if assigned.type != "cuda" or cuda_available:
        return assigned
    if os.environ.get("RAYLAB_SIMULATED_GPUS") == "1":
        return torch.device("cpu")
    if node is None:
        import socket

        import ray

        node = f"{socket.gethostname()} (Ray node {ray.get_runtime_context().get_node_id()[:12]})"
    raise GPUUnavailableError(
        f"this worker reserved a GPU on node {node}, but torch there sees no CUDA device "
        f"(torch {torch.__version__}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); "
        "refusing to train on the CPU (set RAYLAB_SIMULATED_GPUS=1 on a simulated cluster)"
    )


def hide_unreserved_gpus() -> None:
    """Make a Ray worker that reserved no GPU see none (``CUDA_VISIBLE_DEVICES=""``).

    Ray leaves ``CUDA_VISIBLE_DEVICES`` untouched for a worker that asked for 0 GPUs, so on a
    GPU node torch would otherwise find every GPU there. Called before the loop touches CUDA.
    """
    import os

    import ray

    if not ray.get_runtime_context().get_accelerator_ids().get("GPU"):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def prepare_model(model):
    """Move ``model`` to this worker's device; wrap it for DDP when the trial has several workers.

    The device is ``device()``'s (checked), also for DDP: Ray Train's own choice is ``cuda``
    wherever a worker reserved a GPU, which a simulated cluster's CPU torch cannot use."""
    if _session.backend == "train" and world_size() > 1:
        import ray.train.torch

        return ray.train.torch.prepare_model(model, move_to_device=device())
    return model.to(device())


def _report_ray(s: Session, metrics: dict, state_dict: Mapping[str, Any] | None) -> None:
    if s.backend == "tune":
        from ray.tune import Checkpoint
        from ray.tune import report as ray_report
    else:
        from ray.train import Checkpoint
        from ray.train import report as ray_report
    metrics["node_id"] = _node_id()
    if s.gauges is not None:
        s.gauges.report(metrics)
    if state_dict is None:
        ray_report(metrics)
        return
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="raylab-ckpt-"))
    try:
        ckpt.save(tmp, dict(state_dict))
        ray_report(metrics, checkpoint=Checkpoint.from_directory(str(tmp)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if s.gauges is not None:
        s.gauges.checkpoint(time.perf_counter() - started)


@functools.cache
def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _report_local(s: Session, metrics: dict, state_dict: Mapping[str, Any] | None) -> None:
    row = {**metrics, "training_iteration": s.reports, "time_total_s": time.time() - s.started}
    s.history.append(row)
    if s.trial is not None:
        s.trial.append_row(row)
        if state_dict is not None:
            ckpt.save(s.trial.checkpoint_path(s.checkpoint_base + s.reports), dict(state_dict))
            s.trial.prune_checkpoints(s.keep)
    if s.on_row is not None:
        s.on_row(row)
    if s.verbose:
        print(f"[{s.reports:5d}] {progress_text(metrics, s.stop, s.metric)}", file=sys.stderr, flush=True)
    reason = _stop_reason(s, row)
    if reason:
        raise StopTrial(reason)


def _stop_reason(s: Session, metrics: Mapping[str, Any]) -> str | None:
    for key, threshold in s.stop.items():
        value = s.reports if key == "training_iteration" else metrics.get(key)
        if isinstance(value, (int, float)) and value >= threshold:
            return f"{key} reached {threshold:g}"
    return None


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):  # tensors and numpy values
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


SHOWN_AT_MOST = 4
"""Numbers on a local trial's console line; the row's others are in its progress.csv."""


def progress_text(metrics: Mapping[str, Any], stop: Mapping[str, float] = {}, metric: str = "") -> str:
    """``env/steps 2000 | eval/return_mean 12.5 | train/loss 0.031 | +40 more in progress.csv``:
    the stop counters and the experiment's metric first, then training losses and throughputs, at most
    ``SHOWN_AT_MOST`` numbers (a workload may report dozens per row)."""
    numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    first = [k for k in (*stop, metric) if k in numbers]
    watched = [k for k in numbers if k.startswith("train/") and ("loss" in k or k.endswith("per_s"))]
    keys = list(dict.fromkeys([*first, *watched, *numbers]))[:SHOWN_AT_MOST]
    more = len(metrics) - len(keys)
    return " | ".join(f"{k} {_fmt(numbers[k])}" for k in keys) + (f" | +{more} more in progress.csv" if more else "")


def _fmt(value: Any) -> str:
    """A reported value for the console: ``-`` for NaN (a metric not measured yet, such as
    seagram's attack metrics before its attack phase)."""
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


# ------------------------------------------------------------------------ declared reductions

REDUCE_KEY = "_raylab_reduce"
"""The reserved metric key that carries a report's declared reductions to the trial's driver,
which reduces every rank's row to one (``raylab.launch.ranks``)."""
REDUCTIONS = ("mean", "sum", "max", "min")


def check_reductions(reduce: Mapping[str, str]) -> dict[str, str]:
    """``reduce`` validated: each value one of ``REDUCTIONS``."""
    for key, how in reduce.items():
        if how not in REDUCTIONS:
            raise ValueError(f"reduce[{key!r}] = {how!r}; expected one of {', '.join(REDUCTIONS)}")
    return dict(reduce)
