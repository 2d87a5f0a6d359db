"""Models trained end to end on one task: the baselines a probe of a frozen representation faces.

- ``chemprop``: Chemprop's D-MPNN through the real ``chemprop`` package (v2), as its ``chemprop
  train`` command runs by default: bond message passing (hidden 300, depth 3, no dropout),
  ``norm`` aggregation (sum / 100), a one-hidden-layer FFN of 300, no batch norm, batch size
  64, 50 epochs with the Noam schedule (2 warm-up epochs, learning rate 1e-4 to 1e-3 to 1e-4),
  regression targets standardized on the training set, the epoch with the lowest ``val_loss``
  kept (Chemprop's default tracking metric, no early stopping), Chemprop's own (v2) atom and
  bond features.
- ``chemprop_rdkit``: the same D-MPNN with Chemprop-RDKit's extra molecule features: the 200
  RDKit 2D descriptors of ``descriptastorus``' ``RDKit2DNormalized`` (each mapped through the
  CDF descriptastorus ships for it, so in [0, 1]; Chemprop v1's ``--features_generator
  rdkit_2d_normalized``, v2's ``--molecule-featurizers v1_rdkit_2d_normalized``), computed with
  Chemprop's own ``V1RDKit2DNormalizedFeaturizer`` (``rdkit2d_normalized``), concatenated to the
  aggregated molecule vector before the FFN (``input_dim`` 300 + 200), missing values 0, and no
  further scaling (``--no_features_scaling``, as ADMET-AI's ``scripts/train_tdc_admet_group.py``
  trains its Chemprop-RDKit models on the TDC group).
- ``supervised_gine``: the same GINE encoder as the distilled student (``model.py``), from a
  random initialization, mean-pooled, with the MLP probe's head (``probe.MLPProbe``), trained
  end to end with Adam; the epoch with the best validation metric is kept (early stopping
  with ``patience``).

Each returns predictions for the test molecules (probabilities' logits or values), which the
probe loop scores with TDC's metric like every other row.
"""

from __future__ import annotations

import copy
import logging
import tempfile
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch

from trainers.boltz_distill.featurize import mol_to_graph
from trainers.boltz_distill.model import GINEStudent
from trainers.boltz_distill.probe import MLPProbe, better, score


@dataclass(frozen=True)
class EndToEnd:
    """Settings of an end-to-end model (defaults: Chemprop's ``train`` command)."""

    epochs: int = 50
    batch_size: int = 64
    seed: int = 0
    width: int = 300
    depth: int = 3
    patience: int = 20
    lr: float = 1e-3


def rdkit2d_normalized(mols) -> np.ndarray:
    """[molecules, 200] Chemprop-RDKit features: Chemprop's ``V1RDKit2DNormalizedFeaturizer``
    (descriptastorus' ``RDKit2DNormalized`` of the isomeric SMILES), NaN as 0 (as Chemprop's
    datapoints do), float32."""
    from chemprop import featurizers

    for name in ("descriptastorus", "chemprop"):
        logging.getLogger(name).setLevel(logging.ERROR)
    featurizer = featurizers.V1RDKit2DNormalizedFeaturizer()
    out = np.zeros((len(mols), len(featurizer)), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, mol in enumerate(mols):
            out[i] = np.nan_to_num(np.asarray(featurizer(mol), dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    return out


def chemprop_mpnn(d_xd: int, settings: EndToEnd, scaler=None):
    """Chemprop v2's default MPNN (``chemprop train``'s settings, above): a binary classifier, or
    with ``scaler`` (the training targets' ``StandardScaler``) a regressor that unscales its
    output. ``d_xd`` extra molecule features join the aggregated vector before the FFN, whose
    input is then ``settings.width + d_xd`` wide."""
    from chemprop import models, nn

    message_passing = nn.BondMessagePassing(d_h=settings.width, depth=settings.depth, dropout=0.0)
    aggregation = nn.NormAggregation(norm=100.0)
    input_dim = message_passing.output_dim + d_xd
    if scaler is None:
        head = nn.BinaryClassificationFFN(input_dim=input_dim, hidden_dim=300, n_layers=1)
    else:
        head = nn.RegressionFFN(
            input_dim=input_dim,
            hidden_dim=300,
            n_layers=1,
            output_transform=nn.UnscaleTransform.from_standard_scaler(scaler),
        )
    return models.MPNN(
        message_passing, aggregation, head, batch_norm=False, warmup_epochs=2, init_lr=1e-4, max_lr=1e-3, final_lr=1e-4
    )


def train_chemprop(
    train_smiles,
    train_y,
    valid_smiles,
    valid_y,
    test_smiles,
    classify: bool,
    settings: EndToEnd,
    x_d: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Chemprop v2's D-MPNN trained on train, the best ``val_loss`` epoch's test predictions.

    ``x_d``: extra molecule features of train, valid and test (Chemprop-RDKit's
    ``rdkit2d_normalized``), concatenated unscaled to the aggregated vector before the FFN."""
    import lightning.pytorch as pl
    from chemprop import data, featurizers, models
    from lightning.pytorch.callbacks import ModelCheckpoint

    for name in ("lightning", "lightning.pytorch", "chemprop"):  # Lightning's tips and banners
        logging.getLogger(name).setLevel(logging.ERROR)

    featurizer = featurizers.SimpleMoleculeMolGraphFeaturizer()

    def dataset(smiles, y, extra):
        points = [
            data.MoleculeDatapoint.from_smi(
                s, None if y is None else [float(y[i])], x_d=None if extra is None else extra[i].copy()
            )
            for i, s in enumerate(smiles)
        ]
        out = data.MoleculeDataset(points, featurizer)
        out.cache = True  # featurize once, as chemprop train does unless --no-cache
        return out

    extras = x_d if x_d is not None else (None, None, None)
    train, valid, test = (
        dataset(train_smiles, train_y, extras[0]),
        dataset(valid_smiles, valid_y, extras[1]),
        dataset(test_smiles, None, extras[2]),
    )
    scaler = None
    if not classify:
        scaler = train.normalize_targets()
        valid.normalize_targets(scaler)
    model = chemprop_mpnn(train.d_xd, settings, scaler)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lightning's advice on dataloader workers and loggers
        pl.seed_everything(settings.seed, verbose=False)
        best = ModelCheckpoint(dirpath=tmp, monitor="val_loss", mode="min", save_top_k=1)
        trainer = pl.Trainer(
            logger=False,
            callbacks=[best],
            accelerator="cpu",
            devices=1,
            max_epochs=settings.epochs,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(
            model,
            data.build_dataloader(train, batch_size=settings.batch_size, seed=settings.seed),
            data.build_dataloader(valid, batch_size=settings.batch_size, shuffle=False, drop_last=False),
        )
        model = models.MPNN.load_from_checkpoint(best.best_model_path, map_location="cpu")
    model.eval()
    with torch.no_grad():
        out = [
            model(batch.bmg, batch.V_d, batch.X_d)
            for batch in data.build_dataloader(test, batch_size=256, shuffle=False, drop_last=False)
        ]
    pred = torch.cat(out).squeeze(-1).numpy()
    if classify:  # the classification head returns probabilities: ranks are what the metrics use
        pred = np.log(np.clip(pred, 1e-12, 1.0)) - np.log(np.clip(1.0 - pred, 1e-12, 1.0))
    return pred


class SupervisedGINE(torch.nn.Module):
    """The student's GINE encoder, mean-pooled, under the MLP probe's head."""

    def __init__(self, width: int, depth: int, hidden: int, dropout: float):
        super().__init__()
        self.encoder = GINEStudent(width, depth, out_dim=1)
        self.head = MLPProbe(width, hidden, dropout)

    def forward(self, batch) -> torch.Tensor:
        return self.head(self.encoder.pooled(batch))


def train_gine(
    train_mols,
    train_y,
    valid_mols,
    valid_y,
    test_mols,
    metric: str,
    classify: bool,
    settings: EndToEnd,
    hidden: int = 256,
    dropout: float = 0.1,
) -> np.ndarray:
    """The GINE trained end to end; test predictions of the epoch with the best valid metric."""
    graphs = {
        name: [mol_to_graph(m) for m in mols]
        for name, mols in (("train", train_mols), ("valid", valid_mols), ("test", test_mols))
    }
    y_tr = torch.as_tensor(train_y, dtype=torch.float32)
    y_mean, y_std = (0.0, 1.0) if classify else (float(y_tr.mean()), float(y_tr.std().clamp_min(1e-8)))
    target = y_tr if classify else (y_tr - y_mean) / y_std
    torch.manual_seed(settings.seed)
    model = SupervisedGINE(settings.width, settings.depth, hidden, dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    order = torch.Generator().manual_seed(settings.seed)

    @torch.no_grad()
    def predict(part: str) -> np.ndarray:
        model.eval()
        out = [model(Batch.from_data_list(graphs[part][i : i + 256])) for i in range(0, len(graphs[part]), 256)]
        model.train()
        out = torch.cat(out)
        return (out if classify else out * y_std + y_mean).numpy()

    best_valid, best_state, since = float("nan"), copy.deepcopy(model.state_dict()), 0
    for _ in range(settings.epochs):
        perm = torch.randperm(len(y_tr), generator=order)
        for start in range(0, len(perm), settings.batch_size):
            idx = perm[start : start + settings.batch_size].tolist()
            out = model(Batch.from_data_list([graphs["train"][i] for i in idx]))
            loss = (
                torch.nn.functional.binary_cross_entropy_with_logits(out, target[idx])
                if classify
                else torch.nn.functional.mse_loss(out, target[idx])
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        valid_value = score(metric, np.asarray(valid_y), predict("valid"))
        if better(metric, valid_value, best_valid):
            best_valid, best_state, since = valid_value, copy.deepcopy(model.state_dict()), 0
        else:
            since += 1
            if since >= settings.patience:
                break
    model.load_state_dict(best_state)
    return predict("test")
