"""benchmarks/gpu_check.sh without a GPU: it stops at once, its step table fits one device call,
its runner reports what a device call brings back, and its resolution check names a missing module.

What runs here: the shell script and its Python runner up to the "no GPU" line (a stub
``nvidia-smi`` on PATH, CUDA hidden), the step runner with steps replaced (one line per step, a
failed step's log tail, the JSON table and the log tarball in OUT, the work folder outside it),
the import check with a step that imports a module nobody has, the steps' import lists read
from the workloads' folders, the deterministic switch and the simulated GPU count the rehearsal
uses. The steps themselves run in the device rehearsal (tests/benchmarks/test_device_rehearsal.py,
RAYLAB_DEVICE_TESTS=1) and, on a GPU, only there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from raylab.run_folder import RESULT_FILE, TrialFolder, checkpoint_name

LONG = pytest.mark.skipif(
    os.environ.get("RAYLAB_DEVICE_TESTS") != "1", reason="long (minutes, or the network): RAYLAB_DEVICE_TESTS=1 runs it"
)
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_nvidia_smi(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "nvidia-smi"
    stub.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB, 580.159.03'\n")
    stub.chmod(0o755)
    return bin_dir


def check_sh(tmp_path, path: str, **env) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path, "PY": sys.executable, "OUT_DIR": str(tmp_path / "out"), **env},
    )
    return done, time.monotonic() - start


def test_with_nvidia_smi_but_no_cuda_it_stops_at_once_with_one_line(tmp_path, fake_nvidia_smi):
    path = f"{fake_nvidia_smi}:{os.environ['PATH']}"
    # positive control: without the stub the first check (nvidia-smi) is what stops it
    bare = [p for p in os.environ["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists()]
    control, _ = check_sh(tmp_path, ":".join(bare))
    assert control.returncode == 2 and control.stdout.strip() == "no nvidia-smi: this check needs an NVIDIA GPU"
    done, seconds = check_sh(tmp_path, path, CUDA_VISIBLE_DEVICES="")
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("torch sees no CUDA GPU"), lines
    assert not (tmp_path / "out").exists()  # no step ran, nothing unpacked
    print(f"stopped in {seconds:.1f} s: {lines[0]}")
    # the Python runner says the same on its own
    direct = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path / "o2")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert direct.returncode == 2 and direct.stdout.strip().startswith("torch sees no CUDA GPU"), direct.stdout


def test_step_limits_fit_one_device_call_and_cover_every_workload():
    from raylab import workloads

    check = load_check()
    limits = {s.name: s.limit_s for s in check.STEPS}
    assert len(limits) == len(check.STEPS), "step names must be unique"
    assert sum(limits.values()) <= check.BUDGET_S == 540, limits
    # calibration: generous limits, yet the whole run stops within one call (600 s, unpack first)
    assert check.CALIBRATE_BUDGET_S <= 540 and all(check.limit_of(s, "calibrate") >= 2 * s.limit_s for s in check.STEPS)
    # every workload package (one folder of trainers/, whatever loops it registers) but toy
    paper = {w.loop.split(".")[1] for w in workloads.registry().values()} - {"toy"}
    assert {f"cuda_trial_{w}" for w in paper} <= set(limits), sorted(limits)
    for step in (
        "probe",
        "imports",
        "two_trials_one_gpu",
        "amp_trial",
        "resume_gpu",
        "nccl_world1",
        "ddp_gloo_1gpu",
        "refuse_half_gpu_workers",
        "fig_dqn",
        "fig_resnet18",
        "fig_pgd",
    ):
        assert step in limits
    assert list(limits)[:2] == ["probe", "imports"]
    for s in check.STEPS:
        assert hasattr(check.Check, s.action), s
    print(f"step limits: {sum(limits.values())} s over {len(limits)} steps")


def test_each_trial_step_imports_what_its_workload_folder_imports():
    """The resolution list is read from the code: a module a workload adds is checked at once."""
    check = load_check()
    steps = {s.name: s for s in check.STEPS}
    dqn = check.step_imports(steps["cuda_trial_dqn_softlinf"])
    assert {"trainers.dqn_softlinf.loop", "ray.train.torch", "gymnasium", "ale_py", "cv2", "psutil"} <= set(dqn)
    assert not any(m.startswith("ray.rllib") for m in dqn)  # backend rllib only
    assert "pyautoattack" in check.step_imports(steps["cuda_trial_fair_adv"])
    seagram = check.step_imports(steps["cuda_trial_seagram"])
    assert {"torch_geometric.nn", "networkx"} <= set(seagram) and "rdkit" not in seagram
    assert "rdkit" in check.step_imports(steps["cuda_trial_boltz_distill"])
    assert "gymnasium" in check.step_imports(steps["fig_dqn"])


@pytest.fixture
def fake_steps(monkeypatch):
    check = load_check()
    monkeypatch.setattr(check, "preflight", lambda py: None)
    monkeypatch.setattr(check.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "GPU X\n", ""))
    monkeypatch.setattr(check, "GpuSampler", lambda: None)
    S = check.Step
    monkeypatch.setattr(
        check,
        "STEPS",
        (
            S("probe", 5, "fake_probe"),
            S("passes", 5, "passes"),
            S("fails", 5, "fails"),
            S("skips", 5, "skips", optional="may lack rdkit"),
            S("hangs", 2, "hangs"),
            S("needs_ray", 5, "passes", needs=("ray",)),
        ),
    )

    def fake_probe(self, step, log, limit):
        self.facts = {"ray": False, "ray_error": "RuntimeError: no raylet"}
        return "probed"

    def passes(self, step, log, limit):
        self.figures.append("figure: 1 images/s")
        return "fine"

    def fails(self, step, log, limit):
        log.write_text("".join(f"line {i}\n" for i in range(40)))
        raise check.StepFailed("exit 1")

    def skips(self, step, log, limit):
        raise check.Skip("rdkit not importable")

    def hangs(self, step, log, limit):
        return check.run([sys.executable, "-c", "import time; time.sleep(60)"], log, limit)

    for fn in (fake_probe, passes, fails, skips, hangs):
        monkeypatch.setattr(check.Check, fn.__name__, fn, raising=False)
    return check


def test_the_runner_prints_one_line_per_step_a_failures_log_tail_and_the_figures_last(tmp_path, fake_steps, capsys):
    check, out = fake_steps, tmp_path / "out"
    start = time.monotonic()
    failed = check.main(["--out", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert failed == 3 and time.monotonic() - start < 30
    steps = [line for line in lines if line.split()[0] in ("ok", "FAIL", "skip")]
    assert [" ".join(line.split()[:2]) for line in steps] == [
        "ok probe",
        "ok passes",
        "FAIL fails",
        "skip skips",
        "FAIL hangs",
        "FAIL needs_ray",
    ], lines
    assert "timed out after 2 s" in steps[4]
    # on a GPU a step not run fails the check unless it is optional (skips); --rehearse: skipped
    assert "the probe found no ray (RuntimeError: no raylet); not optional" in steps[5]
    # the failed step's log tail follows its line: its last 15 lines
    fail_at = lines.index(steps[2])
    assert lines[fail_at + 1 : fail_at + 16] == [f"      | line {i}" for i in range(25, 40)]
    assert lines[-3:-1] == ["figures (same GPU, same run):", "  figure: 1 images/s"]
    assert lines[-1].startswith("failed steps: 3;")
    # what a device call brings back: three files, the table, every step's log in the tarball
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["gpu_check.json", "logs.tar.gz", "summary.txt"]
    table = json.loads((out / "gpu_check.json").read_text())
    assert table["failed"] == 3 and [s["name"] for s in table["steps"]][:2] == ["probe", "passes"]
    assert table["steps"][2]["tail"][-1] == "line 39"
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert {"logs/fails.log", "logs/hangs.log"} <= set(names), names
    assert (out / "summary.txt").read_text().strip().splitlines() == lines


def test_out_defaults_to_the_device_calls_folder_and_work_stays_outside_it(tmp_path, fake_steps, monkeypatch, capsys):
    out = tmp_path / "OUT"
    monkeypatch.setenv("OUT", str(out))
    fake_steps.main(["--out", str(out), "--only", "passes"])
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "logs.tar.gz", "summary.txt"]


def test_gpu_check_sh_takes_out_when_out_dir_is_unset():
    """Its OUT_DIR line, evaluated by bash itself, with and without OUT."""
    for env, want in (({"OUT": "/x/out"}, "/x/out"), ({"OUT_DIR": "/y"}, "/y"), ({}, "results/gpu-check-")):
        base = {k: v for k, v in os.environ.items() if k not in ("OUT", "OUT_DIR")}
        got = subprocess.run(
            ["bash", "-c", 'eval "$(grep -m1 "^OUT_DIR=" benchmarks/gpu_check.sh)"; echo "$OUT_DIR"'],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**base, **env},
        )
        assert got.stdout.strip().startswith(want), (env, got.stdout)


def test_calibrate_mode_prints_each_steps_wall_time_and_a_suggested_limit(tmp_path, fake_steps, capsys):
    fake_steps.main(["--out", str(tmp_path), "--calibrate", "--only", "passes"])
    text = capsys.readouterr().out
    assert "mode calibrate" in text and "wall times and suggested limits" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("passes "))
    table = json.loads((tmp_path / "gpu_check.json").read_text())
    assert row.split()[-1] == str(table["suggested_limits"]["passes"]) and int(row.split()[-1]) in (10, 15)


def test_the_import_check_fails_naming_the_step_and_the_module_the_kit_lacks(tmp_path, monkeypatch, capsys):
    """A step that imports a module nobody carries: the imports step FAILs naming both, that step
    is skipped with the reason, an optional step with a missing module is only skipped."""
    check = load_check()
    monkeypatch.setattr(check, "preflight", lambda py: None)
    monkeypatch.setattr(check, "GpuSampler", lambda: None)
    S = check.Step
    monkeypatch.setattr(
        check,
        "STEPS",
        (
            S("imports", 60, "imports_check"),
            S("needs_missing", 5, "passes"),
            S("fine", 5, "passes"),
            S("optional_missing", 5, "passes", optional="needs the unicorn kit"),
        ),
    )
    imports = {
        "needs_missing": ("json", "no_such_module_in_any_kit"),
        "fine": ("json",),
        "optional_missing": ("another_missing_module",),
        "imports": (),
    }
    monkeypatch.setattr(check, "step_imports", lambda step: imports[step.name])
    monkeypatch.setattr(check.Check, "passes", lambda self, step, log, limit: "ran", raising=False)
    failed = check.main(["--out", str(tmp_path), "--rehearse"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["ok"], ["FAIL"], ["skip"])]
    assert failed == 1, lines
    assert (
        lines[0].startswith("FAIL  imports")
        and "needs_missing needs no_such_module_in_any_kit (ModuleNotFoundError" in lines[0]
    )
    assert "optional_missing" not in lines[0].split(";")[0]
    assert lines[1].startswith("skip  needs_missing") and "no_such_module_in_any_kit missing" in lines[1]
    assert lines[2].startswith("ok    fine")
    assert lines[3].startswith("skip  optional_missing") and "needs the unicorn kit: another_missing_module" in lines[3]
    table = json.loads((tmp_path / "gpu_check.json").read_text())
    assert table["imports"]["needs_missing"] == ["json", "no_such_module_in_any_kit"]


def test_gpu_utilisation_is_sampled_and_averaged_over_each_trials_own_window(tmp_path, monkeypatch):
    """A stub nvidia-smi answering 37 % busy, 1024 MiB used: the sampler collects it, and each
    trial's figure row averages the samples inside the window its own rows give."""
    check = load_check()
    stub = tmp_path / "bin" / "nvidia-smi"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\necho '37, 1024'\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(check, "SAMPLE_S", 0.05)
    sampler = check.GpuSampler()
    start = time.time()
    time.sleep(0.6)
    sampler.stop()
    assert sampler.samples and all(u == 37.0 and m == 1024.0 for _, u, m in sampler.samples)
    TrialFolder.at(tmp_path / "work" / "runs" / "r" / "trial_0").append_row(
        {"timestamp": int(start) + 1, "time_total_s": 1.0}
    )
    c = check.Check(tmp_path, tmp_path / "work", rehearse=False)
    c.sampler = sampler
    assert c.utilisation("r", "backdoor") == "GPU busy 37%"
    assert c.figures[0].startswith("backdoor trial 0: GPU busy 37% mean, 37% max, 1024 MiB max used")
    assert c.sampler.window(start - 100, start - 50) is None  # no samples: no row


def test_the_tarball_keeps_logs_and_rows_but_no_checkpoints_and_cuts_big_files(tmp_path):
    check = load_check()
    trial = TrialFolder.at(tmp_path / "runs" / "r" / "trial_0")
    runs = trial.path
    (runs / checkpoint_name(1)).mkdir(parents=True)
    (runs / checkpoint_name(1) / "state.txt").write_text("weights")
    trial.append_row({})
    (runs / "big.log").write_bytes(b"x" * (check.LOG_FILE_CAP + 1000) + b"END")
    ray = tmp_path / "ray" / "session_1"
    (ray / "logs").mkdir(parents=True)
    (ray / "logs" / "raylet.out").write_text("raylet")
    (ray / "sockets").mkdir()
    (ray / "sockets" / "x").write_text("s")
    added = check.write_tarball(tmp_path / "t.tar.gz", [(tmp_path / "runs", "runs"), (tmp_path / "ray", "ray")])
    with tarfile.open(tmp_path / "t.tar.gz") as tar:
        names = sorted(tar.getnames())
        big = tar.extractfile("runs/r/trial_0/big.log").read()
    assert names == ["ray/session_1/logs/raylet.out", "runs/r/trial_0/big.log", f"runs/r/trial_0/{RESULT_FILE}"]
    assert added == 3 and len(big) == check.LOG_FILE_CAP and big.endswith(b"END")


def test_deterministic_mode_is_what_fixed_shapes_turns_on_when_asked(monkeypatch):
    import torch

    from raylab import accel

    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
    )
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("RAYLAB_DETERMINISTIC", raising=False)
    try:
        # from a known state: RLlib's seeding (``set_torch_seed``, on a CPU build of torch) turns
        # deterministic algorithms on in the process it runs in, so an earlier test may have left it on
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        accel.fixed_shapes(torch.device("cpu"))  # control: nothing changes without the variable
        assert not torch.are_deterministic_algorithms_enabled()
        monkeypatch.setenv("RAYLAB_DETERMINISTIC", "1")
        accel.fixed_shapes(torch.device("cuda"))  # a CUDA device is not touched, only flags set
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[1], before[2]


def test_a_simulated_gpu_machine_counts_the_gpus_ray_is_told_of_and_its_workers_use_gloo(monkeypatch):
    """The rehearsal's GPU twin: Ray told of one GPU, raylab's resource check counting it, and
    the Train workers' backend gloo even where torch is a CUDA build with NCCL (no GPU for it)."""
    from raylab.launch import ray_start
    from raylab.launch import train_path as train_trial

    monkeypatch.setenv("RAY_OVERRIDE_RESOURCES", json.dumps({"GPU": 1}))
    monkeypatch.delenv("RAYLAB_SIMULATED_GPUS", raising=False)
    real = ray_start.local_resources()["GPU"]  # control: without the switch, torch's count
    assert train_trial.distributed_backend(1, nccl_built=True) == "nccl"
    monkeypatch.setenv("RAYLAB_SIMULATED_GPUS", "1")
    assert ray_start.local_resources()["GPU"] == max(real, 1.0)
    assert train_trial.distributed_backend(1, nccl_built=True) == "gloo"


@LONG  # two spawned torch processes: about 35 s on two busy cores
@pytest.mark.slow
def test_the_ddp_gloo_step_averages_gradients_across_two_ranks_on_cpu(tmp_path):
    check = load_check()
    script = tmp_path / "ddp.py"
    script.write_text(check.DDP_GLOO_1GPU)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GPU_CHECK_DEVICE": "cpu", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gradients averaged across ranks" in done.stdout


def test_rehearse_skips_what_a_gpu_run_fails(tmp_path, fake_steps, capsys):
    """--rehearse (no CUDA) leaves a step whose need is unmet skipped; the same step fails on a GPU."""
    failed = fake_steps.main(["--out", str(tmp_path), "--rehearse", "--only", "probe", "needs_ray"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["ok"], ["FAIL"], ["skip"])]
    assert failed == 0 and lines[-1].startswith("skip  needs_ray"), lines


def only_steps(check, monkeypatch, *names):
    monkeypatch.setattr(check, "STEPS", tuple(s for s in check.STEPS if s.name in names))


def test_a_planted_ray_start_failure_fails_the_check(tmp_path, monkeypatch, capsys):
    """The real probe with Ray made to fail at its start (GPU_CHECK_FAULT=ray_start): the probe
    FAILs naming it and the check exits non-zero (it used to mark the probe ok, skip every Ray
    step and exit 0)."""
    check = load_check()
    only_steps(check, monkeypatch, "probe")
    monkeypatch.setenv("GPU_CHECK_FAULT", "ray_start")
    monkeypatch.setenv("KIT", str(tmp_path / "no-kit"))
    failed = check.main(["--out", str(tmp_path / "out"), "--rehearse"])
    text = capsys.readouterr().out
    assert failed == 1, text
    assert "FAIL  probe" in text and "Ray did not start: RuntimeError: a Ray start failure planted" in text, text


@pytest.mark.long  # two smoke trials through Ray Tune: a minute or two on two busy cores
@pytest.mark.parametrize("plant", [False, True])
def test_a_planted_capture_failure_fails_the_dqn_step(plant, tmp_path, monkeypatch, capsys):
    """The DQN trial step of the rehearsal (simulated capture, strict switch on): it passes
    with ``perf/cuda_graph`` 1, and fails when every capture is made to fail
    (RAYLAB_CUDA_GRAPH_FAULT=1), which without the switch would have trained eagerly."""
    check = load_check()
    only_steps(check, monkeypatch, "probe", "cuda_trial_dqn_softlinf")
    if plant:
        monkeypatch.setenv("RAYLAB_CUDA_GRAPH_FAULT", "1")
    monkeypatch.setenv("KIT", str(tmp_path / "no-kit"))
    failed = check.main(["--out", str(tmp_path / "out"), "--rehearse"])
    text = capsys.readouterr().out
    if plant:
        assert failed == 1 and "FAIL  cuda_trial_dqn_softlinf" in text, text
    else:
        assert failed == 0 and "ok    cuda_trial_dqn_softlinf" in text, text


def test_every_backdoor_trial_of_the_check_runs_with_the_asr_floor_off(tmp_path, monkeypatch):
    """backdoor's smoke trains at chance, where its sweep metric (ASR) is NaN below the
    clean-accuracy floor and ``raylab.tune`` exits 1 for a sweep without a finite metric: each
    step that runs a backdoor trial passes the floor's override, and the override resolves to 0."""
    import subprocess

    from raylab import experiment as experiments

    check = load_check()
    c = check.Check(tmp_path / "out", tmp_path / "work", rehearse=True, kit=tmp_path / "no-kit")
    calls = []

    def fake_tune(name, log, timeout, *overrides, run_name=None, env=None):
        calls.append((name, overrides))
        return subprocess.CompletedProcess([], 0 if name == "dqn_softlinf" else 1)

    monkeypatch.setattr(c, "tune", fake_tune)
    for helper in ("peak", "graph_replayed", "utilisation", "autocast_dtype", "finite_losses", "trial_errors"):
        monkeypatch.setattr(c, helper, lambda *a, **k: [])  # the DQN trial of amp_trial "passes"
    step, log = check.Step("x", 10, "cuda_trial"), tmp_path / "log"
    for run in (
        lambda: c.cuda_trial(step, log, 10, "backdoor"),
        lambda: c.two_trials_one_gpu(step, log, 10),
        lambda: c.amp_trial(step, log, 10),
    ):
        with pytest.raises(check.StepFailed):
            run()
    backdoor = [overrides for name, overrides in calls if name == "backdoor"]
    assert len(backdoor) == 3 and all("config.clean_acc_floor_x_chance=0" in o for o in backdoor), calls
    exp = experiments.load("backdoor", list(check.BACKDOOR_FLOOR_OFF), smoke=True)
    assert exp.config["clean_acc_floor_x_chance"] == 0
