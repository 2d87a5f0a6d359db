"""The fair_adv train loop: adversarial training on CIFAR, evaluated per class every epoch.

Each epoch: train one pass over the training split with the configured method; evaluate
clean and PGD-20 accuracy per class on the validation split (held out from the training set)
and on the test set; keep the model with the best validation worst-class robust accuracy next
to the last one; (FRL) update the class multipliers from the validation errors; report. After
the last epoch the best model is evaluated once more on the test set with CW-inf and, when
available, AutoAttack (``final/*``).
"""

from __future__ import annotations

import copy
import time

import torch

from raylab import session
from raylab.checkpoint import rng_state, set_rng_state
from raylab.config import from_dict
from raylab.data import augment
from raylab.data.cifar import check_cifar, prepare_cifar
from raylab.errors import UserError
from trainers.fair_adv import attack, metrics, reweight
from trainers.fair_adv.config import Config
from trainers.fair_adv.model import build_model
from trainers.fair_adv.step import History, train_step

CIFAR_TRAIN_SIZE = 50_000


def preflight(cfg: Config) -> None:
    """Refuse, before Ray starts, a config this machine cannot run (named file/key/value)."""
    if not cfg.synthetic_data:
        check_cifar(cfg.dataset, cfg.data_dir, cfg.download)
    n_train = cfg.synthetic_train if cfg.synthetic_data else CIFAR_TRAIN_SIZE
    if cfg.val_size >= n_train:
        raise UserError(f"config: val_size: {cfg.val_size} leaves no training images out of {n_train}")
    if cfg.autoattack == "on" and not autoattack_available():
        raise UserError("config: autoattack: 'on' but pyautoattack is not installed; "
                        "pip install -e '.[autoattack]' or set autoattack: auto")


def autoattack_available() -> bool:
    try:
        import pyautoattack  # noqa: F401
    except ImportError:
        return False
    return True


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


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    preflight(cfg)
    if session.world_size() > 1:
        raise UserError("fair_adv runs one worker per trial (resources.workers: 1); the "
                        "sweep runs trials in parallel")
    device = session.device()
    data = prepare_cifar(cfg.dataset, cfg.data_dir, cfg.download, cfg.synthetic_data,
                         cfg.synthetic_train, cfg.synthetic_test)
    num_classes = data.num_classes
    train_idx, val_idx = split_validation(data.train_y, cfg.val_size, cfg.val_seed)
    train_x, train_y = data.train_x[train_idx].to(device), data.train_y[train_idx].to(device)
    val_x, val_y = data.train_x[val_idx].to(device), data.train_y[val_idx].to(device)
    eval_idx = test_subset(data.test_y, cfg.eval_size)
    final_idx = test_subset(data.test_y, cfg.final_eval_size)
    test_x, test_y = data.test_x[eval_idx].to(device), data.test_y[eval_idx].to(device)
    final_x, final_y = data.test_x[final_idx].to(device), data.test_y[final_idx].to(device)
    n_train = len(train_y)

    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, num_classes, cfg.dataset).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay)
    order_gen = torch.Generator().manual_seed(cfg.seed)
    aug_gen = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    attack_gen = torch.Generator(device=device).manual_seed(cfg.seed + 2)
    history = History.empty(n_train, device)
    phi_nat = torch.zeros(num_classes, dtype=torch.float64, device=device)
    phi_bndy = torch.zeros(num_classes, dtype=torch.float64, device=device)
    best: dict = {"epoch": -1, "val": float("-inf"), "model": None, "metrics": {}}
    epoch = 0

    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order_gen.set_state(state["order_gen"])
        aug_gen.set_state(state["aug_gen"])
        attack_gen.set_state(state["attack_gen"])
        history.load_state_dict(state["history"])
        phi_nat.copy_(state["phi_nat"])
        phi_bndy.copy_(state["phi_bndy"])
        best = {**state["best"], "model": state["best_model"]}
        set_rng_state(state["rng"])
        epoch = state["epoch"]

    def eval_attack(seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)

        def run(m, x, y):
            return attack.pgd(m, x, y, eps=cfg.eps, step_size=cfg.step_size,
                              steps=cfg.eval_steps, bn="eval", generator=gen)

        return run

    while epoch < cfg.epochs:
        lr = lr_at(cfg, epoch)
        for group in optimizer.param_groups:
            group["lr"] = lr
        threshold = reweight.loss_threshold(history.ema_loss, history.visits,
                                            cfg.tri_outlier_loss_quantile)
        frl_weights = None
        if cfg.method == "frl":
            frl_weights = (reweight.frl_class_weights(phi_nat).float(),
                           reweight.frl_class_weights(phi_bndy).float())
        model.train()
        started = time.time()
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), dtype=torch.long, device=device)
        regimes = torch.zeros(3, dtype=torch.long, device=device)
        perm = torch.randperm(n_train, generator=order_gen).to(device)
        batches = 0
        for start in range(0, n_train, cfg.batch_size):
            index = perm[start : start + cfg.batch_size]
            xb = train_x[index]
            if cfg.augment:
                xb = augment.random_crop_flip(xb, padding=4, generator=aug_gen)
            stats = train_step(model, optimizer, augment.to_float(xb), train_y[index], index, cfg,
                               epoch=epoch, history=history, loss_threshold=threshold,
                               frl_weights=frl_weights, generator=attack_gen)
            loss_sum += stats["loss"]
            correct += stats["robust_correct"]
            regimes += stats["regimes"]
            batches += 1
        seconds = time.time() - started
        epoch += 1

        val_preds = metrics.evaluate(model, val_x, val_y, num_classes, eval_attack(cfg.seed + 10_000),
                                     cfg.eval_batch_size, augment.to_float)
        test_preds = metrics.evaluate(model, test_x, test_y, num_classes,
                                      eval_attack(cfg.seed + 20_000), cfg.eval_batch_size,
                                      augment.to_float)
        row = {
            "train/loss": float(loss_sum) / batches,
            "train/robust_acc": int(correct) / n_train,
            "train/epoch": epoch,
            "train/lr": lr,
            "train/images_per_s": n_train / max(seconds, 1e-9),
            **{f"regime/{name}_frac": int(count) / n_train
               for name, count in zip(reweight.REGIMES, regimes.tolist())},
            **metrics.summarize(test_preds, test_y, num_classes, "eval"),
            **metrics.summarize(val_preds, val_y, num_classes, "val"),
        }
        if cfg.method == "frl" and epoch > cfg.frl_warmup_epochs:
            clean_err, bndy_err = metrics.class_error_rates(
                val_preds["clean_pred"], val_preds["adv_pred"], val_y, num_classes)
            phi_nat, phi_bndy = reweight.frl_update(
                phi_nat, phi_bndy, clean_err, bndy_err, tau_nat=cfg.frl_tau_nat,
                tau_bndy=cfg.frl_tau_bndy, rate_nat=cfg.frl_rate_nat, rate_bndy=cfg.frl_rate_bndy)
        if row["val/robust_acc_worst_class"] > best["val"]:
            best = {
                "epoch": epoch,
                "val": row["val/robust_acc_worst_class"],
                "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                "metrics": {k.replace("eval/", "best/"): row[k] for k in (
                    "eval/clean_acc", "eval/clean_acc_worst_class",
                    "eval/robust_acc", "eval/robust_acc_worst_class")},
            }
        row |= {"best/epoch": best["epoch"], "best/val_robust_acc_worst_class": best["val"],
                **best["metrics"],
                "best/robust_acc_worst_class_gap":
                    best["metrics"]["best/robust_acc_worst_class"] - row["eval/robust_acc_worst_class"]}
        if epoch == cfg.epochs:
            best_model = copy.deepcopy(model)
            best_model.load_state_dict(best["model"])
            row |= final_evaluation(best_model, final_x, final_y, num_classes, cfg)

        session.report(
            row,
            state=lambda: {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "order_gen": order_gen.get_state(),
                "aug_gen": aug_gen.get_state(),
                "attack_gen": attack_gen.get_state(),
                "history": history.state_dict(),
                "phi_nat": phi_nat.cpu(),
                "phi_bndy": phi_bndy.cpu(),
                "best": {k: v for k, v in best.items() if k != "model"},
                "best_model": best["model"],
                "rng": rng_state(),
                "epoch": epoch,
                "config": config,
            },
            checkpoint=True if epoch == cfg.epochs else None,
        )


def final_evaluation(model: torch.nn.Module, x_u8: torch.Tensor, y: torch.Tensor,
                     num_classes: int, cfg: Config) -> dict:
    """CW-inf and (when available and not off) AutoAttack accuracy of ``model``, per class."""
    gen = torch.Generator(device=x_u8.device).manual_seed(cfg.seed + 30_000)

    def cw(m, x, yb):
        return attack.cw_linf(m, x, yb, eps=cfg.eps, step_size=cfg.step_size, steps=cfg.cw_steps,
                              kappa=cfg.cw_kappa, bn="eval", generator=gen)

    preds = metrics.evaluate(model, x_u8, y, num_classes, cw, cfg.eval_batch_size, augment.to_float)
    out = metrics.summarize(preds, y, num_classes, "final", adv_name="cw")
    if cfg.autoattack == "off" or (cfg.autoattack == "auto" and not autoattack_available()):
        return out
    adv_pred = autoattack_predictions(model, augment.to_float(x_u8), y, cfg)
    out |= metrics.summarize({"adv_pred": adv_pred}, y, num_classes, "final", adv_name="autoattack")
    return out


def autoattack_predictions(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                           cfg: Config) -> torch.Tensor:
    """Predictions of ``model`` under AutoAttack (pyautoattack), L-inf ``eps``."""
    from pyautoattack import AutoAttack

    model.eval()
    custom = bool(cfg.autoattack_attacks)
    adversary = AutoAttack(
        model, eps=cfg.eps, norm="Linf", seed=cfg.seed, device=x.device,
        version="custom" if custom else "standard",
        attacks=list(cfg.autoattack_attacks) if custom else None,
    )
    adversary.verbose = False
    adversary.apgd.n_iter = cfg.autoattack_iters
    adversary.apgd_targeted.n_iter = cfg.autoattack_iters
    adversary.apgd_targeted.n_target_classes = min(adversary.apgd_targeted.n_target_classes,
                                                   model_classes(model, x) - 1)
    adversary.fab.n_target_classes = min(adversary.fab.n_target_classes, model_classes(model, x) - 1)
    _, adv_pred = adversary.run_standard_evaluation(x, y, batch_size=cfg.eval_batch_size)
    return adv_pred.to(y.device)


def model_classes(model: torch.nn.Module, x: torch.Tensor) -> int:
    with torch.no_grad():
        return model(x[:1]).shape[1]
