"""The boltz_distill train loop: a GINE student regresses teacher per-atom embeddings."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from raylab import session
from raylab.checkpoint import GlobalRNG, LoopState, load_at, saved_only
from raylab.config import from_dict
from raylab.errors import ThisMachine, UserError
from raylab.files import user_location
from raylab.run_folder import RunFolder
from raylab.seeds import derive_seed
from trainers.boltz_distill.batches import GraphBank
from trainers.boltz_distill.config import Config
from trainers.boltz_distill.corpus import check_test_sets, corpus_exists, corpus_smiles, exclusion_line
from trainers.boltz_distill.embedding_store import EmbeddingStore
from trainers.boltz_distill.featurize import graphs_from_smiles
from trainers.boltz_distill.loss import distill_loss, standardize
from trainers.boltz_distill.model import GINEStudent


def store_path(cfg: Config, teacher: str) -> Path:
    """Where a teacher's store lives: ``<store_root>/boltz2_<layer>``, ``conformer``, ``descriptors``."""
    name = f"boltz2_{cfg.boltz2_layer}" if teacher == "boltz2" else teacher
    return Path(cfg.store_root) / name


def corpus_of(cfg: Config, excluded_sets: list[str] | None = None) -> list[str]:
    """The corpus's canonical SMILES under the leakage rule of ``corpus.py`` (the test sets
    excluded are appended to ``excluded_sets``)."""
    return corpus_smiles(
        cfg.corpus,
        cfg.max_molecules,
        cfg.exclude_tests,
        cfg.tdc_data_dir,
        cfg.allow_missing_tests,
        excluded_sets,
        cfg.exclude_test_scaffolds,
    )


def preflight(cfg: Config) -> None:
    """Refuse before Ray starts: corpus or Boltz-2 store missing, targets larger than memory."""
    corpus_exists(cfg.corpus)  # raises a UserError naming the missing file
    rows, dims = 0, 0
    for teacher in cfg.teachers:
        path = store_path(cfg, teacher)
        if teacher == "boltz2" and not (path / "meta.json").is_file():
            raise UserError(
                f"config.teachers: no Boltz-2 store at {path}; make it with: .venv-boltz/bin/python "
                f"-m trainers.boltz_distill.teacher --teacher boltz2 --checkpoint boltz2_conf.ckpt "
                f"--layer {cfg.boltz2_layer} --smiles CORPUS.smi --out {path} (CORPUS.smi from: "
                f"python -m trainers.boltz_distill.corpus {cfg.corpus} --limit {cfg.max_molecules} "
                + ("--exclude-test-scaffolds " if cfg.exclude_test_scaffolds else "")
                + "--out CORPUS.smi; across a cluster's GPUs add --address auto)"
            )
        if (path / "meta.json").is_file():
            store = EmbeddingStore(path)
            dims += store.dim
            rows = max(rows, store.total_rows())
    if cfg.exclude_tests or cfg.exclude_test_scaffolds:
        check_test_sets(cfg.tdc_data_dir, cfg.allow_missing_tests)
    need = rows * dims * 4 * 2  # float32 targets, plus room for the batches built from them
    available = _available_memory()
    if available and need > 0.8 * available:
        raise ThisMachine(
            f"config.corpus: the teacher targets need about {need / 2**30:.1f} GiB in "
            f"memory, this machine has {available / 2**30:.1f} GiB available; lower "
            f"config.max_molecules"
        )


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock beside ``path``: trials sharing a store build it one at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_targets(cfg: Config, keys: list[str]) -> tuple[list[np.ndarray | None], list[int]]:
    """Per-molecule [atoms, sum of teacher dims] targets (``None`` where a teacher lacks one)."""
    from trainers.boltz_distill.teacher.rdkit_teachers import build_rdkit_store

    parts, dims = [], []
    for teacher in cfg.teachers:
        path = store_path(cfg, teacher)
        if teacher != "boltz2":
            with _locked(path):
                build_rdkit_store(teacher, keys, str(path), cfg.num_conformers, cfg.teacher_seed)
        store = EmbeddingStore(path)
        dims.append(store.dim)
        parts.append([store[k].astype(np.float32) if k in store else None for k in keys])
    targets = []
    for per_teacher in zip(*parts):
        if any(p is None for p in per_teacher):
            targets.append(None)
        else:
            targets.append(np.concatenate(per_teacher, axis=1))
    return targets, dims


def prepare(cfg: Config):
    """Graphs with targets, the train/val split and the target statistics (deterministic)."""
    sets: list[str] = []
    graphs, keys, _ = graphs_from_smiles(corpus_of(cfg, sets), what=f"corpus {cfg.corpus}")
    print(exclusion_line(sets, cfg.exclude_tests), flush=True)
    unique = {}
    for graph, key in zip(graphs, keys):
        unique.setdefault(key, graph)
    keys, graphs = list(unique), list(unique.values())
    targets, dims = load_targets(cfg, keys)
    kept = []
    for graph, target in zip(graphs, targets):
        if target is None or target.shape[0] != graph.num_nodes:
            continue
        graph.y = torch.from_numpy(target)
        kept.append(graph)
    missing = len(graphs) - len(kept)
    if missing:
        warnings.warn(
            f"{missing} of {len(graphs)} corpus molecules have no teacher embedding "
            f"(failed or not in the store); training on {len(kept)}"
        )
    if len(kept) < 10:
        raise UserError(f"only {len(kept)} corpus molecules have teacher embeddings; need at least 10")
    split = torch.Generator().manual_seed(cfg.seed)
    order = torch.randperm(len(kept), generator=split).tolist()
    n_val = max(1, round(cfg.val_fraction * len(kept)))
    val = [kept[i] for i in order[:n_val]]
    train = [kept[i] for i in order[n_val:]]
    all_y = torch.cat([g.y for g in train])
    mean, std = all_y.mean(0), all_y.std(0, unbiased=False)
    return train, val, mean, std, sum(dims), sets


@torch.no_grad()
def evaluate(model, graphs: GraphBank, mean, std, cfg: Config, device, batch_size: int = 256) -> dict[str, float]:
    """Atom-weighted validation loss, MSE and cosine terms over ``graphs``, and ``r2``: the
    share of the held-out standardized targets' variance the student explains,
    ``1 - sum (p - t)^2 / sum (t - mean_val(t))^2`` over atoms and dimensions."""
    model.eval()
    totals = {"loss": 0.0, "mse": 0.0, "cosine": 0.0}
    atoms, sse, t_sum, t_sq = 0, 0.0, 0.0, 0.0
    for start in range(0, len(graphs), batch_size):
        batch = graphs.batch(range(start, min(start + batch_size, len(graphs))))
        target = standardize(batch.y, mean, std)
        pred = model(batch)
        loss, parts = distill_loss(pred, target, cfg.mse_weight, cfg.cosine_weight)
        n = batch.num_nodes
        totals["loss"] += loss.item() * n
        totals["mse"] += parts["mse"].item() * n
        totals["cosine"] += parts["cosine"].item() * n
        atoms += n
        sse += float(((pred - target) ** 2).sum())
        t_sum = t_sum + target.double().sum(0)
        t_sq = t_sq + (target.double() ** 2).sum(0)
    model.train()
    sst = float((t_sq - t_sum**2 / atoms).sum())
    return {**{k: v / atoms for k, v in totals.items()}, "r2": 1.0 - sse / sst if sst > 0 else float("nan")}


def train_step(
    model, optimizer, graphs: GraphBank, idx: list[int], mean, std, cfg: Config, device, rank: int = 0, world: int = 1
) -> torch.Tensor:
    """One optimizer step on the global batch ``graphs[idx]``, of which this rank takes every
    ``world``-th molecule from position ``rank``; returns the global batch's loss (a tensor on
    the device: the loop reads it at a report, not every step). The batch is gathered from the
    graphs packed on the device (``batches.GraphBank``): no collation on the host.

    Data parallel without DDP's averaging: each rank's loss is its atoms' mean loss times
    ``its atoms / the global batch's atoms``, so the sum over ranks is the global batch's mean
    loss ``L`` (``loss.py``; every term is a mean over atoms), and summing the ranks' gradients
    (one all-reduce of the flattened gradients and loss) gives ``dL/dtheta`` exactly, up to
    floating point. The student has no cross-molecule operation (LayerNorm is per atom,
    pooling per molecule), so the result does not depend on ``world``.
    """
    mine = idx[rank::world]
    total_atoms = graphs.atoms(idx)
    optimizer.zero_grad(set_to_none=False)
    params = [p for p in model.parameters() if p.requires_grad]
    if mine:
        batch = graphs.batch(mine)
        loss, _ = distill_loss(model(batch), standardize(batch.y, mean, std), cfg.mse_weight, cfg.cosine_weight)
        loss = loss * (batch.num_nodes / total_atoms)
        loss.backward()
        value = loss.detach()
    else:
        value = torch.zeros((), device=device)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if world > 1:
        import torch.distributed as dist

        flat = torch.cat([p.grad.reshape(-1) for p in params] + [value.reshape(1)])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        value = flat[-1]
    optimizer.step()
    return value


def init_training(cfg: Config, out_dim: int, device):
    """The student, its optimizer and the batch-order generator, seeded by ``cfg.seed`` (the
    same on every rank)."""
    torch.manual_seed(cfg.seed)
    model = GINEStudent(cfg.width, cfg.depth, out_dim, cfg.dropout, cfg.head_layers, cfg.global_context).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return model, optimizer, torch.Generator().manual_seed(derive_seed(cfg.seed, "batches"))


def distill(cfg: Config, device=None) -> dict:
    """Distil a student outside a trial (no reports, no checkpoints): the same steps as
    ``train_loop`` on one worker; returns the state ``load_student`` reads."""
    device = device or torch.device("cpu")
    train, _, mean, std, out_dim, sets = prepare(cfg)
    train = GraphBank(train, device)
    model, optimizer, order_gen = init_training(cfg, out_dim, device)
    mean, std = mean.to(device), std.to(device)
    model.train()
    for _ in range(cfg.epochs):
        perm = torch.randperm(len(train), generator=order_gen).tolist()
        for pos in range(0, len(train), cfg.batch_size):
            train_step(model, optimizer, train, perm[pos : pos + cfg.batch_size], mean, std, cfg, device)
    return {
        "model": model.state_dict(),
        "out_dim": out_dim,
        "config": {**dataclasses.asdict(cfg), "teachers": list(cfg.teachers)},
        "target_mean": mean.cpu(),
        "target_std": std.cpu(),
        "excluded_test_sets": sets,
    }


@dataclasses.dataclass
class DistillState(LoopState):
    """What a boltz_distill checkpoint holds, each field saved and restored but the last five,
    which ``load_student`` reads to rebuild the student (and its targets' scale)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    order_rng: torch.Generator
    """The epochs' shuffles."""
    perm: torch.Tensor
    """This epoch's order of the training molecules."""
    rng: GlobalRNG = dataclasses.field(default_factory=GlobalRNG)
    step: int = 0
    epoch: int = 0
    pos: int = 0
    """Where in ``perm`` the next batch starts."""
    best_val_loss: float = math.inf
    """The lowest ``distill/val_loss`` reported so far ..."""
    best_step: int = 0
    """... at this step ..."""
    best_model: dict | None = None
    """... and the student's weights then: what ``load_student`` probes (not the newest weights)."""
    target_mean: torch.Tensor | None = saved_only()
    target_std: torch.Tensor | None = saved_only()
    out_dim: int = saved_only(0)
    excluded_test_sets: list | None = saved_only()
    config: dict = saved_only()


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    preflight(cfg)
    device = session.device()
    rank, world = session.world_rank(), session.world_size()
    train, val, mean, std, out_dim, sets = prepare(cfg)
    train, val = GraphBank(train, device), GraphBank(val, device)  # packed once: no collation per step
    mean, std = mean.to(device), std.to(device)

    model, optimizer, order_gen = init_training(cfg, out_dim, device)
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total_steps = cfg.epochs * steps_per_epoch
    st = DistillState(
        model,
        optimizer,
        order_gen,
        torch.randperm(len(train), generator=order_gen),
        target_mean=mean.cpu(),
        target_std=std.cpu(),
        out_dim=out_dim,
        excluded_test_sets=sets,
        config=config,
    )
    saved = session.restore()
    if saved is not None:
        st.load_state_dict(saved)

    model.train()
    running, running_n, molecules, busy = torch.zeros((), device=device), 0, 0, 0.0
    while st.step < total_steps:
        started = time.perf_counter()
        idx = st.perm[st.pos : st.pos + cfg.batch_size].tolist()
        running += train_step(model, optimizer, train, idx, mean, std, cfg, device, rank, world)
        running_n += 1
        molecules += len(idx)
        busy += time.perf_counter() - started
        st.step += 1
        st.pos += cfg.batch_size
        if st.pos >= len(train):
            st.epoch, st.pos = st.epoch + 1, 0
            st.perm = torch.randperm(len(train), generator=order_gen)
        step = st.step
        if step % cfg.report_every == 0 or step == total_steps:
            val_metrics = evaluate(model, val, mean, std, cfg, device)
            if val_metrics["loss"] < st.best_val_loss:
                st.best_val_loss, st.best_step = val_metrics["loss"], step
                st.best_model = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            session.report(
                {
                    "distill/loss": running.item() / running_n,
                    "distill/val_loss": val_metrics["loss"],
                    "distill/val_mse": val_metrics["mse"],
                    "distill/val_cosine": val_metrics["cosine"],
                    "distill/val_r2": val_metrics["r2"],
                    "distill/step": step,
                    "distill/epoch": step / steps_per_epoch,
                    "distill/molecules_per_s": molecules / busy,  # training steps only, all ranks
                },
                state=st.state_dict,
                checkpoint=True if step == total_steps else None,
            )
            running, running_n, molecules, busy = torch.zeros((), device=device), 0, 0, 0.0


def student_location(location: str, *parts: str) -> str:
    """A local path (``~`` and relative paths resolved) or a storage URI (``s3://...``), joined."""
    return RunFolder(user_location(location)).join(*parts)


def load_student(path: str | os.PathLike) -> tuple[GINEStudent, dict]:
    """The distilled student of a checkpoint folder (``state.pt``) or of a trial folder, local
    or at a storage URI (``s3://...``, read through pyarrow's filesystem as Ray's storage is).

    A trial folder's newest good checkpoint is read; the student is the weights with the
    lowest ``distill/val_loss`` that the trial reported (``DistillState.best_model``, carried in
    every checkpoint), not the newest weights; a student distilled outside a trial (``distill``,
    no validation) has only its final weights. ``state["probed_step"]`` says which.
    """
    location = student_location(str(path))
    found = load_at(location)
    if found is None:
        raise UserError(
            f"student_checkpoint: no boltz_distill checkpoint at {location} (expected a "
            f"folder with state.pt, or a trial folder with checkpoint folders)"
        )
    state = found[0]
    cfg = from_dict(Config, state["config"], f"{found[1]}/state.pt")
    model = GINEStudent(cfg.width, cfg.depth, state["out_dim"], cfg.dropout, cfg.head_layers, cfg.global_context)
    best = state.get("best_model")
    model.load_state_dict(best if best is not None else state["model"])
    state["probed_step"] = state.get("best_step") if best is not None else state.get("step")
    model.eval()
    return model, state
