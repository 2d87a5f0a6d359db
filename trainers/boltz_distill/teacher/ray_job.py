"""The Boltz-2 teacher as a Ray job: chunks of molecules as Ray tasks, one GPU each, across a cluster.

``python -m trainers.boltz_distill.teacher --teacher boltz2 ... --address auto`` runs this from
the main environment (Ray lives there; boltz lives in its own). The driver:

1. reads the molecules and the store ``--out`` (if it exists): molecules already stored or
   recorded as failed are skipped, so running the command again resumes;
2. cuts the rest into chunks of ``--chunk-size`` and submits one Ray task per chunk, asking for
   ``--gpus-per-task`` GPUs (Ray sets ``CUDA_VISIBLE_DEVICES`` for the task);
3. each task runs the single-process teacher command in the boltz environment
   (``--boltz-python``, on every node at the same path, as is the repository) on its chunk,
   into a temporary store on its node, and returns the embeddings (float16) and failures;
4. the driver alone writes the store, one shard per finished chunk, and shows a progress bar
   (molecules done of the total, rate, time left). A chunk interrupted by a crash is redone
   on the next run; finished chunks are never redone.

Nothing needs a shared filesystem but the checkpoint and the two environments on each node.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from raylab.errors import UserError

REPO = Path(__file__).resolve().parents[3]


def chunk_command(args: argparse.Namespace, smi: str, out: str) -> list[str]:
    """The single-process teacher command that one task runs on its chunk."""
    command = [
        args.boltz_python,
        "-m",
        "trainers.boltz_distill.teacher",
        "--teacher",
        "boltz2",
        "--smiles",
        smi,
        "--out",
        out,
        "--checkpoint",
        str(Path(args.checkpoint).expanduser()),
        "--layer",
        args.layer,
        "--recycling-steps",
        str(args.recycling_steps),
        "--seed",
        str(args.seed),
        "--device",
        args.device,
        "--precision",
        args.precision,
        "--shard-size",
        str(args.chunk_size),
    ]
    for flag, value in (("--protein", args.protein), ("--msa", args.msa), ("--mol-dir", args.mol_dir)):
        if value:
            command += [flag, value]
    if args.trust_checkpoint:
        command.append("--trust-checkpoint")
    return command


def embed_chunk(args: argparse.Namespace, keys: list[str]) -> dict:
    """Run the boltz teacher on ``keys`` in a temporary store; return its meta and contents."""
    from trainers.boltz_distill.embedding_store import EmbeddingStore

    with tempfile.TemporaryDirectory(prefix="raylab-boltz-") as tmp:
        smi = Path(tmp) / "chunk.smi"
        smi.write_text("".join(k + "\n" for k in keys))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(
            chunk_command(args, str(smi), f"{tmp}/store"), cwd=REPO, env=env, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"boltz teacher failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        store = EmbeddingStore(f"{tmp}/store")
        meta = {k: v for k, v in store.meta.items() if k not in ("format", "dim", "dtype")}
        return {
            "meta": meta,
            "dim": store.dim,
            "keys": store.keys(),
            "arrays": [store[k] for k in store.keys()],
            "failed": dict(store.failed),
        }


def existing_meta(out: str) -> dict | None:
    path = Path(out).expanduser() / "meta.json"
    return json.loads(path.read_text()) if path.is_file() else None


def run(args: argparse.Namespace, keys: list[str]) -> dict[str, int]:
    """Embed ``keys`` into ``args.out`` with Ray tasks; resumable. Returns the counts."""
    import ray
    from tqdm import tqdm

    from raylab.launch.ray_start import connect
    from trainers.boltz_distill.embedding_store import EmbeddingStore, StoreWriter

    if not args.checkpoint:
        raise UserError("--teacher boltz2 needs --checkpoint PATH (boltz2_conf.ckpt)")
    if not Path(args.boltz_python).is_file():
        raise UserError(f"--boltz-python {args.boltz_python}: no such interpreter (make boltz-env creates it)")
    keys = list(dict.fromkeys(keys))
    done: set[str] = set()
    if existing_meta(args.out):
        store = EmbeddingStore(args.out)
        done = set(store.keys()) | set(store.failed)
    todo = [k for k in keys if k not in done]
    counts = {"written": 0, "skipped": len(keys) - len(todo), "failed": 0}
    if not todo:
        return counts
    connect(None if args.address == "local" else args.address)
    task = ray.remote(num_gpus=args.gpus_per_task, num_cpus=args.cpus_per_task, max_retries=1)(embed_chunk)
    pending = [task.remote(args, todo[i : i + args.chunk_size]) for i in range(0, len(todo), args.chunk_size)]
    writer = None
    bar = tqdm(
        total=len(keys),
        initial=len(keys) - len(todo),
        unit="mol",
        desc=f"boltz2 {args.layer}",
        file=sys.stderr,
        mininterval=5,
    )
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            result = ray.get(ready[0])
            if writer is None:
                writer = StoreWriter(args.out, result["dim"], result["meta"], shard_size=10**9)
            for key, array in zip(result["keys"], result["arrays"]):
                writer.add(key, array)
            for key, reason in result["failed"].items():
                writer.fail(key, reason)
            writer.flush()  # one shard per chunk: what is done stays done
            counts["written"] += len(result["keys"])
            counts["failed"] += len(result["failed"])
            bar.update(len(result["keys"]) + len(result["failed"]))
    finally:
        bar.close()
        if writer is not None:
            writer.close()
    return counts


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Ray job (boltz2 across a cluster's GPUs)")
    g.add_argument("--address", help="run as a Ray job: auto, HOST:PORT, or local (start a Ray here)")
    g.add_argument("--gpus-per-task", type=float, default=1.0, help="GPUs per chunk task (0 on CPUs)")
    g.add_argument("--cpus-per-task", type=float, default=1.0)
    g.add_argument("--chunk-size", type=int, default=500, help="molecules per task (and per shard)")
    g.add_argument(
        "--boltz-python",
        default=str(REPO / ".venv-boltz" / "bin" / "python"),
        help="the boltz environment's python on every node",
    )
