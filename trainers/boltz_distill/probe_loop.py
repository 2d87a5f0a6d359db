"""The admet_probe train loop: frozen molecule features, a linear or MLP probe, TDC's protocol."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch
from rdkit import Chem, DataStructs
from rdkit.Chem import Descriptors, rdFingerprintGenerator
from torch_geometric.data import Batch

from raylab import session
from raylab.checkpoint import rng_state, set_rng_state
from raylab.config import from_dict
from raylab.errors import UserError
from trainers.boltz_distill import data as tasks
from raylab.paths import user_path
from trainers.boltz_distill.chem import parse_smiles
from trainers.boltz_distill.config import ProbeConfig
from trainers.boltz_distill.featurize import mol_to_graph
from trainers.boltz_distill.model import GINEStudent
from trainers.boltz_distill.probe import (
    MLPProbe, Standardizer, better, linear_probe, mean_predictor, mlp_loss, score,
)
from trainers.boltz_distill.teachers import signed_log



def preflight(cfg: ProbeConfig) -> None:
    """Refuse before Ray starts: ADMET data missing offline, checkpoint or store missing."""
    if cfg.task in tasks.ADMET_METRICS and not cfg.download and tasks.admet_missing(cfg.data_dir, [cfg.task]):
        raise UserError(tasks.admet_missing_message(cfg.data_dir, cfg.task))
    if cfg.features == "student" and not cfg.student_checkpoint:
        raise UserError("config.student_checkpoint: features=student needs the distilled student's "
                        "checkpoint (a boltz_distill trial or checkpoint folder)")
    if cfg.features == "teacher" and not cfg.teacher_store:
        raise UserError("config.teacher_store: features=teacher needs a teacher embedding store")
    if cfg.features == "student":
        path = user_path(cfg.student_checkpoint)
        if not path.exists():
            raise UserError(f"config.student_checkpoint: {path} does not exist")
    if cfg.features == "teacher" and not (user_path(cfg.teacher_store) / "meta.json").is_file():
        raise UserError(f"config.teacher_store: no embedding store at {cfg.teacher_store}")


@torch.no_grad()
def student_features(model: GINEStudent, mols: list[Chem.Mol], batch_size: int = 256) -> torch.Tensor:
    model.eval()
    out = []
    for start in range(0, len(mols), batch_size):
        batch = Batch.from_data_list([mol_to_graph(m) for m in mols[start : start + batch_size]])
        out.append(model.pooled(batch))
    return torch.cat(out)


def morgan_features(mols: list[Chem.Mol], radius: int, bits: int) -> torch.Tensor:
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    out = np.zeros((len(mols), bits), dtype=np.float32)
    for i, mol in enumerate(mols):
        DataStructs.ConvertToNumpyArray(generator.GetFingerprint(mol), out[i])
    return torch.from_numpy(out)


def descriptor_features(mols: list[Chem.Mol]) -> torch.Tensor:
    names = [name for name, _ in Descriptors.descList]
    out = np.zeros((len(mols), len(names)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, mol in enumerate(mols):
            values = Descriptors.CalcMolDescriptors(mol, missingVal=0.0)
            out[i] = [values[n] for n in names]
    out = signed_log(np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0))
    return torch.from_numpy(out.astype(np.float32))


def teacher_features(store_dir: str, keys: list[str]) -> torch.Tensor:
    from trainers.boltz_distill.store import EmbeddingStore

    store = EmbeddingStore(user_path(store_dir))
    missing = store.missing(keys)
    if missing:
        raise UserError(
            f"config.teacher_store: {len(missing)} of {len(keys)} task molecules are not in "
            f"{store_dir} (e.g. {missing[0]}); run the teacher command on the task's SMILES "
            f"with --out {store_dir}"
        )
    return torch.from_numpy(np.stack([store[k].astype(np.float32).mean(0) for k in keys]))


def features(cfg: ProbeConfig, keys: list[str], mols: list[Chem.Mol]) -> torch.Tensor:
    """The frozen [molecules, dim] representation ``cfg.features`` of the molecules."""
    if cfg.features in ("student", "random_student"):
        from trainers.boltz_distill.loop import load_student

        if cfg.features == "student":
            model, _ = load_student(cfg.student_checkpoint)
        else:
            width, depth, out_dim = cfg.random_width, cfg.random_depth, 1
            if cfg.student_checkpoint:
                from trainers.boltz_distill.config import Config

                _, state = load_student(cfg.student_checkpoint)
                trained = from_dict(Config, state["config"], "student checkpoint")
                width, depth, out_dim = trained.width, trained.depth, state["out_dim"]
            torch.manual_seed(cfg.seed)
            model = GINEStudent(width, depth, out_dim)
        return student_features(model, mols)
    if cfg.features == "morgan":
        return morgan_features(mols, cfg.morgan_radius, cfg.morgan_bits)
    if cfg.features == "descriptors":
        return descriptor_features(mols)
    return teacher_features(cfg.teacher_store, keys)


def prepare(cfg: ProbeConfig):
    """Standardized features and labels of train / valid / test for this seed."""
    task = tasks.load_task(cfg.task, cfg.data_dir, cfg.download, cfg.expected_sha256)
    tv_keys, tv_mols, tv_kept = parse_smiles(task.train_val_smiles, f"{cfg.task} train_val")
    te_keys, te_mols, te_kept = parse_smiles(task.test_smiles, f"{cfg.task} test")
    tv_y, te_y = task.train_val_y[tv_kept], task.test_y[te_kept]
    train_idx, valid_idx = tasks.scaffold_split(tv_keys, cfg.seed)
    x = features(cfg, tv_keys + te_keys, tv_mols + te_mols).float()
    x_tv, x_te = x[: len(tv_keys)], x[len(tv_keys) :]
    scale = Standardizer.fit(x_tv[train_idx])
    y = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return (task, scale(x_tv[train_idx]), y(tv_y[train_idx]), scale(x_tv[valid_idx]), y(tv_y[valid_idx]),
            scale(x_te), te_y)


def train_loop(config: dict) -> None:
    cfg = from_dict(ProbeConfig, config, "trial config")
    preflight(cfg)
    task, x_tr, y_tr, x_va, y_va, x_te, y_te = prepare(cfg)
    metric, name = task.metric, tasks.metric_name(cfg.task)
    sign = -1.0 if metric == "mae" else 1.0
    baseline = score(metric, y_te, mean_predictor(y_tr.numpy(), len(y_te), metric))

    def row(test_pred, valid_value, epoch, train_loss):
        test_value = score(metric, y_te, test_pred)
        return {name: test_value, "probe/test/score": sign * test_value, "probe/valid/score": sign * valid_value,
                "probe/test/mean_predictor": baseline, "probe/epoch": epoch, "probe/train_loss": train_loss}

    if cfg.probe == "linear":
        pred, valid_value, _ = linear_probe(x_tr, y_tr, x_va, y_va, torch.cat([x_tr, x_te]), metric)
        fit = torch.as_tensor(pred[: len(y_tr)])
        train_loss = (torch.nn.functional.binary_cross_entropy_with_logits(fit, y_tr) if task.classification
                      else torch.nn.functional.mse_loss(fit, y_tr))
        session.report(row(pred[len(y_tr) :], valid_value, 0, train_loss.item()), checkpoint=False)
        return

    # MLP probe: standardized regression targets, mini-batches, early stopping on validation.
    classify = task.classification
    y_mean, y_std = (0.0, 1.0) if classify else (float(y_tr.mean()), float(y_tr.std().clamp_min(1e-8)))
    y_tr_fit = y_tr if classify else (y_tr - y_mean) / y_std
    torch.manual_seed(cfg.seed)
    model = MLPProbe(x_tr.shape[1], cfg.mlp_hidden, cfg.mlp_dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.mlp_lr, weight_decay=cfg.mlp_weight_decay)
    order_gen = torch.Generator().manual_seed(cfg.seed)
    epoch, best_valid, best_state, since_best = 0, float("nan"), copy.deepcopy(model.state_dict()), 0
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order_gen.set_state(state["order_rng"])
        set_rng_state(state["rng"])
        epoch, best_valid, best_state, since_best = (state["epoch"], state["best_valid"],
                                                     state["best_model"], state["since_best"])

    def predict(weights, x):
        probe = MLPProbe(x_tr.shape[1], cfg.mlp_hidden, cfg.mlp_dropout)
        probe.load_state_dict(weights)
        probe.eval()
        with torch.no_grad():
            out = probe(x)
        return (out if classify else out * y_std + y_mean).numpy()

    while epoch < cfg.mlp_epochs and since_best < cfg.mlp_patience:
        model.train()
        perm = torch.randperm(len(y_tr), generator=order_gen)
        total = 0.0
        for start in range(0, len(perm), cfg.mlp_batch_size):
            idx = perm[start : start + cfg.mlp_batch_size]
            loss = mlp_loss(model, x_tr[idx], y_tr_fit[idx], classify)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        epoch += 1
        valid_value = score(metric, y_va.numpy(), predict(model.state_dict(), x_va))
        if better(metric, valid_value, best_valid):
            best_valid, best_state, since_best = valid_value, copy.deepcopy(model.state_dict()), 0
        else:
            since_best += 1
        done = epoch >= cfg.mlp_epochs or since_best >= cfg.mlp_patience
        if epoch % cfg.report_every == 0 or done:
            session.report(
                row(predict(best_state, x_te), best_valid, epoch, total / len(y_tr)),
                state=lambda: {
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "order_rng": order_gen.get_state(), "rng": rng_state(), "epoch": epoch,
                    "best_valid": best_valid, "best_model": best_state, "since_best": since_best,
                    "config": config,
                },
                checkpoint=True if done else None,
            )
