"""The GPU path, asserted, on one machine with an NVIDIA GPU, in at most 480 s of step limits.

    PY=python3 PYTHONPATH=KIT_SITE:. python3 benchmarks/gpu_check.py [--out DIR] [--only STEP ...]

(benchmarks/gpu_check.sh sets PY and PYTHONPATH from a carried ``.kit/``.) Each step runs in
its own process group with its own time limit (``STEPS``), prints one ``ok``/``FAIL``/``skip``
line, and the next step runs after a failure; the figures table comes last. Exit code: the
number of failed steps; 2 when there is no GPU to check (one line, before any step).

Steps:
- ``cuda_trial_<workload>``: the workload's smoke trial with ``resources.gpus_per_worker=1``;
  its rows must carry ``gpu/mem_peak_mib`` (reported by ``raylab.session.report`` only from a
  process that initialised CUDA) above ``PEAK_FLOOR_MIB``, so a trial that trained on the CPU
  fails (``session.device()`` also refuses that);
- ``two_trials_one_gpu``: two 0.5-GPU trials sampled by ``nvidia-smi --query-compute-apps``
  at the same time on one GPU UUID, both finishing;
- ``amp_trial``: dqn_softlinf with ``amp_bf16=true`` and backdoor with ``amp_bf16=true
  channels_last=true`` on the GPU: finite losses;
- ``resume_gpu``: a fair_adv GPU sweep interrupted with SIGINT, continued with the printed
  ``--resume`` command, its final metrics bit for bit those of an uninterrupted GPU run;
- ``nccl_world1``: an all-reduce in a one-rank NCCL group; ``ddp_gloo_1gpu``: a two-rank gloo
  DDP step on CUDA tensors of one GPU; ``refuse_half_gpu_workers``: the CLI exits 2 for
  ``workers=2`` with ``gpus_per_worker=0.5``;
- ``fig_*``: benchmarks/dqn_throughput.py, image_throughput.py and adv_throughput.py on this
  GPU, side by side in one process each (their own ratio lines go to the table).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ("dqn_softlinf", "backdoor", "fair_adv", "seagram", "boltz_distill")
"""The paper workloads (toy never touches a device)."""
PEAK_FLOOR_MIB = 1.0
"""A trial's ``gpu/mem_peak_mib`` must exceed this: a model and a batch on the GPU."""
STEPS: dict[str, int] = {
    **{f"cuda_trial_{w}": 38 for w in WORKLOADS},
    "two_trials_one_gpu": 45,
    "amp_trial": 60,
    "resume_gpu": 55,
    "nccl_world1": 15,
    "ddp_gloo_1gpu": 20,
    "refuse_half_gpu_workers": 15,
    "fig_dqn": 30,
    "fig_resnet18": 25,
    "fig_pgd": 20,
}
"""Each step's time limit in seconds, in the order they run; their sum is the check's bound."""
BUDGET_S = 480
NO_GPU = "torch sees no CUDA GPU"


@dataclass
class Outcome:
    name: str
    ok: bool | None
    """True ok, False FAIL, None skip."""
    seconds: float
    note: str = ""
    figures: list[str] = field(default_factory=list)

    def line(self) -> str:
        word = {True: "ok", False: "FAIL", None: "skip"}[self.ok]
        return f"{word:<5} {self.name} ({self.seconds:.0f} s{'; ' + self.note if self.note else ''})"


class StepFailed(Exception):
    """A step's assertion failed; its message is the step's one-line note."""


def run(argv: list[str], log: Path, timeout: float, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``argv`` in its own process group, output appended to ``log``; the group is killed at ``timeout``."""
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **(env or {})}, start_new_session=True, **kw)
        try:
            proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise StepFailed(f"timed out after {timeout:.0f} s") from None
    return subprocess.CompletedProcess(argv, proc.returncode)


class Check:
    """The steps, run in order against ``PY`` (this interpreter) with results under ``out``."""

    def __init__(self, out: Path, py: str = sys.executable):
        self.out, self.py = out, py
        self.storage = out / "runs"
        self.figures: list[str] = []

    # --- helpers -------------------------------------------------------------------------
    def tune(self, name: str, log: Path, timeout: float, *overrides: str, run_name: str | None = None):
        return run([self.py, "-m", "raylab.tune", name, "--smoke", *overrides, "--storage", str(self.storage),
                    "--name", run_name or name, "--quiet"], log, timeout)

    def rows(self, run_name: str) -> list[list[dict]]:
        """Each trial's rows (``result.json``) of run ``run_name``."""
        trials = []
        for result in sorted((self.storage / run_name).glob("*/result.json")):
            trials.append([json.loads(line) for line in result.read_text().splitlines() if line.strip()])
        return trials

    def peak(self, run_name: str) -> float:
        trials = self.rows(run_name)
        if not trials or not all(trials):
            raise StepFailed("no trial reported")
        peaks = [max((r.get("gpu/mem_peak_mib", 0.0) for r in rows), default=0.0) for rows in trials]
        if min(peaks) <= PEAK_FLOOR_MIB:
            raise StepFailed(f"peak GPU memory {min(peaks):.2f} MiB <= {PEAK_FLOOR_MIB} MiB: trained on the CPU?")
        return max(peaks)

    # --- steps ---------------------------------------------------------------------------
    def cuda_trial(self, workload: str, log: Path, limit: float) -> str:
        if workload == "boltz_distill" and not importable(self.py, "rdkit"):
            raise Skip("rdkit not importable: carry .kit-mol/ too")
        done = self.tune(workload, log, limit, "resources.gpus_per_worker=1", run_name=f"cuda_{workload}")
        if done.returncode != 0:
            raise StepFailed(f"exit {done.returncode}")
        peak = self.peak(f"cuda_{workload}")
        self.figures.append(f"{workload}: peak GPU memory {peak:.0f} MiB (torch allocator)")
        return f"peak {peak:.0f} MiB"

    def two_trials_one_gpu(self, log: Path, limit: float) -> str:
        samples: list[set[tuple[str, str]]] = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                got = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                                     capture_output=True, text=True)
                samples.append({tuple(x.strip() for x in line.split(",")) for line in got.stdout.splitlines() if "," in line})
                stop.wait(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            done = self.tune("backdoor", log, limit, "resources.gpus_per_worker=0.5", "max_concurrent_trials=2",
                             "num_samples=2", run_name="two_trials")
        finally:
            stop.set()
            sampler.join(timeout=5)
        if done.returncode != 0:
            raise StepFailed(f"exit {done.returncode}")
        shared = max((max(sum(1 for _, u in s if u == uuid) for uuid in {u for _, u in s}) for s in samples if s), default=0)
        if shared < 2:
            raise StepFailed(f"never two processes on one GPU at once (most seen: {shared})")
        trials = self.rows("two_trials")
        if len(trials) < 2:
            raise StepFailed(f"{len(trials)} trials finished, not 2")
        self.peak("two_trials")
        return f"{shared} processes seen on one GPU at once"

    def amp_trial(self, log: Path, limit: float) -> str:
        start, notes = time.monotonic(), []
        for name, overrides in (("dqn_softlinf", ["config.amp_bf16=true"]),
                                ("backdoor", ["config.amp_bf16=true", "config.channels_last=true"])):
            done = self.tune(name, log, limit - (time.monotonic() - start), "resources.gpus_per_worker=1",
                             *overrides, run_name=f"amp_{name}")
            if done.returncode != 0:
                raise StepFailed(f"{name}: exit {done.returncode}")
            self.peak(f"amp_{name}")
            losses = [v for rows in self.rows(f"amp_{name}") for r in rows for k, v in r.items()
                      if "loss" in k and isinstance(v, (int, float))]
            if not losses or not all(math.isfinite(v) for v in losses):
                raise StepFailed(f"{name}: losses not all finite: {losses[:5]}")
            notes.append(f"{name} {len(losses)} finite losses")
        return "bf16: " + ", ".join(notes)

    def resume_gpu(self, log: Path, limit: float) -> str:
        overrides = ["resources.gpus_per_worker=1", "stop.training_iteration=3", "checkpoint.every=1"]
        start = time.monotonic()
        argv = [self.py, "-m", "raylab.tune", "fair_adv", "--smoke", *overrides, "--storage", str(self.storage),
                "--name", "resume", "--quiet"]
        err_log = self.out / "resume_gpu.stderr"
        with open(err_log, "w") as err:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                    start_new_session=True)
            while not any(rows for rows in self.rows("resume")):
                if proc.poll() is not None or time.monotonic() - start > limit / 3:
                    os.killpg(proc.pid, signal.SIGKILL)
                    raise StepFailed("no report before the interrupt")
                time.sleep(0.2)
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(timeout=limit / 3)
        lines = err_log.read_text().splitlines()
        hint = [i for i, line in enumerate(lines) if line.endswith("continue it with:")]
        if proc.returncode != 130 or not hint:
            raise StepFailed(f"interrupt: exit {proc.returncode}, resume hint {'found' if hint else 'missing'}")
        command = shlex.split(lines[hint[0] + 1].strip())
        resumed = run([self.py, *command[1:]], log, limit - (time.monotonic() - start))
        if resumed.returncode != 0:
            raise StepFailed(f"resume: exit {resumed.returncode}")
        whole = self.tune("fair_adv", log, limit - (time.monotonic() - start), *overrides, run_name="whole")
        if whole.returncode != 0:
            raise StepFailed(f"uninterrupted: exit {whole.returncode}")
        a, b = final_metrics(self.rows("resume")), final_metrics(self.rows("whole"))
        if not a or a != b:
            raise StepFailed(f"resumed != uninterrupted: {sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))[:5]}")
        return f"{len(a)} final metrics bit-identical"

    def python_step(self, code: str, log: Path, limit: float, **env) -> str:
        script = self.out / f"{log.stem}.py"  # a file: torch.multiprocessing spawns from it
        script.write_text(code)
        done = run([self.py, str(script)], log, limit, env=env)
        if done.returncode != 0:
            raise StepFailed(f"exit {done.returncode}")
        return log.read_text().strip().splitlines()[-1]

    def nccl_world1(self, log: Path, limit: float) -> str:
        return self.python_step(NCCL_WORLD1, log, limit)

    def ddp_gloo_1gpu(self, log: Path, limit: float) -> str:
        return self.python_step(DDP_GLOO_1GPU, log, limit)

    def refuse_half_gpu_workers(self, log: Path, limit: float) -> str:
        done = self.tune("backdoor", log, limit, "resources.workers=2", "resources.gpus_per_worker=0.5",
                         run_name="refused")
        if done.returncode != 2:
            raise StepFailed(f"exit {done.returncode}, not 2")
        return "exit 2: " + log.read_text().strip().splitlines()[-1][:120]

    def figure(self, script: list[str], log: Path, limit: float, grep: tuple[str, ...]) -> str:
        done = run([self.py, *script], log, limit)
        if done.returncode != 0:
            raise StepFailed(f"exit {done.returncode}")
        found = [line.strip() for line in log.read_text().splitlines() if any(g in line for g in grep)]
        self.figures.extend(found)
        return f"{len(found)} figure lines"

    def step(self, name: str, log: Path, limit: float) -> str:
        if name.startswith("cuda_trial_"):
            return self.cuda_trial(name.removeprefix("cuda_trial_"), log, limit)
        if name == "fig_dqn":
            return self.figure(["benchmarks/dqn_throughput.py", "--steps", "2000", "--num-envs", "8", "--skip-rllib"],
                               log, limit, ("steps/s", "x the", "ratio"))
        if name == "fig_resnet18":
            return self.figure(["benchmarks/image_throughput.py", "--steps", "50"], log, limit, ("images/s", "ratio"))
        if name == "fig_pgd":
            return self.figure(["benchmarks/adv_throughput.py", "--device", "cuda", "--rounds", "5"], log, limit,
                               ("per image", "x clean", "ratio"))
        return getattr(self, name)(log, limit)


class Skip(Exception):
    """A step that cannot run here (what is missing is its note)."""


def final_metrics(trials: list[list[dict]]) -> dict:
    """The last row of each trial, keyed by config, without timings."""
    out = {}
    for rows in trials:
        if rows:
            key = json.dumps(rows[-1].get("config"), sort_keys=True, default=str)
            out.update({f"{key}:{m}": v for m, v in rows[-1].items()
                        if isinstance(v, (int, float)) and not m.startswith(("perf/", "time", "timestamp", "gpu/"))
                        and "per_s" not in m and m not in ("pid", "iterations_since_restore")})
    return out


def importable(py: str, module: str) -> bool:
    return subprocess.run([py, "-c", f"import {module}"], capture_output=True).returncode == 0


NCCL_WORLD1 = """
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
x = torch.arange(4.0, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
assert x.is_cuda and x.tolist() == [0.0, 1.0, 2.0, 3.0], x
dist.destroy_process_group()
print("nccl all_reduce on one rank: ok, nccl", ".".join(map(str, torch.cuda.nccl.version())))
"""

DDP_GLOO_1GPU = """
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
DEVICE = torch.device(os.environ.get("GPU_CHECK_DEVICE", "cuda:0"))
def step(rank):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", "29518"
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2).to(DEVICE))
    x = torch.full((4, 8), float(rank + 1), device=DEVICE)
    model(x).sum().backward()
    grad = model.module.weight.grad
    assert grad.device == DEVICE, grad.device
    expected = torch.full_like(grad, 6.0)  # ranks' grads 4 and 8 per entry, averaged
    assert torch.allclose(grad, expected), grad
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(step, nprocs=2)
    print(f"2-rank gloo DDP step on {DEVICE}: gradients averaged across ranks")
"""


def preflight(py: str) -> str | None:
    """Why there is nothing to check here (one line), or None when a GPU is there."""
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi: this check needs an NVIDIA GPU"
    got = subprocess.run([py, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True)
    count = got.stdout.strip().splitlines()[-1] if got.stdout.strip() else ""
    if got.returncode != 0 or not count.isdigit():
        return f"{py} cannot import torch: {(got.stderr.strip().splitlines() or ['?'])[-1]}"
    if int(count) < 1:
        return f"{NO_GPU} (torch built for CPU, or CUDA_VISIBLE_DEVICES hides it)"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "results" / f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}")
    p.add_argument("--only", nargs="*", default=None, help="run only these steps")
    args = p.parse_args(argv)
    py = os.environ.get("PY", sys.executable)
    why = preflight(py)
    if why:
        print(why)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    summary = open(args.out / "summary.txt", "a")

    def say(text: str) -> None:
        print(text, flush=True)
        summary.write(text + "\n")
        summary.flush()

    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    say(f"gpu: {gpu[0] if gpu else '?'}; step limits {sum(STEPS.values())} s")
    check = Check(args.out, py)
    failed = 0
    for name, limit in STEPS.items():
        if args.only is not None and name not in args.only:
            continue
        start = time.monotonic()
        try:
            outcome = Outcome(name, True, 0, check.step(name, args.out / f"{name}.log", limit))
        except Skip as why_not:
            outcome = Outcome(name, None, 0, str(why_not))
        except (StepFailed, subprocess.SubprocessError, OSError) as err:
            outcome = Outcome(name, False, 0, f"{err}; see {args.out / (name + '.log')}")
        outcome.seconds = time.monotonic() - start
        failed += outcome.ok is False
        say(outcome.line())
    say("figures (same GPU, same run):")
    for line in check.figures:
        say(f"  {line}")
    say(f"failed steps: {failed} (logs in {args.out})")
    return failed


if __name__ == "__main__":
    sys.exit(main())
