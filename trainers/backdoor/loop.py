"""The backdoor workload's train loop: poison, train with dense early probes, evaluate, find
trigger-dominant neurons, fine-tune on clean data, and measure what is left.

Phases, in order, each resumable from a checkpoint:

1. ``train``: SGD on the poisoned training set (for ``wanet``, clean images poisoned afresh in
   every batch, ``wanet.py``). During the first ``early_epochs`` epochs, every
   ``early_log_every`` steps, the early-stage signatures of each probe group and their contrasts
   between the poisoned group and the same-label controls (``early/*``); before training and
   after every ``eval_every`` epochs, ``eval/clean_acc``, ``eval/asr``, ``eval/ra``.
2. ``neurons``: per-neuron selectivity of the penultimate layer on paired test images (with and
   without the trigger), the trigger-dominant count, and ASR with the top-k neurons ablated.
3. ``finetune``: SGD on a clean subset; ``finetune/*`` after each epoch, and at the end whether
   the neurons found in phase 2 keep their selectivity.

Every report carries the latest value of every metric so far, so the last row has them all.
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from raylab import session
from raylab.accel import compiled, enabled, fixed_shapes
from raylab.checkpoint import rng_state, set_rng_state
from raylab.config import from_dict
from raylab.data.augment import random_crop_flip, to_float
from raylab.data.cifar import MEAN, STD, ImageData, check_cifar, prepare_cifar
from raylab.errors import UserError
from raylab.models import preact_resnet18, resnet18
from trainers.backdoor import CONTROLS, GROUPS, attack, probe, wanet
from trainers.backdoor.config import Config

MODELS = {"resnet18": resnet18, "preact_resnet18": preact_resnet18}
EVAL_BATCH = 512


DIGITS = ("mnist5k", "digits8x8")
"""The real digits sets that ship in packages (``raylab.data.digits``)."""
SIDE = 32
"""Every image enters the attacks and the network as ``[3, 32, 32]`` (the CIFAR format)."""


def preflight(cfg: Config) -> None:
    """Fail before Ray starts: a missing dataset, an unreadable Blended trigger image."""
    if cfg.dataset in DIGITS:
        from raylab.data.digits import find_digits

        find_digits(cfg.dataset, cfg.data_dir, extra="backdoor")  # its package is in this workload's extra
    elif not cfg.synthetic_data:
        check_cifar(cfg.dataset, cfg.data_dir, cfg.download)
    if cfg.attack == "blended" and cfg.blend_trigger == "image":
        attack.load_trigger_image(cfg.blend_image, (3, 32, 32))


@dataclass
class Data:
    """The poisoned training set and every fixed evaluation set, on the training device."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    poison_idx: torch.Tensor
    finetune_idx: torch.Tensor
    probe_x: dict[str, torch.Tensor]
    probe_y: dict[str, torch.Tensor]
    test_x: torch.Tensor
    test_y: torch.Tensor
    trig_x: torch.Tensor
    trig_clean_x: torch.Tensor
    trig_y: torch.Tensor
    bn_x: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]


def as_cifar_format(x: torch.Tensor) -> torch.Tensor:
    """uint8 ``[N, C, H, W]`` images as ``[N, 3, 32, 32]``: enlarged by the largest whole factor
    that fits (nearest neighbour: 8x8 digits become 32x32, 28x28 MNIST stays), zero-padded
    evenly to 32 (MNIST's background is 0) and, with one channel, repeated to three."""
    n, c, h, w = x.shape
    factor = max(1, SIDE // max(h, w))
    if factor > 1:
        x = x.repeat_interleave(factor, dim=2).repeat_interleave(factor, dim=3)
    dh, dw = SIDE - x.shape[2], SIDE - x.shape[3]
    if dh < 0 or dw < 0:
        raise UserError(f"images of {h}x{w} pixels do not fit the {SIDE}x{SIDE} networks")
    x = F.pad(x, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2))
    return x.expand(n, 3, SIDE, SIDE).contiguous() if c == 1 else x


def load_images(cfg: Config) -> tuple[ImageData, tuple[float, ...], tuple[float, ...]]:
    """The dataset of ``cfg.dataset`` in the CIFAR format, with the per-channel mean and std the
    network normalizes by (CIFAR's published ones; for digits, those of the training images);
    with ``train_size``, the first images of a fixed (seed 0) permutation of the training set."""
    if cfg.dataset in DIGITS:
        from raylab.data.digits import load_digits

        raw = load_digits(cfg.dataset, cfg.data_dir)
        images = ImageData(train_x=as_cifar_format(raw.train_x), train_y=raw.train_y,
                           test_x=as_cifar_format(raw.test_x), test_y=raw.test_y, classes=raw.classes)
        pixels = to_float(images.train_x).transpose(0, 1).flatten(1)
        mean = tuple(float(v) for v in pixels.mean(1))
        std = tuple(float(v) for v in pixels.std(1))
    else:
        images = prepare_cifar(cfg.dataset, cfg.data_dir, cfg.download, cfg.synthetic_data,
                               cfg.synthetic_train_size, cfg.synthetic_test_size)
        mean, std = MEAN[cfg.dataset], STD[cfg.dataset]
    if cfg.train_size and cfg.train_size < len(images.train_y):
        keep = torch.randperm(len(images.train_y), generator=torch.Generator().manual_seed(0))
        keep = keep[: cfg.train_size].sort().values
        images = ImageData(train_x=images.train_x[keep], train_y=images.train_y[keep],
                           test_x=images.test_x, test_y=images.test_y, classes=images.classes)
    return images, mean, std


def bn_sample(poison_idx: torch.Tensor, n: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """Indices of a random sample of ``min(size, n)`` training images whose poisoned share is the
    training set's (``round(size * len(poison_idx) / n)`` drawn from ``poison_idx``, the rest
    from the other images): the batch whose BatchNorm statistics the probes use."""
    size = min(size, n)
    poisoned = torch.zeros(n, dtype=torch.bool)
    poisoned[poison_idx] = True
    k = round(size * len(poison_idx) / n)
    pool_p, pool_c = torch.nonzero(poisoned).flatten(), torch.nonzero(~poisoned).flatten()
    return torch.cat([pool_p[torch.randperm(len(pool_p), generator=gen)[:k]],
                      pool_c[torch.randperm(len(pool_c), generator=gen)[: size - k]]])


def build_data(cfg: Config, device: torch.device) -> Data:
    """The training set (poisoned, except for ``wanet``, which poisons each batch) and the probe
    groups of ``GROUPS``: ``poison`` (source-class training images with the trigger and the
    target label: the poisoned images themselves where there are any), ``relabel`` (the same
    images without the trigger, target label), ``target`` (clean target-class images) and
    ``clean`` (clean images of every class, own labels); and ``bn_x``, a fixed random sample of
    the poisoned training set (its poisoned share the training set's; for ``wanet``, poisoned
    as a training batch is) whose BatchNorm statistics the probes normalise by."""
    images, mean, std = load_images(cfg)
    trigger, spec = attack.get(cfg.attack), trigger_spec(cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    fixed_ratio = 0.0 if cfg.attack == "wanet" else cfg.poison_ratio
    poison_idx = attack.poison_indices(images.train_y, fixed_ratio, cfg.target_class, gen)
    train_x, train_y = attack.poison(images.train_x, images.train_y, poison_idx, trigger, spec,
                                     cfg.target_class)
    n = len(train_y)
    untouched = torch.ones(n, dtype=torch.bool)
    untouched[poison_idx] = False
    if cfg.attack == "wanet_fixed" and cfg.wanet_cross_ratio > 0:
        free = torch.nonzero(untouched).flatten()
        count = min(round(cfg.wanet_cross_ratio * len(poison_idx)), len(free))
        cross_idx = free[torch.randperm(len(free), generator=gen)[:count]]
        train_x[cross_idx] = attack.wanet_noise(train_x[cross_idx], spec, gen)
        untouched[cross_idx] = False
    clean_idx = torch.nonzero(untouched).flatten()
    clean_order = clean_idx[torch.randperm(len(clean_idx), generator=gen)]
    n_finetune = max(1, round(cfg.finetune_fraction * n))
    finetune_idx = clean_order[:n_finetune]
    rest = clean_order[n_finetune:]
    is_target = images.train_y[rest] == cfg.target_class
    # poisoned images where there are some; otherwise (poison_ratio 0, wanet) clean source images
    source = (poison_idx[torch.randperm(len(poison_idx), generator=gen)] if len(poison_idx)
              else rest[~is_target])[: cfg.probe_size]
    target_idx = rest[is_target][: cfg.probe_size]
    if len(target_idx) < 2 or len(source) < 2:
        raise UserError(f"probe_size: the training set leaves {len(target_idx)} clean target-class and "
                        f"{len(source)} source images for the probe groups; at least 2 each are needed")
    target_label = lambda idx: torch.full((len(idx),), cfg.target_class, dtype=train_y.dtype)  # noqa: E731
    probe_x = {
        "poison": trigger(images.train_x[source], spec),
        "target": images.train_x[target_idx],
        "relabel": images.train_x[source],
        "clean": train_x[clean_order[: cfg.probe_size]],
    }
    probe_y = {
        "poison": target_label(source), "target": images.train_y[target_idx],
        "relabel": target_label(source), "clean": train_y[clean_order[: cfg.probe_size]],
    }
    test_x, test_y = images.test_x, images.test_y
    if cfg.eval_size:
        test_x, test_y = test_x[: cfg.eval_size], test_y[: cfg.eval_size]
    trig_x, trig_clean_x, trig_y = attack.triggered_test_set(test_x, test_y, trigger, spec,
                                                             cfg.target_class)
    bn_gen = torch.Generator().manual_seed(derived_seed(cfg.seed, "probe-bn"))
    if cfg.attack == "wanet":
        pick = torch.randperm(n, generator=bn_gen)[: cfg.probe_bn_size]
        bn_x = wanet.poison_batch(train_x[pick], train_y[pick], spec, cfg.poison_ratio,
                                  cfg.wanet_cross_ratio, cfg.target_class, bn_gen)[0]
    else:
        bn_x = to_float(train_x[bn_sample(poison_idx, n, cfg.probe_bn_size, bn_gen)])
    on = lambda t: t.to(device)  # noqa: E731
    return Data(
        train_x=on(train_x), train_y=on(train_y), poison_idx=poison_idx, finetune_idx=finetune_idx,
        probe_x={g: on(v) for g, v in probe_x.items()}, probe_y={g: on(v) for g, v in probe_y.items()},
        test_x=on(test_x), test_y=on(test_y),
        trig_x=on(trig_x), trig_clean_x=on(trig_clean_x), trig_y=on(trig_y),
        bn_x=on(bn_x), mean=mean, std=std,
    )


def trigger_spec(cfg: Config) -> attack.TriggerSpec:
    return attack.TriggerSpec(
        seed=cfg.trigger_seed, blend_alpha=cfg.blend_alpha, blend_trigger=cfg.blend_trigger,
        blend_image=cfg.blend_image, blend_mean=cfg.blend_mean, blend_std=cfg.blend_std,
        patch_size=cfg.patch_size, wanet_k=cfg.wanet_k, wanet_s=cfg.wanet_s,
    )


def derived_seed(*parts) -> int:
    """A 63-bit seed from any parts (the same parts give the same seed on every machine)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


# ----------------------------------------------------------------------------- measurements


@torch.no_grad()
def predict(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    net.eval()
    return torch.cat([net(to_float(x[i:i + EVAL_BATCH])).argmax(1) for i in range(0, len(x), EVAL_BATCH)])


@torch.no_grad()
def penultimate(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    net.eval()
    return torch.cat([net.features(to_float(x[i:i + EVAL_BATCH])) for i in range(0, len(x), EVAL_BATCH)])


def evaluate(net: torch.nn.Module, data: Data, target: int) -> dict[str, float]:
    """Clean accuracy on the test set; ASR and RA on its triggered non-target images."""
    pred_trig = predict(net, data.trig_x)
    return {
        "clean_acc": probe.accuracy(predict(net, data.test_x), data.test_y),
        "asr": probe.attack_success_rate(pred_trig, data.trig_y, target),
        "ra": probe.robust_accuracy(pred_trig, data.trig_y, target),
    }


def probe_network(net: torch.nn.Module, bn_x: torch.Tensor) -> torch.nn.Module:
    """A copy of ``net`` in eval mode whose BatchNorm statistics are those of the float batch
    ``bn_x`` (a random sample of the poisoned training set, ``Data.bn_x``): each probe image is
    normalised as it would be inside a training batch, and the trained network's running
    statistics are left alone."""
    net = copy.deepcopy(net)
    for module in net.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # cumulative average: one batch gives its exact statistics
    with torch.no_grad():
        net.train()
        net(bn_x)
    return net.eval()


def probe_groups(net: torch.nn.Module, data: Data, cfg: Config) -> dict[str, dict]:
    """Loss, prior-corrected loss, margin, ReLU gates and gradient coherence of each probe group,
    measured on ``probe_network(net, data.bn_x)``. The prior the corrected loss removes is the
    network's own on the training distribution, ``probe.log_prior`` of its logits on ``bn_x``."""
    net = probe_network(net, data.bn_x)
    with torch.no_grad():
        log_prior = probe.log_prior(net(data.bn_x))
    out = {}
    for group in GROUPS:
        x, y = to_float(data.probe_x[group]), data.probe_y[group]
        with torch.no_grad():
            logits, acts = net.forward_with_activations(x)
        k = min(cfg.coherence_size, len(y))
        out[group] = {
            "loss": float(F.cross_entropy(logits, y)),
            "loss_prior_corrected": float(probe.prior_corrected_loss(logits, y, log_prior).mean()),
            "margin": float(probe.logit_margin(logits, y).mean()),
            "gates": (acts[net.last_relu] > 0).cpu(),
            "coherence": probe.gradient_coherence(net, x[:k], y[:k]),
        }
    return out


def neuron_report(net: torch.nn.Module, data: Data, cfg: Config, top: torch.Tensor | None = None):
    """Selectivity of every penultimate neuron; ablation of the top-k (``top``, or this
    network's own top-k) and of as many random neurons; returns (metrics, selectivity, top)."""
    feats_trig = penultimate(net, data.trig_x)
    feats_clean = penultimate(net, data.trig_clean_x)
    sel = probe.selectivity(feats_trig, feats_clean)
    if top is None:
        top = probe.top_neurons(sel, cfg.ablate_top_k)
    gen = torch.Generator().manual_seed(derived_seed(cfg.seed, "random-neurons"))
    rand = torch.randperm(len(sel), generator=gen)[: len(top)].to(sel.device)
    with torch.no_grad():
        head = net.classify
        test_feats = penultimate(net, data.test_x)
        metrics = {
            "trigger_dominant_count": int((sel > cfg.selectivity_threshold).sum()),
            "selectivity_max": float(sel.max()),
            "selectivity_topk_mean": float(sel[top].mean()),
            "asr_ablated_topk": probe.attack_success_rate(
                head(probe.ablate(feats_trig, top)).argmax(1), data.trig_y, cfg.target_class),
            "clean_acc_ablated_topk": probe.accuracy(
                head(probe.ablate(test_feats, top)).argmax(1), data.test_y),
            "asr_ablated_random": probe.attack_success_rate(
                head(probe.ablate(feats_trig, rand)).argmax(1), data.trig_y, cfg.target_class),
        }
    return metrics, sel, top


# ----------------------------------------------------------------------------- the loop


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    preflight(cfg)
    device = session.device()
    rank, world = session.world_rank(), session.world_size()
    data = build_data(cfg, device)
    num_classes = 100 if cfg.dataset == "cifar100" else 10

    torch.manual_seed(cfg.seed)
    net = MODELS[cfg.model](num_classes, data.mean, data.std, cfg.model_width)
    layout = torch.channels_last if enabled(cfg.channels_last, device) else torch.contiguous_format
    net = net.to(memory_format=layout)
    fixed_shapes(device)  # fixed image shapes: cuDNN picks its kernels once
    model = session.prepare_model(net)
    net = getattr(model, "module", model)  # the bare network (DDP wraps it)
    train_forward = compiled(model, enabled(cfg.compile, device), "backdoor network")  # the training steps' forward
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay)
    scheduler = train_scheduler(optimizer, cfg)
    spec = trigger_spec(cfg)

    phase, epoch, batch, step = "train", 0, 0, 0
    totals = {"loss": 0.0, "correct": 0.0, "seen": 0.0, "time": 0.0}
    latest: dict[str, float] = {}
    baseline: dict | None = None  # the step-0 probe values
    previous_gates: dict | None = None
    last_probe = -1  # the step of the last early probe (a resumed trial must not repeat it)
    top, sel_before = None, None
    ft_optimizer = ft_scheduler = None
    ft_epoch = ft_step = 0

    state = session.restore()
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        phase, epoch, batch, step = state["phase"], state["epoch"], state["batch"], state["step"]
        totals, latest = dict(state["totals"]), dict(state["latest"])
        baseline, previous_gates = state["baseline"], state["previous_gates"]
        last_probe = state["last_probe"]
        top, sel_before, ft_epoch = state["top"], state["sel_before"], state["ft_epoch"]
        ft_step = state["ft_step"]
        if state["ft_optimizer"] is not None:
            ft_optimizer, ft_scheduler = finetune_optimizer(model, cfg)
            ft_optimizer.load_state_dict(state["ft_optimizer"])
            ft_scheduler.load_state_dict(state["ft_scheduler"])
        set_rng_state(state["rng"])
        if top is not None:
            top = top.to(device)

    running = {"loss": torch.zeros((), device=device), "correct": torch.zeros((), device=device)}

    def fold() -> None:
        """Move the on-device running sums into ``totals`` (plain floats, checkpointed)."""
        for key, value in running.items():
            totals[key] += float(value)
            value.zero_()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def snapshot():
        return {
            "model": net.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "phase": phase, "epoch": epoch, "batch": batch,
            "step": step, "totals": totals, "latest": latest, "baseline": baseline,
            "previous_gates": previous_gates, "last_probe": last_probe,
            "top": None if top is None else top.cpu(), "sel_before": sel_before,
            "ft_epoch": ft_epoch, "ft_step": ft_step,
            "ft_optimizer": None if ft_optimizer is None else ft_optimizer.state_dict(),
            "ft_scheduler": None if ft_scheduler is None else ft_scheduler.state_dict(),
            "rng": rng_state(), "config": config,
        }

    def report(metrics: dict, checkpoint: bool | None = None) -> None:
        latest.update(metrics)
        session.report(dict(latest), state=snapshot, checkpoint=checkpoint)

    def early_probe() -> None:
        nonlocal baseline, previous_gates, last_probe
        last_probe = step
        groups = probe_groups(net, data, cfg)
        gates = {g: v.pop("gates") for g, v in groups.items()}
        if baseline is None:
            baseline, previous_gates = groups, gates
            return
        row = {"train/step": step, "train/epoch": epoch + batch / batches_per_epoch}
        signature = {"loss_drop": {}, "grad_coherence": {}, "margin_growth": {},
                     "gate_flip_since_last": {}}
        prior_corrected = {}
        for g in GROUPS:
            signature["loss_drop"][g] = baseline[g]["loss"] - groups[g]["loss"]
            signature["grad_coherence"][g] = groups[g]["coherence"]
            signature["margin_growth"][g] = groups[g]["margin"] - baseline[g]["margin"]
            signature["gate_flip_since_last"][g] = probe.gate_flip_fraction(previous_gates[g], gates[g])
            prior_corrected[g] = baseline[g]["loss_prior_corrected"] - groups[g]["loss_prior_corrected"]
            row |= {
                f"early/loss_drop_prior_corrected_{g}": prior_corrected[g],
                f"early/loss_{g}": groups[g]["loss"],
                f"early/loss_drop_{g}": signature["loss_drop"][g],
                f"early/rel_drop_{g}": probe.relative_drop(baseline[g]["loss"], groups[g]["loss"]),
                f"early/grad_coherence_{g}": groups[g]["coherence"],
                f"early/gate_flip_since_last_{g}": signature["gate_flip_since_last"][g],
                f"early/margin_{g}": groups[g]["margin"],
                f"early/margin_growth_{g}": signature["margin_growth"][g],
            }
        for name, values in signature.items():
            row |= {f"early/{name}_gap_vs_{c}": probe.gap(values, c) for c in CONTROLS}
        row["early/loss_drop_prior_corrected_gap_vs_clean"] = probe.gap(prior_corrected, "clean")
        row["early/loss_drop_gap_vs_clean"] = probe.gap(signature["loss_drop"], "clean")
        previous_gates = gates
        report(row)

    if state is None:  # before any step: every report then carries eval/* (Tune's metric)
        latest |= {f"eval/{k}": v for k, v in evaluate(net, data, cfg.target_class).items()}

    # ------------------------------------------------------------------ phase 1: poisoned training
    n_train = len(data.train_y)
    batches_per_epoch = -(-n_train // cfg.batch_size)
    while phase == "train" and epoch < cfg.epochs:
        order = torch.randperm(n_train, generator=torch.Generator().manual_seed(
            derived_seed(cfg.seed, "order", epoch))).to(device)
        started = time.perf_counter()
        while batch < batches_per_epoch:
            due = baseline is None or (step % cfg.early_log_every == 0 and step != last_probe)
            if epoch < cfg.early_epochs and due:
                sync()
                totals["time"] += time.perf_counter() - started
                fold()
                early_probe()
                started = time.perf_counter()
            idx = order[batch * cfg.batch_size:(batch + 1) * cfg.batch_size]
            if cfg.attack == "wanet":
                x, y = wanet_batch(data, idx, cfg, spec, (epoch, batch), rank, world)
            else:
                x, y = crop_flip_batch(data, idx, cfg, ("aug", epoch, batch), rank, world)
            model.train()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled(cfg.amp_bf16, device)):
                logits = train_forward(x.contiguous(memory_format=layout))
                loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running["loss"] += loss.detach() * len(y)  # on the device: no sync per step
            running["correct"] += (logits.argmax(1) == y).sum()
            totals["seen"] += len(y)
            batch += 1
            step += 1
        sync()
        totals["time"] += time.perf_counter() - started
        fold()
        scheduler.step()
        epoch, batch = epoch + 1, 0
        row = {
            "train/step": step, "train/epoch": epoch,
            "train/loss": totals["loss"] / max(totals["seen"], 1),
            "train/acc": totals["correct"] / max(totals["seen"], 1),
            "train/lr": optimizer.param_groups[0]["lr"],
            "perf/images_per_s": totals["seen"] * world / max(totals["time"], 1e-9),
        }
        totals = {"loss": 0.0, "correct": 0.0, "seen": 0.0, "time": 0.0}
        if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
            row |= {f"eval/{k}": v for k, v in evaluate(net, data, cfg.target_class).items()}
        if epoch == cfg.epochs:
            phase = "neurons"
        report(row, checkpoint=True if phase != "train" else None)

    # ------------------------------------------------------------------ phase 2: neurons
    if phase == "neurons":
        metrics, sel_before, top = neuron_report(net, data, cfg)
        sel_before = sel_before.cpu()
        phase = "finetune" if cfg.finetune_epochs else "done"
        report({f"neurons/{k}": v for k, v in metrics.items()},
               checkpoint=True if phase == "done" else None)

    # ------------------------------------------------------------------ phase 3: clean fine-tuning
    if phase == "finetune":
        if ft_optimizer is None:
            ft_optimizer, ft_scheduler = finetune_optimizer(model, cfg)
        subset = data.finetune_idx.to(device)
        while ft_epoch < cfg.finetune_epochs:
            order = subset[torch.randperm(len(subset), generator=torch.Generator().manual_seed(
                derived_seed(cfg.seed, "finetune-order", ft_epoch))).to(device)]
            for b in range(-(-len(order) // cfg.finetune_batch_size)):
                idx = order[b * cfg.finetune_batch_size:(b + 1) * cfg.finetune_batch_size]
                x, y = crop_flip_batch(data, idx, cfg, ("finetune-aug", ft_epoch, b), rank, world)
                model.train()
                loss = F.cross_entropy(model(x), y)
                ft_optimizer.zero_grad(set_to_none=True)
                loss.backward()
                ft_optimizer.step()
                ft_step += 1
            ft_scheduler.step()
            ft_epoch += 1
            row = {"finetune/epoch": ft_epoch, "finetune/step": ft_step,
                   "finetune/lr": ft_optimizer.param_groups[0]["lr"],
                   "finetune/loss": float(loss.detach())}
            row |= {f"finetune/{k}": v for k, v in evaluate(net, data, cfg.target_class).items()}
            if ft_epoch == cfg.finetune_epochs:
                metrics, sel_after, _ = neuron_report(net, data, cfg, top=top)
                kept = sel_after.cpu()[top.cpu()].mean() / sel_before[top.cpu()].mean().clamp_min(1e-12)
                row |= {
                    "finetune/selectivity_retained": float(kept),
                    "finetune/trigger_dominant_count": metrics["trigger_dominant_count"],
                    "finetune/asr_ablated_topk": metrics["asr_ablated_topk"],
                }
                phase = "done"
            report(row, checkpoint=True if phase == "done" else None)


def crop_flip_batch(data: Data, idx: torch.Tensor, cfg: Config, seed_parts: tuple, rank: int,
                    world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's share (``[rank::world]``) of the global batch ``idx``, as float images:
    crop and flip offsets are drawn for the whole global batch from ``(seed, *seed_parts)``, so
    every worker count sees the same augmented global batch."""
    x, y = data.train_x[idx], data.train_y[idx]
    if cfg.augment:
        gen = torch.Generator(device=x.device).manual_seed(derived_seed(cfg.seed, *seed_parts))
        x = random_crop_flip(x, generator=gen, flip=cfg.dataset == "cifar10")
    return to_float(x[rank::world]), y[rank::world]


def wanet_batch(data: Data, idx: torch.Tensor, cfg: Config, spec: attack.TriggerSpec,
                seed_parts: tuple, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's share of the global batch ``idx`` poisoned and augmented as BackdoorBench's
    WaNet does (``wanet.py``), every random draw made for the global batch."""
    gen = torch.Generator().manual_seed(derived_seed(cfg.seed, "wanet", *seed_parts))
    x, y, _, _ = wanet.poison_batch(data.train_x[idx], data.train_y[idx], spec, cfg.poison_ratio,
                                    cfg.wanet_cross_ratio, cfg.target_class, gen)
    if cfg.augment:
        x = wanet.augment(x, data.mean, gen)
    return x[rank::world], y[rank::world]


def train_scheduler(optimizer: torch.optim.Optimizer, cfg: Config):
    """The poisoned-training schedule (``Config.lr_schedule``): cosine over the epochs; constant;
    or per attack, BackdoorBench's WaNet MultiStepLR (x0.1 at epochs 100, 200, 300, 400:
    constant within its 100 epochs) for ``wanet`` and cosine for the others."""
    schedule = cfg.lr_schedule
    if schedule == "per_attack":
        if cfg.attack == "wanet":
            return torch.optim.lr_scheduler.MultiStepLR(optimizer, [100, 200, 300, 400], 0.1)
        schedule = "cosine"
    if schedule == "constant":
        return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)


def finetune_optimizer(model: torch.nn.Module, cfg: Config):
    """BackdoorBench FT: SGD with the training momentum and weight decay, cosine with period
    ``finetune_t_max`` epochs (100), stepped per epoch."""
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.finetune_lr, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay)
    return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.finetune_t_max)
