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
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.nn import functional as F

from raylab import session
from raylab.accel import compiled, enabled, fixed_shapes
from raylab.checkpoint import GlobalRNG, LoopState, on_device, saved_only
from raylab.config import from_dict
from raylab.data.augment import random_crop_flip, to_float
from raylab.data.cifar import MEAN, STD, ImageData, check_cifar, prepare_cifar
from raylab.errors import UserError
from raylab.models import preact_resnet18, resnet18
from raylab.seeds import derive_seed
from trainers.backdoor import GROUPS, attack, probe, wanet
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
    bn_y: torch.Tensor
    """``bn_x``'s training labels (the whole-loss gradient of the alignment probe)."""
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
        images = ImageData(
            train_x=as_cifar_format(raw.train_x),
            train_y=raw.train_y,
            test_x=as_cifar_format(raw.test_x),
            test_y=raw.test_y,
            classes=raw.classes,
        )
        pixels = to_float(images.train_x).transpose(0, 1).flatten(1)
        mean = tuple(float(v) for v in pixels.mean(1))
        std = tuple(float(v) for v in pixels.std(1))
    else:
        images = prepare_cifar(
            cfg.dataset,
            cfg.data_dir,
            cfg.download,
            cfg.synthetic_data,
            cfg.synthetic_train_size,
            cfg.synthetic_test_size,
        )
        mean, std = MEAN[cfg.dataset], STD[cfg.dataset]
    if cfg.train_size and cfg.train_size < len(images.train_y):
        keep = torch.randperm(len(images.train_y), generator=torch.Generator().manual_seed(0))
        keep = keep[: cfg.train_size].sort().values
        images = ImageData(
            train_x=images.train_x[keep],
            train_y=images.train_y[keep],
            test_x=images.test_x,
            test_y=images.test_y,
            classes=images.classes,
        )
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
    return torch.cat(
        [
            pool_p[torch.randperm(len(pool_p), generator=gen)[:k]],
            pool_c[torch.randperm(len(pool_c), generator=gen)[: size - k]],
        ]
    )


def build_data(cfg: Config, device: torch.device) -> Data:
    """The training set (poisoned, except for ``wanet``, which poisons each batch; with
    ``poison_mode: label_flip`` the poisoned images are relabelled but not triggered) and the probe
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
    label_flip = cfg.poison_mode == "label_flip"
    applied = untriggered if label_flip else trigger  # label_flip: relabelled, never triggered
    train_x, train_y = attack.poison(images.train_x, images.train_y, poison_idx, applied, spec, cfg.target_class)
    n = len(train_y)
    untouched = torch.ones(n, dtype=torch.bool)
    untouched[poison_idx] = False
    if cfg.attack == "wanet_fixed" and cfg.wanet_cross_ratio > 0 and not label_flip:
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
    source = (poison_idx[torch.randperm(len(poison_idx), generator=gen)] if len(poison_idx) else rest[~is_target])[
        : cfg.probe_size
    ]
    target_idx = rest[is_target][: cfg.probe_size]
    if len(target_idx) < 2 or len(source) < 2:
        raise UserError(
            f"probe_size: the training set leaves {len(target_idx)} clean target-class and "
            f"{len(source)} source images for the probe groups; at least 2 each are needed"
        )
    target_label = lambda idx: torch.full((len(idx),), cfg.target_class, dtype=train_y.dtype)  # noqa: E731
    probe_x = {
        "poison": trigger(images.train_x[source], spec),
        "target": images.train_x[target_idx],
        "relabel": images.train_x[source],
        "clean": train_x[clean_order[: cfg.probe_size]],
    }
    probe_y = {
        "poison": target_label(source),
        "target": images.train_y[target_idx],
        "relabel": target_label(source),
        "clean": train_y[clean_order[: cfg.probe_size]],
    }
    test_x, test_y = images.test_x, images.test_y
    if cfg.eval_size:
        test_x, test_y = test_x[: cfg.eval_size], test_y[: cfg.eval_size]
    trig_x, trig_clean_x, trig_y = attack.triggered_test_set(test_x, test_y, trigger, spec, cfg.target_class)
    bn_x, bn_y = bn_batch(cfg, spec, train_x, train_y, poison_idx)
    on = lambda t: t.to(device)  # noqa: E731
    return Data(
        train_x=on(train_x),
        train_y=on(train_y),
        poison_idx=poison_idx,
        finetune_idx=finetune_idx,
        probe_x={g: on(v) for g, v in probe_x.items()},
        probe_y={g: on(v) for g, v in probe_y.items()},
        test_x=on(test_x),
        test_y=on(test_y),
        trig_x=on(trig_x),
        trig_clean_x=on(trig_clean_x),
        trig_y=on(trig_y),
        bn_x=on(bn_x),
        bn_y=on(bn_y),
        mean=mean,
        std=std,
    )


def bn_batch(
    cfg: Config, spec: attack.TriggerSpec, train_x: torch.Tensor, train_y: torch.Tensor, poison_idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Data.bn_x`` and ``bn_y``: a fixed random sample of the training set (``bn_sample``; for
    ``wanet``, poisoned as a training batch is), drawn from its own stream."""
    n = len(train_y)
    bn_gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "probe-bn"))
    if cfg.attack == "wanet":
        pick = torch.randperm(n, generator=bn_gen)[: cfg.probe_bn_size]
        bn_x, bn_y = wanet.poison_batch(
            train_x[pick], train_y[pick], spec, cfg.poison_ratio, cfg.wanet_cross_ratio, cfg.target_class, bn_gen
        )[:2]
    else:
        pick = bn_sample(poison_idx, n, cfg.probe_bn_size, bn_gen)
        bn_x, bn_y = to_float(train_x[pick]), train_y[pick]
    return bn_x, bn_y


def untriggered(x: torch.Tensor, _spec: attack.TriggerSpec) -> torch.Tensor:
    """The identity "trigger" of the ``label_flip`` arm: the images as they are."""
    return x


def trigger_spec(cfg: Config) -> attack.TriggerSpec:
    return attack.TriggerSpec(
        seed=cfg.trigger_seed,
        blend_alpha=cfg.blend_alpha,
        blend_trigger=cfg.blend_trigger,
        blend_image=cfg.blend_image,
        blend_mean=cfg.blend_mean,
        blend_std=cfg.blend_std,
        patch_size=cfg.patch_size,
        wanet_k=cfg.wanet_k,
        wanet_s=cfg.wanet_s,
    )


# ----------------------------------------------------------------------------- measurements


@torch.no_grad()
def predict(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    net.eval()
    return torch.cat([net(to_float(x[i : i + EVAL_BATCH])).argmax(1) for i in range(0, len(x), EVAL_BATCH)])


@torch.no_grad()
def penultimate(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    net.eval()
    return torch.cat([net.features(to_float(x[i : i + EVAL_BATCH])) for i in range(0, len(x), EVAL_BATCH)])


def num_classes(cfg: Config) -> int:
    return 100 if cfg.dataset == "cifar100" else 10


def asr_floor(cfg: Config) -> float:
    """The clean accuracy a model must exceed for its ASR to be reported (``probe.clean_acc_floor``)."""
    return probe.clean_acc_floor(cfg.clean_acc_floor_x_chance, num_classes(cfg))


def evaluate(net: torch.nn.Module, data: Data, cfg: Config) -> dict[str, float]:
    """Clean accuracy on the test set; ASR and RA on its triggered non-target images, ASR NaN
    where clean accuracy does not exceed the floor (``probe.reported_asr``)."""
    pred_trig = predict(net, data.trig_x)
    clean_acc = probe.accuracy(predict(net, data.test_x), data.test_y)
    asr = probe.attack_success_rate(pred_trig, data.trig_y, cfg.target_class)
    return {
        "clean_acc": clean_acc,
        "asr": probe.reported_asr(asr, clean_acc, asr_floor(cfg)),
        "ra": probe.robust_accuracy(pred_trig, data.trig_y, cfg.target_class),
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
    """Loss, prior-corrected loss, margin, ReLU gates, gradient coherence and the alignment of the
    group's loss gradient with the whole training loss's (on ``bn_x``) of each probe group,
    measured on ``probe_network(net, data.bn_x)``. The prior the corrected loss removes is the
    network's own on the training distribution, ``probe.log_prior`` of its logits on ``bn_x``."""
    net = probe_network(net, data.bn_x)
    with torch.no_grad():
        log_prior = probe.log_prior(net(data.bn_x))
    whole = probe.loss_gradient(net, data.bn_x, data.bn_y)
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
            **probe.gradient_alignment(probe.loss_gradient(net, x, y), whole),
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
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "random-neurons"))
    rand = torch.randperm(len(sel), generator=gen)[: len(top)].to(sel.device)
    with torch.no_grad():
        head = net.classify
        test_feats = penultimate(net, data.test_x)
        clean_acc = probe.accuracy(head(test_feats).argmax(1), data.test_y)
        metrics = {
            "trigger_dominant_count": int((sel > cfg.selectivity_threshold).sum()),
            "selectivity_max": float(sel.max()),
            "selectivity_topk_mean": float(sel[top].mean()),
            "asr_ablated_topk": probe.reported_asr(
                probe.attack_success_rate(head(probe.ablate(feats_trig, top)).argmax(1), data.trig_y, cfg.target_class),
                clean_acc,
                asr_floor(cfg),
            ),
            "clean_acc_ablated_topk": probe.accuracy(head(probe.ablate(test_feats, top)).argmax(1), data.test_y),
            "asr_ablated_random": probe.reported_asr(
                probe.attack_success_rate(
                    head(probe.ablate(feats_trig, rand)).argmax(1), data.trig_y, cfg.target_class
                ),
                clean_acc,
                asr_floor(cfg),
            ),
        }
    return metrics, sel, top


# ----------------------------------------------------------------------------- the loop


@dataclass
class Trial:
    """What a backdoor trial works with and never checkpoints: its settings, data and networks."""

    cfg: Config
    device: torch.device
    rank: int
    world: int
    data: Data
    net: torch.nn.Module
    """The bare network (its weights are what a checkpoint holds)."""
    model: torch.nn.Module
    """``net``, or the DDP module around it on several Ray Train workers."""
    train_forward: Callable[[torch.Tensor], torch.Tensor]
    """The poisoned-training steps' forward (``torch.compile`` where ``compile`` asks)."""
    layout: torch.memory_format
    spec: attack.TriggerSpec
    compute_dtype: torch.dtype = torch.float32
    """The training forward's output dtype at the last step (bfloat16 under autocast): what
    ``perf/autocast_bf16`` reports, so a check sees that bf16 ran, not only finite losses."""

    @property
    def batches_per_epoch(self) -> int:
        return -(-len(self.data.train_y) // self.cfg.batch_size)


def no_totals() -> dict[str, float]:
    return {"loss": 0.0, "correct": 0.0, "seen": 0.0, "time": 0.0}


@dataclass
class BackdoorState(LoopState):
    """Where a trial is, each field saved in every checkpoint and restored on resume."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    ft_optimizer: torch.optim.Optimizer
    """Phase 3's optimizer and schedule (made at the start, untouched until phase 3)."""
    ft_scheduler: torch.optim.lr_scheduler.LRScheduler
    rng: GlobalRNG = field(default_factory=GlobalRNG)
    phase: str = "train"
    """``train``, ``neurons``, ``finetune`` or ``done``."""
    epoch: int = 0
    batch: int = 0
    step: int = 0
    totals: dict = field(default_factory=no_totals)
    """This epoch's training loss, correct predictions, images and seconds so far."""
    latest: dict = field(default_factory=dict)
    """Every metric's latest value (each report carries them all)."""
    baseline: dict | None = None
    """Each probe group's values at step 0."""
    previous_gates: dict | None = None
    """Each probe group's ReLU gates at the previous early probe."""
    last_probe: int = -1
    """The step of the last early probe (a resumed trial must not repeat it)."""
    top: torch.Tensor | None = on_device()
    """The trigger-dominant neurons phase 2 found."""
    sel_before: torch.Tensor | None = None
    """Every neuron's selectivity before fine-tuning."""
    ft_epoch: int = 0
    ft_step: int = 0
    config: dict = saved_only()


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    preflight(cfg)
    t = build_trial(cfg)
    st = new_state(t, config)
    saved = session.restore()
    if saved is not None:
        st.load_state_dict(saved, device=t.device)
    else:  # before any step: every report then carries eval/* (Tune's metric)
        st.latest |= {f"eval/{k}": v for k, v in evaluate(t.net, t.data, cfg).items()}
        st.latest["eval/clean_acc_floor"] = asr_floor(cfg)
    poisoned_training(t, st)
    find_neurons(t, st)
    clean_finetuning(t, st)


def build_trial(cfg: Config) -> Trial:
    """The data and the network on this worker's device (the seeded initialization first)."""
    device = session.device()
    data = build_data(cfg, device)
    torch.manual_seed(cfg.seed)
    net = MODELS[cfg.model](num_classes(cfg), data.mean, data.std, cfg.model_width)
    layout = torch.channels_last if enabled(cfg.channels_last, device) else torch.contiguous_format
    net = net.to(memory_format=layout)
    fixed_shapes(device)  # fixed image shapes: cuDNN picks its kernels once
    model = session.prepare_model(net)
    return Trial(
        cfg,
        device,
        session.world_rank(),
        session.world_size(),
        data,
        net=getattr(model, "module", model),
        model=model,
        train_forward=compiled(model, enabled(cfg.compile, device), "backdoor network"),
        layout=layout,
        spec=trigger_spec(cfg),
    )


def new_state(t: Trial, config: dict) -> BackdoorState:
    optimizer = torch.optim.SGD(
        t.model.parameters(), lr=t.cfg.lr, momentum=t.cfg.momentum, weight_decay=t.cfg.weight_decay
    )
    return BackdoorState(
        t.net, optimizer, train_scheduler(optimizer, t.cfg), *finetune_optimizer(t.model, t.cfg), config=config
    )


def report(st: BackdoorState, metrics: dict, checkpoint: bool | None = None) -> None:
    st.latest.update(metrics)
    session.report(dict(st.latest), state=st.state_dict, checkpoint=checkpoint)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fold(running: dict[str, torch.Tensor], totals: dict[str, float]) -> None:
    """Move the on-device running sums into ``totals`` (plain floats, checkpointed)."""
    for key, value in running.items():
        totals[key] += float(value)
        value.zero_()


def poisoned_training(t: Trial, st: BackdoorState) -> None:
    """Phase 1: SGD on the poisoned training set; the early probes every ``early_log_every``
    steps of the first ``early_epochs`` epochs; after each epoch its row (and the evaluation,
    every ``eval_every`` epochs)."""
    cfg = t.cfg
    running = {"loss": torch.zeros((), device=t.device), "correct": torch.zeros((), device=t.device)}
    while st.phase == "train" and st.epoch < cfg.epochs:
        order = torch.randperm(
            len(t.data.train_y), generator=torch.Generator().manual_seed(derive_seed(cfg.seed, "order", st.epoch))
        ).to(t.device)
        started = time.perf_counter()
        while st.batch < t.batches_per_epoch:
            due = st.baseline is None or (st.step % cfg.early_log_every == 0 and st.step != st.last_probe)
            if st.epoch < cfg.early_epochs and due:
                sync(t.device)
                st.totals["time"] += time.perf_counter() - started
                fold(running, st.totals)
                early_probe(t, st)
                started = time.perf_counter()
            train_step(t, st, order, running)
        sync(t.device)
        st.totals["time"] += time.perf_counter() - started
        fold(running, st.totals)
        st.scheduler.step()
        st.epoch, st.batch = st.epoch + 1, 0
        seen = max(st.totals["seen"], 1)
        row = {
            "train/step": st.step,
            "train/epoch": st.epoch,
            "train/loss": st.totals["loss"] / seen,
            "train/acc": st.totals["correct"] / seen,
            "train/lr": st.optimizer.param_groups[0]["lr"],
            "perf/images_per_s": st.totals["seen"] * t.world / max(st.totals["time"], 1e-9),
            "perf/autocast_bf16": float(t.compute_dtype == torch.bfloat16),
        }
        st.totals = no_totals()
        if st.epoch % cfg.eval_every == 0 or st.epoch == cfg.epochs:
            row |= {f"eval/{k}": v for k, v in evaluate(t.net, t.data, cfg).items()}
        if st.epoch == cfg.epochs:
            st.phase = "neurons"
        report(st, row, checkpoint=True if st.phase != "train" else None)


def train_step(t: Trial, st: BackdoorState, order: torch.Tensor, running: dict[str, torch.Tensor]) -> None:
    """One SGD step on batch ``st.batch`` of ``order``; its loss and hits summed on the device."""
    cfg = t.cfg
    idx = order[st.batch * cfg.batch_size : (st.batch + 1) * cfg.batch_size]
    if cfg.attack == "wanet":
        x, y = wanet_batch(t.data, idx, cfg, t.spec, (st.epoch, st.batch), t.rank, t.world)
    else:
        x, y = crop_flip_batch(t.data, idx, cfg, ("aug", st.epoch, st.batch), t.rank, t.world)
    t.model.train()
    with torch.autocast(t.device.type, dtype=torch.bfloat16, enabled=enabled(cfg.amp_bf16, t.device)):
        logits = t.train_forward(x.contiguous(memory_format=t.layout))
        loss = F.cross_entropy(logits, y)
    t.compute_dtype = logits.dtype  # metadata: nothing read from the device
    st.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    st.optimizer.step()
    running["loss"] += loss.detach() * len(y)  # on the device: no sync per step
    running["correct"] += (logits.argmax(1) == y).sum()
    st.totals["seen"] += len(y)
    st.batch += 1
    st.step += 1


def early_probe(t: Trial, st: BackdoorState) -> None:
    """Probe every group; the first probe is the baseline, each later one reports the early
    signatures against it (``probe.early_signature``) with the clean accuracy and ASR at that
    step (``early/clean_acc``, ``early/asr``: withheld, NaN, below the floor as ``eval/asr`` is)
    and the step itself (``early/probe_step``: later rows carry these values, and this names the
    probe they come from)."""
    st.last_probe = st.step
    groups = probe_groups(t.net, t.data, t.cfg)
    gates = {g: v.pop("gates") for g, v in groups.items()}
    if st.baseline is None:
        st.baseline, st.previous_gates = groups, gates
        return
    row = {
        "train/step": st.step,
        "train/epoch": st.epoch + st.batch / t.batches_per_epoch,
        "early/probe_step": st.step,
        **probe.early_signature(st.baseline, groups, st.previous_gates, gates),
        **{f"early/{k}": v for k, v in evaluate(t.net, t.data, t.cfg).items() if k in ("clean_acc", "asr")},
    }
    st.previous_gates = gates
    report(st, row)


def find_neurons(t: Trial, st: BackdoorState) -> None:
    """Phase 2: the trigger-dominant neurons of the trained network, and ablating them."""
    if st.phase != "neurons":
        return
    metrics, sel_before, st.top = neuron_report(t.net, t.data, t.cfg)
    st.sel_before = sel_before.cpu()
    st.phase = "finetune" if t.cfg.finetune_epochs else "done"
    report(st, {f"neurons/{k}": v for k, v in metrics.items()}, checkpoint=True if st.phase == "done" else None)


def clean_finetuning(t: Trial, st: BackdoorState) -> None:
    """Phase 3: SGD on the clean subset; after each epoch the evaluation, and after the last
    whether the neurons of phase 2 keep their selectivity."""
    if st.phase != "finetune":
        return
    cfg = t.cfg
    subset = t.data.finetune_idx.to(t.device)
    while st.ft_epoch < cfg.finetune_epochs:
        order = subset[
            torch.randperm(
                len(subset),
                generator=torch.Generator().manual_seed(derive_seed(cfg.seed, "finetune-order", st.ft_epoch)),
            ).to(t.device)
        ]
        for b in range(-(-len(order) // cfg.finetune_batch_size)):
            idx = order[b * cfg.finetune_batch_size : (b + 1) * cfg.finetune_batch_size]
            x, y = crop_flip_batch(t.data, idx, cfg, ("finetune-aug", st.ft_epoch, b), t.rank, t.world)
            t.model.train()
            loss = F.cross_entropy(t.model(x), y)
            st.ft_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            st.ft_optimizer.step()
            st.ft_step += 1
        st.ft_scheduler.step()
        st.ft_epoch += 1
        row = {
            "finetune/epoch": st.ft_epoch,
            "finetune/step": st.ft_step,
            "finetune/lr": st.ft_optimizer.param_groups[0]["lr"],
            "finetune/loss": float(loss.detach()),
        }
        row |= {f"finetune/{k}": v for k, v in evaluate(t.net, t.data, cfg).items()}
        if st.ft_epoch == cfg.finetune_epochs:
            metrics, sel_after, _ = neuron_report(t.net, t.data, cfg, top=st.top)
            top = st.top.cpu()
            kept = sel_after.cpu()[top].mean() / st.sel_before[top].mean().clamp_min(1e-12)
            row |= {
                "finetune/selectivity_retained": float(kept),
                "finetune/trigger_dominant_count": metrics["trigger_dominant_count"],
                "finetune/asr_ablated_topk": metrics["asr_ablated_topk"],
            }
            st.phase = "done"
        report(st, row, checkpoint=True if st.phase == "done" else None)


def crop_flip_batch(
    data: Data, idx: torch.Tensor, cfg: Config, seed_parts: tuple, rank: int, world: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's share (``[rank::world]``) of the global batch ``idx``, as float images:
    crop and flip offsets are drawn for the whole global batch from ``(seed, *seed_parts)``, so
    every worker count sees the same augmented global batch."""
    x, y = data.train_x[idx], data.train_y[idx]
    if cfg.augment:
        gen = torch.Generator(device=x.device).manual_seed(derive_seed(cfg.seed, *seed_parts))
        x = random_crop_flip(x, generator=gen, flip=cfg.dataset == "cifar10")
    return to_float(x[rank::world]), y[rank::world]


def wanet_batch(
    data: Data, idx: torch.Tensor, cfg: Config, spec: attack.TriggerSpec, seed_parts: tuple, rank: int, world: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's share of the global batch ``idx`` poisoned and augmented as BackdoorBench's
    WaNet does (``wanet.py``), every random draw made for the global batch."""
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "wanet", *seed_parts))
    x, y, _, _ = wanet.poison_batch(
        data.train_x[idx], data.train_y[idx], spec, cfg.poison_ratio, cfg.wanet_cross_ratio, cfg.target_class, gen
    )
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
    optimizer = torch.optim.SGD(
        model.parameters(), lr=cfg.finetune_lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )
    return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.finetune_t_max)
