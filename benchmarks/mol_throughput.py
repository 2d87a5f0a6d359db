"""Molecule throughput of boltz_distill: featurization, distillation training, store reads.

Side by side in one process, one run:

1. Featurization (molecules/s): raylab's Chemprop featurizer (``graphs_from_smiles``) on
   RDKit's NCI set; torch-geometric's own ``from_smiles`` (9 integer features) for reference.
2. Distillation training (molecules/s, training steps only): the boltz_distill train loop
   (``train_loop`` in a local session, descriptor teacher) against a plain torch-geometric loop
   (``DataLoader(shuffle=True)``, the same ``GINEStudent``, loss, optimizer, batch size and
   targets), alternating, best of ``--repeats`` each. Target: raylab >= 0.95x plain.
3. Embedding store reads (molecules/s and MB/s): every molecule of a store of random float16
   embeddings (Boltz-2's trunk width, 384), in random order, from a fresh reader.

    python benchmarks/mol_throughput.py [--molecules 2000] [--epochs 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch


def featurization(smiles: list[str]) -> tuple[float, float]:
    from torch_geometric.utils import from_smiles

    from trainers.boltz_distill.featurize import graphs_from_smiles

    start = time.perf_counter()
    graphs, _, _ = graphs_from_smiles(smiles)
    ours = len(graphs) / (time.perf_counter() - start)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n = sum(1 for s in smiles if from_smiles(s) is not None)
    pyg = n / (time.perf_counter() - start)
    return ours, pyg


def distillation(
    molecules: int, epochs: int, store_root: str, batch_size: int, width: int, depth: int, repeats: int = 2
):
    from torch_geometric.loader import DataLoader

    from raylab import session
    from trainers.boltz_distill.config import Config
    from trainers.boltz_distill.loop import prepare, train_loop
    from trainers.boltz_distill.loss import distill_loss, standardize
    from trainers.boltz_distill.model import GINEStudent

    config = dict(
        teachers=["descriptors"],
        corpus="nci",
        allow_missing_tests=True,
        max_molecules=molecules,
        epochs=epochs,
        width=width,
        depth=depth,
        batch_size=batch_size,
        report_every=10**9,
        store_root=store_root,
        seed=0,
    )
    cfg = Config(**{**config, "teachers": ("descriptors",)})
    train, _, mean, std, out_dim, _ = prepare(cfg)  # builds the teacher store once, untimed

    def raylab_loop() -> float:
        s = session.start(backend="local")
        train_loop(config)
        return s.history[-1]["distill/molecules_per_s"]

    def plain_loop() -> float:
        torch.manual_seed(0)
        model = GINEStudent(width, depth, out_dim)
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        loader = DataLoader(train, batch_size=batch_size, shuffle=True)
        seen, busy = 0, 0.0
        for _ in range(epochs):
            start = time.perf_counter()
            for batch in loader:
                loss, _ = distill_loss(model(batch), standardize(batch.y, mean, std))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                seen += batch.num_graphs
            busy += time.perf_counter() - start
        return seen / busy

    # alternate, best of `repeats` each: the same warm-up and the same machine load for both
    ours, plain = [], []
    for _ in range(repeats):
        ours.append(raylab_loop())
        plain.append(plain_loop())
    return max(ours), max(plain)


def store_reads(molecules: int, dim: int, root: Path) -> tuple[float, float]:
    from trainers.boltz_distill.embedding_store import EmbeddingStore, StoreWriter

    rng = np.random.default_rng(0)
    with StoreWriter(root, dim, {"teacher": "random"}, shard_size=1000) as writer:
        for i in range(molecules):
            writer.add(f"mol{i}", rng.normal(size=(int(rng.integers(10, 40)), dim)).astype(np.float32))
    order = rng.permutation(molecules)
    start = time.perf_counter()
    store = EmbeddingStore(root)
    nbytes = sum(store[f"mol{i}"].nbytes for i in order)
    took = time.perf_counter() - start
    return molecules / took, nbytes / took / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--molecules", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--width", type=int, default=300)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--repeats", type=int, default=2, help="alternating runs of each loop (best kept)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    from trainers.boltz_distill.chem import nci_smiles_path, read_smiles_file

    smiles = read_smiles_file(nci_smiles_path(), limit=args.molecules)
    print(f"{len(smiles)} NCI molecules, torch threads {torch.get_num_threads()}")
    ours, pyg = featurization(smiles)
    print(
        f"featurization   raylab (133+13 Chemprop features) {ours:9.0f} mol/s | "
        f"torch_geometric from_smiles (9+3 ints) {pyg:9.0f} mol/s | ratio {ours / pyg:.2f}x"
    )
    with tempfile.TemporaryDirectory() as tmp:
        ours, plain = distillation(
            args.molecules, args.epochs, f"{tmp}/stores", args.batch_size, args.width, args.depth, args.repeats
        )
        print(
            f"distillation    raylab train_loop {ours:9.0f} mol/s | plain torch_geometric loop "
            f"{plain:9.0f} mol/s | ratio {ours / plain:.2f}x (target >= 0.95x)"
        )
        per_s, mb_s = store_reads(5000, 384, Path(tmp) / "store")
        print(f"store reads     {per_s:9.0f} mol/s | {mb_s:7.1f} MB/s (5000 molecules x 10-40 atoms x 384 float16)")


if __name__ == "__main__":
    main()
