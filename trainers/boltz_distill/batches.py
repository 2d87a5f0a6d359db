"""Molecule graphs packed once on the training device and batched there by index.

``Batch.from_data_list`` collates a batch in Python on the host, every step, before the copy
to the GPU: the training step waits for it. ``GraphBank`` concatenates every graph's tensors
once, on ``device``: atom features ``x``, targets ``y`` (atoms along dim 0), bond features and
each edge's endpoints as indices local to its molecule (edges along dim 0 / 1), and keeps each
molecule's atom and edge counts. ``batch(indices)`` gathers molecules ``indices`` in that order
with a few index operations on the device (one copy of the indices there)::

    for molecule k of the batch (b = 0..B-1 in order), with n_k atoms and e_k edges:
        atoms of the batch    = atoms of molecule k, molecules back to back
        batch vector          = k repeated n_k times
        edge_index            = molecule k's local edge_index + sum_{j<k} n_j
        edge_attr             = molecule k's edges, back to back

the same tensors ``Batch.from_data_list([graphs[i] for i in indices])`` builds (tested
bit for bit), so training is unchanged. On a CPU the bank lives in host memory and the gather
replaces the collation there too.

Memory: everything the graphs hold, once. A float tensor whose every value a float16 holds
exactly (the teachers' targets: the stores are float16; bond features: 0/1) is kept as
float16 and widened to float32 when gathered, which is exact: 100,000 MOSES molecules (about
2.2M atoms) with Boltz-2's 384-wide trunk targets take about 2.9 GB, 1.2 GB of it the 133
atom features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from raylab.accel import to_device


@dataclass
class GraphBatch:
    """A batch of molecules with the fields the student and the loss read (a PyG ``Batch``'s)."""

    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    y: torch.Tensor | None
    batch: torch.Tensor
    """Each atom's molecule in the batch, 0..num_graphs-1."""
    num_graphs: int

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]


def _compact(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as float16 when that holds every value exactly, else unchanged."""
    if tensor.dtype == torch.float32 and torch.equal(tensor.half().float(), tensor):
        return tensor.half()
    return tensor


class GraphBank:
    """Graphs (``x``, ``edge_index``, ``edge_attr``, optional ``y``) packed once on ``device``."""

    def __init__(self, graphs: list, device: torch.device | str = "cpu"):
        if not graphs:
            raise ValueError("GraphBank needs at least one graph")
        self.device = torch.device(device)
        self.node_counts = np.array([g.num_nodes for g in graphs], dtype=np.int64)
        self.edge_counts = np.array([g.edge_index.shape[1] for g in graphs], dtype=np.int64)
        has_y = all(getattr(g, "y", None) is not None for g in graphs)
        host = {
            "x": torch.cat([g.x for g in graphs]),
            "edge_attr": _compact(torch.cat([g.edge_attr for g in graphs])),
            "edge_index": torch.cat([g.edge_index for g in graphs], dim=1),  # local to each molecule
            "node_start": torch.from_numpy(np.cumsum(self.node_counts) - self.node_counts),
            "edge_start": torch.from_numpy(np.cumsum(self.edge_counts) - self.edge_counts),
            "node_counts": torch.from_numpy(self.node_counts),
            "edge_counts": torch.from_numpy(self.edge_counts),
            **({"y": _compact(torch.cat([g.y for g in graphs]))} if has_y else {}),
        }
        # copied once, not pinned: pinning the whole bank would lock its size in host memory
        # (GBs per trial on a full corpus) for one copy that gains nothing from it
        self.tensors = {k: v.to(self.device) for k, v in host.items()}

    def __len__(self) -> int:
        return len(self.node_counts)

    def atoms(self, indices) -> int:
        """Atoms of the molecules ``indices`` (from host-side counts: no device sync)."""
        return int(self.node_counts[np.asarray(indices, dtype=np.int64)].sum())

    def batch(self, indices) -> GraphBatch:
        """Molecules ``indices`` (a list or 1-D integer array, in batch order), on the device."""
        idx = np.asarray(indices, dtype=np.int64)
        n_atoms, n_edges = int(self.node_counts[idx].sum()), int(self.edge_counts[idx].sum())
        t = self.tensors
        sel = to_device(torch.from_numpy(idx), self.device)
        graphs = torch.arange(len(idx), device=self.device)
        node_counts, edge_counts = t["node_counts"][sel], t["edge_counts"][sel]
        new_node_start = torch.cumsum(node_counts, 0) - node_counts
        new_edge_start = torch.cumsum(edge_counts, 0) - edge_counts
        node_of = torch.repeat_interleave(graphs, node_counts, output_size=n_atoms)
        edge_of = torch.repeat_interleave(graphs, edge_counts, output_size=n_edges)
        atoms = t["node_start"][sel][node_of] + torch.arange(n_atoms, device=self.device) - new_node_start[node_of]
        edges = t["edge_start"][sel][edge_of] + torch.arange(n_edges, device=self.device) - new_edge_start[edge_of]
        y = t["y"][atoms].float() if "y" in t else None
        return GraphBatch(
            x=t["x"][atoms].float(),
            edge_index=t["edge_index"][:, edges] + new_node_start[edge_of],
            edge_attr=t["edge_attr"][edges].float(),
            y=y,
            batch=node_of,
            num_graphs=len(idx),
        )
