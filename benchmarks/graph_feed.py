"""Graph loops: time per training step with the batch collated on the host in the loop (as
before) against gathered on the device from graphs packed once, side by side in one run.

For each workload, three variants of the same optimizer step, in interleaved rounds (one block
of steps of each per round, so a machine's drift affects them alike; the median block is kept):

- ``host``: the batch built per step on the host (boltz_distill: ``Batch.from_data_list`` of
  the molecules, then ``to_device``; seagram: ``loop.victim_batch``'s padding, then the copy);
- ``device``: the loops' path now (``batches.GraphBank.batch``, ``batches.TrainPairs.sample``);
- ``fixed``: batches made before the clock starts (20 of them, drawn the same way) and cycled:
  the step with no feeding at all.

``device / fixed`` near 1 means the step no longer waits on building its batch. The batch
building alone is timed the same way (``build: host`` against ``build: device``). On a CPU the
"device" is host memory: the gather replaces Python-level collation with a few tensor index
operations. On a GPU the ``host`` variant also pays the copy, and the gather stays on the GPU.

    python benchmarks/graph_feed.py [--rounds 7] [--steps 10] [--threads 1] [--device auto]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
import warnings

import numpy as np
import torch


def timed(step, steps: int, device: torch.device) -> float:
    """Seconds per step over ``steps`` calls of ``step`` (CUDA synchronized at both ends)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / steps


def interleaved(variants: dict, rounds: int, steps: int, device: torch.device) -> dict[str, float]:
    for step in variants.values():  # warm-up, untimed
        step()
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, step in variants.items():
            times[name].append(timed(step, steps, device))
    return {name: statistics.median(values) for name, values in times.items()}


def boltz_distill(device: torch.device, molecules: int, batch_size: int, width: int, depth: int, target_dim: int):
    from torch_geometric.data import Batch

    from raylab.accel import to_device
    from trainers.boltz_distill.batches import GraphBank
    from trainers.boltz_distill.chem import nci_smiles_path, read_smiles_file
    from trainers.boltz_distill.featurize import graphs_from_smiles
    from trainers.boltz_distill.loss import distill_loss, standardize
    from trainers.boltz_distill.model import GINEStudent

    graphs, _, _ = graphs_from_smiles(read_smiles_file(nci_smiles_path(), limit=molecules))
    gen = torch.Generator().manual_seed(0)
    for graph in graphs:  # float16 values, as the teachers' stores hold (Boltz-2's trunk: 384 wide)
        graph.y = torch.randn(graph.num_nodes, target_dim, generator=gen).half().float()
    mean, std = torch.zeros(target_dim, device=device), torch.ones(target_dim, device=device)
    torch.manual_seed(0)
    model = GINEStudent(width, depth, target_dim).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    bank = GraphBank(graphs, device)
    rng = np.random.default_rng(0)
    made = itertools.cycle([bank.batch(rng.permutation(len(graphs))[:batch_size]) for _ in range(20)])

    def step(batch):
        loss, _ = distill_loss(model(batch), standardize(batch.y, mean, std))
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()

    def host_batch():
        idx = rng.permutation(len(graphs))[:batch_size]
        return to_device(Batch.from_data_list([graphs[i] for i in idx]), device)

    def gathered_batch():
        return bank.batch(rng.permutation(len(graphs))[:batch_size])

    atoms = sum(g.num_nodes for g in graphs) / len(graphs)
    label = (
        f"boltz_distill: GINE student {width} x {depth}, batches of {batch_size} NCI molecules "
        f"(about {atoms * batch_size:.0f} atoms), {target_dim}-wide targets"
    )
    return label, {
        "host": lambda: step(host_batch()),
        "device": lambda: step(gathered_batch()),
        "fixed": lambda: step(next(made)),
        "build: host": host_batch,
        "build: device": gathered_batch,
    }


def seagram(device: torch.device, corpus: int, queries: int, victim: str, queries_per_step: int):
    from raylab.accel import to_device
    from trainers.seagram.batches import TrainPairs
    from trainers.seagram.config import Config
    from trainers.seagram.data import RetrievalData
    from trainers.seagram.loop import victim_batch
    from trainers.seagram.loss import ranking_hinge_loss
    from trainers.seagram.model import build_victim

    cfg = Config(victim=victim, queries_per_step=queries_per_step)  # x (8 + 8) pairs, hidden 10, 5 layers
    rng = np.random.default_rng(0)

    def graph(n: int) -> np.ndarray:
        upper = np.triu(rng.random((n, n)) < 0.25, 1)
        return (upper | upper.T).astype(np.float32)

    nq, nc = cfg.query_nodes[1], cfg.corpus_nodes[1]
    data = RetrievalData(
        corpus=[graph(int(n)) for n in rng.integers(cfg.corpus_nodes[0], nc + 1, size=corpus)],
        queries=[graph(int(n)) for n in rng.integers(cfg.query_nodes[0], nq + 1, size=queries)],
        labels=(rng.random((queries, corpus)) < 0.25).astype(np.int8),
        stats={},
        spec=None,
        splits={"train": np.arange(queries), "val": np.arange(0), "test": np.arange(0)},
    )
    data.labels[:, :2] = [1, 0]  # every query has relevant and irrelevant graphs
    max_edges = max(int(g.sum()) // 2 for g in data.corpus + data.queries) + cfg.budget
    torch.manual_seed(0)
    model = build_victim(cfg.victim, cfg.hidden, cfg.layers, nc, max_edges).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    feed = TrainPairs.of(data, cfg, device)
    made = itertools.cycle([feed.sample(rng) for _ in range(20)])

    def step(qa, qm, ca, cm, labels):
        loss = ranking_hinge_loss(model(qa, qm, ca, cm).view(labels.shape), labels, cfg.margin)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def host_batch():
        return [to_device(t, device) for t in victim_batch(data, cfg, rng, nq, nc)]

    label = (
        f"seagram: {victim} victim (hidden {cfg.hidden}, {cfg.layers} layers), "
        f"{cfg.queries_per_step} x {cfg.pos_per_query + cfg.neg_per_query} pairs a step, "
        f"{queries} queries, {corpus} corpus graphs of up to {nc} nodes"
    )
    return label, {
        "host": lambda: step(*host_batch()),
        "device": lambda: step(*feed.sample(rng)),
        "fixed": lambda: step(*next(made)),
        "build: host": host_batch,
        "build: device": lambda: feed.sample(rng),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median kept)")
    p.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--molecules", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--width", type=int, default=300)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--target-dim", type=int, default=384)
    p.add_argument("--victim", default="gmn")
    p.add_argument("--corpus", type=int, default=100, help="seagram corpus graphs")
    p.add_argument("--queries", type=int, default=60, help="seagram query graphs")
    p.add_argument("--queries-per-step", type=int, default=16, help="seagram queries a step (Config's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    print(
        f"device {device}, torch threads {torch.get_num_threads()}, {args.rounds} rounds x "
        f"{args.steps} steps per variant, median ms per step"
    )
    for label, variants in (
        boltz_distill(device, args.molecules, args.batch_size, args.width, args.depth, args.target_dim),
        seagram(device, args.corpus, args.queries, args.victim, args.queries_per_step),
    ):
        ms = {name: 1000 * t for name, t in interleaved(variants, args.rounds, args.steps, device).items()}
        print(label)
        print(
            f"  host collation {ms['host']:8.2f} | device gather {ms['device']:8.2f} | fixed batch "
            f"{ms['fixed']:8.2f} | host / fixed {ms['host'] / ms['fixed']:.2f}x, device / fixed "
            f"{ms['device'] / ms['fixed']:.2f}x, host / device {ms['host'] / ms['device']:.2f}x"
        )
        print(
            f"  building the batch alone: host {ms['build: host']:8.3f} | device "
            f"{ms['build: device']:8.3f} | host / device {ms['build: host'] / ms['build: device']:.1f}x"
        )


if __name__ == "__main__":
    main()
