"""RDKit molecules to torch-geometric graphs, with Chemprop's atom and bond features.

Atom features (133, as Chemprop v1): one-hot atomic number (1-100, plus unknown), degree (0-5),
formal charge (-1, -2, 1, 2, 0), chiral tag (0-3), total hydrogens (0-4), hybridization (SP,
SP2, SP3, SP3D, SP3D2), each with an extra "other" slot; then aromaticity (0/1) and mass / 100.

Bond features (13): one-hot type (single, double, triple, aromatic), conjugated, in ring,
one-hot stereo (STEREONONE, ANY, Z, E, CIS, TRANS, plus other).

Each undirected bond becomes two directed edges (``i -> j`` and ``j -> i``, in that order) with
the same features. Node ``i`` is atom ``i`` of the molecule (see ``chem``).
"""

from __future__ import annotations

import numpy as np
import torch
from rdkit import Chem
from torch_geometric.data import Data

from trainers.boltz_distill.chem import parse_smiles

ATOMIC_NUMS = list(range(1, 101))
DEGREES = [0, 1, 2, 3, 4, 5]
FORMAL_CHARGES = [-1, -2, 1, 2, 0]
CHIRAL_TAGS = [0, 1, 2, 3]
NUM_HS = [0, 1, 2, 3, 4]
HYBRIDIZATIONS = [
    Chem.rdchem.HybridizationType.SP,
    Chem.rdchem.HybridizationType.SP2,
    Chem.rdchem.HybridizationType.SP3,
    Chem.rdchem.HybridizationType.SP3D,
    Chem.rdchem.HybridizationType.SP3D2,
]
BOND_TYPES = [
    Chem.rdchem.BondType.SINGLE,
    Chem.rdchem.BondType.DOUBLE,
    Chem.rdchem.BondType.TRIPLE,
    Chem.rdchem.BondType.AROMATIC,
]
STEREOS = [0, 1, 2, 3, 4, 5]

_ONE_HOTS = [
    ("atomic_num", ATOMIC_NUMS),
    ("degree", DEGREES),
    ("formal_charge", FORMAL_CHARGES),
    ("chiral_tag", CHIRAL_TAGS),
    ("num_hs", NUM_HS),
    ("hybridization", HYBRIDIZATIONS),
]
# Start offset of each one-hot block; each block has len(choices) + 1 slots (last = other).
ATOM_OFFSETS: dict[str, int] = {}
_offset = 0
for _name, _choices in _ONE_HOTS:
    ATOM_OFFSETS[_name] = _offset
    _offset += len(_choices) + 1
ATOM_OFFSETS["aromatic"] = _offset
ATOM_OFFSETS["mass"] = _offset + 1
ATOM_DIM = _offset + 2
"""133 atom features."""
BOND_OFFSETS = {"type": 0, "conjugated": 4, "ring": 5, "stereo": 6}
BOND_DIM = 6 + len(STEREOS) + 1
"""13 bond features."""

_LOOKUPS = {name: {v: i for i, v in enumerate(choices)} for name, choices in _ONE_HOTS}
_BOND_TYPE = {v: i for i, v in enumerate(BOND_TYPES)}


def _slot(name: str, value) -> int:
    table = _LOOKUPS[name]
    return ATOM_OFFSETS[name] + table.get(value, len(table))


def atom_features(atom: Chem.Atom) -> np.ndarray:
    """The 133 Chemprop features of one atom (float32)."""
    out = np.zeros(ATOM_DIM, dtype=np.float32)
    out[_slot("atomic_num", atom.GetAtomicNum())] = 1
    out[_slot("degree", atom.GetTotalDegree())] = 1
    out[_slot("formal_charge", atom.GetFormalCharge())] = 1
    out[_slot("chiral_tag", int(atom.GetChiralTag()))] = 1
    out[_slot("num_hs", atom.GetTotalNumHs())] = 1
    out[_slot("hybridization", atom.GetHybridization())] = 1
    out[ATOM_OFFSETS["aromatic"]] = float(atom.GetIsAromatic())
    out[ATOM_OFFSETS["mass"]] = atom.GetMass() * 0.01
    return out


def bond_features(bond: Chem.Bond) -> np.ndarray:
    """The 13 Chemprop features of one bond (float32); an unknown type sets no type slot."""
    out = np.zeros(BOND_DIM, dtype=np.float32)
    kind = _BOND_TYPE.get(bond.GetBondType())
    if kind is not None:
        out[BOND_OFFSETS["type"] + kind] = 1
    out[BOND_OFFSETS["conjugated"]] = float(bond.GetIsConjugated())
    out[BOND_OFFSETS["ring"]] = float(bond.IsInRing())
    stereo = int(bond.GetStereo())
    out[BOND_OFFSETS["stereo"] + (stereo if stereo in STEREOS else len(STEREOS))] = 1
    return out


def mol_to_graph(mol: Chem.Mol) -> Data:
    """One molecule as a graph: ``x`` [atoms, 133], ``edge_index`` [2, 2*bonds], ``edge_attr``."""
    x = np.stack([atom_features(a) for a in mol.GetAtoms()])
    bonds = list(mol.GetBonds())
    edge_index = np.zeros((2, 2 * len(bonds)), dtype=np.int64)
    edge_attr = np.zeros((2 * len(bonds), BOND_DIM), dtype=np.float32)
    for k, bond in enumerate(bonds):
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        edge_index[:, 2 * k] = (i, j)
        edge_index[:, 2 * k + 1] = (j, i)
        edge_attr[2 * k] = edge_attr[2 * k + 1] = bond_features(bond)
    return Data(
        x=torch.from_numpy(x),
        edge_index=torch.from_numpy(edge_index),
        edge_attr=torch.from_numpy(edge_attr),
        num_nodes=x.shape[0],
    )


def graphs_from_smiles(smiles, what: str = "input") -> tuple[list[Data], list[str], list[int]]:
    """Graphs of the valid SMILES (invalid ones skipped with one warning, see ``parse_smiles``).

    Returns ``(graphs, keys, kept)``; each graph carries its canonical SMILES as ``graph.smiles``.
    """
    keys, mols, kept = parse_smiles(smiles, what)
    graphs = []
    for key, mol in zip(keys, mols):
        graph = mol_to_graph(mol)
        graph.smiles = key
        graphs.append(graph)
    return graphs, keys, kept
