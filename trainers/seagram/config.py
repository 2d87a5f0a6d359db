"""Config of the seagram workload: NSGM victims and the solver-efficient SEAGRAM attack.

Defaults are the paper-scale setting (IsoNet protocol: 800 corpus graphs, 500 queries) for a
GPU cluster; the experiment's smoke section shrinks everything to run on two CPU cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raylab.config import UserPath, check, require_at_least


@dataclass(frozen=True)
class Config:
    # ---------------------------------------------------------------- data
    dataset: Literal["", "aids", "mutag", "ptc_fm", "ptc_fr", "ptc_mm", "ptc_mr"] = ""
    """A released IsoNet benchmark split (IsoNet++ ``large_dataset``, read from ``data_dir``:
    ``<data_dir>/large_dataset/splits/...``); empty: generate data from ``source``. The released
    data fixes the corpus, queries, labels and splits (the generation fields below are unused)."""
    verify_checksums: bool = True
    """Released data: check every file's SHA-256 against the released files'."""
    source: str = "nci"
    """Graph source: ``nci`` (the 5,000 NCI molecules RDKit ships, offline) or a TU dataset
    name read through torch-geometric's TUDataset (AIDS, MUTAG, PTC_FM, PTC_FR, PTC_MM,
    PTC_MR)."""
    data_dir: UserPath = "~/.cache/raylab/seagram"
    """Where TU datasets (``<data_dir>/<NAME>/raw/<NAME>_A.txt`` ...) or the released IsoNet
    splits (``<data_dir>/large_dataset/splits/``) live. A relative path is taken from the
    directory the run was started in."""
    cache_dir: UserPath = ""
    """Where generated retrieval datasets are cached (npz + json); empty: ``<data_dir>/cache``."""
    download: bool = False
    """Download a missing TU dataset (torch-geometric's URL) instead of failing."""
    n_corpus: int = 800
    """Corpus graphs (shared by all queries)."""
    n_queries: int = 500
    """Query graphs kept (those whose relevant:irrelevant ratio is in pos_ratio)."""
    corpus_nodes: tuple[int, int] = (16, 20)
    """Node count range of corpus graphs (BFS samples), inclusive."""
    query_nodes: tuple[int, int] = (7, 15)
    """Node count range of query graphs (BFS samples), inclusive."""
    pos_ratio: tuple[float, float] = (0.1, 0.4)
    """A query is kept when its ratio of relevant to irrelevant corpus graphs lies in this
    range (IsoNet's filter: 0.1-0.4, about 9-29% relevant)."""
    split: tuple[float, float, float] = (0.6, 0.15, 0.25)
    """Train/val/test fractions of the queries."""
    induced: bool = True
    """Relevance relation: induced subgraph isomorphism (True) or monomorphism (False)."""
    solver_budget: int = 200000
    """Per-call limit of the exact solver in node expansions (VF2 feasibility tests),
    deterministic; a call that runs out is "unknown", never a label. 0: no limit."""
    solver_timeout_s: float = 0.0
    """Optional per-call wall-clock limit in seconds (labels then depend on machine load); 0: none."""
    max_query_attempts: int = 20000
    """Query samples tried before data generation gives up."""
    nci_max_molecules: int = 5000
    """NCI molecules read as source graphs (source nci)."""
    data_seed: int = 0
    """Seed of the data generation (sampling and splits)."""
    # ---------------------------------------------------------------- victim
    victim: Literal["gmn", "neuromatch", "isonet", "isonet_node"] = "gmn"
    """Victim NSGM model: GMN cross-graph matching, NeuroMatch order embedding, IsoNet (edge
    alignment), or the node-alignment ablation ``isonet_node``."""
    hidden: int = 10
    """Victim node state width (IsoNet++: 10)."""
    layers: int = 5
    """Victim propagation steps / layers (IsoNet++: 5 for GMN and IsoNet)."""
    lr: float = 1e-3
    """Victim Adam learning rate."""
    weight_decay: float = 5e-4
    """Victim Adam weight decay (IsoNet++: 5e-4)."""
    patience: int = 10
    """Early stopping: evaluations (every report_every steps) without a validation MAP gain
    of es_tolerance before the victim stops; 0: run all victim_steps. Either way the
    best-validation model is restored."""
    es_tolerance: float = 1e-4
    """Early stopping: the smallest validation MAP gain that counts (IsoNet++: 1e-4)."""
    victim_steps: int = 10000
    """Victim optimizer steps."""
    queries_per_step: int = 16
    """Training queries per victim step."""
    pos_per_query: int = 8
    """Relevant corpus graphs sampled per query and step (with replacement)."""
    neg_per_query: int = 8
    """Irrelevant corpus graphs sampled per query and step (with replacement)."""
    margin: float = 0.5
    """Margin of the ranking hinge loss."""
    report_every: int = 500
    """Victim steps between reports (validation MAP, checkpoint at the experiment's cadence)."""
    # ---------------------------------------------------------------- attack
    attack: Literal["seagram", "greedy", "greedy_free", "random", "none"] = "seagram"
    """The attack this trial runs on the test pairs (``greedy_free``: greedy with no label
    check, the unconstrained reference); ``none``: the victim stage, which trains and
    checkpoints the victim and attacks nothing (``tune_configs/seagram_victims.yaml``)."""
    victim_from: UserPath = ""
    """A ``seagram_victims`` run (a path or a URI): load the victim of this trial's (dataset,
    victim, hidden, layers, seed) from it instead of training one (``trainers/seagram/victims.py``:
    a swept margin is chosen per dataset and victim on validation MAP). The victim training
    fields of this config are then unused. Empty: train the victim in this trial."""
    label_source: Literal["solver", "victim"] = "solver"
    """What SEAGRAM and greedy_free condition on (gain sign, classifier input): ``solver``, each
    test pair's true label (made by the solver at data generation; the attacker knows it), or
    ``victim``, the victim's predicted label (score at or above the threshold that best
    separates the train pairs; no test label needed). Greedy always checks true labels."""
    budget: int = 3
    """Edge flips per attacked (query, corpus graph) pair, at most."""
    top_k: int = 0
    """Per attack step and pair, score exactly only the top_k flips of largest first-order
    (gradient) gain; 0 scores every node pair exactly."""
    greedy_max_checks: int = 0
    """Greedy: solver checks per step and pair, at most (0: until a label-preserving flip)."""
    attack_queries: int = 0
    """Test queries attacked (the first ones of the test split); 0: all."""
    threshold: float = 0.8
    """SEAGRAM: a flip is allowed when p_noncritical >= threshold."""
    select: Literal["safest", "gain"] = "safest"
    """SEAGRAM: among allowed flips of positive gain take the most surely non-critical
    (safest) or the one of largest gain."""
    # ---------------------------------------------------------------- active learning
    al_budget: int = 2000
    """SEAGRAM: solver calls spent on training labels, in all."""
    al_init: int = 500
    """Of those, the random seed set labelled before the first round."""
    al_rounds: int = 10
    """Active-learning rounds sharing the rest of al_budget equally."""
    al_candidates: int = 8192
    """Pool flips scored per round; the most uncertain go to the solver."""
    al_pool: Literal["picks", "attack", "uniform"] = "picks"
    """Candidate flips of a round: ``picks``, the flip the SEAGRAM attack with the current
    classifier would take on each of al_candidates random train pairs (where a mistake becomes
    a label flip); ``attack``, flips of positive gain among an attack step's candidates;
    ``uniform``, uniform node pairs of random train pairs."""
    al_strategy: Literal["uncertainty", "random", "passive"] = "uncertainty"
    """Which flips are labelled: the most uncertain candidates (after the al_random_frac share
    drawn at random); all candidates at random (the pool still made by the current classifier
    under ``al_pool: picks``); or ``passive``, classifier-free: every label, the seed set
    included, a uniform node pair of a uniformly drawn train pair (``al_pool`` ignored)."""
    al_random_frac: float = 0.5
    """Share of each round's labels drawn at random from the candidates before uncertainty
    sampling picks the rest (exploration against the sampling bias of pure uncertainty)."""
    eval_candidates: int = 2000
    """SEAGRAM: held-out candidate flips (positive-gain flips of an attack step on random
    validation pairs, the same set for every arm of a seed and victim) labelled by the solver
    to judge the classifier threshold-free (``clf/auroc``, ``clf/precision_at_recall``); their
    solver calls are measurement (``clf/eval_calls``), not the attack's cost. 0: skip."""
    eval_recall: float = 0.5
    """The recall at which ``clf/precision_at_recall`` reads each classifier (one level for every
    arm; set it near the attack's own recall, ``clf/recall_at_threshold``)."""
    al_pos_frac: float = 0.5
    """Share of pool flips drawn from relevant train pairs."""
    witness_labels: int = 0
    """Extra flips labelled non-critical per solver "yes" on a relevant pair, certified by the
    witness embedding (no extra solver call); 0 disables."""
    clf_hidden: int = 64
    """Classifier hidden width."""
    clf_layers: int = 3
    """Classifier message-passing layers."""
    clf_members: int = 1
    """Classifier ensemble size (p_noncritical is the members' minimum)."""
    clf_lr: float = 1e-3
    """Classifier Adam learning rate."""
    clf_epochs_init: int = 30
    """Classifier epochs on the seed set."""
    clf_epochs: int = 10
    """Classifier epochs after each round (warm start)."""
    clf_batch: int = 64
    """Classifier minibatch size."""
    # ---------------------------------------------------------------- run
    seed: int = 0
    """Seed of the victim, the classifier, sampling and the random attack."""
    torch_threads: int = 0
    """torch intra-op threads; 0 leaves torch's default."""

    def __post_init__(self):
        lo, hi = self.corpus_nodes
        check(3 <= lo <= hi <= 64, "corpus_nodes", f"need 3 <= min <= max <= 64, got {list(self.corpus_nodes)}")
        qlo, qhi = self.query_nodes
        check(
            2 <= qlo <= qhi <= hi,
            "query_nodes",
            f"need 2 <= min <= max <= corpus max {hi}, got {list(self.query_nodes)}",
        )
        plo, phi = self.pos_ratio
        check(0 <= plo <= phi and phi > 0, "pos_ratio", f"need 0 <= min <= max, max > 0, got {list(self.pos_ratio)}")
        check(
            all(f >= 0 for f in self.split)
            and abs(sum(self.split) - 1) < 1e-6
            and self.split[0] > 0
            and self.split[2] > 0,
            "split",
            f"need train, val, test >= 0 summing to 1 (train, test > 0), got {list(self.split)}",
        )
        require_at_least(
            self,
            1,
            "n_corpus",
            "n_queries",
            "max_query_attempts",
            "nci_max_molecules",
            "hidden",
            "layers",
            "victim_steps",
            "queries_per_step",
            "pos_per_query",
            "neg_per_query",
            "report_every",
            "budget",
            "al_rounds",
            "al_candidates",
            "clf_hidden",
            "clf_layers",
            "clf_members",
            "clf_batch",
        )
        require_at_least(
            self,
            0,
            "solver_budget",
            "top_k",
            "greedy_max_checks",
            "attack_queries",
            "patience",
            "witness_labels",
            "eval_candidates",
            "clf_epochs_init",
            "clf_epochs",
            "torch_threads",
        )
        check(
            self.solver_timeout_s >= 0, "solver_timeout_s", f"must be >= 0 (0: no limit), got {self.solver_timeout_s}"
        )
        check(
            not (self.victim_from and self.attack == "none"),
            "victim_from",
            "a victim stage (attack: none) trains its victim; victim_from is for the attack experiments",
        )
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(self.es_tolerance >= 0, "es_tolerance", f"must be >= 0, got {self.es_tolerance}")
        check(self.clf_lr > 0, "clf_lr", f"must be > 0, got {self.clf_lr}")
        check(self.margin > 0, "margin", f"must be > 0, got {self.margin}")
        check(0 < self.threshold < 1, "threshold", f"must be in (0, 1), got {self.threshold}")
        check(0 < self.eval_recall <= 1, "eval_recall", f"must be in (0, 1], got {self.eval_recall}")
        check(0 < self.al_pos_frac < 1, "al_pos_frac", f"must be in (0, 1), got {self.al_pos_frac}")
        check(0 <= self.al_random_frac <= 1, "al_random_frac", f"must be in [0, 1], got {self.al_random_frac}")
        check(
            1 <= self.al_init <= self.al_budget,
            "al_init",
            f"must be in [1, al_budget={self.al_budget}], got {self.al_init}",
        )
        check(
            self.source == "nci" or self.source.replace("_", "").isalnum(),
            "source",
            f"must be nci or a TU dataset name, got {self.source!r}",
        )

    @property
    def al_per_round(self) -> int:
        """Solver calls (labels) per active-learning round."""
        return (self.al_budget - self.al_init) // self.al_rounds
