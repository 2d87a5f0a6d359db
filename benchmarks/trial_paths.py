"""Single-GPU trials on raylab's two trial paths, side by side in one local Ray.

The same single-worker, one-GPU trial (a loop that reports ``--reports`` times, each with a
checkpoint of ``--state-mib`` MiB) runs through raylab's own trainables
(``raylab.launch.trainable.make_trainable``):

- the Ray Train path: a Tune function trial that drives a Ray Train run (the trial's driver
  holds one ``trial_driver`` unit, which only a cluster's head declares; it starts a Train
  controller and a mailbox beside it, on the head); its one Train worker runs the loop;
- the Tune path: the loop runs in the Tune function trial itself, which holds the GPU.

The GPUs are Ray's resource labels (``ray.init(num_gpus=2)``, ``RAYLAB_SIMULATED_GPUS=1``): the
loop trains on the CPU and reports how many GPUs Ray assigned its process and how many
``CUDA_VISIBLE_DEVICES`` names, so each path shows that its trial sees its GPU. Trials run one
at a time (their fixed cost is not mixed with another's), the paths alternate ``--repeats``
times, and a thread samples every Ray process of this session (``ray::ClassName`` titles) every
0.2 s for:

- memory per trial on the head: the peak RSS and private memory (USS) of the processes a Ray
  Train trial keeps on the head (its driver, ``ImplicitFunc``, and the Train controller and
  the actors they start, as ``tests/scenarios/clusters/test_head_capacity.py`` finds them there
  on a simulated cluster) against the Tune path's, which keeps none there; and the process
  that runs the loop on the GPU node on each path (``RayTrainWorker`` / ``ImplicitFunc``);
- fixed cost per trial: from Tune starting the trial to its first report (the median trial,
  and a sweep's first trial: the Tune path reuses a trial's process for the next trial, as
  raylab's sweeps do, and a Ray Train trial starts new ones each time), and the trial's whole
  time less the loop's own sleeping (``--reports`` x ``--step-s``);
- checkpoint bytes through the head: the bytes the head's processes wrote (``/proc/PID/io``
  ``wchar``) per checkpoint byte. The storage is a local folder, as a cluster's shared NFS
  folder: the Ray Train driver copies each checkpoint from Ray Train's folder into the Tune
  trial's. (On S3 that copy is a server-side CopyObject: no bytes through the head, one more
  write in the bucket; ``tests/scenarios/clusters/test_checkpoint_bytes.py``.) The loop's own
  process counts its own writes (it saves each checkpoint to a temporary folder, and Ray
  copies it into storage from there, through write calls on the Ray Train path).

    python benchmarks/trial_paths.py [--trials 3] [--repeats 2] [--reports 3] [--step-s 0.5]
                                     [--state-mib 16] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
LOOP = "benchmarks.trial_paths:bench_loop"
"""The loop both paths run (this module, imported by Ray's workers from the repository root)."""
HEAD_CLASSES = (
    "ImplicitFunc",
    "TrainController",
    "Mailbox",
    "PlacementGroupCleaner",
    "DatasetManager",
    "SynchronizationActor",
)
"""The processes of one Ray Train trial that run on the head: its driver (Tune's function
trial, ``ImplicitFunc``) and the actors it and the Train controller start on its node."""
LOOP_CLASS = {"train": "RayTrainWorker", "tune": "ImplicitFunc"}
"""The process that runs the loop, on the GPU node, on each path."""


def bench_loop(config: dict) -> None:
    """Report ``reports`` times, each after ``step_s`` of sleep, with a ``state_mib`` checkpoint;
    and what the process sees of its GPU."""
    import torch

    from raylab import session

    written = written_bytes()
    device = session.device()  # raises where a reserved GPU is not visible (no simulated flag)
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    payload = torch.zeros(int(config["state_mib"] * 2**20) // 4)
    for step in range(1, config["reports"] + 1):
        time.sleep(config["step_s"])
        session.report(
            {
                "bench/step": step,
                "bench/gpus_reserved": len(session.reserved_gpus()),
                "bench/cuda_visible_devices": len(visible),
                "bench/cuda_device": float(device.type == "cuda"),
            },
            state={"payload": payload, "step": step},
            checkpoint=True,
        )
    # What this process wrote for its checkpoints (each saved, then copied into storage),
    # read here, after the last one is stored: a sampler could miss the last copy.
    session.report({"bench/loop_bytes": written_bytes() - written}, checkpoint=False)


def written_bytes(pid: int | str = "self") -> int:
    """Bytes a process passed to write calls so far (``wchar`` of ``/proc/PID/io``)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/io has no wchar line")


@dataclasses.dataclass
class Seen:
    """One Ray process of this session, as sampled."""

    title: str = "IDLE"
    rss: float = 0.0
    uss: float = 0.0
    wchar_first: int | None = None
    wchar_last: int = 0


class Sampler:
    """Samples every Ray worker process under this process (raylet's children) every ``every_s``."""

    def __init__(self, every_s: float = 0.2):
        self.every_s = every_s
        self.seen: dict[int, Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every_s)

    def sample(self) -> None:
        import psutil

        for proc in psutil.Process().children(recursive=True):
            try:
                cmdline = proc.cmdline()
                if not cmdline or not cmdline[0].startswith("ray::"):
                    continue
                memory = proc.memory_full_info()
                wchar = written_bytes(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError, RuntimeError):
                continue
            seen = self.seen.setdefault(proc.pid, Seen())
            title = actor_class(cmdline[0])
            if title != "IDLE":
                seen.title = title
            seen.rss, seen.uss = max(seen.rss, memory.rss), max(seen.uss, memory.uss)
            if seen.wchar_first is None:
                seen.wchar_first = wchar
            seen.wchar_last = wchar


def actor_class(title: str) -> str:
    """``ray::TrainController.run`` -> ``TrainController``; ``ray::IDLE`` -> ``IDLE``."""
    return title[len("ray::") :].split()[0].split(".")[0]


class Timings:
    """A Tune callback: when each trial started, first reported, and ended (driver clock)."""

    def __init__(self):
        from ray import tune

        outer = self

        class Callback(tune.Callback):
            def on_trial_start(self, iteration, trials, trial, **info):
                outer.started.setdefault(trial.trial_id, time.time())

            def on_trial_result(self, iteration, trials, trial, result, **info):
                outer.first.setdefault(trial.trial_id, time.time())
                outer.last_result[trial.trial_id] = result
                outer.results.append(result)

            def on_trial_complete(self, iteration, trials, trial, **info):
                outer.ended[trial.trial_id] = time.time()

        self.started, self.first, self.ended, self.last_result = {}, {}, {}, {}
        self.results: list[dict] = []
        self.callback = Callback()


def run_path(path: str, args: argparse.Namespace, storage: str, tag: str) -> dict:
    """One sweep of ``args.trials`` trials on ``path`` (``"train"`` or ``"tune"``), one at a time."""
    from ray import tune

    from raylab import experiment as experiments
    from raylab.launch import trainable as trainables
    from raylab.launch.trial import TrialSettings
    from raylab.run_folder import RunFolder

    experiment = experiments.load(
        "toy", ["resources.gpus_per_worker=1", "resources.cpus_per_worker=1", "checkpoint.every=1", "checkpoint.keep=1"]
    )
    run = RunFolder.under(storage, f"{path}-{tag}")
    settings_of = TrialSettings.of.__func__
    with_loop = classmethod(lambda cls, e, r: dataclasses.replace(settings_of(cls, e, r), loop=LOOP))
    with mock.patch.object(TrialSettings, "of", with_loop):
        trainable = trainables.make_trainable(experiment, run, ray_train=path == "train")
    timings = Timings()
    started = time.perf_counter()
    with Sampler() as sampler:
        tune.Tuner(
            trainable,
            param_space={
                "state_mib": args.state_mib,
                "reports": args.reports,
                "step_s": args.step_s,
                "trial": tune.grid_search(list(range(args.trials))),
            },
            tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=path == "tune"),
            run_config=tune.RunConfig(
                name=run.name,
                storage_path=run.storage_root,
                callbacks=[timings.callback],
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                verbose=0,
            ),
        ).fit()
    wall = time.perf_counter() - started
    return summarize(path, args, sampler.seen, timings, wall)


def summarize(path: str, args: argparse.Namespace, seen: dict[int, Seen], timings: Timings, wall: float) -> dict:
    """One sweep's figures: per trial, and by process class."""
    head = [s for s in seen.values() if path == "train" and s.title in HEAD_CLASSES]
    loop = [s for s in seen.values() if s.title == LOOP_CLASS[path]]
    trials = args.trials
    checkpoint_bytes = trials * args.reports * args.state_mib * 2**20
    ids = sorted(timings.started)
    first = [timings.first[t] - timings.started[t] for t in ids if t in timings.first]
    whole = [timings.ended[t] - timings.started[t] for t in ids if t in timings.ended]
    sleeping = args.reports * args.step_s
    results = list(timings.last_result.values())
    return {
        "path": path,
        "trials": trials,
        "ended": len(whole),
        "wall_s": wall,
        "first_report_s": statistics.median(first) if first else None,
        "first_report_cold_s": first[0] if first else None,
        "first_report_each_s": first,
        "overhead_s": statistics.median(w - sleeping for w in whole) if whole else None,
        "head_rss_mib_per_trial": sum(s.rss for s in head) / 2**20 / trials,
        "head_uss_mib_per_trial": sum(s.uss for s in head) / 2**20 / trials,
        "head_processes_per_trial": len(head) / trials,
        "head_classes": sorted({s.title for s in head}),
        "loop_rss_mib": statistics.mean(s.rss for s in loop) / 2**20 if loop else None,
        "loop_uss_mib": statistics.mean(s.uss for s in loop) / 2**20 if loop else None,
        "head_bytes_per_checkpoint_byte": sum(s.wchar_last - (s.wchar_first or 0) for s in head) / checkpoint_bytes,
        "loop_bytes_per_checkpoint_byte": sum(r.get("bench/loop_bytes", 0) for r in results) / checkpoint_bytes,
        "gpus_reserved": sorted({r["bench/gpus_reserved"] for r in timings.results if "bench/gpus_reserved" in r}),
        "cuda_visible_devices": sorted(
            {r["bench/cuda_visible_devices"] for r in timings.results if "bench/cuda_visible_devices" in r}
        ),
    }


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def print_table(by_path: dict[str, list[dict]], args: argparse.Namespace) -> dict:
    train, tune_ = by_path["train"], by_path["tune"]
    rows = [
        ("head memory per trial, RSS (MiB)", "head_rss_mib_per_trial"),
        ("head memory per trial, private (MiB)", "head_uss_mib_per_trial"),
        ("head processes per trial", "head_processes_per_trial"),
        ("loop's process on the GPU node, RSS (MiB)", "loop_rss_mib"),
        ("loop's process on the GPU node, private (MiB)", "loop_uss_mib"),
        ("trial start to first report, median trial (s)", "first_report_s"),
        ("the same, a sweep's first trial (a new process) (s)", "first_report_cold_s"),
        (f"trial time less the loop's {args.reports * args.step_s:g} s (s)", "overhead_s"),
        ("sweep wall time (s)", "wall_s"),
        ("bytes the head writes per checkpoint byte", "head_bytes_per_checkpoint_byte"),
        ("bytes the loop's process writes per checkpoint byte", "loop_bytes_per_checkpoint_byte"),
    ]
    medians = {}
    print(
        f"{args.trials} single-GPU trial(s) a sweep, one at a time, {args.reports} reports with a "
        f"{args.state_mib:g} MiB checkpoint each; median of {args.repeats} sweep(s) per path"
    )
    print(f"  {'':52s} {'Ray Train':>10s} {'Tune path':>10s} {'ratio':>7s}")
    for label, key in rows:
        a, b = median_of(train, key), median_of(tune_, key)
        medians[key] = {"train": a, "tune": b}
        ratio = f"{a / b:6.2f}x" if a is not None and b else "      -"
        print(f"  {label:52s} {_num(a):>10s} {_num(b):>10s} {ratio:>7s}")
    for path, runs in by_path.items():
        print(
            f"  {path}: head classes {runs[0]['head_classes'] or '-'}; GPUs Ray assigned the loop's process "
            f"{runs[0]['gpus_reserved']}, CUDA_VISIBLE_DEVICES entries {runs[0]['cuda_visible_devices']}"
        )
    return medians


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--reports", type=int, default=3)
    parser.add_argument("--step-s", type=float, default=0.5)
    parser.add_argument("--state-mib", type=float, default=16)
    parser.add_argument("--json", help="write every sweep's figures and the medians here")
    args = parser.parse_args(argv)

    import ray

    from raylab.launch import ray_start

    # Ray's workers import this module (LOOP) from the repository root.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(ROOT))
    os.environ["RAYLAB_SIMULATED_GPUS"] = "1"  # the GPUs are labels: the loop trains on the CPU
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # As raylab starts a local Ray for Ray Train trials: with the state API that Ray Train's
    # controller polls, at an address only this Ray's processes are given.
    port = ray_start._state_api_of_this_ray(listen=False)
    ray.init(
        num_cpus=2,
        num_gpus=2,
        resources={"trial_driver": 2},  # as a cluster's head declares it
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        **({"dashboard_port": port} if port else {}),
        logging_level=logging.ERROR,
    )
    by_path: dict[str, list[dict]] = {"train": [], "tune": []}
    try:
        with tempfile.TemporaryDirectory(prefix="raylab-paths-") as storage:
            for repeat in range(args.repeats):
                for path in ("train", "tune"):
                    by_path[path].append(run_path(path, args, storage, str(repeat)))
    finally:
        ray.shutdown()
    medians = print_table(by_path, args)
    report = {"args": vars(args), "sweeps": by_path, "medians": medians}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
