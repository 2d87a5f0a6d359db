"""``python -m trainers.boltz_distill.teacher``: SMILES in, per-atom teacher embeddings out.

Writes an embedding store (see ``store``): sharded float16, keyed by canonical SMILES, one row
per heavy atom in RDKit atom order, resumable (run the same command again to continue).

    # Boltz-2 (in the boltz environment: make boltz-env), ligand alone, trunk single repr.
    .venv-boltz/bin/python -m trainers.boltz_distill.teacher --teacher boltz2 \\
        --checkpoint ~/.boltz/boltz2_conf.ckpt --smiles corpus.smi --out stores/boltz2_trunk_s
    # the atom encoder's output instead, with a protein (needs boltz's CCD 'mols' folder)
    ... --layer atom_attention --protein MKT...LE --mol-dir ~/.boltz/mols
    # across a cluster's GPUs, from the main environment: a Ray job, one task per chunk, resumable
    python -m trainers.boltz_distill.teacher --teacher boltz2 --checkpoint ~/.boltz/boltz2_conf.ckpt \
        --smiles moses --limit 100000 --out stores/boltz2_trunk_s --address auto
    # RDKit teachers (either environment)
    python -m trainers.boltz_distill.teacher --teacher conformer --smiles corpus.smi --out stores/conformer
    python -m trainers.boltz_distill.teacher --teacher descriptors --smiles corpus.smi --out stores/descriptors

``--smiles`` takes ``moses`` or ``nci`` (the corpora of ``corpus.py``, test-set molecules left
out as the distillation does), a .smi/.txt file (first field per line) or a .csv with a SMILES
column (``smiles``, ``Drug``...); without it, ``nci``.
``--write-random-checkpoint PATH`` saves a small randomly initialized Boltz-2 (for tests).
"""

from __future__ import annotations

import argparse
import sys
import time

from raylab.errors import UserError, exit_on_user_error
from trainers.boltz_distill.chem import parse_smiles, read_smiles_file
from trainers.boltz_distill.corpus import NAMED, corpus_smiles

TEACHERS = ("boltz2", "conformer", "descriptors")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainers.boltz_distill.teacher", description=__doc__.split("\n")[0])
    p.add_argument("--teacher", choices=TEACHERS, default="boltz2")
    p.add_argument(
        "--smiles",
        help="moses, nci (the corpora of corpus.py, test-set molecules left out) or a "
        "SMILES file (.smi, .txt, .csv); default: nci",
    )
    p.add_argument(
        "--tdc-data-dir",
        default="~/.cache/raylab/tdc",
        help="with --smiles moses/nci: where the ADMET test sets to leave out live",
    )
    p.add_argument(
        "--allow-missing-tests",
        action="store_true",
        help="with moses/nci: run although some ADMET test sets are missing (not excluded)",
    )
    p.add_argument("--out", help="store directory (created, or continued if it exists)")
    p.add_argument("--limit", type=int, default=0, help="use the first N molecules (0: all)")
    p.add_argument("--shard-size", type=int, default=1000, help="molecules per shard")
    p.add_argument("--seed", type=int, default=0, help="conformer/featurizer seed")
    g = p.add_argument_group("boltz2")
    g.add_argument("--checkpoint", help="Boltz-2 checkpoint (boltz2_conf.ckpt), downloaded by you")
    g.add_argument(
        "--layer",
        default="trunk_s",
        help="trunk_s (default), atom_attention, s_inputs, or atom_input (the linear input control)",
    )
    g.add_argument("--recycling-steps", type=int, default=3)
    g.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ...")
    g.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "32", "bf16-mixed"],
        help="auto: bf16-mixed on a GPU (as boltz predict), 32 on a CPU",
    )
    g.add_argument("--protein", help="a protein sequence to co-fold each ligand with")
    g.add_argument("--msa", help="the protein's MSA (.a3m or .csv); default: single sequence")
    g.add_argument("--mol-dir", help="boltz's CCD molecule folder (needed with --protein)")
    g.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="unpickle the checkpoint fully, as boltz predict does (default: weights only, OmegaConf classes allowed)",
    )
    g.add_argument(
        "--write-random-checkpoint",
        metavar="PATH",
        help="save a small randomly initialized Boltz-2 as a training run saves one, and exit (tests)",
    )
    from trainers.boltz_distill.teacher.ray_job import add_arguments

    add_arguments(p)
    g = p.add_argument_group("conformer")
    g.add_argument("--num-conformers", type=int, default=4)
    g.add_argument("--workers", type=int, default=1, help="processes for the RDKit teachers")
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.write_random_checkpoint:
        from trainers.boltz_distill.teacher.boltz2 import write_random_checkpoint

        print(write_random_checkpoint(args.write_random_checkpoint, seed=args.seed))
        return 0
    if not args.out:
        raise UserError("--out: name the store directory to write")
    source = args.smiles or "nci"
    if source in NAMED:
        from trainers.boltz_distill.corpus import exclusion_line

        sets: list[str] = []
        smiles = corpus_smiles(
            source,
            args.limit,
            exclude_tests=True,
            tdc_data_dir=args.tdc_data_dir,
            allow_missing_tests=args.allow_missing_tests,
            excluded_sets=sets,
        )
        print(exclusion_line(sets))
    else:
        smiles = read_smiles_file(source, limit=args.limit)
    started = time.time()
    if args.teacher == "boltz2" and args.address:
        from trainers.boltz_distill.teacher.ray_job import run

        keys, _, _ = parse_smiles(smiles, what=str(source))
        counts = run(args, keys)
    elif args.teacher == "boltz2":
        counts = run_boltz2(args, smiles)
    else:
        from trainers.boltz_distill.teacher.rdkit_teachers import build_rdkit_store

        counts = build_rdkit_store(
            args.teacher,
            smiles,
            args.out,
            args.num_conformers,
            args.seed,
            workers=args.workers,
            shard_size=args.shard_size,
        )
    took = time.time() - started
    print(
        f"{args.teacher} -> {args.out}: {counts['written']} written, {counts['skipped']} already "
        f"there, {counts['failed']} failed ({took:.1f} s)"
    )
    return 0


def run_boltz2(args: argparse.Namespace, smiles: list[str]) -> dict[str, int]:
    """Embed every molecule with Boltz-2 into the store ``args.out`` (resumable)."""
    import importlib.util

    if importlib.util.find_spec("boltz") is None:
        raise UserError(
            f"--teacher boltz2 needs the boltz package, which {sys.executable} lacks; "
            f"create its environment with 'make boltz-env' and run .venv-boltz/bin/python"
        )
    from trainers.boltz_distill.embedding_store import StoreWriter
    from trainers.boltz_distill.teacher.boltz2 import Boltz2Teacher

    if not args.checkpoint:
        raise UserError("--teacher boltz2 needs --checkpoint PATH (boltz2_conf.ckpt)")
    teacher = Boltz2Teacher(
        args.checkpoint,
        layer=args.layer,
        device=args.device,
        recycling_steps=args.recycling_steps,
        seed=args.seed,
        protein=args.protein,
        msa=args.msa,
        mol_dir=args.mol_dir,
        precision=args.precision,
        trust_checkpoint=args.trust_checkpoint,
    )
    keys, _, _ = parse_smiles(smiles, what=str(args.smiles or "NCI"))
    counts = {"written": 0, "skipped": 0, "failed": 0}
    last = time.time()
    with StoreWriter(args.out, teacher.dim, teacher.settings(), shard_size=args.shard_size) as writer:
        todo = [k for k in dict.fromkeys(keys) if k not in writer]
        counts["skipped"] = len(dict.fromkeys(keys)) - len(todo)
        for done, key in enumerate(todo, 1):
            try:
                embedding, _ = teacher.embed(key)
            except Exception as err:  # noqa: BLE001 - one molecule must not stop the run
                writer.fail(key, f"{type(err).__name__}: {err}")
                counts["failed"] += 1
                print(f"boltz2: failed on {key}: {err}", file=sys.stderr)
            else:
                writer.add(key, embedding)
                counts["written"] += 1
            if time.time() - last > 30:
                last = time.time()
                print(f"boltz2: {done}/{len(todo)} molecules", file=sys.stderr)
    return counts
