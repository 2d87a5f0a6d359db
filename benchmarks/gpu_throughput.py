"""GPU throughput in one script, without Ray: the DQN loop's variants, packed fair_adv trials, image steps.

    python benchmarks/gpu_throughput.py [--out DIR] [--sections dqn,ops,pack,image,eval] [--rounds 2] [--compile]
    python benchmarks/gpu_throughput.py --smoke      # the same, end to end, at small sizes (CPU: seconds)

Needs torch, numpy, gymnasium, ale-py and this tree on PYTHONPATH (no Ray, no network). On the
GPU machine it takes about 3 minutes. Five sections (a sixth, ``compile``, only with
``--compile``, and always last: a cold ``torch.compile`` takes minutes), each printed as a
table as soon as it ends and written then to ``DIR/gpu_throughput.json`` (default
``gpu_throughput_out/``; ``finished`` lists the sections it holds), so a run cut short by a
time limit keeps every section that finished:

1. ``dqn``: the DQN loop (trainers/dqn_softlinf/loop.py's ``train_loop``, soft-linf, Pong, 8
   envs, the held-out game and every probe on) in four variants, run in interleaved rounds:
   **today** (the loop before the device-replay change: each batch sent in five
   copies, two of them slices with gaps; the held-out game's greedy action in a forward pass
   and a device read of its own; soft-linf reading beta's sign from the device), **window**
   (the host replay now: one contiguous window and one scalar array per batch, the held-out
   game in the training forward pass; the default on a CPU), **device** (the replay on the
   device, batches drawn and gathered there, epsilon-greedy there: one read per vector step)
   and **device+graph** (that, with the update captured as a CUDA graph: the default on a
   GPU; CUDA only), in rounds A B C D, D C B A, ..., and the device's default variant with
   ``channels_last`` off (``NCHW``) beside them. Agent steps/s after the first report (learning starts, the graph is
   captured, cuDNN picks kernels), from the loop's own clock, which leaves out the reports'
   probe measurements; the wall time per vector step (8 agent steps) and the CPU time per
   agent step; the number of ALE threads; GPU utilisation sampled with ``nvidia-smi`` during
   each run where there is one.
2. ``ops``: per update, with ``torch.profiler``: kernels launched (on a CPU: aten ops that
   call no other), host-to-device copies and device reads (CPU: ``.item()``-style reads; CUDA:
   stream/device/event synchronizations and blocking copies), for each variant.
3. ``pack``: 1, 2 and 4 processes (--smoke: 1 and 2) each running fair_adv's ``train_step`` (PGD-10 AT,
   ResNet-18, batch 128, the workload's own amp_bf16 / channels_last / compile settings as its
   Config gives them on this device) on the same device at once; aggregate images/s.
4. ``image``: ResNet-18 clean and PGD-10 AT steps at fp32 / NCHW / eager and bf16 / NHWC /
   eager (the image code's own knobs: autocast, channels_last), interleaved, median images/s.
5. ``eval``: the DQN evaluation games (loop.py's ``evaluate``: ``play_games`` with
   ``eval_chooser``), Pong, 8 envs for 400 vector steps, acting on the host (``host``: each
   step's observations sent with ``to_device``, epsilon drawn and compared on the host) and
   through the device path (``device``, evaluation.py: observations and the host's draws in
   one staged copy, epsilon a device scalar), interleaved: agent steps/s, copies and reads per
   vector step, and whether the games' returns equal the host path's.
6. ``compile`` (``--compile``): the same as ``image`` at fp32 / NCHW / eager and bf16 / NHWC /
   torch.compile (raylab.accel.compiled), its compile time in the note.

The issue's targets are printed as predictions: met, not met, or not measurable on a CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Callable, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

TARGETS = {
    "cpu_no_regression": "DQN loop, this device's default variant, at least as fast as today's (paired, this run)",
    "dqn_10m_under_30min": "H200, 16 cores: 10M agent steps of one dqn_softlinf trial in <= 30 min (>= 5,556 agent steps/s)",
    "pack_4_at_3x": "H200: 4 trials per GPU at >= 3x one trial's aggregate throughput (fair_adv PGD-10 processes)",
    "pgd10_epoch_under_8s_bf16": "H200: PGD-10 AT of ResNet-18 in bf16 <= 8 s per CIFAR-10 epoch (50,000 images)",
}


# ---------------------------------------------------------------------- today's DQN, for "today"
def todays_to_batch(run, b):
    """loop.to_batch before the device-replay change: five copies, obs and next_obs as slices with gaps."""
    from trainers.dqn_softlinf.loop import to_device

    def to_obs(frames):
        return to_device(torch.from_numpy(frames.reshape(len(frames), *run.envs.obs_shape)), run.device)

    return {
        "obs": to_obs(b["obs"]),
        "next_obs": to_obs(b["next_obs"]),
        "action": to_device(torch.from_numpy(b["action"]), run.device, torch.long),
        "reward": to_device(torch.from_numpy(b["reward"]), run.device),
        "done": to_device(torch.from_numpy(b["done"]), run.device, torch.float32),
    }


def todays_choose_actions(run, epsilon):
    """Acting before the device-replay change: numpy epsilon-greedy, the held-out game's greedy action in a
    forward pass (and a device read) of its own."""
    from trainers.dqn_softlinf import loop

    return loop.act(run, run.obs, epsilon, run.rng), lambda obs: loop.greedy(run, obs)


def todays_soft_linf(td, beta, weights=None):
    """loss.soft_linf before the device-replay change: beta made a device tensor and its sign read back."""
    from trainers.dqn_softlinf.loss import _mean

    beta = torch.as_tensor(beta, dtype=td.dtype, device=td.device)
    if bool((beta <= 0).any()):
        raise ValueError(f"soft_linf: beta must be > 0, got {beta}")
    a = td.abs()
    counted = a if weights is None else a.masked_fill(weights <= 0, float("-inf"))
    m = counted.max().detach()
    z = torch.expm1(torch.clamp(beta * (a - m), max=0.0))
    return m + torch.log1p(_mean(z, weights)) / beta


@contextlib.contextmanager
def todays_code(enabled: bool):
    """Swap today's pieces into the loop (the variant "today"), and back."""
    from trainers.dqn_softlinf import loop, loss

    saved = loop.to_batch, loop.choose_actions, loss.soft_linf
    if enabled:
        loop.to_batch, loop.choose_actions, loss.soft_linf = todays_to_batch, todays_choose_actions, todays_soft_linf
    try:
        yield
    finally:
        loop.to_batch, loop.choose_actions, loss.soft_linf = saved


VARIANTS = {  # name: config overrides (and "today" swaps today's code in)
    "today": {"replay_on_device": False, "cuda_graph": False},
    "window": {"replay_on_device": False, "cuda_graph": False},
    "device": {"replay_on_device": True, "cuda_graph": False},
    "device+graph": {"replay_on_device": True, "cuda_graph": True},
}
LAYOUT_ROWS = {  # the device's default variant with channels_last off (the Config's default is on)
    "window NCHW": {"replay_on_device": False, "cuda_graph": False, "channels_last": False},
    "device+graph NCHW": {"replay_on_device": True, "cuda_graph": True, "channels_last": False},
}


def default_variant(device: torch.device) -> str:
    return "device+graph" if device.type == "cuda" else "window"


# ---------------------------------------------------------------------- GPU utilisation
class GpuUtilisation:
    """``nvidia-smi --query-gpu=timestamp,utilization.gpu`` sampled every 200 ms while the block
    runs; ``mean(t0, t1)``: the mean utilisation in % of the samples between two ``time.time()``
    values (all of them by default), over every GPU listed; None without nvidia-smi."""

    def __enter__(self):
        self.samples: list[tuple[float, float]] = []
        exe = shutil.which("nvidia-smi")
        self.proc = (
            None
            if exe is None
            else subprocess.Popen(
                [exe, "--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        for line in out.splitlines():
            stamp, _, value = line.rpartition(",")
            try:
                when = datetime.datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.samples.append((when, float(value)))
            except ValueError:
                continue

    def mean(self, t0: float = float("-inf"), t1: float = float("inf")) -> float | None:
        inside = [v for t, v in self.samples if t0 <= t <= t1]
        return statistics.fmean(inside) if inside else None


# ---------------------------------------------------------------------- 1. the DQN loop
def dqn_config(args, name: str) -> dict:
    s = args.sizes
    return {
        "game": "Pong",
        "loss": "soft_linf",
        "num_envs": 8,
        "seed": 0,
        "torch_threads": args.threads,
        "batch_size": s["dqn_batch"],
        "total_steps": s["dqn_steps"],
        "learning_starts": s["dqn_report"] // 2,
        "report_every": s["dqn_report"],
        "buffer_size": s["dqn_buffer"],
        "heldout_size": s["heldout"],
        "expected_states": 8,
        "expected_samples": 2,
        "probe_size": 256,
        "eval_episodes": 1,
        "eval_max_steps": 1,
        "eval_every": 10**9,
        "checkpoint_replay": False,
        **(VARIANTS | LAYOUT_ROWS)[name],
    }


def ale_threads(args) -> int:
    """The emulator threads the DQN runs use (envs.py: ``env_threads`` 0 is one per env up to
    the core count)."""
    return min(8, os.cpu_count() or 1)


def run_dqn(args, name: str) -> dict:
    from raylab import session
    from trainers.dqn_softlinf import loop

    cpu_at_report = []  # this process's CPU seconds (all its threads) at each report
    report, preflight, evaluate = loop.session.report, loop.preflight, loop.evaluate

    def timed_report(*a, **k):
        cpu_at_report.append(time.process_time())
        return report(*a, **k)

    with todays_code(name == "today"), GpuUtilisation() as util:
        sess = session.start(backend="local")
        loop.session.report = timed_report
        # the workload's preflight names missing packages through raylab's installed entry
        # points, which a bare tree on PYTHONPATH lacks (this script's needs are imported up
        # front); the evaluation games at the first report are outside the loop's clock and
        # cost an emulator of their own to start: both left out
        loop.preflight = lambda cfg: None
        loop.evaluate = lambda run, s: float("nan")
        start = time.perf_counter()
        try:
            loop.train_loop(dqn_config(args, name))
        finally:
            loop.session.report, loop.preflight, loop.evaluate = report, preflight, evaluate
        wall = time.perf_counter() - start
    history = sess.history
    steps = [r["env/steps"] for r in history]
    timed = [(b - a, (b - a) / r["perf/env_steps_per_s"]) for a, b, r in zip(steps, steps[1:], history[1:])]
    # utilisation between the first and the last report (the timed steps, and the probes at reports)
    window = (sess.started + history[0]["time_total_s"], sess.started + history[-1]["time_total_s"])
    rate = sum(n for n, _ in timed) / sum(t for _, t in timed)
    return {
        "variant": name,
        "steps_per_s": rate,
        # wall time of one vector step (8 agent steps: acting, the emulators, the updates)
        "host_ms_per_vector_step": 1000 * 8 / rate,
        # CPU time per env step between the first and the last report (a loaded machine
        # stretches wall time, much less the CPU time the same work takes)
        "cpu_ms_per_step": 1000 * (cpu_at_report[-1] - cpu_at_report[0]) / (steps[-1] - steps[0]),
        "gpu_util_pct": util.mean(*window),
        "updates": history[-1]["train/updates"],
        "wall_s": wall,
    }


def section_dqn(args, device) -> list[dict]:
    import ale_py  # noqa: F401 - the emulator; cv2 for the held-out game: named here if missing
    import cv2  # noqa: F401

    names = [n for n in VARIANTS if n != "device+graph" or device.type == "cuda"]
    names.append(f"{default_variant(device)} NCHW")  # channels_last off: the layout's row
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:  # A B C, C B A, ...: no variant always first
            runs[name].append(run_dqn(args, name))
            print(f"  dqn {name:13s} {runs[name][-1]['steps_per_s']:9.1f} env steps/s", flush=True)
    rows = []
    today = statistics.median(r["steps_per_s"] for r in runs["today"])
    for name in [*VARIANTS, *(n for n in LAYOUT_ROWS if n in runs)]:
        if name not in runs:
            rows.append({"variant": name, "note": "not measurable on CPU (CUDA graphs need CUDA)"})
            continue
        rates = [r["steps_per_s"] for r in runs[name]]
        utils = [r["gpu_util_pct"] for r in runs[name] if r["gpu_util_pct"] is not None]
        cpu = statistics.median(r["cpu_ms_per_step"] for r in runs[name])
        rows.append(
            {
                "variant": name,
                "steps_per_s": statistics.median(rates),
                "runs": rates,
                "vs_today": statistics.median(rates) / today,
                "cpu_ms_per_step": cpu,
                "cpu_runs": [r["cpu_ms_per_step"] for r in runs[name]],
                "cpu_vs_today": statistics.median(r["cpu_ms_per_step"] for r in runs["today"]) / cpu,
                "gpu_util_pct": statistics.fmean(utils) if utils else None,
                "updates": runs[name][0]["updates"],
                "host_ms_per_vector_step": statistics.median(r["host_ms_per_vector_step"] for r in runs[name]),
                "cpu_ms_per_vector_step": 8 * cpu,
                "ale_threads": ale_threads(args),
                "channels_last": (VARIANTS | LAYOUT_ROWS)[name].get("channels_last", True),
            }
        )
    return rows


# ---------------------------------------------------------------------- 2. ops per update
READS = ("item", "cpu", "tolist", "__float__", "__int__", "__bool__")


@contextlib.contextmanager
def counting_reads(counter: list[int]):
    """Count the tensor-to-host reads (``.item()``, ``.cpu()``, ``bool(t)``...) that the DQN
    code (trainers/, and today's pieces in this file) makes: each one waits for the device on
    CUDA. Reads inside torch (fused Adam reads its CPU step count on a CPU) are not counted."""
    mine = (str(ROOT / "trainers"), str(Path(__file__).resolve()))
    saved = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(original):
        def counted(self, *args, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(mine):
                counter[0] += 1
            return original(self, *args, **kwargs)

        return counted

    for name, original in saved.items():
        setattr(torch.Tensor, name, wrap(original))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)


def count_update_ops(args, device, name: str, updates: int = 4) -> dict:
    from trainers.dqn_softlinf import loop
    from trainers.dqn_softlinf.config import Config

    cfg = Config(**{k: v for k, v in dqn_config(args, name).items()} | {"buffer_size": 4000})
    with todays_code(name == "today"):
        run = loop.build_run(cfg, device)
        rng = np.random.default_rng(0)
        n = cfg.num_envs
        run.replay.add_observation(rng.integers(0, 255, (n, 84, 84), np.uint8), np.ones(n, bool), np.zeros(n, bool))
        for _ in range(64):
            run.replay.set_step(rng.integers(0, 6, n), rng.normal(size=n).astype(np.float32), np.zeros(n, bool))
            run.replay.add_observation(
                rng.integers(0, 255, (n, 84, 84), np.uint8), np.zeros(n, bool), np.zeros(n, bool)
            )
        run.sums = {k: torch.zeros((), device=device) for k in ("loss", "q", "ess")}
        if run.capture:
            run.graph = loop.update_graph(run)
        s = types.SimpleNamespace(loss_n=0)  # the loop state's update counter
        for _ in range(5):  # warm-up; the graph is captured at the 4th
            loop.update(run, s)
        if device.type == "cuda":
            torch.cuda.synchronize()
        timed = 4 * updates  # host plus device per update, synchronized at both ends only
        start = time.perf_counter()
        for _ in range(timed):
            loop.update(run, s)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms_per_update = 1000 * (time.perf_counter() - start) / timed
        copies, reads = [0], [0]
        to_device = loop.to_device

        def counted(*a, **k):
            copies[0] += 1
            return to_device(*a, **k)

        loop.to_device = counted
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            with torch.profiler.profile(activities=activities) as prof, counting_reads(reads):
                for _ in range(updates):
                    loop.update(run, s)
        finally:
            loop.to_device = to_device
        run.envs.close()
    events = list(prof.events())
    if device.type == "cuda":
        launch = (
            "cudaLaunchKernel",
            "cuLaunchKernel",
            "cudaLaunchKernelExC",
            "cuLaunchKernelEx",
            "cudaGraphLaunch",
            "cudaMemcpyAsync",
            "cudaMemsetAsync",
        )
        sync = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
        launches = sum(e.name in launch for e in events)
        syncs = sum(e.name in sync for e in events)
        graphs = sum(e.name == "cudaGraphLaunch" for e in events)
    else:
        launches = sum(
            e.name.startswith("aten::") and not any(c.name.startswith("aten::") for c in e.cpu_children) for e in events
        )
        syncs, graphs = None, 0
    return {
        "variant": name,
        "launches_per_update": launches / updates,
        "h2d_copies_per_update": copies[0] / updates,
        "reads_per_update": reads[0] / updates,
        "syncs_per_update": None if syncs is None else syncs / updates,
        "graph_launches_per_update": graphs / updates,
        "ms_per_update": ms_per_update,
        "counted": (
            "CUDA runtime calls (kernel and graph launches, async copies and memsets)"
            if device.type == "cuda"
            else "leaf aten ops (each would be a kernel on a GPU)"
        ),
    }


def section_ops(args, device) -> list[dict]:
    return [
        count_update_ops(args, device, name)
        if name != "device+graph" or device.type == "cuda"
        else {"variant": name, "note": "not measurable on CPU (CUDA graphs need CUDA)"}
        for name in VARIANTS
    ]


# ---------------------------------------------------------------------- 3. packed fair_adv processes
def image_settings(device: torch.device) -> dict:
    """fair_adv's amp_bf16 / channels_last / compile as its Config's defaults resolve on
    ``device`` (``auto``: on where the device is CUDA)."""
    from raylab.accel import enabled
    from trainers.fair_adv.config import Config

    cfg = Config()
    return {k: enabled(getattr(cfg, k), device) for k in ("amp_bf16", "channels_last", "compile")}


class ImageStep:
    """One fair_adv ``train_step`` of ``method`` on a fixed random batch, with the image code's
    knobs: autocast bf16, channels_last, raylab.accel.compiled (``compile='eager'``: dynamo
    with its eager backend, for --smoke on a CPU, where inductor takes minutes)."""

    def __init__(
        self,
        model_name: str,
        batch: int,
        device,
        amp: bool,
        channels_last: bool,
        compile: bool | str,
        pgd_steps: int = 10,
    ):
        from raylab.accel import compiled
        from trainers.fair_adv.config import Config
        from trainers.fair_adv.model import build_model
        from trainers.fair_adv.step import History

        torch.manual_seed(0)
        self.device, self.amp = device, amp
        layout = torch.channels_last if channels_last else torch.contiguous_format
        self.model = build_model(model_name, 10).to(device, memory_format=layout)
        if compile == "eager":
            self.forward = torch.compile(self.model, backend="eager")
        else:
            self.forward = compiled(self.model, bool(compile), "ResNet")
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        gen = torch.Generator(device=device).manual_seed(0)
        self.x = torch.rand(batch, 3, 32, 32, device=device, generator=gen).contiguous(memory_format=layout)
        self.y = torch.randint(0, 10, (batch,), device=device, generator=gen)
        self.index = torch.arange(batch, device=device)
        self.history = History.empty(batch, device)
        self.gen = gen
        self.configs = {m: Config(method=m, train_steps=pgd_steps, tri_warmup_epochs=0) for m in ("standard", "pgd_at")}

    def __call__(self, method: str) -> float:
        from trainers.fair_adv.step import train_step

        sync(self.device)
        start = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            train_step(
                self.forward,
                self.optimizer,
                self.x,
                self.y,
                self.index,
                self.configs[method],
                epoch=1,
                history=self.history,
                loss_threshold=float("inf"),
                generator=self.gen,
            )
        sync(self.device)
        return time.perf_counter() - start


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def packs(args) -> tuple[int, ...]:
    """Processes at once, phase by phase: 1, 2 and 4 (--smoke: 1 and 2, the same code with
    two fewer process start-ups)."""
    return tuple(args.sizes["packs"])


def pack_worker(args) -> int:
    """Packed process ``--rank``: warm up once, wait for all, then for each count of packs() that includes it
    (ranks below the count), wait for the others, run PGD steps for ``--seconds``, print one
    JSON line; every process waits for each phase to end before the next (one start-up for all
    three counts)."""
    device = pick_device(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    s = image_settings(device)
    step = ImageStep(
        args.sizes["model"],
        args.sizes["batch"],
        device,
        s["amp_bf16"],
        s["channels_last"],
        "eager" if s["compile"] and args.smoke else s["compile"],
        args.sizes["pgd_steps"],
    )
    for _ in range(args.sizes["warmup"]):
        step("pgd_at")
    folder = Path(args.barrier)

    def wait(prefix: str, count: int) -> None:
        while len(list(folder.glob(f"{prefix}-*"))) < count:
            time.sleep(0.005)

    (folder / f"warm-{args.rank}").touch()
    wait("warm", max(packs(args)))  # every process started and warmed up: none competes for the start
    for phase, procs in enumerate(packs(args)):
        if args.rank < procs:
            (folder / f"ready{phase}-{args.rank}").touch()
            wait(f"ready{phase}", procs)
            start, steps = time.perf_counter(), 0
            while time.perf_counter() - start < args.seconds:
                step("pgd_at")
                steps += 1
            elapsed = time.perf_counter() - start
            print(
                json.dumps(
                    {"phase": phase, "images": steps * args.sizes["batch"], "seconds": elapsed, "end": time.time(), **s}
                ),
                flush=True,
            )
            (folder / f"done{phase}-{args.rank}").touch()
        wait(f"done{phase}", procs)
    return 0


def section_pack(args, device) -> list[dict]:
    with tempfile.TemporaryDirectory() as barrier, GpuUtilisation() as util:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--worker",
                    "pack",
                    "--rank",
                    str(rank),
                    "--barrier",
                    barrier,
                    "--seconds",
                    str(args.sizes["pack_seconds"]),
                    "--device",
                    args.device,
                    "--threads",
                    str(args.threads or 1),
                ]
                + (["--smoke"] if args.smoke else []),
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for rank in range(max(packs(args)))
        ]
        outs = [w.communicate(timeout=900)[0] for w in workers]
    if any(w.returncode for w in workers):
        raise RuntimeError(f"a packed process failed: exit codes {[w.returncode for w in workers]}")
    results = [json.loads(line) for out in outs for line in out.splitlines() if line.startswith("{")]
    rows = []
    for phase, procs in enumerate(packs(args)):
        mine = [r for r in results if r["phase"] == phase]
        assert len(mine) == procs, (phase, mine)
        rate = sum(r["images"] / r["seconds"] for r in mine)
        end = min(r["end"] for r in mine)
        rows.append(
            {
                "processes": procs,
                "images_per_s": rate,
                "per_process": [r["images"] / r["seconds"] for r in mine],
                "gpu_util_pct": util.mean(end - min(r["seconds"] for r in mine), end),
                "settings": {k: mine[0][k] for k in ("amp_bf16", "channels_last", "compile")},
            }
        )
        print(f"  pack {procs} processes {rate:9.1f} images/s", flush=True)
    for row in rows:
        row["vs_one"] = row["images_per_s"] / rows[0]["images_per_s"]
    return rows


# ---------------------------------------------------------------------- 4. precision, layout, compile
IMAGE_VARIANTS = {  # name: (amp_bf16, channels_last, compile)
    "fp32/NCHW/eager": (False, False, False),
    "bf16/NHWC/eager": (True, True, False),
}
COMPILE_VARIANTS = {  # the section "compile": last, and only when asked for (a cold compile takes minutes)
    "fp32/NCHW/eager": (False, False, False),
    "bf16/NHWC/compile": (True, True, True),
}


def section_compile(args, device) -> list[dict]:
    return section_image(args, device, COMPILE_VARIANTS)


def section_image(args, device, variants: dict = IMAGE_VARIANTS) -> list[dict]:
    steps = {}
    compile_s = None
    for name, (amp, cl, comp) in variants.items():
        step = ImageStep(
            args.sizes["model"],
            args.sizes["batch"],
            device,
            amp,
            cl,
            "eager" if comp and args.smoke else comp,
            args.sizes["pgd_steps"],
        )
        start = time.perf_counter()
        for _ in range(args.sizes["warmup"]):
            for method in ("standard", "pgd_at"):
                step(method)
        if comp:
            compile_s = time.perf_counter() - start
        steps[name] = step
    times = {(n, m): [] for n in variants for m in ("standard", "pgd_at")}
    for _ in range(args.sizes["image_rounds"]):  # interleaved: one step of each per round
        for name, method in times:
            times[(name, method)].append(steps[name](method))
    rows = []
    for (name, method), ts in times.items():
        rate = args.sizes["batch"] / statistics.median(ts)
        base = args.sizes["batch"] / statistics.median(times[("fp32/NCHW/eager", method)])
        step = steps[name]
        fell_back = getattr(step.forward, "eager", False)
        rows.append(
            {
                "variant": name,
                "step": "clean" if method == "standard" else f"PGD-{args.sizes['pgd_steps']} AT",
                "images_per_s": rate,
                "vs_fp32": rate / base,
                "epoch_s_cifar10": 50_000 / rate,
                "note": (
                    "torch.compile fell back to eager"
                    if fell_back
                    else (
                        f"dynamo, eager backend (--smoke); warm-up {compile_s:.1f} s"
                        if args.smoke and "compile" in name
                        else (f"compile + warm-up {compile_s:.1f} s" if "compile" in name else "")
                    )
                ),
            }
        )
    return rows


# ---------------------------------------------------------------------- 5. evaluation games
EVAL_EPSILON = 0.05
"""The evaluation games' epsilon here (Nature's; the Config's default is 0.01)."""
EVAL_VARIANTS = {"host": False, "device": True}  # name: replay_on_device (evaluation acts as training does)


def eval_games(args, device, name: str) -> dict:
    """``loop.evaluate``'s games (``loop.play_games`` with ``loop.eval_chooser``) on Pong,
    ``eval_envs`` envs for ``eval_steps`` vector steps, after a warm-up of 8 steps: agent
    steps/s, host-to-device copies and device reads per vector step, the games' returns."""
    import dataclasses

    from trainers.dqn_softlinf import evaluation, loop
    from trainers.dqn_softlinf.config import Config

    s = args.sizes
    cfg = Config(
        game="Pong",
        num_envs=1,
        buffer_size=64,
        seed=0,
        eval_episodes=s["eval_envs"],
        eval_max_steps=s["eval_steps"],
        eval_epsilon=EVAL_EPSILON,
        replay_on_device=EVAL_VARIANTS[name],
        cuda_graph=False,
    )
    run = loop.build_run(cfg, device)
    envs = loop.make_envs(cfg, cfg.eval_episodes)
    loop.play_games(
        dataclasses.replace(cfg, eval_max_steps=8), envs, loop.eval_chooser(run, np.random.default_rng(1)), 1
    )
    choose = loop.eval_chooser(run, np.random.default_rng([0, loop.EVAL_STREAM, 0]))
    steps, copies, reads = [0], [0], [0]
    to_device, send = loop.to_device, evaluation.EvalStaging.send

    def counted_choose(obs):
        steps[0] += 1
        return choose(obs)

    def counted_to_device(*a, **k):
        copies[0] += 1
        return to_device(*a, **k)

    def counted_send(self, *a, **k):
        copies[0] += 1
        return send(self, *a, **k)

    loop.to_device, evaluation.EvalStaging.send = counted_to_device, counted_send
    try:
        with counting_reads(reads):
            sync(device)
            start = time.perf_counter()
            returns, lengths = loop.play_games(cfg, envs, counted_choose, loop.env_seed(0, loop.EVAL_STREAM, 0))
            sync(device)
            elapsed = time.perf_counter() - start
    finally:
        loop.to_device, evaluation.EvalStaging.send = to_device, send
        envs.close()
        run.envs.close()
    return {
        "steps_per_s": int(lengths.sum()) / elapsed,
        "ms_per_vector_step": 1000 * elapsed / steps[0],
        "h2d_copies_per_step": copies[0] / steps[0],
        "reads_per_step": reads[0] / steps[0],
        "returns": returns.tolist(),
    }


def section_eval(args, device) -> list[dict]:
    names = list(EVAL_VARIANTS)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            runs[name].append(eval_games(args, device, name))
            print(f"  eval {name:7s} {runs[name][-1]['steps_per_s']:9.1f} env steps/s", flush=True)
    host = statistics.median(r["steps_per_s"] for r in runs["host"])
    rows = []
    for name in names:
        rates = [r["steps_per_s"] for r in runs[name]]
        rows.append(
            {
                "variant": name,
                "steps_per_s": statistics.median(rates),
                "runs": rates,
                "vs_host": statistics.median(rates) / host,
                "ms_per_vector_step": statistics.median(r["ms_per_vector_step"] for r in runs[name]),
                "h2d_copies_per_step": runs[name][0]["h2d_copies_per_step"],
                "reads_per_step": runs[name][0]["reads_per_step"],
                "same_returns": all(r["returns"] == runs["host"][0]["returns"] for r in runs[name]),
                "returns": runs[name][0]["returns"],
            }
        )
    return rows


# ---------------------------------------------------------------------- targets and output
def judge(results: dict, device, smoke: bool) -> list[dict]:
    cuda = device.type == "cuda"
    out = []

    def add(key, status, figure):
        out.append({"target": key, "what": TARGETS[key], "status": status, "figure": figure})

    dqn = {r["variant"]: r for r in results.get("dqn", []) if "steps_per_s" in r}
    if dqn:
        default = dqn[default_variant(device)]
        add(
            "cpu_no_regression",
            "met" if default["vs_today"] >= 1.0 else "not met",
            f"{default['variant']} {default['vs_today']:.3f}x today's ({default['steps_per_s']:.1f} vs "
            f"{dqn['today']['steps_per_s']:.1f} env steps/s)",
        )
        best = max(dqn.values(), key=lambda r: r["steps_per_s"])
        minutes = 1e7 / best["steps_per_s"] / 60
        add(
            "dqn_10m_under_30min",
            ("met" if minutes <= 30 else "not met") if cuda else "not measurable on CPU",
            f"{best['variant']}: {best['steps_per_s']:.0f} env steps/s, 10M steps in {minutes:.0f} min",
        )
    pack = results.get("pack", [])
    if pack:
        most = pack[-1]
        four = most["processes"] == 4
        add(
            "pack_4_at_3x",
            ("met" if most["vs_one"] >= 3 else "not met")
            if cuda and four
            else ("not measurable on CPU" if not cuda else "not measured (--smoke packs 2 at most)"),
            f"{most['processes']} processes {most['vs_one']:.2f}x one ({most['images_per_s']:.0f} vs "
            f"{pack[0]['images_per_s']:.0f} images/s)",
        )
    pgd = [
        r
        for r in results.get("image", []) + results.get("compile", [])
        if r["step"] != "clean" and "bf16" in r["variant"]
    ]
    if pgd:
        best = min(pgd, key=lambda r: r["epoch_s_cifar10"])
        add(
            "pgd10_epoch_under_8s_bf16",
            ("met" if best["epoch_s_cifar10"] <= 8 else "not met") if cuda else "not measurable on CPU",
            f"{best['variant']}: {best['images_per_s']:.0f} images/s, {best['epoch_s_cifar10']:.1f} s per epoch"
            + (" (--smoke sizes: not the target's model)" if smoke else ""),
        )
    return out


def table(title: str, rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """``columns``: (key, header, format)."""
    lines = [title, "  ".join(f"{h:>{max(len(h), 10)}}" for _, h, _ in columns)]
    for row in rows:
        cells = []
        for key, header, fmt in columns:
            value = row.get(key)
            width = max(len(header), 10)
            cells.append(f"{'-' if value is None else format(value, fmt):>{width}}")
        lines.append("  ".join(cells) + (f"  {row['note']}" if row.get("note") else ""))
    return "\n".join(lines)


SIZES = {
    # the device run: about 3 minutes on an H200
    False: {
        "dqn_steps": 12_000,
        "dqn_report": 2_000,
        "dqn_buffer": 100_000,
        "heldout": 512,
        "dqn_batch": 32,
        "model": "resnet18",
        "batch": 128,
        "pgd_steps": 10,
        "warmup": 2,
        "pack_seconds": 6.0,
        "image_rounds": 5,
        "packs": (1, 2, 4),
        "eval_envs": 8,
        "eval_steps": 400,
    },
    # --smoke: every path, small, on a CPU in tens of seconds
    True: {
        "dqn_steps": 128,
        "dqn_report": 64,
        "dqn_buffer": 2_000,
        "heldout": 32,
        "dqn_batch": 8,
        "model": "small_cnn",
        "batch": 8,
        "pgd_steps": 10,
        "warmup": 1,
        "pack_seconds": 0.5,
        "image_rounds": 2,
        "packs": (1, 2),
        "eval_envs": 2,
        "eval_steps": 16,
    },
}


def pick_device(args) -> torch.device:
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu_throughput_out", help="folder for gpu_throughput.json")
    p.add_argument("--smoke", action="store_true", help="every section at small sizes (a CPU: tens of seconds)")
    p.add_argument("--sections", default="dqn,ops,pack,image,eval", help="any of dqn,ops,pack,image,eval,compile")
    p.add_argument(
        "--compile",
        action="store_true",
        help="add the section compile (ResNet-18 under torch.compile: minutes cold), run last",
    )
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds of the DQN variants (2; --smoke 1)")
    p.add_argument("--dqn-steps", type=int, default=None, help="agent steps per DQN run (12,000; --smoke 128)")
    p.add_argument(
        "--dqn-report",
        type=int,
        default=None,
        help="agent steps between the DQN loop's reports (2,000; --smoke 64); learning starts at half",
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    p.add_argument("--worker", choices=["pack"], help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--barrier", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=1.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.sizes = dict(SIZES[args.smoke])
    for key in ("dqn_steps", "dqn_report"):
        if getattr(args, key):
            args.sizes[key] = getattr(args, key)
    args.rounds = args.rounds or (1 if args.smoke else 2)
    if args.worker == "pack":
        return pack_worker(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if args.compile and "compile" not in sections:
        sections.append("compile")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        print(
            f"gpu_throughput: unknown section(s) {', '.join(sorted(unknown))}; valid: {', '.join(SECTIONS)}",
            file=sys.stderr,
        )
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results: dict = {
        "device": name,
        "torch": torch.__version__,
        "smoke": args.smoke,
        "cpus": os.cpu_count(),
        "sizes": args.sizes,
        "rounds": args.rounds,
        "finished": [],
    }
    print(
        f"device {name}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"{'--smoke sizes' if args.smoke else 'full sizes'}",
        flush=True,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()
    for section, run in SECTIONS.items():  # in this order whatever --sections says: compile last
        if section not in sections:
            continue
        start = time.perf_counter()
        results[section] = run(args, device)
        results[f"{section}_s"] = time.perf_counter() - start
        results["finished"].append(section)
        results["targets"] = judge(results, device, args.smoke)
        results["total_s"] = time.perf_counter() - clock
        write_json(out, results)  # first: a run cut short keeps every section that finished
        print()
        print(section_table(section, results, args), flush=True)

    print("targets (predictions):")
    for t in results.get("targets", []):
        print(f"  [{t['status']}] {t['what']}: {t['figure']}")
    write_json(out, results)
    print(f"\nwrote {out / 'gpu_throughput.json'} ({results.get('total_s', 0.0):.0f} s)")
    return 0


def write_json(out: Path, results: dict) -> None:
    """``out/gpu_throughput.json`` replaced whole (written beside it, then renamed): a kill
    mid-write leaves the previous section's file."""
    tmp = out / "gpu_throughput.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=str))
    os.replace(tmp, out / "gpu_throughput.json")


class SectionTable(NamedTuple):
    """How one section's rows are printed: ``title(rows, args, section)``, the ``columns``
    (key, header, format) and a ``note(rows, args)`` printed under the table in parentheses
    (none where it gives "")."""

    title: Callable[[list[dict], argparse.Namespace, str], str]
    columns: list[tuple[str, str, str]]
    note: Callable[[list[dict], argparse.Namespace], str] = lambda rows, args: ""


IMAGE_TABLE = SectionTable(
    lambda rows, args, section: (
        f"{args.sizes['model']} batch {args.sizes['batch']} steps ({section}), median of "
        f"{args.sizes['image_rounds']} interleaved rounds"
    ),
    [
        ("variant", "variant", "s"),
        ("step", "step", "s"),
        ("images_per_s", "images/s", ".1f"),
        ("vs_fp32", "vs fp32", ".2f"),
        ("epoch_s_cifar10", "epoch s", ".1f"),
    ],
)
TABLES = {
    "dqn": SectionTable(
        lambda rows, args, section: (
            f"DQN loop, Pong, 8 envs, {rows[0].get('ale_threads', '?')} ALE threads, agent "
            f"steps/s after the first report (median of {args.rounds} interleaved rounds of {args.sizes['dqn_steps']:,} steps)"
        ),
        [
            ("variant", "variant", "s"),
            ("steps_per_s", "steps/s", ".1f"),
            ("vs_today", "vs today", ".3f"),
            ("host_ms_per_vector_step", "ms/vec step", ".2f"),
            ("cpu_ms_per_step", "CPU ms/step", ".2f"),
            ("cpu_vs_today", "CPU vs today", ".3f"),
            ("gpu_util_pct", "GPU util %", ".0f"),
            ("updates", "updates", "d"),
        ],
        lambda rows, args: (
            "ms/vec step: wall time per vector step of 8 agent steps; CPU vs today: today's CPU time per"
            " step over this one's, above 1 is cheaper; NCHW: channels_last off"
        ),
    ),
    "ops": SectionTable(
        lambda rows, args, section: "DQN update, per update (torch.profiler)",
        [
            ("variant", "variant", "s"),
            ("launches_per_update", "launches", ".1f"),
            ("h2d_copies_per_update", "H2D copies", ".1f"),
            ("reads_per_update", "reads", ".1f"),
            ("syncs_per_update", "syncs", ".1f"),
            ("graph_launches_per_update", "graphs", ".1f"),
            ("ms_per_update", "ms/update", ".3f"),
        ],
        lambda rows, args: (
            f"launches: {rows[0].get('counted', '-')}; reads: .item()/.cpu()/bool() of a tensor "
            "by the DQN code; syncs: CUDA stream/device/event synchronizations and blocking copies; "
            "ms/update: wall time of back-to-back updates, host plus device, batch as sized"
        ),
    ),
    "pack": SectionTable(
        lambda rows, args, section: (
            f"fair_adv PGD-{args.sizes['pgd_steps']} AT train_step, {args.sizes['model']} "
            f"batch {args.sizes['batch']}, processes at once"
        ),
        [
            ("processes", "processes", "d"),
            ("images_per_s", "images/s", ".1f"),
            ("vs_one", "vs one", ".2f"),
            ("gpu_util_pct", "GPU util %", ".0f"),
        ],
        lambda rows, args: f"settings: {rows[0]['settings']}",
    ),
    "image": IMAGE_TABLE,
    "eval": SectionTable(
        lambda rows, args, section: (
            f"DQN evaluation games, Pong, {args.sizes['eval_envs']} envs (a game each), "
            f"{args.sizes['eval_steps']} vector steps at eval_epsilon {EVAL_EPSILON} (median of {args.rounds} "
            "interleaved rounds)"
        ),
        [
            ("variant", "variant", "s"),
            ("steps_per_s", "steps/s", ".1f"),
            ("vs_host", "vs host", ".3f"),
            ("ms_per_vector_step", "ms/vec step", ".2f"),
            ("h2d_copies_per_step", "H2D copies", ".1f"),
            ("reads_per_step", "reads", ".1f"),
            ("same_returns", "same returns", ""),
        ],
        lambda rows, args: (
            "steps/s: agent steps, acting and the emulators; per vector step: host-to-device copies "
            "(host: to_device of the observations; device: one staged copy of observations and draws) and reads "
            "(the actions); same returns: the games' returns equal to the host path's, bit for bit"
        ),
    ),
    "compile": IMAGE_TABLE,
}
"""Each section's printed table (``section_table``)."""


def section_table(section: str, results: dict, args) -> str:
    """The printed table of one finished section (``TABLES``)."""
    spec, rows = TABLES[section], results[section]
    note = spec.note(rows, args)
    return table(spec.title(rows, args, section), rows, spec.columns) + (f"\n  ({note})\n" if note else "\n")


SECTIONS = {
    "dqn": section_dqn,
    "ops": section_ops,
    "pack": section_pack,
    "image": section_image,
    "eval": section_eval,
    "compile": section_compile,
}
"""The sections in the order they run; ``compile`` (a cold ``torch.compile``) only when asked."""


if __name__ == "__main__":
    sys.exit(main())
