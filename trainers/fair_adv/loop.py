"""The fair_adv train loop: adversarial training on CIFAR, evaluated per class every epoch.

Each epoch: train one pass over the training split with the configured method; evaluate
clean and PGD-20 accuracy per class on the validation split (held out from the training set)
and on the test set; keep the model that the selection rule (``select_by``: worst-class or
average robust accuracy on validation) ranks best next to the last one; report. FRL runs in two stages, as its authors do: the first
``epochs - frl_finetune_epochs`` epochs train the plain base loss (PGD-AT or TRADES) under the
usual schedule, and the rest fine-tune the first stage's best-validation model (with a fresh
optimizer, as the reference loads its pre-trained model into a new SGD) at ``frl_lr`` with
class weights whose multipliers are updated before every fine-tuning epoch from the current
model's validation errors. FRL's best model is the best of its fine-tuning epochs (its own
fine-tuned model, even when the stage-1 model scored higher on validation). After
the last epoch the best model (and with ``final_eval_last`` the last one) is evaluated once
more on the test set with CW-inf and (unless ``autoattack: off``) AutoAttack (``final/*``).

With several Ray Train workers each takes its part of every batch (``step.Shard``); the
history, the validation errors and so the class weights are global (all-reduced).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch

from raylab import session
from raylab.accel import compiled, enabled, fixed_shapes
from raylab.checkpoint import GlobalRNG, LoopState, on_device, saved_only
from raylab.config import from_dict
from raylab.data import augment
from raylab.data.cifar import ImageData, check_cifar, prepare_cifar
from raylab.data.digits import find_digits, load_digits
from raylab.errors import UserError
from raylab.seeds import derive_seed
from raylab.workloads import require_modules
from trainers.fair_adv import attack, metrics, reweight
from trainers.fair_adv.config import DIGITS, Config
from trainers.fair_adv.model import build_model
from trainers.fair_adv.step import FrlWeights, History, Shard, train_epoch

CIFAR_TRAIN_SIZE = 50_000


def preflight(cfg: Config) -> None:
    """Refuse, before Ray starts, a config this machine cannot run (named file/key/value)."""
    if cfg.dataset in DIGITS:
        find_digits(cfg.dataset, cfg.data_dir, extra="fair_adv")  # its package is in this workload's extra
        n_train = len(load_digits(cfg.dataset, cfg.data_dir).train_y)  # checks the SHA-256 too
    elif not cfg.synthetic_data:
        check_cifar(cfg.dataset, cfg.data_dir, cfg.download)
    if cfg.dataset not in DIGITS:
        n_train = cfg.synthetic_train if cfg.synthetic_data else CIFAR_TRAIN_SIZE
    if cfg.val_size >= n_train:
        raise UserError(f"config: val_size: {cfg.val_size} leaves no training images out of {n_train}")
    classes = 100 if cfg.dataset == "cifar100" else 10
    if cfg.val_size < classes:
        raise UserError(
            f"config: val_size: {cfg.val_size} is fewer than one image per class ({classes} classes of {cfg.dataset})"
        )
    if cfg.autoattack == "on":
        require_modules("fair_adv", ["pyautoattack"], why="for autoattack: 'on'", otherwise="or set autoattack: 'off'")
    return True


def load_data(cfg: Config) -> ImageData:
    """The config's dataset as uint8 images: CIFAR (real or synthetic) or the shipped digits."""
    if cfg.dataset in DIGITS:
        return load_digits(cfg.dataset, cfg.data_dir)
    return prepare_cifar(
        cfg.dataset, cfg.data_dir, cfg.download, cfg.synthetic_data, cfg.synthetic_train, cfg.synthetic_test
    )


def split_validation(y: torch.Tensor, val_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class-stratified split of indices ``0..len(y)-1`` into (train, validation).

    Samples are shuffled with ``seed``; each gets its rank within its class divided by the
    class size; the ``val_size`` smallest go to validation, so every class gives its share.
    """
    n = len(y)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    y_perm = y[perm]
    order = torch.argsort(y_perm, stable=True)  # class by class, shuffled within each class
    counts = torch.bincount(y_perm)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty(n, dtype=torch.float64)
    rank[order] = (torch.arange(n) - starts[y_perm[order]]).double()
    score = rank / counts[y_perm].double()
    chosen = torch.argsort(score, stable=True)
    val = perm[chosen[:val_size]].sort().values
    train = perm[chosen[val_size:]].sort().values
    return train, val


def test_subset(y: torch.Tensor, size: int | None) -> torch.Tensor:
    """Indices of a class-stratified subset of ``size`` test examples (all of them for None)."""
    if size is None or size >= len(y):
        return torch.arange(len(y))
    return split_validation(y, size, seed=0)[1]


def lr_at(cfg: Config, epoch: int) -> float:
    """Step decay: ``lr * gamma^(number of milestones <= epoch)``."""
    return cfg.lr * cfg.lr_gamma ** sum(epoch >= m for m in cfg.lr_milestones)


def frl_state(lam: dict[str, torch.Tensor], cfg: Config) -> FrlWeights:
    """The class weights of FRL's next fine-tuning epoch from its multipliers."""
    return FrlWeights(
        nat=reweight.frl_class_weights(lam["nat"]).float(),
        bndy=reweight.frl_class_weights(lam["bndy"]).float(),
        eps_scale=reweight.frl_margin_scale(lam["margin"]).float() if cfg.frl_remargin else None,
    )


def frl_step(
    lam: dict[str, torch.Tensor], preds: dict, y: torch.Tensor, num_classes: int, cfg: Config, finetune_epoch: int
) -> dict[str, torch.Tensor]:
    """FRL's multiplier update before fine-tuning epoch ``finetune_epoch`` (1-based), from the
    validation predictions of the current model (``reweight.py``)."""
    clean_err, bndy_err, total_clean, total_bndy = metrics.frl_error_rates(
        preds["clean_pred"], preds["adv_pred"], y, num_classes
    )
    halve = cfg.frl_rate_halve_every
    return {
        "nat": reweight.frl_multiplier_step(
            lam["nat"],
            clean_err,
            total_clean,
            tolerance=cfg.frl_tau_nat,
            rate=reweight.frl_rate(cfg.frl_rate_nat, finetune_epoch, halve),
            cap=cfg.frl_cap,
        ),
        "bndy": reweight.frl_multiplier_step(
            lam["bndy"],
            bndy_err,
            total_bndy,
            tolerance=cfg.frl_tau_bndy,
            rate=reweight.frl_rate(cfg.rate_bndy(), finetune_epoch, halve),
            cap=cfg.frl_cap,
        ),
        "margin": reweight.frl_multiplier_step(
            lam["margin"], bndy_err, total_bndy, tolerance=cfg.frl_tau_bndy, rate=cfg.frl_rate_margin, cap=None
        ),
    }


def make_optimizer(model: torch.nn.Module, cfg: Config, lr: float) -> torch.optim.SGD:
    """SGD with the config's momentum and weight decay (a fresh one: no momentum buffers)."""
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def no_best() -> dict:
    nothing = float("-inf")
    return {"epoch": -1, "key": [nothing, nothing], "val": nothing, "val_average": nothing, "metrics": {}}


@dataclass
class FairAdvState(LoopState):
    """What a fair_adv checkpoint holds, each field saved and restored."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    """SGD; FRL's fine-tuning replaces it with a fresh one."""
    order_gen: torch.Generator
    aug_gen: torch.Generator
    attack_gen: torch.Generator
    history: History
    frl_lambda: dict = on_device()
    """FRL's multipliers per regime (``nat``, ``bndy``, ``margin``), one per class."""
    rng: GlobalRNG = field(default_factory=GlobalRNG)
    best: dict = field(default_factory=no_best)
    """The best-validation epoch so far (FRL: of its fine-tune, once that has begun): its epoch,
    selection key, validation worst class and average, and test metrics."""
    best_model: dict | None = None
    """That epoch's weights (on the CPU)."""
    epoch: int = 0
    config: dict = saved_only()


@dataclass
class Trial:
    """What a fair_adv trial works with and never checkpoints: its settings, its splits on the
    device and its network."""

    cfg: Config
    device: torch.device
    shard: Shard
    num_classes: int
    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    """The per-epoch test subset (``eval_size``)."""
    test_y: torch.Tensor
    final_x: torch.Tensor
    """The final evaluation's test images (``final_eval_size``)."""
    final_y: torch.Tensor
    select_idx: torch.Tensor
    """The validation images the selection rule reads."""
    model: torch.nn.Module
    train_model: torch.nn.Module
    """The training steps' forward (``torch.compile`` where ``compile`` asks)."""
    layout: torch.memory_format

    @property
    def n_train(self) -> int:
        return len(self.train_y)

    def train_input(self, batch: torch.Tensor) -> torch.Tensor:
        return augment.to_float(batch).contiguous(memory_format=self.layout)


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    preflight(cfg)
    t = build_trial(cfg)
    st = new_state(t, config)
    saved = session.restore()
    if saved is not None:
        st.load_state_dict(saved, device=t.device)
    val_preds = None  # the current model's validation predictions (from the last epoch's end)
    while st.epoch < cfg.epochs:
        frl, val_preds = frl_weights(t, st, val_preds)
        lr, totals, seconds = train_one_epoch(t, st, frl)
        val_preds = evaluate_val(t, t.model)
        test_preds = metrics.evaluate(
            t.model, t.test_x, t.test_y, t.num_classes, eval_attack(t, derive_seed(cfg.seed, "test-attack")),
            cfg.eval_batch_size, augment.to_float, t.shard,
        )  # fmt: skip
        row = epoch_row(t, st.epoch, lr, totals, seconds, frl, test_preds, val_preds)
        row |= keep_best(t, st, row, val_preds)
        if st.epoch == cfg.epochs:
            row |= final_rows(t, st)
        session.report(row, state=st.state_dict, checkpoint=True if st.epoch == cfg.epochs else None)


def build_trial(cfg: Config) -> Trial:
    """The splits on this worker's device and the network (its seeded initialization)."""
    shard = Shard(session.world_rank(), session.world_size())
    device = session.device()
    data = load_data(cfg)
    train_idx, val_idx = split_validation(data.train_y, cfg.val_size, cfg.val_seed)
    eval_idx = test_subset(data.test_y, cfg.eval_size)
    final_idx = test_subset(data.test_y, cfg.final_eval_size)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, data.num_classes, cfg.dataset, cfg.cnn_width)
    if shard.world > 1 and device.type == "cuda":
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    layout = torch.channels_last if enabled(cfg.channels_last, device) else torch.contiguous_format
    model = model.to(device, memory_format=layout)
    fixed_shapes(device)  # fixed image shapes: cuDNN picks its kernels once
    return Trial(
        cfg,
        device,
        shard,
        data.num_classes,
        train_x=data.train_x[train_idx].to(device),
        train_y=data.train_y[train_idx].to(device),
        val_x=data.train_x[val_idx].to(device),
        val_y=data.train_y[val_idx].to(device),
        test_x=data.test_x[eval_idx].to(device),
        test_y=data.test_y[eval_idx].to(device),
        final_x=data.test_x[final_idx].to(device),
        final_y=data.test_y[final_idx].to(device),
        select_idx=test_subset(data.train_y[val_idx], cfg.select_size),
        model=model,
        train_model=compiled(model, enabled(cfg.compile, device), "fair_adv network"),
        layout=layout,
    )


def new_state(t: Trial, config: dict) -> FairAdvState:
    cfg = t.cfg
    return FairAdvState(
        t.model,
        make_optimizer(t.model, cfg, cfg.lr),
        order_gen=torch.Generator().manual_seed(cfg.seed),
        aug_gen=torch.Generator(device=t.device).manual_seed(derive_seed(cfg.seed, "augment")),
        attack_gen=torch.Generator(device=t.device).manual_seed(derive_seed(cfg.seed, "attack")),
        history=History.empty(t.n_train, t.device),
        frl_lambda={
            k: torch.zeros(t.num_classes, dtype=torch.float64, device=t.device) for k in ("nat", "bndy", "margin")
        },
        config=config,
    )


def eval_attack(t: Trial, seed: int):
    """The per-epoch PGD attack (``eval_steps``), its random starts from a generator of ``seed``."""
    cfg = t.cfg
    gen = torch.Generator(device=t.device).manual_seed(seed)

    def run(m, x, y, share=None):
        return attack.pgd(
            m, x, y, eps=cfg.eps, step_size=cfg.step_size, steps=cfg.eval_steps, bn="eval", generator=gen, share=share
        )

    return run


def evaluate_val(t: Trial, model: torch.nn.Module) -> dict:
    """Clean and PGD predictions of ``model`` on the validation split (the same seeded attack
    every time)."""
    return metrics.evaluate(
        model, t.val_x, t.val_y, t.num_classes, eval_attack(t, derive_seed(t.cfg.seed, "validation-attack")),
        t.cfg.eval_batch_size, augment.to_float, t.shard,
    )  # fmt: skip


def frl_weights(t: Trial, st: FairAdvState, val_preds: dict | None) -> tuple[FrlWeights | None, dict | None]:
    """FRL's class weights for the coming epoch (None before its fine-tuning) from the multipliers
    updated on the current model's validation predictions; the predictions, made if missing."""
    cfg, epoch = t.cfg, st.epoch
    finetune_start = cfg.finetune_start()
    if epoch < finetune_start:
        return None, val_preds
    # FRL's fine-tuning epoch epoch - finetune_start + 1
    if epoch == finetune_start:
        # the fine-tune starts from the first stage's best-validation model, in a new
        # SGD (the reference loads its pre-trained model into a fresh optimizer)
        t.model.load_state_dict(st.best_model)
        st.optimizer = make_optimizer(t.model, cfg, cfg.frl_lr)
        # FRL's reported model is its own fine-tuned one: the best of the fine-tuning
        # epochs (never the stage-1 model, even when none beats it on validation)
        st.best, st.best_model = no_best(), None
        val_preds = None
    if val_preds is None:  # also after a resume: the same seeded attack, the same preds
        val_preds = evaluate_val(t, t.model)
    st.frl_lambda = frl_step(st.frl_lambda, val_preds, t.val_y, t.num_classes, cfg, epoch - finetune_start + 1)
    return frl_state(st.frl_lambda, cfg), val_preds


def train_one_epoch(t: Trial, st: FairAdvState, frl: FrlWeights | None) -> tuple[float, dict, float]:
    """One pass over the training split at this epoch's learning rate; returns the rate, the
    epoch's totals and its seconds. ``st.epoch`` counts it."""
    cfg, epoch = t.cfg, st.epoch
    lr = lr_at(cfg, epoch) if epoch < cfg.finetune_start() else cfg.frl_lr
    for group in st.optimizer.param_groups:
        group["lr"] = lr
    started = time.time()
    totals = train_epoch(
        t.train_model,
        st.optimizer,
        t.train_x,
        t.train_y,
        cfg,
        epoch=epoch,
        history=st.history,
        frl=frl,
        order_gen=st.order_gen,
        aug_gen=st.aug_gen,
        attack_gen=st.attack_gen,
        num_classes=t.num_classes,
        to_input=t.train_input,
        shard=t.shard,
    )
    seconds = time.time() - started
    st.epoch = epoch + 1
    return lr, totals, seconds


def epoch_row(
    t: Trial,
    epoch: int,
    lr: float,
    totals: dict,
    seconds: float,
    frl: FrlWeights | None,
    test_preds: dict,
    val_preds: dict,
) -> dict:
    """The epoch's row: training loss and robust accuracy, regimes, class weights, test and
    validation accuracies per class."""
    num_classes = t.num_classes
    regimes = totals["regimes"].double()
    per_class_visits = regimes.sum(1).clamp(min=1)
    class_weights = frl or FrlWeights(
        torch.full((num_classes,), 1 / num_classes), torch.full((num_classes,), 1 / num_classes)
    )
    return {
        "train/loss": float(totals["loss_sum"]) / max(totals["batches"], 1),
        "train/robust_acc": int(totals["robust_correct"]) / t.n_train,
        "train/epoch": epoch,
        "train/lr": lr,
        "train/images_per_s": t.n_train / max(seconds, 1e-9),
        **{
            f"regime/{name}_frac": float(regimes[:, r].sum() / regimes.sum().clamp(min=1))
            for r, name in enumerate(reweight.REGIMES)
        },
        **{
            f"regime/{name}_frac_per_class": (regimes[:, r] / per_class_visits).tolist()
            for r, name in enumerate(reweight.REGIMES)
        },
        "frl/clean_weight_per_class": class_weights.nat.tolist(),
        "frl/bndy_weight_per_class": class_weights.bndy.tolist(),
        **metrics.summarize(test_preds, t.test_y, num_classes, "eval"),
        **metrics.summarize(val_preds, t.val_y, num_classes, "val"),
    }


def keep_best(t: Trial, st: FairAdvState, row: dict, val_preds: dict) -> dict:
    """Keep the epoch's model as the best if the selection rule ranks it above the best so far;
    returns the best model's ``best/*`` metrics and its gaps to this epoch's."""
    cfg, num_classes, select_idx = t.cfg, t.num_classes, t.select_idx
    # the selection rule's key (worst_class: ties of the worst class, all at 0 under a strong
    # attack say, go to the better average; average: Rice et al.'s rule)
    key = list(
        metrics.selection_key(val_preds["adv_pred"][select_idx], t.val_y[select_idx], num_classes, cfg.select_by)
    )
    # (a checkpoint from before select_by kept the worst-class key as val, val_average)
    if key > list(st.best.get("key", [st.best["val"], st.best.get("val_average", float("-inf"))])):
        st.best = {
            "epoch": st.epoch,
            "key": key,
            "val": row["val/robust_acc_worst_class"],
            "val_average": row["val/robust_acc"],
            "metrics": {
                k.replace("eval/", "best/"): row[k]
                for k in (
                    "eval/clean_acc",
                    "eval/clean_acc_worst_class",
                    "eval/robust_acc",
                    "eval/robust_acc_worst_class",
                )
            },
        }
        st.best_model = {k: v.detach().cpu().clone() for k, v in t.model.state_dict().items()}
    best = st.best
    return {
        "best/epoch": best["epoch"],
        "best/val_robust_acc_worst_class": best["val"],
        "best/val_robust_acc": best["val_average"],
        "best/val_score": best.get("key", [best["val"]])[0],
        **best["metrics"],
        "best/robust_acc_worst_class_gap": best["metrics"]["best/robust_acc_worst_class"]
        - row["eval/robust_acc_worst_class"],
        "best/robust_acc_gap": best["metrics"]["best/robust_acc"] - row["eval/robust_acc"],
    }


def final_rows(t: Trial, st: FairAdvState) -> dict:
    """After the last epoch: the final evaluation of the best model (``final/*``) and, with
    ``final_eval_last``, of the last one (``final_last/*``) and the gaps between them."""
    cfg = t.cfg
    best_model = copy.deepcopy(t.model)
    best_model.load_state_dict(st.best_model)
    row = final_evaluation(best_model, t.final_x, t.final_y, t.num_classes, cfg, t.shard)
    if cfg.final_eval_last:
        last = final_evaluation(t.model, t.final_x, t.final_y, t.num_classes, cfg, t.shard, prefix="final_last")
        row |= last | final_gaps(row, last)
    return row


def final_evaluation(
    model: torch.nn.Module,
    x_u8: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    cfg: Config,
    shard: Shard = Shard(),
    prefix: str = "final",
) -> dict:
    """Clean, PGD-20 (the per-epoch attack; the worst case over ``eval_restarts`` random starts,
    with the evaluation noise beside it from two), CW-inf and (unless ``autoattack: off``)
    AutoAttack accuracy of ``model`` on the final test images (all of them by default), per class
    (``{prefix}/*``; PGD-20 is ``{prefix}/robust_acc``, as ``eval/robust_acc`` on the subset).

    With several workers PGD and CW are sharded; every worker runs the same AutoAttack (once
    per trial).
    """
    pgd_gen = torch.Generator(device=x_u8.device).manual_seed(derive_seed(cfg.seed, "final-pgd"))

    def pgd(m, x, yb, share=None):
        return attack.pgd(
            m,
            x,
            yb,
            eps=cfg.eps,
            step_size=cfg.step_size,
            steps=cfg.eval_steps,
            bn="eval",
            generator=pgd_gen,
            share=share,
        )

    runs = [
        metrics.evaluate(model, x_u8, y, num_classes, pgd, cfg.eval_batch_size, augment.to_float, shard)
        for _ in range(cfg.eval_restarts)
    ]
    adv_preds = [r["adv_pred"] for r in runs]
    robust = {"clean_pred": runs[0]["clean_pred"], "adv_pred": metrics.worst_over_restarts(adv_preds, y)}
    noise = metrics.restart_noise(adv_preds, y, num_classes) if len(runs) > 1 else {}
    gen = torch.Generator(device=x_u8.device).manual_seed(derive_seed(cfg.seed, "final-cw"))

    def cw(m, x, yb, share=None):
        return attack.cw_linf(
            m,
            x,
            yb,
            eps=cfg.eps,
            step_size=cfg.step_size,
            steps=cfg.cw_steps,
            kappa=cfg.cw_kappa,
            bn="eval",
            generator=gen,
            share=share,
        )

    preds = metrics.evaluate(model, x_u8, y, num_classes, cw, cfg.eval_batch_size, augment.to_float, shard)
    out = metrics.summarize(robust, y, num_classes, prefix) | metrics.summarize(
        preds, y, num_classes, prefix, adv_name="cw"
    )
    out |= {f"{prefix}/{k}": v for k, v in noise.items()}
    if cfg.autoattack == "off":
        return out
    adv_pred = autoattack_predictions(model, augment.to_float(x_u8), y, cfg)
    out |= metrics.summarize({"adv_pred": adv_pred}, y, num_classes, prefix, adv_name="autoattack")
    return out


def final_gaps(best: dict, last: dict) -> dict:
    """Best minus last model's final accuracies, ``final/{name}_gap`` for every scalar
    ``final_last/{name}`` (robust overfitting shows as a positive gap)."""
    return {
        f"final/{name.split('/', 1)[1]}_gap": best["final/" + name.split("/", 1)[1]] - value
        for name, value in last.items()
        if not isinstance(value, list) and not name.endswith(("_restart_range", "_half_gap"))
    }


def autoattack_predictions(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: Config) -> torch.Tensor:
    """Predictions of ``model`` under AutoAttack (pyautoattack), L-inf ``eps``."""
    from pyautoattack import AutoAttack

    model.eval()
    custom = bool(cfg.autoattack_attacks)
    adversary = AutoAttack(
        model,
        eps=cfg.eps,
        norm="Linf",
        seed=cfg.seed,
        device=x.device,
        version="custom" if custom else "standard",
        attacks=list(cfg.autoattack_attacks) if custom else None,
    )
    adversary.verbose = False
    adversary.apgd.n_iter = cfg.autoattack_iters
    adversary.apgd_targeted.n_iter = cfg.autoattack_iters
    adversary.apgd_targeted.n_target_classes = min(
        adversary.apgd_targeted.n_target_classes, model_classes(model, x) - 1
    )
    adversary.fab.n_target_classes = min(adversary.fab.n_target_classes, model_classes(model, x) - 1)
    _, adv_pred = adversary.run_standard_evaluation(x, y, batch_size=cfg.eval_batch_size)
    return adv_pred.to(y.device)


def model_classes(model: torch.nn.Module, x: torch.Tensor) -> int:
    with torch.no_grad():
        return model(x[:1]).shape[1]
