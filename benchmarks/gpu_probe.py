"""What a GPU machine offers the GPU check, in about 10 s: one line ``PROBE {json}``.

    python3 benchmarks/gpu_probe.py        (benchmarks/gpu_check.py runs it as its first step)

MemTotal and MemAvailable (and a cgroup memory limit) against what a local Ray detects (CPUs,
GPUs, memory, object store: Ray started and stopped, its start timed), ``/dev/shm``'s size, the
kernel (gVisor reports 4.4.0), torch's view of the GPU (name, memory, CUDA, cuDNN, NCCL, bf16),
``nvidia-smi``'s, and whether a live CUDA process (this one, after an allocation) is listed by
``nvidia-smi --query-compute-apps`` (in a PID namespace it may list none, or other pids). With
``GPU_CHECK_KIT_JSON`` (``.kit/kit.json``): the installed version of each machine package the
kit was resolved against, and those that differ from the stand-in's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import torch

GIB = 2**30


def host() -> dict:
    facts = {
        "python": sys.version.split()[0],
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
    }
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split()[1:2]}
    facts["mem_total_gib"] = round(info.get("MemTotal", 0) / GIB, 1)
    facts["mem_available_gib"] = round(info.get("MemAvailable", 0) / GIB, 1)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        if os.path.exists(path):
            with open(path) as f:
                facts["cgroup_memory_limit"] = f.read().strip()
            break
    try:
        st = os.statvfs("/dev/shm")
        facts["shm_gib"] = round(st.f_blocks * st.f_frsize / GIB, 1)
        facts["shm_free_gib"] = round(st.f_bavail * st.f_frsize / GIB, 1)
    except OSError as err:
        facts["shm_gib"], facts["shm_error"] = 0.0, str(err)
    return facts


def gpu() -> dict:
    """torch's view of GPU 0 (a live allocation made), then nvidia-smi's, compute-apps included."""
    facts: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if facts["cuda"]:
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=props.name,
            gpu_mem_gib=round(props.total_memory / GIB, 1),
            gpu_sms=props.multi_processor_count,
            cuda_runtime=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            nccl=".".join(map(str, torch.cuda.nccl.version())),
            bf16=torch.cuda.is_bf16_supported(),
        )
        x = torch.ones(1 << 20, device="cuda")  # keeps this process a live CUDA process below
        torch.cuda.synchronize()
        facts["gpu_mem_used_by_probe_mib"] = round(x.numel() * 4 / 2**20, 1)
    else:
        facts["bf16"] = True  # bf16 autocast on the CPU: the rehearsal's twin
    smi = shutil.which("nvidia-smi")
    facts["nvidia_smi"] = bool(smi)
    if smi:
        q = subprocess.run(
            [smi, "--query-gpu=name,memory.total,driver_version,utilization.gpu", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        facts["nvidia_smi_gpu"] = q.stdout.strip()
        apps = subprocess.run(
            [smi, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        rows = [line.strip() for line in apps.stdout.splitlines() if "," in line]
        facts["compute_apps_rows"] = rows[:8]
        facts["compute_apps_own_pid"] = any(r.split(",")[0].strip() == str(os.getpid()) for r in rows)
    facts["compute_apps"] = bool(facts.get("compute_apps_rows"))
    return facts


def ray_detects() -> dict:
    """A local Ray started and stopped: the resources it detects (memory in GiB), its start time."""
    start = time.monotonic()
    facts: dict = {}
    try:
        import ray

        if os.environ.get("GPU_CHECK_FAULT") == "ray_start":  # the check's tests plant a start failure
            raise RuntimeError("a Ray start failure planted by GPU_CHECK_FAULT=ray_start")
        ray.init(address="local", include_dashboard=False, logging_level=40, log_to_driver=False)
        facts["ray_resources"] = {
            k: (round(v / GIB, 1) if k in ("memory", "object_store_memory") else v)
            for k, v in ray.cluster_resources().items()
            if not k.startswith("node:")
        }
        ray.shutdown()
        facts["ray"] = True
    except Exception as err:  # noqa: BLE001 - Ray failing to start is the finding
        facts["ray"], facts["ray_error"] = False, f"{type(err).__name__}: {err}"[:400]
    facts["ray_start_s"] = round(time.monotonic() - start, 1)
    return facts


def machine_packages(kit_json: str | None) -> dict:
    """The installed version of each machine package the kit was resolved against."""
    if not kit_json or not os.path.exists(kit_json):
        return {}
    with open(kit_json) as f:
        stand_ins = json.load(f)["machine_packages"]
    here = {}
    for name in stand_ins:
        try:
            here[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            here[name] = None
    return {
        "machine_packages_here": here,
        "machine_packages_differ": {n: [stand_ins[n], v] for n, v in here.items() if v != stand_ins[n]},
    }


def main() -> int:
    facts = {**host(), **gpu(), **ray_detects(), **machine_packages(os.environ.get("GPU_CHECK_KIT_JSON"))}
    print("PROBE " + json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
