"""The GPU path, asserted, on one machine with an NVIDIA GPU, each step within its time limit.

    PY=python3 PYTHONPATH=KIT_SITE:. python3 benchmarks/gpu_check.py [--out DIR] [--work DIR]
        [--only STEP ...] [--calibrate] [--rehearse]

(benchmarks/gpu_check.sh sets PY and PYTHONPATH from a carried ``.kit/``.) Each step of
``STEPS`` runs in its own process group under its time limit (the table's ``limit_s``, the one
place limits live), prints one ``ok``/``FAIL``/``skip`` line (a FAIL with its log's last
lines), and the next step runs after a failure; the figures come last. ``--out`` gets what a
device call brings back: ``summary.txt`` (the lines printed), ``gpu_check.json`` (the table,
the probe's facts, the modules each step imports, the figures) and ``logs.tar.gz`` (every
step's log, the trials' result rows and errors, Ray's session logs); the runs themselves
(checkpoints) stay in ``--work``. Exit code: the number of failed steps; 2 when there is no
GPU to check (one line, before any step).

Steps (``STEPS``):
- ``probe`` (benchmarks/gpu_probe.py, about 10 s): MemTotal and what Ray detects (CPUs,
  GPUs, memory, object store), ``/dev/shm``, the GPU's name and memory, whether a live CUDA
  process (the probe's own) appears in ``nvidia-smi --query-compute-apps``, bf16 support, and
  the installed versions of the machine's packages the kit relies on. Ray not starting fails
  this step. A step that needs one of these facts (``needs``) is skipped with the reason when
  it is false, and on a GPU (not ``--rehearse``) that skip is a failure, as is a step skipped
  for modules it lacks, unless the step is ``optional`` (boltz_distill without RDKit): a
  check cannot pass with its steps not run;
- ``imports``: the kit's resolution check. Every module each step imports (``step_imports``:
  the workload folder's imports, found by reading its files, less what its smoke run does
  not use) is imported with this Python; a missing one fails this step, naming the step and
  the module, and that step is skipped. ``pip check`` on the kit's distributions goes in the
  note (a kit resolved against other versions than the machine's shows there);
- ``cuda_trial_<workload>``: the workload's smoke trial (one, pinned) with
  ``resources.gpus_per_worker=1``; its rows must carry ``gpu/mem_peak_mib`` (reported by
  ``raylab.session.report`` only from a process that initialised CUDA) above
  ``PEAK_FLOOR_MIB``, so a trial that trained on the CPU fails. seagram reads its smoke split
  from the kit (``.kit/seagram-cache``: no RDKit needed); boltz_distill needs RDKit, which the
  kit leaves out, and is skipped without it. dqn_softlinf's rows must say that its update
  replayed a CUDA graph (``perf/cuda_graph`` 1; ``--rehearse``: the simulated capture, which
  refuses a device read), and every trial runs with ``RAYLAB_CUDA_GRAPH_STRICT=1``, so a
  failed capture fails the trial instead of running eagerly. The GPU's utilisation, sampled with
  ``nvidia-smi --query-gpu=utilization.gpu`` every ``SAMPLE_S``, is averaged over each
  trial's own time window (a figure row per trial);
- ``two_trials_one_gpu``: two 0.5-GPU trials sampled by ``nvidia-smi --query-compute-apps`` at
  the same time on one GPU UUID, both finishing (where the probe saw no process listed there,
  the overlap of the two trials' own clocks stands in, and the note says so);
- ``amp_trial``: dqn_softlinf with ``amp_bf16=true`` and backdoor with ``amp_bf16=true
  channels_last=true`` on the GPU: finite losses, and each trial's training forward ran in
  bfloat16 (``perf/autocast_bf16``, the autocast dtype in the note);
- ``resume_gpu``: a fair_adv GPU sweep, then a dqn_softlinf_small one with its update a CUDA
  graph (a capturable fused Adam and the batches' generator restored from the checkpoint),
  each interrupted with SIGINT and continued with the printed ``--resume`` command, against an
  uninterrupted run started beside it; both under deterministic algorithms
  (``RAYLAB_DETERMINISTIC=1``: ``raylab.accel.deterministic``, with
  ``CUBLAS_WORKSPACE_CONFIG``), so their final metrics must agree bit for bit;
- ``nccl_world1``: an all-reduce in a one-rank NCCL group; ``ddp_gloo_1gpu``: a two-rank gloo
  DDP step on CUDA tensors of one GPU; ``refuse_half_gpu_workers``: the CLI exits 2 for
  ``workers=2`` with ``gpus_per_worker=0.5``;
- ``fig_*``: benchmarks/dqn_throughput.py (env steps/s after warm-up, float32 and bf16),
  image_throughput.py (images/s in float32, bf16, channels_last and both) and
  adv_throughput.py (clean, PGD-10 AT, TRADES and tri-regime steps at fp32/NCHW and at
  fair_adv's CUDA defaults, bf16 autocast with channels_last, with seconds per CIFAR-10 epoch)
  on this GPU, each side by side in one process (their lines go to the figures).

``--calibrate``: every step with generous limits (``CALIBRATE_FACTOR`` x its limit, at least
``CALIBRATE_MIN_S``) within ``CALIBRATE_BUDGET_S`` in all, each step's wall time printed, and
limits suggested for the table. ``--rehearse``: the device rehearsal on a machine without
CUDA (benchmarks/device_rehearsal.py): no GPU preflight; Ray is told of one GPU
(``RAY_OVERRIDE_RESOURCES``) and the trials train on the CPU (``RAYLAB_SIMULATED_GPUS=1``), so
every step runs its own command up to where CUDA is required; each step's ``twin`` says what
its assertion becomes there.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEAK_FLOOR_MIB = 1.0
"""A trial's ``gpu/mem_peak_mib`` must exceed this: a model and a batch on the GPU."""
SAMPLE_S = 0.5
"""Seconds between two ``nvidia-smi --query-gpu=utilization.gpu`` samples."""


@dataclass(frozen=True)
class Figure:
    """A benchmark script run on the GPU; its lines holding one of ``grep`` are figures."""

    argv: tuple[str, ...]
    grep: tuple[str, ...]
    twin_argv: tuple[str, ...] = ()
    """The same script at CPU size, for ``--rehearse`` (empty: ``argv``)."""


@dataclass(frozen=True)
class Step:
    name: str
    limit_s: int
    """Time limit in a normal run, in seconds (the one place limits live)."""
    action: str
    """The ``Check`` method that runs it."""
    args: tuple = ()
    needs: tuple[str, ...] = ()
    """Probe facts this step needs (``probe``); when one is false it is skipped with the reason."""
    twin: str = ""
    """What ``--rehearse`` (no CUDA) asserts instead of the GPU assertion; empty: the same."""
    optional: str = ""
    """Non-empty: the reason this step may lack modules (it is then skipped, not failed)."""
    figure: Figure | None = None


TRIAL_TWIN = "rows reported, losses finite (trained on the CPU: Ray's GPU is simulated); no peak GPU memory"
STEPS: tuple[Step, ...] = (
    Step("probe", 20, "probe", twin="no CUDA: the GPU facts are empty"),
    Step("imports", 30, "imports_check"),
    Step("cuda_trial_dqn_softlinf", 40, "cuda_trial", ("dqn_softlinf",), needs=("ray",), twin=TRIAL_TWIN),
    Step("cuda_trial_backdoor", 35, "cuda_trial", ("backdoor",), needs=("ray",), twin=TRIAL_TWIN),
    Step("cuda_trial_fair_adv", 45, "cuda_trial", ("fair_adv",), needs=("ray",), twin=TRIAL_TWIN),
    Step("cuda_trial_seagram", 40, "cuda_trial", ("seagram",), needs=("ray",), twin=TRIAL_TWIN),
    Step(
        "cuda_trial_boltz_distill",
        35,
        "cuda_trial",
        ("boltz_distill",),
        needs=("ray",),
        twin=TRIAL_TWIN,
        optional="boltz_distill needs RDKit (and datamol), which the kit leaves out (benchmarks/device_kit.py LEFT_OUT)",
    ),
    Step(
        "two_trials_one_gpu",
        40,
        "two_trials_one_gpu",
        needs=("ray",),
        twin="the two trials' own clocks overlap (no nvidia-smi)",
    ),
    Step("amp_trial", 50, "amp_trial", needs=("ray", "bf16"), twin="finite losses, bf16 autocast on the CPU"),
    Step("resume_gpu", 80, "resume_gpu", needs=("ray",), twin="the same comparison, on the CPU"),
    Step("nccl_world1", 15, "script", ("NCCL_WORLD1",), twin="the same script with gloo on the CPU"),
    Step("ddp_gloo_1gpu", 20, "script", ("DDP_GLOO_1GPU",), twin="the same script on CPU tensors"),
    Step("refuse_half_gpu_workers", 15, "refuse_half_gpu_workers", twin="the same refusal, Ray told of one GPU"),
    Step(
        "fig_dqn",
        40,
        "figure",
        figure=Figure(
            (
                "benchmarks/dqn_throughput.py",
                "--steps",
                "4000",
                "--warmup-steps",
                "2000",
                "--learning-starts",
                "1000",
                "--num-envs",
                "8",
                "--skip-rllib",
                "--torch-threads",
                "0",
            ),
            ("steps/s", "x the", "ratio", "raylab /", "GPU target"),
            (
                "benchmarks/dqn_throughput.py",
                "--steps",
                "600",
                "--warmup-steps",
                "300",
                "--learning-starts",
                "100",
                "--num-envs",
                "4",
                "--skip-rllib",
            ),
        ),
    ),
    Step(
        "fig_resnet18",
        20,
        "figure",
        figure=Figure(
            ("benchmarks/image_throughput.py", "--steps", "60", "--variants", "all"),
            ("images/s", "ratio"),
            ("benchmarks/image_throughput.py", "--steps", "2", "--variants", "bf16+channels_last"),
        ),
    ),
    Step(
        "fig_pgd",
        15,
        "figure",
        figure=Figure(
            ("benchmarks/adv_throughput.py", "--device", "cuda", "--rounds", "5"),
            ("costs", "standard ", "pgd_at ", "trades ", "tri_regime "),
            (
                "benchmarks/adv_throughput.py",
                "--device",
                "cpu",
                "--rounds",
                "1",
                "--model",
                "small_cnn",
                "--batch-size",
                "16",
            ),
        ),
    ),
    # benchmarks/gpu_throughput.py goes here, one row (its seconds taken from another
    # row: the limits' sum stays within BUDGET_S), e.g.:
    # Step("fig_gpu_throughput", 40, "figure", figure=Figure(("benchmarks/gpu_throughput.py",), ("steps/s",),
    #      ("benchmarks/gpu_throughput.py", "--cpu-size-args"))),
)
"""The steps in the order they run; their limits' sum is the check's bound, at most ``BUDGET_S``."""
BUDGET_S = 540
"""A device call runs 600 s at most; the kit's unpack (about 10 s) and Python's start come first."""
CALIBRATE_FACTOR, CALIBRATE_MIN_S, CALIBRATE_BUDGET_S = 3.0, 60, 540
"""``--calibrate``: each limit x3 (at least 60 s), every step within 540 s in all (a device call
runs 600 s at most, and the kit's unpack comes first)."""
REHEARSE_FACTOR, REHEARSE_MIN_S = 8.0, 480
"""``--rehearse``: the CPU twins on a small shared machine are far slower than the GPU (a ResNet-18
step in bf16 takes seconds there): limits x8, at least 480 s each, no budget in all."""
SINGLE_TRIAL = {
    "dqn_softlinf": ("config.loss=soft_linf", "config.beta=10.0"),
    "fair_adv": ("config.method=frl",),
    "seagram": ("config.al_strategy=uncertainty",),
    "boltz_distill": ("config.teachers=[conformer]",),
}
"""Overrides that pin each smoke sweep to one trial (pinning the fields its search sweeps)."""
DQN_GRAPH = ("config.replay_on_device=true", "config.cuda_graph=true")
BACKDOOR_FLOOR_OFF = ("config.clean_acc_floor_x_chance=0",)
"""backdoor's smoke trains at chance on synthetic images, where its sweep metric (ASR) is withheld
(NaN) below the clean-accuracy floor, and ``raylab.tune`` exits 1 when no trial reports a finite
metric: every backdoor trial of the check runs with the floor off."""
RESUME_PAIRS = (
    ("fair_adv", ("config.method=tri_regime",), "fair_adv"),
    ("dqn_softlinf_small", ("config.loss=soft_linf", *DQN_GRAPH), "dqn"),
)
"""``resume_gpu``'s pairs: (experiment, overrides, run name prefix)."""
"""dqn_softlinf's GPU defaults, named: the replay on the device and the update a CUDA graph (on a
simulated GPU machine, ``--rehearse``, the capture is simulated: trainers/dqn_softlinf/cuda_graph.py)."""
SMOKE_WITHOUT = {
    "seagram": {"rdkit": "its smoke split is read from the kit (.kit/seagram-cache)"},
    "dqn_softlinf": {"ray.rllib": "backend: rllib only (the smoke trial runs raylab's loop)"},
}
"""Modules a workload's folder imports that its smoke trial here does not need, and why."""
TRIAL_MODULES = ("raylab.tune", "ray.tune", "ray.train.torch", "ray.dashboard.optional_deps")
"""What every trial imports: GPU trials run under Ray Train, whose state API Ray's dashboard
process serves, which starts only when ``ray.dashboard.optional_deps`` imports."""
NO_GPU = "torch sees no CUDA GPU"


@dataclass
class Outcome:
    name: str
    ok: bool | None
    """True ok, False FAIL, None skip."""
    seconds: float
    note: str = ""
    limit_s: float = 0.0
    twin: str = ""
    tail: list[str] = field(default_factory=list)
    util: list[dict] = field(default_factory=list)

    def line(self) -> str:
        word = {True: "ok", False: "FAIL", None: "skip"}[self.ok]
        return (
            f"{word:<5} {self.name} ({self.seconds:.0f} s of {self.limit_s:.0f}{'; ' + self.note if self.note else ''})"
        )


class StepFailed(Exception):
    """A step's assertion failed; its message is the step's one-line note."""


class Skip(Exception):
    """A step that cannot run here (what is missing is its note)."""


def run(argv: list[str], log: Path, timeout: float, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``argv`` in its own process group, output appended to ``log``; the group is killed at ``timeout``."""
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            **kw,
        )
        try:
            proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise StepFailed(f"timed out after {timeout:.0f} s") from None
    return subprocess.CompletedProcess(argv, proc.returncode)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# --- what each step imports (the kit's resolution list) -------------------------------------
def module_imports(path: Path) -> set[str]:
    """Modules a file imports (dotted, as written), not the standard library's nor relative ones."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"}


def third_party(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] not in ("raylab", "trainers", "benchmarks")}


def step_imports(step: Step) -> tuple[str, ...]:
    """The modules ``step`` imports: a trial's workload loop and every outside module its
    folder imports (less ``SMOKE_WITHOUT``), a figure's script's imports, torch and Ray else."""
    if step.action == "cuda_trial":
        (workload,) = step.args
        folder = ROOT / "trainers" / workload
        outside = set().union(*(third_party(module_imports(f)) for f in folder.glob("*.py")))
        unused = SMOKE_WITHOUT.get(workload, {})
        outside = {m for m in outside if not any(m == u or m.startswith(u + ".") for u in unused)}
        return (f"trainers.{workload}.loop", *TRIAL_MODULES, *sorted(outside))
    if step.figure is not None:
        script = ROOT / step.figure.argv[0]
        mods = module_imports(script)
        return tuple(sorted(m for m in mods if not m.startswith("benchmarks")))
    if step.action in ("two_trials_one_gpu", "amp_trial", "resume_gpu", "refuse_half_gpu_workers"):
        return TRIAL_MODULES
    return ("torch", "torch.distributed") if step.action == "script" else ("torch", "ray")


IMPORT_CHECK = """
import importlib, json, sys, traceback
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as err:  # noqa: BLE001 - any failure to import is the finding
        failed[name] = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:300]
print(json.dumps(failed))
"""


# --- the GPU's utilisation, sampled -----------------------------------------------------------
class GpuSampler:
    """``nvidia-smi --query-gpu=utilization.gpu,memory.used`` every ``SAMPLE_S`` in a thread:
    ``(time.time(), percent busy, MiB used)`` samples, averaged over any time window."""

    def __init__(self):
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                got = subprocess.run(
                    ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                )
                util, mem = (float(x) for x in got.stdout.strip().splitlines()[0].split(",")[:2])
                self.samples.append((time.time(), util, mem))
            except (subprocess.SubprocessError, OSError, ValueError, IndexError):
                pass
            self._stop.wait(SAMPLE_S)

    def window(self, start: float, end: float) -> dict | None:
        inside = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not inside:
            return None
        return {
            "samples": len(inside),
            "util_mean_pct": round(sum(u for u, _ in inside) / len(inside), 1),
            "util_max_pct": max(u for u, _ in inside),
            "mem_max_mib": max(m for _, m in inside),
            "seconds": round(end - start, 1),
        }

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class Check:
    """The steps, run in order against ``PY`` (this interpreter) with results under ``work``."""

    def __init__(
        self, out: Path, work: Path, py: str = sys.executable, rehearse: bool = False, kit: Path | None = None
    ):
        self.out, self.work, self.py, self.rehearse = out, work, py, rehearse
        self.kit = kit or Path(os.environ.get("KIT", ROOT / ".kit"))
        self.storage = work / "runs"
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.figures: list[str] = []
        self.facts: dict = {}
        self.imports: dict[str, tuple[str, ...]] = {}
        self.missing: dict[str, dict[str, str]] = {}
        self.sampler: GpuSampler | None = None
        self.util: list[dict] = []
        simulated = {"RAYLAB_SIMULATED_GPUS": "1", "RAY_OVERRIDE_RESOURCES": json.dumps({"GPU": 1})}
        self.env = {**(simulated if rehearse else {}), "RAYLAB_CUDA_GRAPH_STRICT": "1"}  # a failed capture fails

    # --- helpers -------------------------------------------------------------------------
    def tune_argv(self, name: str, *overrides: str, run_name: str) -> list[str]:
        return [
            self.py,
            "-m",
            "raylab.tune",
            name,
            "--smoke",
            *overrides,
            "--storage",
            str(self.storage),
            "--name",
            run_name,
            "--quiet",
        ]

    def tune(
        self,
        name: str,
        log: Path,
        timeout: float,
        *overrides: str,
        run_name: str | None = None,
        env: dict | None = None,
    ):
        return run(
            self.tune_argv(name, *overrides, run_name=run_name or name), log, timeout, env={**self.env, **(env or {})}
        )

    def trials(self, run_name: str):
        """The trial folders of run ``run_name`` (``raylab.run_folder``), by name."""
        from raylab.run_folder import RunFolder

        return RunFolder(self.storage / run_name).trials()

    def rows(self, run_name: str) -> list[list[dict]]:
        """Each trial's reported rows of run ``run_name``."""
        return [trial.rows() for trial in self.trials(run_name)]

    def trial_errors(self, run_name: str) -> list[str]:
        """The last lines of each failed trial's error file (Ray writes one for a failed trial)."""
        lines = []
        for trial in self.trials(run_name):
            error = trial.error()
            if error is not None:
                lines += [f"{trial.error_location}:"] + error.strip().splitlines()[-8:]
        return lines

    def exit_failed(self, what: str, done: subprocess.CompletedProcess, run_name: str) -> StepFailed:
        errors = self.trial_errors(run_name)
        hint = " (refused before Ray started: a preflight or check)" if done.returncode == 2 else ""
        return StepFailed(
            f"{what}exit {done.returncode}{hint}" + (f"; {errors[1].strip()[:160]}" if len(errors) > 1 else "")
        )

    def peak(self, run_name: str) -> float:
        trials = self.rows(run_name)
        if not trials or not all(trials):
            raise StepFailed("no trial reported")
        if self.rehearse:
            return 0.0
        peaks = [max((r.get("gpu/mem_peak_mib", 0.0) for r in rows), default=0.0) for rows in trials]
        if min(peaks) <= PEAK_FLOOR_MIB:
            raise StepFailed(f"peak GPU memory {min(peaks):.2f} MiB <= {PEAK_FLOOR_MIB} MiB: trained on the CPU?")
        return max(peaks)

    def graph_replayed(self, run_name: str) -> None:
        """Every trial of ``run_name`` says in its last row that its update replayed a CUDA
        graph (``perf/cuda_graph``; simulated in ``--rehearse``)."""
        flags = [rows[-1].get("perf/cuda_graph") for rows in self.rows(run_name) if rows]
        if not flags or any(flag != 1 for flag in flags):
            raise StepFailed(f"{run_name}: the update did not replay a CUDA graph (perf/cuda_graph {flags})")

    def finite_losses(self, run_name: str) -> list[float]:
        losses = [
            v
            for rows in self.rows(run_name)
            for r in rows
            for k, v in r.items()
            if "loss" in k and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        if not losses or not all(math.isfinite(v) for v in losses):
            raise StepFailed(f"{run_name}: losses not all finite: {losses[:5]}")
        return losses

    def trial_windows(self, run_name: str) -> list[tuple[str, float, float]]:
        """Each trial's (name, start, end) in epoch seconds, from its own rows."""
        windows = []
        for trial in self.trials(run_name):
            rows = trial.rows()
            if rows and "timestamp" in rows[-1]:
                end = float(rows[-1]["timestamp"])
                windows.append((trial.name, end - float(rows[-1].get("time_total_s", 0.0)), end))
        return windows

    def utilisation(self, run_name: str, label: str) -> str:
        """GPU utilisation over each trial's window, as figure rows; '' without samples."""
        if self.sampler is None:
            return ""
        notes = []
        for i, (trial, start, end) in enumerate(self.trial_windows(run_name)):
            stats = self.sampler.window(start - 1, end + 1)
            if stats is None:
                continue
            self.util.append({"step": label, "trial": trial, **stats})
            self.figures.append(
                f"{label} trial {i}: GPU busy {stats['util_mean_pct']:.0f}% mean, "
                f"{stats['util_max_pct']:.0f}% max, {stats['mem_max_mib']:.0f} MiB max used, "
                f"over {stats['seconds']:.0f} s ({stats['samples']} samples of nvidia-smi "
                f"utilization.gpu)"
            )
            notes.append(f"GPU busy {stats['util_mean_pct']:.0f}%")
        return ", ".join(notes)

    # --- steps ---------------------------------------------------------------------------
    def probe(self, step: Step, log: Path, limit: float) -> str:
        env = {**self.env, "GPU_CHECK_KIT_JSON": str(self.kit / "kit.json")}
        done = run([self.py, str(ROOT / "benchmarks" / "gpu_probe.py")], log, limit, env=env)
        found = [line for line in log.read_text().splitlines() if line.startswith("PROBE ")]
        if done.returncode != 0 or not found:
            raise StepFailed(f"exit {done.returncode}")
        self.facts = json.loads(found[-1].removeprefix("PROBE "))
        (self.logs / "probe.json").write_text(json.dumps(self.facts, indent=1) + "\n")
        f = self.facts
        if not f.get("ray"):  # every trial step needs it: the check must not pass without them
            raise StepFailed(f"Ray did not start: {f.get('ray_error')}")
        ray_res = f.get("ray_resources", {})
        parts = [
            f"MemTotal {f['mem_total_gib']} GiB",
            f"Ray: {ray_res.get('CPU', '?')} CPU, {ray_res.get('GPU', 0)} GPU, memory {ray_res.get('memory', '?')} GiB, "
            f"object store {ray_res.get('object_store_memory', '?')} GiB (started in {f['ray_start_s']} s)"
            if f.get("ray")
            else f"Ray did not start: {f.get('ray_error')}",
            f"/dev/shm {f.get('shm_gib')} GiB ({f.get('shm_free_gib', '?')} free)",
            f"GPU {f['gpu']} {f['gpu_mem_gib']} GiB" if f.get("cuda") else "no CUDA",
            f"compute-apps lists {len(f.get('compute_apps_rows', []))} process(es)"
            + (" incl. the probe's own pid" if f.get("compute_apps_own_pid") else "")
            if f.get("nvidia_smi")
            else "no nvidia-smi",
            f"kernel {f['kernel']}",
        ]
        if f.get("machine_packages_differ"):
            parts.append(f"{len(f['machine_packages_differ'])} machine packages differ from the kit's stand-ins")
        return "; ".join(parts)

    def imports_check(self, step: Step, log: Path, limit: float) -> str:
        start = time.monotonic()
        self.imports = {s.name: step_imports(s) for s in STEPS}
        modules = sorted(set().union(*self.imports.values()))
        with open(log, "a") as f:
            f.write("modules each step imports (the kit's resolution list):\n")
            f.write("".join(f"  {name}: {' '.join(mods)}\n" for name, mods in self.imports.items()))
        script = self.logs / "imports.py"
        script.write_text(IMPORT_CHECK)
        done = run([self.py, str(script), *modules], log, limit, env=self.env)
        last = log.read_text().strip().splitlines()[-1] if log.read_text().strip() else ""
        if done.returncode != 0 or not last.startswith("{"):
            raise StepFailed(f"the import check itself failed: exit {done.returncode}")
        failed = json.loads(last)
        for name, mods in self.imports.items():
            missing = {m: failed[m] for m in mods if m in failed}
            if missing:
                self.missing[name] = missing
        pip_note = self.pip_check(log, timeout=max(limit - (time.monotonic() - start), 5))
        hard = {n: m for n, m in self.missing.items() if not next(s for s in STEPS if s.name == n).optional}
        if hard:
            raise StepFailed(
                "; ".join(f"{n} needs {', '.join(f'{m} ({e})' for m, e in mods.items())}" for n, mods in hard.items())[
                    :600
                ]
            )
        optional = f"; {', '.join(self.missing)} skipped (optional)" if self.missing else ""
        return f"{len(modules)} modules import{optional}; {pip_note}"

    def pip_check(self, log: Path, timeout: float = 60) -> str:
        """``pip check`` lines about the kit's own distributions (the machine's others are not
        ours); those naming a requirement the kit leaves out on purpose (kit.json's
        ``not_carried``) are expected and set apart."""
        kit_names = {canonical(w.name.split("-")[0]) for w in self.kit.glob("*.whl")}
        kit_json = self.kit / "kit.json"
        expected = set(json.loads(kit_json.read_text()).get("not_carried", {})) if kit_json.is_file() else set()
        try:
            got = subprocess.run(
                [self.py, "-m", "pip", "check"],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env={**os.environ, **self.env},
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return f"pip check did not answer within {timeout:.0f} s"
        ours = [line for line in got.stdout.splitlines() if canonical(line.split(" ")[0]) in kit_names]
        known = [line for line in ours if any(canonical(w.strip(",.")) in expected for w in line.split()[2:])]
        problems = [line for line in ours if line not in known]
        with open(log, "a") as f:
            f.write(
                "pip check, lines naming a kit distribution first (expected: kit.json not_carried):\n"
                + "".join(f"  {'expected: ' if line in known else ''}{line}\n" for line in ours)
            )
        return (
            f"pip check: {len(problems)} problem(s) with the kit's distributions"
            + (f": {problems[0][:150]}" if problems else "")
            + (f" ({len(known)} expected)" if known else "")
        )

    def cuda_trial(self, step: Step, log: Path, limit: float, workload: str) -> str:
        overrides = ["resources.gpus_per_worker=1", *SINGLE_TRIAL.get(workload, ())]
        if workload == "seagram":
            cache = self.kit / "seagram-cache"
            if any(cache.glob("*.npz")):
                overrides.append(f"config.cache_dir={cache.resolve()}")
            elif not importable(self.py, "rdkit", self.env):
                raise Skip(f"no cached smoke split in {cache} (benchmarks/device_kit.sh writes it) and no RDKit")
        if workload == "dqn_softlinf":
            overrides += DQN_GRAPH
        if workload == "backdoor":
            overrides += BACKDOOR_FLOOR_OFF
        run_name = f"cuda_{workload}"
        done = self.tune(workload, log, limit, *overrides, run_name=run_name)
        if done.returncode != 0:
            raise self.exit_failed("", done, run_name)
        peak = self.peak(run_name)
        if workload == "dqn_softlinf":
            self.graph_replayed(run_name)
        util = self.utilisation(run_name, workload)
        if self.rehearse:
            losses = self.finite_losses(run_name)
            return f"{sum(len(r) for r in self.rows(run_name))} rows, {len(losses)} finite losses (CPU twin)"
        self.figures.append(f"{workload}: peak GPU memory {peak:.0f} MiB (torch allocator)")
        return f"peak {peak:.0f} MiB" + (f", {util}" if util else "")

    def two_trials_one_gpu(self, step: Step, log: Path, limit: float) -> str:
        samples: list[set[tuple[str, str]]] = []
        stop = threading.Event()
        listed = bool(self.facts.get("compute_apps")) and not self.rehearse

        def sample():
            while not stop.is_set():
                got = subprocess.run(
                    ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                )
                samples.append(
                    {tuple(x.strip() for x in line.split(",")) for line in got.stdout.splitlines() if "," in line}
                )
                stop.wait(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        if listed:
            sampler.start()
        try:
            done = self.tune(
                "backdoor",
                log,
                limit,
                "resources.gpus_per_worker=0.5",
                "max_concurrent_trials=2",
                "num_samples=2",
                *BACKDOOR_FLOOR_OFF,
                run_name="two_trials",
            )
        finally:
            stop.set()
            if listed:
                sampler.join(timeout=5)
        if done.returncode != 0:
            raise self.exit_failed("", done, "two_trials")
        trials = self.rows("two_trials")
        if len(trials) < 2:
            raise StepFailed(f"{len(trials)} trials finished, not 2")
        self.peak("two_trials")
        windows = self.trial_windows("two_trials")
        overlap = (min(w[2] for w in windows) - max(w[1] for w in windows)) if len(windows) >= 2 else -1.0
        util = self.utilisation("two_trials", "two_trials_one_gpu")
        if listed:
            shared = max(
                (max(sum(1 for _, u in s if u == uuid) for uuid in {u for _, u in s}) for s in samples if s), default=0
            )
            if shared < 2:
                raise StepFailed(
                    f"never two processes on one GPU at once (most seen: {shared}); "
                    f"the trials' clocks overlap {overlap:.0f} s"
                )
            return f"{shared} processes seen on one GPU at once" + (f", {util}" if util else "")
        if overlap <= 0:
            raise StepFailed(f"the two trials did not run at the same time (overlap {overlap:.0f} s)")
        why = "CPU twin" if self.rehearse else "compute-apps lists no process here (probe)"
        return f"the two trials ran {overlap:.0f} s side by side by their own clocks ({why})"

    def amp_trial(self, step: Step, log: Path, limit: float) -> str:
        start, notes = time.monotonic(), []
        for name, overrides in (
            ("dqn_softlinf", ["config.amp_bf16=true", *SINGLE_TRIAL["dqn_softlinf"], *DQN_GRAPH]),
            ("backdoor", ["config.amp_bf16=true", "config.channels_last=true", *BACKDOOR_FLOOR_OFF]),
        ):
            done = self.tune(
                name,
                log,
                limit - (time.monotonic() - start),
                "resources.gpus_per_worker=1",
                *overrides,
                run_name=f"amp_{name}",
            )
            if done.returncode != 0:
                raise self.exit_failed(f"{name}: ", done, f"amp_{name}")
            self.peak(f"amp_{name}")
            if name == "dqn_softlinf":
                self.graph_replayed(f"amp_{name}")
            util = self.utilisation(f"amp_{name}", f"amp {name}")
            dtype = self.autocast_dtype(f"amp_{name}")
            notes.append(
                f"{name} {len(self.finite_losses(f'amp_{name}'))} finite losses, autocast {dtype}"
                + (f" ({util})" if util else "")
            )
        return "bf16: " + ", ".join(notes)

    def autocast_dtype(self, run_name: str) -> str:
        """``bfloat16`` when every trial's last row says its training forward ran in it
        (``perf/autocast_bf16``); anything else fails the step."""
        flags = [rows[-1].get("perf/autocast_bf16") for rows in self.rows(run_name) if rows]
        if not flags or any(flag != 1 for flag in flags):
            raise StepFailed(f"{run_name}: the training forward did not run in bfloat16 (perf/autocast_bf16 {flags})")
        return "bfloat16"

    def resume_gpu(self, step: Step, log: Path, limit: float) -> str:
        """Interrupted and resumed vs uninterrupted (started beside it), deterministic kernels:
        fair_adv, then dqn_softlinf_small with its update a CUDA graph."""
        start, notes = time.monotonic(), []
        for i, (name, overrides, run_name) in enumerate(RESUME_PAIRS):
            share = (limit - (time.monotonic() - start)) / (len(RESUME_PAIRS) - i)
            part = log if i == 0 else log.with_suffix(f".{run_name}.log")
            try:
                notes.append(f"{name}: {self.resume_pair(name, overrides, run_name, part, share)}")
            except StepFailed as err:
                raise StepFailed(f"{name}: {err}") from None
        return "; ".join(notes)

    def resume_pair(self, name: str, extra: tuple[str, ...], run_name: str, log: Path, limit: float) -> str:
        """One workload's pair (``resume_gpu``): final metrics of ``<run_name>_resume`` and
        ``<run_name>_whole`` bit-identical."""
        overrides = ["resources.gpus_per_worker=1", "stop.training_iteration=3", "checkpoint.every=1", *extra]
        env = {**os.environ, **self.env, "RAYLAB_DETERMINISTIC": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
        start = time.monotonic()
        whole_log = open(log.with_suffix(".whole.log"), "w")
        whole = subprocess.Popen(
            self.tune_argv(name, *overrides, run_name=f"{run_name}_whole"),
            cwd=ROOT,
            env=env,
            stdout=whole_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            err_log = log.with_suffix(".interrupted.log")
            with open(err_log, "w") as err:
                proc = subprocess.Popen(
                    self.tune_argv(name, *overrides, run_name=f"{run_name}_resume"),
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    text=True,
                    env=env,
                    start_new_session=True,
                )
                while not any(rows for rows in self.rows(f"{run_name}_resume")):
                    if proc.poll() is not None or time.monotonic() - start > limit / 2:
                        kill_group(proc)
                        raise StepFailed(f"no report before the interrupt (exit {proc.returncode})")
                    time.sleep(0.2)
                os.kill(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=max(limit / 4, 10))
                except subprocess.TimeoutExpired:
                    kill_group(proc)
                    raise StepFailed("the interrupted sweep did not stop after SIGINT") from None
            lines = err_log.read_text().splitlines()
            hint = [i for i, line in enumerate(lines) if line.endswith("continue it with:")]
            if proc.returncode != 130 or not hint:
                raise StepFailed(f"interrupt: exit {proc.returncode}, resume hint {'found' if hint else 'missing'}")
            command = shlex.split(lines[hint[0] + 1].strip())
            resumed = run([self.py, *command[1:]], log, limit - (time.monotonic() - start), env=env)
            if resumed.returncode != 0:
                raise self.exit_failed("resume: ", resumed, f"{run_name}_resume")
            try:
                whole.wait(timeout=max(limit - (time.monotonic() - start), 1))
            except subprocess.TimeoutExpired:
                raise StepFailed("the uninterrupted run did not finish in time") from None
            if whole.returncode != 0:
                raise self.exit_failed("uninterrupted: ", whole, f"{run_name}_whole")
        finally:
            if whole.poll() is None:
                kill_group(whole)
            whole_log.close()
        a, b = final_metrics(self.rows(f"{run_name}_resume")), final_metrics(self.rows(f"{run_name}_whole"))
        if not a or a != b:
            differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            warned = sorted(
                {
                    line.split("does not have a deterministic implementation")[0].strip()[-80:]
                    for p in self.logs.glob("resume_gpu*")
                    for line in p.read_text().splitlines()
                    if "does not have a deterministic implementation" in line
                }
            )
            raise StepFailed(
                f"resumed != uninterrupted in {len(differ)} metrics: "
                + ", ".join(f"{k.split(':')[-1]} {a.get(k)} vs {b.get(k)}" for k in differ[:3])
                + (f"; ops without a deterministic kernel: {warned[:3]}" if warned else "")
            )
        if name.startswith("dqn_softlinf"):
            for part in (f"{run_name}_resume", f"{run_name}_whole"):
                self.graph_replayed(part)
        return f"{len(a)} final metrics bit-identical (deterministic algorithms)"

    def script(self, step: Step, log: Path, limit: float, code_name: str) -> str:
        script = self.logs / f"{step.name}.py"  # a file: torch.multiprocessing spawns from it
        script.write_text(globals()[code_name])
        env = {**self.env, **({"GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_BACKEND": "gloo"} if self.rehearse else {})}
        done = run([self.py, str(script)], log, limit, env=env)
        if done.returncode != 0:
            raise StepFailed(f"exit {done.returncode}")
        return log.read_text().strip().splitlines()[-1]

    def refuse_half_gpu_workers(self, step: Step, log: Path, limit: float) -> str:
        done = self.tune(
            "backdoor", log, limit, "resources.workers=2", "resources.gpus_per_worker=0.5", run_name="refused"
        )
        if done.returncode != 2:
            raise StepFailed(f"exit {done.returncode}, not 2")
        return "exit 2: " + log.read_text().strip().splitlines()[-1][:120]

    def figure(self, step: Step, log: Path, limit: float) -> str:
        argv = step.figure.twin_argv if self.rehearse and step.figure.twin_argv else step.figure.argv
        done = run([self.py, *argv], log, limit, env=self.env)
        if done.returncode != 0:
            raise StepFailed(f"exit {done.returncode}")
        found = [line.strip() for line in log.read_text().splitlines() if any(g in line for g in step.figure.grep)]
        self.figures.extend(found)
        return f"{len(found)} figure lines"

    def run_step(self, step: Step, log: Path, limit: float) -> str:
        unmet = [need for need in step.needs if self.facts and not self.facts.get(need)]
        if unmet:
            raise Skip(
                f"the probe found no {', '.join(unmet)}"
                + (f" ({self.facts.get('ray_error')})" if "ray" in unmet else "")
            )
        if step.name in self.missing:
            mods = ", ".join(
                dict.fromkeys(
                    m.split(".")[0] for m in self.missing[step.name] if not m.startswith(("trainers.", "raylab."))
                )
            )
            raise Skip(f"{step.optional or 'its modules do not import'}: {mods} missing")
        return getattr(self, step.action)(step, log, limit, *step.args)


def final_metrics(trials: list[list[dict]]) -> dict:
    """The last row of each trial, keyed by config, without timings."""
    out = {}
    for rows in trials:
        if rows:
            key = json.dumps(rows[-1].get("config"), sort_keys=True, default=str)
            out.update(
                {
                    f"{key}:{m}": v
                    for m, v in rows[-1].items()
                    if isinstance(v, (int, float))
                    and not m.startswith(("perf/", "time", "timestamp", "gpu/"))
                    and "per_s" not in m
                    and m not in ("pid", "iterations_since_restore")
                }
            )
    return out


def log_tail(log: Path, lines: int = 15) -> list[str]:
    """The last lines of a step's log, then of its other logs (``<step>.<part>.log``)."""
    tail = log.read_text().strip().splitlines()[-lines:] if log.is_file() else []
    for other in sorted(log.parent.glob(f"{log.stem}.*.log")):
        tail += [f"[{other.name}]"] + other.read_text().strip().splitlines()[-(lines // 2) :]
    return tail


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def importable(py: str, module: str, env: dict | None = None) -> bool:
    return (
        subprocess.run(
            [py, "-c", f"import {module}"], capture_output=True, env={**os.environ, **(env or {})}
        ).returncode
        == 0
    )


NCCL_WORLD1 = """
import os, torch, torch.distributed as dist
backend = os.environ.get("GPU_CHECK_BACKEND", "nccl")
device = torch.device(os.environ.get("GPU_CHECK_DEVICE", "cuda:0"))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group(backend, rank=0, world_size=1, **({"device_id": device} if device.type == "cuda" else {}))
x = torch.arange(4.0, device=device)
dist.all_reduce(x)
if device.type == "cuda":
    torch.cuda.synchronize()
assert x.device.type == device.type and x.tolist() == [0.0, 1.0, 2.0, 3.0], x
dist.destroy_process_group()
version = ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else "(gloo twin)"
print(f"{backend} all_reduce on one rank: ok, {backend}", version)
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
    got = subprocess.run([py, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True, text=True)
    count = got.stdout.strip().splitlines()[-1] if got.stdout.strip() else ""
    if got.returncode != 0 or not count.isdigit():
        return f"{py} cannot import torch: {(got.stderr.strip().splitlines() or ['?'])[-1]}"
    if int(count) < 1:
        return f"{NO_GPU} (torch built for CPU, or CUDA_VISIBLE_DEVICES hides it)"
    return None


def limit_of(step: Step, mode: str) -> float:
    if mode == "calibrate":
        return max(step.limit_s * CALIBRATE_FACTOR, CALIBRATE_MIN_S)
    if mode == "rehearse":
        return max(step.limit_s * REHEARSE_FACTOR, REHEARSE_MIN_S)
    return float(step.limit_s)


def suggested_limit(seconds: float) -> int:
    """A limit for a step that took ``seconds``: 1.5x and 10 s more, rounded up to 5 s."""
    return int(math.ceil((seconds * 1.5 + 10) / 5) * 5)


LOG_FILE_CAP, LOGS_CAP = 256 * 1024, 12 * 2**20
"""The tarball keeps each file's last 256 KiB and stops adding at 12 MiB (16 MiB come back a file)."""


def write_tarball(path: Path, folders: list[tuple[Path, str]]) -> int:
    """``logs.tar.gz`` of the logs, trial rows/errors and Ray's session logs (no checkpoints),
    each file cut to its last ``LOG_FILE_CAP`` bytes. Returns the files added."""
    from raylab.run_folder import CHECKPOINT_PREFIX  # checkpoints, finished or still being written

    added, total = 0, 0
    with tarfile.open(path, "w:gz") as tar:
        for folder, arc in folders:
            if not folder.is_dir():
                continue
            for file in sorted(folder.rglob("*")):
                rel = file.relative_to(folder)
                if (
                    not file.is_file()
                    or file.is_symlink()
                    or any(p.startswith(CHECKPOINT_PREFIX) for p in rel.parts)
                    or file.suffix in (".pt", ".pkl", ".npz", ".so")
                    or (arc == "ray" and "logs" not in rel.parts)
                ):
                    continue
                data = file.read_bytes()[-LOG_FILE_CAP:]
                if total + len(data) > LOGS_CAP:
                    continue
                info = tarfile.TarInfo(f"{arc}/{rel}")
                info.size, info.mtime = len(data), int(file.stat().st_mtime)
                tar.addfile(info, fileobj=io.BytesIO(data))
                added, total = added + 1, total + len(data)
    return added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out",
        type=Path,
        default=ROOT / "results" / f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}",
        help="summary.txt, gpu_check.json and logs.tar.gz (what a device call brings back)",
    )
    p.add_argument(
        "--work",
        type=Path,
        default=None,
        help="logs and runs (default: OUT/work, or a temporary folder when OUT is $OUT)",
    )
    p.add_argument("--only", nargs="*", default=None, help="run only these steps (the probe and imports always run)")
    p.add_argument("--calibrate", action="store_true", help="generous limits; print wall times and suggested limits")
    p.add_argument("--rehearse", action="store_true", help="no CUDA here: every step's CPU twin (device rehearsal)")
    args = p.parse_args(argv)
    py = os.environ.get("PY", sys.executable)
    mode = "rehearse" if args.rehearse else "calibrate" if args.calibrate else "check"
    if not args.rehearse:
        why = preflight(py)
        if why:
            print(why)
            return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    to_out = os.environ.get("OUT") and Path(os.environ["OUT"]).resolve() == out
    work = args.work or (Path(tempfile.mkdtemp(prefix="raylab-gpu-check-")) if to_out else out / "work")
    for old in ("runs", "logs"):  # an earlier check's, in the same folder: its run names would clash
        shutil.rmtree(work / old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    # Ray's own files: a short path of our own (its socket paths must stay under 107 bytes, and
    # this machine's other Ray instances are not ours to pack)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rgc-"))
    os.environ["RAY_TMPDIR"] = str(ray_tmp)
    summary = open(out / "summary.txt", "w")

    def say(text: str) -> None:
        print(text, flush=True)
        summary.write(text + "\n")
        summary.flush()

    gpu = (
        ""
        if args.rehearse
        else subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[0]
    )
    steps = [s for s in STEPS if args.only is None or s.name in args.only or s.action in ("probe", "imports_check")]
    limits = {s.name: limit_of(s, mode) for s in steps}
    budget = CALIBRATE_BUDGET_S if mode == "calibrate" else sum(limits.values())
    say(
        f"gpu: {gpu or 'none (rehearsal: CPU twins)'}; mode {mode}; {len(steps)} steps, limits {sum(limits.values()):.0f} s"
        + (f", {budget} s in all" if mode == "calibrate" else "")
    )
    check = Check(out, work, py, rehearse=args.rehearse)
    if not args.rehearse:
        check.sampler = GpuSampler()
    outcomes: list[Outcome] = []
    started = time.monotonic()

    def save(final: bool = False) -> None:
        """The table and the logs, rewritten after every step: a call cut off at its limit still
        brings back what ran."""
        (out / "gpu_check.json").write_text(
            json.dumps(
                {
                    "mode": mode,
                    "gpu": gpu,
                    "python": py,
                    "seconds": round(time.monotonic() - started, 1),
                    "finished": final,
                    "failed": sum(o.ok is False for o in outcomes),
                    "steps": [{**asdict(o), "seconds": round(o.seconds, 1)} for o in outcomes],
                    "limits": {s.name: s.limit_s for s in STEPS},
                    "suggested_limits": {o.name: suggested_limit(o.seconds) for o in outcomes if o.ok is not None},
                    "probe": check.facts,
                    "imports": check.imports,
                    "missing": check.missing,
                    "figures": check.figures,
                    "trial_utilisation": check.util,
                },
                indent=1,
                default=str,
            )
            + "\n"
        )
        write_tarball(out / "logs.tar.gz", [(check.logs, "logs"), (check.storage, "runs"), (ray_tmp / "ray", "ray")])

    for step in steps:
        limit = limits[step.name]
        log = check.logs / f"{step.name}.log"
        left = budget - (time.monotonic() - started)
        begin, t0 = time.monotonic(), time.time()
        twin = step.twin if args.rehearse else ""
        if mode == "calibrate" and left < 10:
            outcome = Outcome(step.name, None, 0, f"calibration budget ({budget} s) spent", limit, twin)
        else:
            limit = min(limit, left) if mode == "calibrate" else limit
            try:
                outcome = Outcome(step.name, True, 0, check.run_step(step, log, limit), limit, twin)
            except Skip as why_not:
                # on a GPU a step not run is a failure, unless it may lack what it needs
                hard = not args.rehearse and not step.optional
                outcome = Outcome(
                    step.name,
                    False if hard else None,
                    0,
                    str(why_not) + ("; not optional" if hard else ""),
                    limit,
                    twin,
                )
            except (StepFailed, subprocess.SubprocessError, OSError) as err:
                outcome = Outcome(
                    step.name, False, 0, f"{err}; log {step.name}.log in logs.tar.gz", limit, twin, log_tail(log)
                )
        outcome.seconds = time.monotonic() - begin
        if check.sampler is not None:
            stats = check.sampler.window(t0, time.time())
            if stats:
                outcome.util.append(stats)
        outcomes.append(outcome)
        say(outcome.line())
        for line in outcome.tail:
            say(f"      | {line[:200]}")
        save()
    if check.sampler is not None:
        check.sampler.stop()
    failed = sum(o.ok is False for o in outcomes)
    say("figures (same GPU, same run):" if not args.rehearse else "figures (CPU twins: not GPU figures):")
    for line in check.figures:
        say(f"  {line}")
    suggested = {o.name: suggested_limit(o.seconds) for o in outcomes if o.ok is not None}
    if mode == "calibrate":
        say("wall times and suggested limits (1.5x + 10 s) for STEPS in benchmarks/gpu_check.py:")
        for o in outcomes:
            say(f"  {o.name:<26} {o.seconds:6.1f} s  -> {suggested.get(o.name, '-')}")
    total = time.monotonic() - started
    say(f"failed steps: {failed}; {total:.0f} s in all (logs in {out / 'logs.tar.gz'})")
    summary.close()
    save(final=True)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    if to_out and args.work is None:
        shutil.rmtree(work, ignore_errors=True)  # a folder of our own beside $OUT: its logs are packed
    return failed


if __name__ == "__main__":
    sys.exit(main())
