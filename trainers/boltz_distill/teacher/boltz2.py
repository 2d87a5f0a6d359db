"""Boltz-2 as a teacher: per-heavy-atom ligand embeddings through the real ``boltz`` package.

Runs only where ``boltz`` is installed (its own environment, ``make boltz-env``). Every step is
boltz's own code: ``parse_boltz_schema`` reads the ligand SMILES (hydrogens added, atoms named,
an ETKDG conformer made), ``Boltz2Tokenizer`` and ``Boltz2Featurizer`` build the features,
``collate`` batches them, and the ``Boltz2`` model class, loaded from a checkpoint path as
``boltz predict`` loads it (``boltz2_checkpoint.load_boltz2``), runs its trunk. Nothing downloads.

Layers (``LAYERS``):

- ``trunk_s``: the trunk's single representation ``s`` after the Pairformer (default),
  ``token_s`` wide. Boltz tokenizes a ligand per heavy atom, so ligand token = heavy atom.
- ``atom_attention``: the learned per-atom representation, the second output ``q`` of
  ``input_embedder.atom_attention_encoder`` (after its windowed atom transformer, which
  attends over neighbours with a bias from reference-conformer distances), ``atom_s`` wide.
  Boltz itself pools it to tokens and discards the per-atom tensor; a forward hook keeps it.
- ``s_inputs``: the input embedder's output (before the trunk), ``token_s`` wide.
- ``atom_input`` (a control, not a representation Boltz learned much in): the atom encoder's
  per-atom ``q`` (forward hook on ``input_embedder.atom_encoder``), which is
  ``Linear(cat[ref_pos, ref_charge, ref_element, ref_atom_name_chars])``: a linear map of the
  raw inputs (uncentred conformer coordinates and atom-name characters included), ``atom_s``
  wide. ``raw_atom_inputs`` returns those inputs, so a least-squares fit can show it.

Atom mapping: the teacher passes the canonical SMILES (the store key) to boltz and maps each of
boltz's ligand atoms back to the RDKit atom index by its name (element + canonical rank, as
boltz names them; see ``chem.boltz_atom_names``). A molecule whose names do not match is
recorded as failed, never stored misaligned.

Determinism: boltz's parser embeds the reference conformer with an unseeded ETKDG. Its
featurizer's random roto-translation of reference coordinates loops over the reference spaces
but ``max(ref_space_uid)`` of a lone ligand is 0, so it does not run and the coordinates go in as
ETKDG wrote them; torch is seeded anyway for the ``--protein`` path. The teacher seeds ETKDG and
torch per molecule (``seed``), so a molecule's embedding does not depend on the run, the order
of molecules or a resume.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from raylab.errors import UserError
from trainers.boltz_distill.chem import boltz_atom_names
from trainers.boltz_distill.teacher.boltz2_checkpoint import (  # noqa: F401 - re-exported
    load_boltz2,
    predict_overrides,
    redraw_weights,
    small_hparams,
    small_overrides,
    standin_hparams,
    write_random_checkpoint,
)

LAYERS = ("trunk_s", "atom_attention", "s_inputs", "atom_input")
ATOM_LAYERS = ("atom_attention", "atom_input")
"""Layers with one row per featurized atom (the others have one per token)."""
LIGAND_CHAIN = "L"
PROTEIN_CHAIN = "A"


def raw_atom_inputs(batch: dict[str, Any]) -> np.ndarray:
    """The atom encoder's raw per-atom inputs, [atoms, 388]: ``cat[ref_pos, ref_charge,
    ref_element, ref_atom_name_chars]``, as ``AtomEncoder.forward`` concatenates them."""
    n = batch["ref_pos"].shape[1]
    parts = [
        batch["ref_pos"][0],
        batch["ref_charge"][0].unsqueeze(-1),
        batch["ref_element"][0],
        batch["ref_atom_name_chars"][0].reshape(n, -1),
    ]
    return torch.cat([p.float().cpu() for p in parts], dim=-1).numpy()


class _SeededAllChem:
    """``rdkit.Chem.AllChem`` whose ``ETKDGv3()`` carries a fixed random seed."""

    def __init__(self, module, seed: int):
        self._module = module
        self._seed = seed

    def __getattr__(self, name):
        return getattr(self._module, name)

    def ETKDGv3(self):  # noqa: N802 - the name boltz calls
        params = self._module.ETKDGv3()
        params.randomSeed = self._seed
        return params


@contextlib.contextmanager
def _seeded_boltz_conformers(seed: int):
    from boltz.data.parse import schema

    original = schema.AllChem
    schema.AllChem = _SeededAllChem(original, seed)
    try:
        yield
    finally:
        schema.AllChem = original


class Boltz2Teacher:
    """Embeds ligands (alone, or with one protein) with a Boltz-2 checkpoint."""

    def __init__(
        self,
        checkpoint: str | Path,
        layer: str = "trunk_s",
        device: str = "cpu",
        recycling_steps: int = 3,
        seed: int = 0,
        protein: str | None = None,
        msa: str | None = None,
        mol_dir: str | None = None,
        precision: str = "auto",
        trust_checkpoint: bool = False,
        overrides: dict | None = None,
    ):
        """``overrides``: the load arguments, ``boltz predict``'s by default (``predict_overrides``)."""
        if layer not in LAYERS:
            raise UserError(f"--layer {layer}: choose one of {', '.join(LAYERS)}")
        if protein and not mol_dir:
            raise UserError(
                "--protein needs --mol-dir: boltz's CCD molecule folder (the 'mols' "
                "directory that boltz downloads to ~/.boltz/mols)"
            )
        self.layer = layer
        self.device = torch.device(device)
        self.recycling_steps = recycling_steps
        self.seed = seed
        self.protein = protein
        self.msa = msa
        self.mol_dir = Path(mol_dir).expanduser() if mol_dir else None
        if precision == "auto":
            precision = "bf16-mixed" if self.device.type == "cuda" else "32"
        self.precision = precision
        self.model = load_boltz2(checkpoint, trust_checkpoint, overrides).to(self.device)
        hp = self.model.hparams
        self.dim = int(hp["atom_s"] if layer in ATOM_LAYERS else hp["token_s"])
        self._canonicals = None
        self._captured: dict[str, torch.Tensor] = {}
        embedder = self.model.input_embedder
        if layer == "atom_attention":  # outputs (a, q, c, to_keys): q is the per-atom output
            embedder.atom_attention_encoder.register_forward_hook(
                lambda _m, _i, out: self._captured.__setitem__("out", out[1])
            )
        elif layer == "atom_input":  # outputs (q, c, p, to_keys): q = Linear(raw atom features)
            embedder.atom_encoder.register_forward_hook(lambda _m, _i, out: self._captured.__setitem__("out", out[0]))
        elif layer == "s_inputs":
            embedder.register_forward_hook(lambda _m, _i, out: self._captured.__setitem__("out", out))

    def settings(self) -> dict[str, Any]:
        """What determines the embeddings (written into the store's meta.json)."""
        return {
            "teacher": "boltz2",
            "settings": {
                "layer": self.layer,
                "recycling_steps": self.recycling_steps,
                "seed": self.seed,
                "protein": self.protein or "",
                "msa": self.msa or "",
                "precision": self.precision,
                "hparams_token_s": int(self.model.hparams["token_s"]),
            },
        }

    def _schema(self, key: str) -> dict:
        sequences = [{"ligand": {"id": LIGAND_CHAIN, "smiles": key}}]
        if self.protein:
            sequences.insert(
                0, {"protein": {"id": PROTEIN_CHAIN, "sequence": self.protein, "msa": self.msa or "empty"}}
            )
        return {"version": 1, "sequences": sequences}

    def features(self, key: str) -> tuple[dict[str, Any], Any]:
        """Boltz's collated features of the ligand ``key`` and its tokenized structure."""
        from boltz.data import const
        from boltz.data.feature.featurizerv2 import Boltz2Featurizer
        from boltz.data.module.inferencev2 import collate
        from boltz.data.mol import load_canonicals
        from boltz.data.parse.schema import parse_boltz_schema
        from boltz.data.tokenize.boltz2 import Boltz2Tokenizer
        from boltz.data.types import Input

        with _seeded_boltz_conformers(self.seed), contextlib.redirect_stdout(None):
            target = parse_boltz_schema("ligand", self._schema(key), ccd={}, mol_dir=self.mol_dir, boltz_2=True)
        msas = {}
        if self.protein and self.msa and self.msa != "empty":
            msas[0] = self._parse_msa(Path(self.msa).expanduser(), const.max_msa_seqs)
            for chain in target.record.chains:
                if chain.chain_name == PROTEIN_CHAIN:
                    chain.msa_id = 0
        data = Input(
            target.structure,
            msas,
            record=target.record,
            residue_constraints=target.residue_constraints,
            templates=None,
            extra_mols=target.extra_mols,
        )
        tokenized = Boltz2Tokenizer().tokenize(data)
        molecules = {}
        if self.protein:
            if self._canonicals is None:
                self._canonicals = load_canonicals(str(self.mol_dir))
            molecules.update(self._canonicals)
        molecules.update(target.extra_mols)
        torch.manual_seed(self.seed)  # for the featurizer's roto-translation (runs with --protein only)
        feats = Boltz2Featurizer().process(
            tokenized,
            molecules=molecules,
            random=np.random.default_rng(self.seed),
            training=False,
            max_atoms=None,
            max_tokens=None,
            max_seqs=const.max_msa_seqs,
            pad_to_max_seqs=False,
            single_sequence_prop=0.0,
            compute_frames=True,
            inference_pocket_constraints=None,
            inference_contact_constraints=None,
            compute_constraint_features=True,
            override_method=None,
            compute_affinity=False,
        )
        return collate([feats]), tokenized

    @staticmethod
    def _parse_msa(path: Path, max_seqs: int):
        from boltz.data.parse.a3m import parse_a3m
        from boltz.data.parse.csv import parse_csv

        if not path.is_file():
            raise UserError(f"--msa {path}: no such file")
        if path.suffix == ".a3m":
            return parse_a3m(path, taxonomy=None, max_seqs=max_seqs)
        if path.suffix == ".csv":
            return parse_csv(path, max_seqs=max_seqs)
        raise UserError(f"--msa {path}: expected an .a3m or .csv file, or 'empty'")

    def ligand_rows(self, batch: dict[str, Any], tokenized) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Rows of the layer's output that hold the ligand's atoms, with boltz's names/elements.

        Returns ``(rows, names, elements)`` in boltz's ligand atom order.
        """
        tokens = tokenized.tokens
        chains = tokenized.structure.chains
        asym = int(chains["asym_id"][chains["name"] == LIGAND_CHAIN][0])
        token_rows = np.nonzero(tokens["asym_id"] == asym)[0]
        atom_idx = tokens["atom_idx"][token_rows]
        names = [str(n) for n in tokenized.structure.atoms["name"][atom_idx]]
        if self.layer not in ATOM_LAYERS:
            rows = token_rows
        else:
            # atom k of the featurized atoms belongs to token argmax(atom_to_token[k])
            atom_to_token = batch["atom_to_token"][0].argmax(-1).cpu().numpy()
            pad = batch["atom_pad_mask"][0].cpu().numpy() > 0
            first_atom = {}
            for k in np.nonzero(pad)[0]:
                first_atom.setdefault(int(atom_to_token[k]), int(k))
            rows = np.array([first_atom[int(t)] for t in token_rows])
        ref_element = batch["ref_element"][0].argmax(-1).cpu().numpy()
        atom_rows = (
            rows
            if self.layer in ATOM_LAYERS
            else np.array([int(np.nonzero(batch["atom_to_token"][0][:, t].cpu().numpy())[0][0]) for t in token_rows])
        )
        self._atom_rows = atom_rows
        return rows, names, ref_element[atom_rows]

    @torch.no_grad()
    def embed(self, key: str) -> tuple[np.ndarray, dict[str, Any]]:
        """The [heavy atoms, dim] embedding of ligand ``key`` (rows in RDKit atom order of key).

        Also returns what the mapping used (boltz's atom names and elements, per RDKit atom).
        Raises ``ValueError`` when boltz's atoms cannot be matched to RDKit's by name.
        """
        batch, tokenized = self.features(key)
        batch = {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        self._captured.clear()
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16-mixed")
        with autocast:
            out = self.model(batch, recycling_steps=self.recycling_steps)
        values = out["s"] if self.layer == "trunk_s" else self._captured["out"]
        values = values[0].float().cpu().numpy()
        rows, names, elements = self.ligand_rows(batch, tokenized)
        expected = boltz_atom_names(key)
        position = {name: i for i, name in enumerate(names)}
        if sorted(names) != sorted(expected) or len(set(names)) != len(names):
            raise ValueError(f"boltz atoms {names} do not match RDKit atoms {expected}")
        order = [position[name] for name in expected]
        embedding = values[rows[order]]
        mapping = {
            "names": [names[i] for i in order],
            "elements": elements[order].tolist(),
            "raw_inputs": raw_atom_inputs(batch)[self._atom_rows[order]],
        }
        return embedding, mapping
