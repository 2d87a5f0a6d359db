"""The seagram train loop: data, victim training, attack training, attack evaluation.

Three phases, each resumable from its checkpoints:

1. ``victim``: the victim NSGM model is trained with the ranking hinge loss on the train
   queries; every ``report_every`` steps it reports the validation MAP and checkpoints (model,
   optimizer, sampler and RNG states, step);
2. ``attack_train`` (SEAGRAM only): the criticality classifier is trained by active learning;
   every round reports and checkpoints (classifier, optimizer, the labelled flips, the pool
   sampler and RNG states, solver counters);
3. ``eval``: the attack runs on every (test query, corpus graph) pair, the victim's MAP is
   measured on the attacked corpus, and the solver checks afterwards how many attacked pairs
   kept their label. One final report with every metric and a checkpoint marking the trial done.

Ray Tune wants the experiment's metric in every report: until the attack has run,
``attack/map`` is reported as NaN (not measured yet; the unattacked test MAP is ``victim/map``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from raylab import session
from raylab.checkpoint import GlobalRNG, LoopState, saved_only
from raylab.config import from_dict
from raylab.seeds import derive_seed
from trainers.seagram import attack as atk
from trainers.seagram.batches import TrainPairs
from trainers.seagram.config import Config
from trainers.seagram.data import RetrievalData, load_data
from trainers.seagram.loss import mean_average_precision, ranking_hinge_loss
from trainers.seagram.model import build_victim, dense_batch
from trainers.seagram.preflight import preflight
from trainers.seagram.solver import SolverStats, SubgraphSolver

PHASES = ("victim", "attack_train", "eval", "done")
NOT_YET = {"attack/map": float("nan"), "clf/auroc": float("nan")}
"""The experiments' metrics, in every row before the attack has measured them (Tune wants its
metric in every report): NaN, not measured yet."""


@dataclass
class SeagramState(LoopState):
    """What a seagram checkpoint holds, each field saved and restored."""

    victim: torch.nn.Module
    optimizer: torch.optim.Optimizer
    clf: torch.nn.Module
    """SEAGRAM's criticality classifier."""
    clf_optimizer: torch.optim.Optimizer
    victim_rng: np.random.Generator
    al_rng: np.random.Generator
    clf_gen: torch.Generator
    solver: SolverStats
    """What the subgraph solver spent labelling the classifier's training set."""
    early_stopping: EarlyStopping
    rng: GlobalRNG = field(default_factory=GlobalRNG)
    phase: str = "victim"
    """One of ``PHASES``."""
    step: int = 0
    round: int = 0
    """The active-learning round."""
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int64))
    """The classifier's labelled training set: (query, corpus, node, flip) rows ..."""
    targets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """... and their labels (-1: unknown)."""
    clean_map: float | None = None
    victim_seconds: float = 0.0
    al_seconds: float = 0.0
    clf_loss: float = float("nan")
    pairs_per_s: float = 0.0
    config: dict = saved_only()


@dataclass
class Trial:
    """What a seagram trial works with and never checkpoints: its settings, data, solver and the
    victim stage's state it was served (``victim_from``)."""

    cfg: Config
    device: torch.device
    data: RetrievalData
    data_metrics: dict
    """The data set's statistics, in every row."""
    test_queries: np.ndarray
    """The test queries the attack runs on (``attacked_queries``)."""
    solver: SubgraphSolver
    """The solver labelling the classifier's training set (its counters are ``State.solver``)."""
    served: tuple | None
    """With ``victim_from``: the victim stage's checkpointed state and trial."""

    @property
    def sizes(self) -> tuple[int, int]:
        return self.cfg.query_nodes[1], self.cfg.corpus_nodes[1]


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    preflight(cfg)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    t, st = build_trial(cfg, config)
    saved = session.restore()
    if saved is not None:
        st.load_state_dict(saved)
    if st.phase == "done":
        return
    served_victim(t, st)
    victim_training(t, st)
    if cfg.attack == "none":  # the victim stage: its checkpoint is the product
        victim_stage_row(t, st)
        return
    st.victim.eval()
    for p in st.victim.parameters():
        p.requires_grad_(False)
    active_learning(t, st)
    st.clf.eval()
    attack_and_measure(t, st)


def build_trial(cfg: Config, config: dict) -> tuple[Trial, SeagramState]:
    """The data, the victim (the victim stage's architecture when served one) and the classifier
    (each from its seeded initialization, in this order), generators and solver."""
    data = load_data(cfg)
    device = session.device()
    data_metrics = {
        "data/pos_rate": data.stats["pos_rate"],
        "data/pos_rate_test": data.stats["pos_rate_test"],
        "data/solver_calls": data.stats["solver"]["calls"],
        "data/queries_dropped_unknown": data.stats["queries_dropped_unknown"],
    }
    torch.manual_seed(cfg.seed)
    served = None
    if cfg.victim_from:
        from trainers.seagram.victims import load_victim_state

        served = load_victim_state(cfg)
        victim, _ = make_victim(served[1].config, data)  # its own edge slots (its budget)
    else:
        victim, _ = make_victim(cfg, data)
    victim = victim.to(device)
    optimizer = torch.optim.Adam(victim.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    torch.manual_seed(derive_seed(cfg.seed, "classifier-init"))
    clf = atk.CriticalityClassifier(cfg.clf_hidden, cfg.clf_layers, cfg.clf_members).to(device)
    clf_optimizer = torch.optim.Adam(clf.parameters(), lr=cfg.clf_lr)
    victim_rng = np.random.default_rng(derive_seed(cfg.seed, "victim"))
    al_rng = np.random.default_rng(derive_seed(cfg.seed, "active-learning"))
    clf_gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "classifier-batches"))
    solver = SubgraphSolver.from_config(cfg)
    stopping = EarlyStopping(cfg.patience, cfg.es_tolerance)
    st = SeagramState(
        victim, optimizer, clf, clf_optimizer, victim_rng, al_rng, clf_gen, solver.stats, stopping, config=config
    )
    return Trial(cfg, device, data, data_metrics, attacked_queries(cfg, data), solver, served), st


def served_victim(t: Trial, st: SeagramState) -> None:
    """Phase 1 with ``victim_from``: the victim stage's trained victim, loaded (no step taken),
    its clean test MAP measured; one row and a checkpoint."""
    if st.phase != "victim" or t.served is None:
        return
    state, found = t.served
    st.victim.load_state_dict(state["victim"])
    st.victim.eval()
    st.clean_map = split_map(st.victim, t.data, t.test_queries, *t.sizes)
    st.step, st.pairs_per_s = int(state["step"]), float(state["pairs_per_s"])
    st.victim_seconds = float(state["victim_seconds"])
    st.phase = next_phase(t.cfg)
    session.report(
        {
            "victim/step": st.step,
            "victim/map_val": found.map_val,
            "victim/best_step": int(state["early_stopping"]["best_step"]),
            "victim/pairs_per_s": st.pairs_per_s,
            "victim/margin": found.config.margin,
            "victim/map": st.clean_map,
            **NOT_YET,
            "train/phase": 0,
            **t.data_metrics,
        },
        state=st.state_dict,
        checkpoint=True,
    )


def victim_training(t: Trial, st: SeagramState) -> None:
    """Phase 1: the victim's ranking-loss steps; every ``report_every`` steps the validation
    MAP (early stopping on it) and a row; at the end the best model and its clean test MAP."""
    if st.phase != "victim":
        return
    cfg, victim, stopping = t.cfg, st.victim, st.early_stopping
    feed = TrainPairs.of(t.data, cfg, t.device)  # padded once on the device: no collation per step
    losses, pairs, started = [], 0, time.perf_counter()
    victim.train()
    while st.step < cfg.victim_steps:
        loss, n_pairs = victim_step(victim, st.optimizer, feed, cfg, st.victim_rng)
        losses.append(loss)
        pairs += n_pairs
        st.step += 1
        if st.step % cfg.report_every == 0 or st.step == cfg.victim_steps:
            st.victim_seconds += time.perf_counter() - started
            st.pairs_per_s = pairs / max(time.perf_counter() - started, 1e-9)
            victim.eval()
            map_val = split_map(victim, t.data, val_queries(t.data), *t.sizes)
            stopping.check(map_val, st.step, victim)
            last = st.step == cfg.victim_steps or stopping.stop
            if last:
                stopping.restore(victim)
                st.clean_map = split_map(victim, t.data, t.test_queries, *t.sizes)
                st.phase = next_phase(cfg)
            victim.train()
            session.report(
                {
                    "victim/loss": torch.stack(losses).double().mean().item(),
                    "victim/step": st.step,
                    "victim/map_val": map_val,
                    "victim/best_step": stopping.best_step,
                    "victim/pairs_per_s": st.pairs_per_s,
                    "victim/margin": cfg.margin,
                    **NOT_YET,
                    "train/phase": 0,
                    **t.data_metrics,
                    **({"victim/map": st.clean_map} if last else {}),
                },
                state=st.state_dict,
                # the victim stage checkpoints with its final row (victim_stage_row)
                checkpoint=(cfg.attack != "none") if last else None,
            )
            losses, pairs, started = [], 0, time.perf_counter()
            if last:
                break
    st.phase = next_phase(cfg)


def victim_stage_row(t: Trial, st: SeagramState) -> None:
    """The victim stage (``attack: none``): its final row and the checkpoint other trials load."""
    if st.phase != "done":
        return
    session.report(
        {
            "victim/map": st.clean_map,
            "victim/map_val": st.early_stopping.best,
            "victim/best_step": st.early_stopping.best_step,
            "victim/step": st.step,
            "victim/pairs_per_s": st.pairs_per_s,
            "victim/margin": t.cfg.margin,
            **NOT_YET,
            "train/phase": 2,
            **t.data_metrics,
        },
        state=st.state_dict,
        checkpoint=True,
    )


def active_learning(t: Trial, st: SeagramState) -> None:
    """Phase 2 (SEAGRAM only): the criticality classifier's active-learning rounds, a row and
    (after the last) a checkpoint each."""
    if st.phase != "attack_train":
        return
    cfg = t.cfg
    pool = flip_pool(t.data, cfg)
    while st.round <= cfg.al_rounds:
        started = time.perf_counter()
        st.rows, st.targets, loss = al_round(
            st.round, cfg, pool, st.clf, st.clf_optimizer, t.solver, st.al_rng, st.clf_gen, st.victim, st.rows,
            st.targets,
        )  # fmt: skip
        st.clf_loss = loss if loss is not None else st.clf_loss
        known = st.targets >= 0
        st.al_seconds += time.perf_counter() - started
        st.round += 1
        last = st.round > cfg.al_rounds
        if last:
            st.phase = "eval"
        session.report(
            {
                "seagram/al_round": st.round - 1,
                "seagram/labeled": int(known.sum()),
                "seagram/noncritical_rate": float(st.targets[known].mean()) if known.any() else 0.0,
                "seagram/clf_loss": st.clf_loss,
                "attack/solver_calls_train": t.solver.stats.calls,
                "attack/solver_unknown_train": t.solver.stats.unknown,
                "attack/train_s": st.al_seconds,
                **NOT_YET,
                "train/phase": 1,
                **t.data_metrics,
            },
            state=st.state_dict,
            checkpoint=True if last else None,
        )
    st.phase = "eval"


def attack_and_measure(t: Trial, st: SeagramState) -> None:
    """Phase 3: the attack on every (test query, corpus graph) pair, the held-out judgement of
    SEAGRAM's classifier; one final row with every metric and the checkpoint marking it done."""
    cfg = t.cfg
    metrics, checker = run_attack(cfg, t.data, st.victim, st.clf, t.test_queries)
    metrics["clf/auroc"] = float("nan")  # measured for SEAGRAM's classifier only
    if cfg.attack == "seagram" and cfg.eval_candidates:
        metrics.update(heldout_metrics(cfg, st.clf, *heldout_set(cfg, t.data, st.victim)))
    st.phase = "done"
    session.report(
        {
            **metrics,
            "victim/map": st.clean_map,
            "victim/pairs_per_s": st.pairs_per_s,
            "attack/solver_calls_train": t.solver.stats.calls,
            "attack/solver_s_train": t.solver.stats.seconds,
            "attack/train_s": st.al_seconds,
            "attack/label_check_calls": checker.stats.calls,
            "seagram/labeled": int((st.targets >= 0).sum()),
            "train/phase": 2,
            **t.data_metrics,
        },
        state=st.state_dict,
        checkpoint=True,
    )


def next_phase(cfg: Config) -> str:
    """The phase after the victim's: active learning for SEAGRAM, the attack for the others,
    nothing for the victim stage (``attack: none``)."""
    return {"seagram": "attack_train", "none": "done"}.get(cfg.attack, "eval")


class EarlyStopping:
    """Early stopping on validation MAP with restore of the best model (IsoNet++'s rule).

    An evaluation improves when ``map_val >= best + tolerance`` (the first always does); the
    best model's weights are kept. Training stops after more than ``patience`` evaluations in
    a row without improvement (``patience = 0``: never early); ``restore`` loads the best
    weights, whether training stopped early or ran to the end.
    """

    def __init__(self, patience: int, tolerance: float):
        self.patience, self.tolerance = patience, tolerance
        self.best, self.best_step, self.bad, self.weights = float("-inf"), 0, 0, None

    @property
    def stop(self) -> bool:
        return self.patience > 0 and self.bad > self.patience

    def check(self, map_val: float, step: int, model) -> bool:
        """Record one evaluation; returns whether it improved."""
        if self.weights is None or map_val >= self.best + self.tolerance:
            self.best, self.best_step, self.bad = map_val, step, 0
            self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
            return True
        self.bad += 1
        return False

    def restore(self, model) -> None:
        if self.weights is not None:
            model.load_state_dict(self.weights)

    def state_dict(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "bad": self.bad, "weights": self.weights}

    def load_state_dict(self, state: dict | None) -> None:
        if state:
            self.best, self.best_step, self.bad, self.weights = (
                state["best"],
                state["best_step"],
                state["bad"],
                state["weights"],
            )


def val_queries(data: RetrievalData) -> np.ndarray:
    """The validation queries (the train queries when the split has none)."""
    return data.splits["val"] if len(data.splits["val"]) else data.splits["train"]


def train_victim(victim, optimizer, data: RetrievalData, cfg: Config, rng: np.random.Generator) -> dict:
    """Train without a session (side-by-side studies): the same steps, evaluations every
    ``report_every`` steps and early stopping as ``train_loop``; restores the best model."""
    stopping = EarlyStopping(cfg.patience, cfg.es_tolerance)
    started, pairs, step = time.perf_counter(), 0, 0
    feed = TrainPairs.of(data, cfg, next(victim.parameters()).device)
    victim.train()
    while step < cfg.victim_steps and not stopping.stop:
        pairs += victim_step(victim, optimizer, feed, cfg, rng)[1]
        step += 1
        if step % cfg.report_every == 0 or step == cfg.victim_steps:
            victim.eval()
            stopping.check(
                split_map(victim, data, val_queries(data), cfg.query_nodes[1], cfg.corpus_nodes[1]), step, victim
            )
            victim.train()
    seconds = time.perf_counter() - started
    stopping.restore(victim)
    victim.eval()
    return {
        "pairs_per_s": pairs / seconds,
        "seconds": seconds,
        "steps": step,
        "best_step": stopping.best_step,
        "map_val": stopping.best,
    }


def make_victim(cfg: Config, data: RetrievalData):
    """The victim of ``cfg`` sized for ``data`` (IsoNet's edge slots: the most edges of any
    graph plus the flip budget) and its Adam optimizer (IsoNet++'s weight decay)."""
    max_edges = max(int(g.sum()) // 2 for g in data.corpus + data.queries) + cfg.budget
    victim = build_victim(cfg.victim, cfg.hidden, cfg.layers, cfg.corpus_nodes[1], max_edges)
    return victim, torch.optim.Adam(victim.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def victim_step(victim, optimizer, feed: TrainPairs, cfg: Config, rng: np.random.Generator):
    """One optimizer step of the ranking hinge loss on pairs drawn by ``rng`` and gathered on the
    device (``batches.TrainPairs``: the same batch as ``victim_batch``); returns ``(loss, pairs
    scored)``, the loss as a tensor on the device (read at the report, not every step)."""
    qa, qm, ca, cm, labels = feed.sample(rng)
    scores = victim(qa, qm, ca, cm)
    loss = ranking_hinge_loss(scores.view(labels.shape), labels, cfg.margin)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach(), labels.numel()


def flip_pool(data: RetrievalData, cfg: Config) -> atk.FlipPool:
    """The active-learning pool over the train queries and the corpus."""
    return atk.FlipPool(
        [data.queries[i] for i in data.splits["train"]],
        data.corpus,
        data.split_labels("train"),
        cfg.al_pos_frac,
        cfg.induced,
    )


def al_round(
    round_index: int,
    cfg: Config,
    pool: atk.FlipPool,
    clf,
    clf_optimizer,
    solver: SubgraphSolver,
    rng: np.random.Generator,
    clf_gen: torch.Generator,
    victim,
    rows: np.ndarray,
    targets: np.ndarray,
):
    """One active-learning round; returns the grown ``(rows, targets)`` and the training loss.

    Round 0 labels ``al_init`` random pool flips and trains ``clf_epochs_init`` epochs; round
    r >= 1 draws ``al_candidates`` pool flips and sends ``al_per_round`` of them to the solver:
    an ``al_random_frac`` share at random, the rest the most uncertain under the current
    classifier (``al_strategy: random``: all at random; ``passive``: uniform pool flips, all
    at random, no classifier in the choice); then ``clf_epochs`` more epochs.
    """
    n_query, n_corpus = cfg.query_nodes[1], cfg.corpus_nodes[1]
    if round_index == 0:
        new = sample_pool(pool, cfg, rng, cfg.al_init, victim, n_query, n_corpus)
        epochs = cfg.clf_epochs_init
    else:
        candidates = sample_pool(pool, cfg, rng, cfg.al_candidates, victim, n_query, n_corpus, clf)
        n_random = (
            cfg.al_per_round
            if cfg.al_strategy in ("random", "passive")
            else round(cfg.al_random_frac * cfg.al_per_round)
        )
        order = rng.permutation(len(candidates))
        pick, rest = order[:n_random], order[n_random:]
        if cfg.al_per_round > n_random and len(rest):
            batch = pool.batch(candidates[rest], n_query, n_corpus)
            prob = atk.noncritical_prob(
                clf,
                batch,
                torch.arange(len(rest)),
                torch.from_numpy(candidates[rest, 2]),
                torch.from_numpy(candidates[rest, 3]),
                aggregate="mean",
            )
            chosen = atk.select_uncertain(prob, cfg.al_per_round - n_random).numpy()
            pick = np.concatenate([pick, rest[chosen]])
        new = candidates[np.sort(pick)]
        epochs = cfg.clf_epochs
    new_rows, new_targets, _ = pool.label(new, solver, cfg.witness_labels, rng)
    rows = np.concatenate([rows, new_rows])
    targets = np.concatenate([targets, new_targets])
    known = targets >= 0
    loss = None
    if known.any() and epochs:
        labelled = rows[known]
        loss = atk.train_classifier(
            clf,
            clf_optimizer,
            pool.batch(labelled, n_query, n_corpus),
            torch.from_numpy(labelled[:, 2]),
            torch.from_numpy(labelled[:, 3]),
            torch.from_numpy(targets[known]),
            epochs,
            cfg.clf_batch,
            clf_gen,
        )
    clf.eval()
    return rows, targets, loss


def run_attack(cfg: Config, data: RetrievalData, victim, clf, test_queries: np.ndarray, attack: str | None = None):
    """Attack every (test query, corpus graph) pair with ``attack`` (default ``cfg.attack``).

    Returns the metrics of ``attack_metrics`` and the solver that checked the labels afterwards.
    """
    attack = attack or cfg.attack
    n_query, n_corpus = cfg.query_nodes[1], cfg.corpus_nodes[1]
    batch = atk.PairBatch.build(
        [data.queries[q] for q in test_queries for _ in data.corpus],
        [c for _ in test_queries for c in data.corpus],
        data.labels[test_queries].reshape(-1),
        n_query,
        n_corpus,
    )
    clean = atk.pair_scores(victim, batch).view(len(test_queries), -1)
    labels = torch.from_numpy(data.labels[test_queries])
    true_y = batch.y.clone()
    predicted = cfg.label_source == "victim" and attack in ("seagram", "greedy_free")
    extra = {}
    if predicted:
        threshold = fit_threshold(train_scores(victim, data, cfg), data.split_labels("train").reshape(-1))
        batch.y = (clean.reshape(-1) >= threshold).to(true_y.dtype)
        extra["attack/pred_label_acc"] = float((batch.y == true_y).float().mean())
    if attack == "random":
        outcome = atk.random_attack(batch, cfg.budget, np.random.default_rng(derive_seed(cfg.seed, "random-attack")))
    elif attack in ("greedy", "greedy_free"):
        outcome = atk.greedy_attack(
            victim,
            batch,
            cfg.budget,
            SubgraphSolver.from_config(cfg) if attack == "greedy" else None,
            max_checks=cfg.greedy_max_checks,
            top_k=cfg.top_k,
        )
    else:
        outcome = atk.seagram_attack(victim, clf, batch, cfg.budget, cfg.threshold, top_k=cfg.top_k, select=cfg.select)
    batch.y = true_y
    attacked = atk.pair_scores(victim, batch).view(len(test_queries), -1)
    checker = SubgraphSolver.from_config(cfg)
    metrics = attack_metrics(batch, outcome, atk.label_check(batch, outcome.flips, checker), clean, attacked, labels)
    # solver calls behind the labels the attack used: one per attacked pair at generation
    uses_labels = attack in ("greedy", "seagram", "greedy_free") and not predicted
    metrics["attack/solver_calls_labels"] = len(batch) if uses_labels else 0
    return {**metrics, **extra}, checker


def heldout_set(cfg: Config, data: RetrievalData, victim) -> tuple:
    """The held-out candidate flips that judge a classifier, labelled by the solver.

    ``eval_candidates`` flips of positive gain among an attack step's candidates on random
    (validation query, corpus graph) pairs (the train queries when there is no validation
    split), drawn by a generator of the seed alone: every arm of a seed and victim gets the
    same set. Returns ``(pool, rows, labels, solver calls)``; labels 1 = non-critical (the
    flip keeps the pair's relevance), unknown verdicts dropped.
    """
    queries = val_queries(data)
    pool = atk.FlipPool(
        [data.queries[i] for i in queries], data.corpus, data.labels[queries], cfg.al_pos_frac, cfg.induced
    )
    rng = np.random.default_rng(derive_seed(cfg.seed, "flip-pool"))
    per_pair = min(cfg.top_k, 8) if cfg.top_k else 8
    rows = pool.sample_attack(
        rng, cfg.eval_candidates, victim, max(1, -(-cfg.eval_candidates // per_pair)), cfg.top_k,
        cfg.query_nodes[1], cfg.corpus_nodes[1],
    )  # fmt: skip
    solver = SubgraphSolver.from_config(cfg)
    rows, labels, _ = pool.label(rows, solver)
    known = labels >= 0
    return pool, rows[known], labels[known], solver.stats.calls


def heldout_metrics(cfg: Config, clf, pool: atk.FlipPool, rows: np.ndarray, labels: np.ndarray, calls: int) -> dict:
    """The classifier on the held-out flips: AUROC, precision at ``eval_recall``, and recall and
    precision at the attack's threshold (``p_noncritical`` as the attack reads it: the ensemble's
    minimum)."""
    from trainers.seagram import al_metrics

    if not len(rows):
        nan = float("nan")
        return {"clf/auroc": nan, "clf/precision_at_recall": nan, "clf/recall_at_threshold": nan,
                "clf/precision_at_threshold": nan, "clf/eval_noncritical_rate": nan, "clf/eval_calls": calls}  # fmt: skip
    batch = pool.batch(rows, cfg.query_nodes[1], cfg.corpus_nodes[1])
    with torch.no_grad():
        prob = atk.noncritical_prob(
            clf, batch, torch.arange(len(rows)), torch.from_numpy(rows[:, 2]), torch.from_numpy(rows[:, 3])
        ).numpy()
    recall, precision = al_metrics.at_threshold(prob, labels, cfg.threshold)
    return {
        "clf/auroc": al_metrics.auroc(prob, labels),
        "clf/precision_at_recall": al_metrics.precision_at_recall(prob, labels, cfg.eval_recall),
        "clf/recall_at_threshold": recall,
        "clf/precision_at_threshold": precision,
        "clf/eval_noncritical_rate": float(labels.mean()),
        "clf/eval_calls": calls,
    }


def train_scores(victim, data: RetrievalData, cfg: Config) -> torch.Tensor:
    """The victim's scores of every (train query, corpus graph) pair, row-major."""
    queries = data.splits["train"]
    batch = atk.PairBatch.build(
        [data.queries[q] for q in queries for _ in data.corpus],
        [c for _ in queries for c in data.corpus],
        data.labels[queries].reshape(-1),
        cfg.query_nodes[1],
        cfg.corpus_nodes[1],
    )
    return atk.pair_scores(victim, batch)


def fit_threshold(scores: torch.Tensor, labels: np.ndarray) -> float:
    """The score threshold ``t`` maximizing the accuracy of ``[s >= t]`` against ``labels``.

    Candidates are the midpoints between consecutive distinct sorted scores (and +inf: all
    predicted irrelevant); the first best one (the highest threshold among ties) is returned.
    """
    s = scores.detach().double().cpu().numpy().reshape(-1)
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    # predicting the top k as relevant: correct = positives in top k + negatives below
    correct = np.concatenate([[0], np.cumsum(y)]) + (len(y) - np.sum(y)) - np.concatenate([[0], np.cumsum(1 - y)])
    boundary = np.concatenate([[True], s[1:] != s[:-1], [True]])  # cut only between distinct scores
    correct = np.where(boundary, correct, -1)
    k = int(np.argmax(correct))
    if k == 0:
        return float("inf")
    if k == len(s):
        return float(s[-1])
    return float((s[k - 1] + s[k]) / 2)


def attack_metrics(
    batch: atk.PairBatch,
    outcome: atk.AttackOutcome,
    after: torch.Tensor,
    clean: torch.Tensor,
    attacked: torch.Tensor,
    labels: torch.Tensor,
) -> dict:
    """The attack's metrics from its outcome, the labels after it and the victim's scores.

    ``attack/label_preserved``: among pairs the attack perturbed (at least one flip), the
    fraction whose solver label after the attack equals the label before (an unknown verdict
    counts as not preserved); 1.0 when no pair was perturbed. ``attack/map`` ranks the attacked
    corpus with the original labels (the attack's premise); ``attack/map_true_labels`` with the
    labels the solver gives after the attack (unknown: the original label).
    """
    perturbed = outcome.flips > 0
    kept = after == batch.y

    def frac(mask: torch.Tensor) -> float:
        return float(kept[mask].float().mean()) if mask.any() else 1.0

    true_labels = torch.where(after >= 0, after, batch.y).view(labels.shape)
    clean_map = mean_average_precision(clean, labels)
    attack_map = mean_average_precision(attacked, labels)
    return {
        "attack/map": attack_map,
        "attack/map_drop": clean_map - attack_map,
        "attack/map_true_labels": mean_average_precision(attacked, true_labels),
        "attack/label_preserved": frac(perturbed),
        "attack/label_preserved_pos": frac(perturbed & (batch.y == 1)),
        "attack/label_preserved_neg": frac(perturbed & (batch.y == 0)),
        "attack/label_unknown": int((after < 0).sum()),
        "attack/flips_mean": float(outcome.flips.float().mean()),
        "attack/perturbed_frac": float(perturbed.float().mean()),
        "attack/solver_calls_test": outcome.solver_calls,
        "attack/solver_unknown_test": outcome.solver_unknown,
        "attack/solver_s_test": outcome.solver_seconds,
        "attack/test_s": outcome.seconds,
        "attack/pairs": len(batch),
    }


def victim_batch(data: RetrievalData, cfg: Config, rng: np.random.Generator, n_query: int, n_corpus: int):
    """One training batch: queries_per_step train queries, each with pos/neg corpus samples,
    collated on the host (the reference ``batches.TrainPairs`` gathers the same on the device;
    ``benchmarks/graph_feed.py`` times both)."""
    train = data.splits["train"]
    queries = rng.choice(train, size=cfg.queries_per_step)
    qs, cs, labels = [], [], []
    for q in queries.tolist():
        pos = np.flatnonzero(data.labels[q] == 1)
        neg = np.flatnonzero(data.labels[q] == 0)
        picks = np.concatenate([rng.choice(pos, size=cfg.pos_per_query), rng.choice(neg, size=cfg.neg_per_query)])
        qs += [data.queries[q]] * len(picks)
        cs += [data.corpus[c] for c in picks.tolist()]
        labels.append(data.labels[q, picks])
    qa, qm = dense_batch(qs, n_query)
    ca, cm = dense_batch(cs, n_corpus)
    return qa, qm, ca, cm, torch.from_numpy(np.stack(labels).astype(np.int64))


def split_map(victim, data: RetrievalData, queries: np.ndarray, n_query: int, n_corpus: int) -> float:
    """MAP of the victim for ``queries`` over the whole corpus."""
    batch = atk.PairBatch.build(
        [data.queries[q] for q in queries for _ in data.corpus],
        [c for _ in queries for c in data.corpus],
        data.labels[queries].reshape(-1),
        n_query,
        n_corpus,
    )
    scores = atk.pair_scores(victim, batch).view(len(queries), -1)
    return mean_average_precision(scores, torch.from_numpy(data.labels[queries]))


def sample_pool(
    pool: atk.FlipPool, cfg: Config, rng: np.random.Generator, count: int, victim, n_query: int, n_corpus: int, clf=None
) -> np.ndarray:
    """About ``count`` pool flips of the kind ``al_pool`` names.

    ``uniform``: uniform node pairs of random train pairs; ``attack``: flips of positive gain
    among an attack step's candidates; ``picks``: the flip the SEAGRAM attack with the current
    classifier would take, on ``count`` random train pairs (the seed set, before there is a
    classifier, uses ``attack``).
    """
    if cfg.al_pool == "uniform" or cfg.al_strategy == "passive":
        return pool.sample(rng, count)
    if cfg.al_pool == "picks" and clf is not None:
        return pool.sample_picks(rng, count, victim, clf, cfg.top_k, n_query, n_corpus, cfg.select)
    per_pair = min(cfg.top_k, 8) if cfg.top_k else 8
    return pool.sample_attack(rng, count, victim, max(1, -(-count // per_pair)), cfg.top_k, n_query, n_corpus)


def train_seagram(cfg: Config, data: RetrievalData, victim) -> tuple:
    """Active learning of the criticality classifier for ``victim`` (phase 2 of ``train_loop``,
    no session); returns the classifier and its cost (solver calls and seconds, labels)."""
    torch.manual_seed(derive_seed(cfg.seed, "classifier-init"))
    clf = atk.CriticalityClassifier(cfg.clf_hidden, cfg.clf_layers, cfg.clf_members)
    clf_optimizer = torch.optim.Adam(clf.parameters(), lr=cfg.clf_lr)
    solver = SubgraphSolver.from_config(cfg)
    al_rng = np.random.default_rng(derive_seed(cfg.seed, "active-learning"))
    clf_gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "classifier-batches"))
    pool = flip_pool(data, cfg)
    rows, targets = np.zeros((0, 4), np.int64), np.zeros(0, np.int64)
    started = time.perf_counter()
    for r in range(cfg.al_rounds + 1):
        rows, targets, _ = al_round(r, cfg, pool, clf, clf_optimizer, solver, al_rng, clf_gen, victim, rows, targets)
    return clf, {
        "solver_calls": solver.stats.calls,
        "solver_s": solver.stats.seconds,
        "seconds": time.perf_counter() - started,
        "labeled": int((targets >= 0).sum()),
    }


def trained_victim(cfg: Config, data: RetrievalData) -> tuple:
    """A victim trained as ``train_loop`` trains it (early stopping, best model), frozen, and
    ``{"map": clean test MAP, ...training statistics}``."""
    torch.manual_seed(cfg.seed)
    victim, optimizer = make_victim(cfg, data)
    trained = train_victim(victim, optimizer, data, cfg, np.random.default_rng(derive_seed(cfg.seed, "victim")))
    for p in victim.parameters():
        p.requires_grad_(False)
    return victim, {
        "map": split_map(victim, data, attacked_queries(cfg, data), cfg.query_nodes[1], cfg.corpus_nodes[1]),
        **trained,
    }


def attacked_queries(cfg: Config, data: RetrievalData) -> np.ndarray:
    """The test queries the attacks run on (the first ``attack_queries``; 0: all)."""
    return data.splits["test"][: cfg.attack_queries] if cfg.attack_queries else data.splits["test"]


def compare_attacks(
    cfg: Config,
    data: RetrievalData,
    attacks=("random", "greedy", "seagram"),
    al_strategies: tuple[str, ...] = (),
    al_arms: dict[str, dict] | None = None,
    judge: bool = False,
) -> dict:
    """Train one victim, then run each attack on it; no session, no checkpoints.

    For side-by-side studies (the science test, ``benchmarks/seagram_cost.py``): the same
    phases as ``train_loop``, on one victim. Returns ``{attack: metrics}`` plus ``"victim"``
    (its clean test MAP, training pairs/s and seconds) and, with SEAGRAM, ``"seagram_train"``
    (solver calls and seconds of active learning). ``al_strategies``: SEAGRAM is also trained
    with each of these sampling strategies on the same victim, its results under
    ``"seagram_<strategy>"`` and ``"seagram_train_<strategy>"``; ``al_arms``, ``{name:
    overrides}``, the same for other settings (``"seagram_<name>"``), at the same al_budget.
    ``judge``: every SEAGRAM classifier is also scored on one held-out set of ``eval_candidates``
    solver-labelled flips (``heldout_metrics``, the ``clf/*`` metrics), and ``"heldout"`` holds
    its solver calls, its non-critical rate and an untrained classifier's scores (the control).
    """
    victim, clean = trained_victim(cfg, data)
    out = {"victim": clean}
    test_queries = attacked_queries(cfg, data)
    clf, heldout = None, None
    if "seagram" in attacks:
        heldout = heldout_set(cfg, data, victim) if judge and cfg.eval_candidates else None
        clf, out["seagram_train"] = train_seagram(cfg, data, victim)
        arms = {s: {"al_strategy": s} for s in al_strategies} | dict(al_arms or {})
        for name, overrides in arms.items():
            other = replace(cfg, **overrides)
            other_clf, out[f"seagram_train_{name}"] = train_seagram(other, data, victim)
            out[f"seagram_{name}"] = run_attack(other, data, victim, other_clf, test_queries, attack="seagram")[0]
            if heldout is not None:
                out[f"seagram_{name}"].update(heldout_metrics(other, other_clf, *heldout))
    for name in attacks:
        out[name] = run_attack(cfg, data, victim, clf, test_queries, attack=name)[0]
    if clf is not None and heldout is not None:
        out["seagram"].update(heldout_metrics(cfg, clf, *heldout))
        # the instrument's control: an untrained classifier (the same initialisation) on the same flips
        torch.manual_seed(derive_seed(cfg.seed, "classifier-init"))
        untrained = atk.CriticalityClassifier(cfg.clf_hidden, cfg.clf_layers, cfg.clf_members).eval()
        out["heldout"] = {
            "calls": heldout[3],
            "noncritical_rate": float(heldout[2].mean()) if len(heldout[2]) else float("nan"),
            "untrained": heldout_metrics(cfg, untrained, *heldout),
        }
    return out
