"""One training step of each method, shared by the train loop and the small-scale science test.

``train_step`` makes the method's adversarial examples, weights the per-sample losses
(``loss.py``, ``reweight.py``), takes one optimizer step, and folds the visit into the
per-sample history that the tri-regime method reads. Regimes are assigned (and counted) for
every method, so the regime fractions of plain PGD-AT can be compared with tri-regime's; only
tri_regime uses them as weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from raylab.accel import enabled
from raylab.data import augment
from trainers.fair_adv import attack, loss, reweight
from trainers.fair_adv.config import Config


@dataclass
class History:
    """Per training sample: EMA of clean correctness, EMA of clean loss, visits."""

    ema_correct: torch.Tensor
    ema_loss: torch.Tensor
    visits: torch.Tensor

    @classmethod
    def empty(cls, n: int, device: torch.device | str = "cpu") -> "History":
        return cls(
            torch.zeros(n, device=device),
            torch.zeros(n, device=device),
            torch.zeros(n, dtype=torch.long, device=device),
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"ema_correct": self.ema_correct.cpu(), "ema_loss": self.ema_loss.cpu(), "visits": self.visits.cpu()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for key in ("ema_correct", "ema_loss", "visits"):
            getattr(self, key).copy_(state[key])


@dataclass(frozen=True)
class Shard:
    """This worker's part of the data when ``world`` Ray Train workers share each batch.

    Every worker sees the same global batch order; worker ``rank`` takes the ``rank``-th of
    ``world`` contiguous parts of each batch (``torch.tensor_split``), draws the random starts of
    the whole batch (``attack.batch_noise``), and the loss is divided by global sums (one
    all-reduce), so a step's gradient is the single-worker gradient of the whole batch up to
    floating point. With ``world == 1`` nothing is communicated.
    """

    rank: int = 0
    world: int = 1

    def part(self, n: int) -> tuple[int, int]:
        """``(first, stop)``: this worker's rows of an ``n``-row batch."""
        first = (n // self.world) * self.rank + min(self.rank, n % self.world)
        return first, first + n // self.world + (self.rank < n % self.world)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the workers, in place (nothing with one worker)."""
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor

    def sync_gradients(self, model: torch.nn.Module) -> None:
        """Sum the parameter gradients over the workers and average their float buffers
        (BatchNorm running statistics), so every worker keeps the same model."""
        if self.world == 1:
            return
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = self.all_reduce(torch.cat([g.reshape(-1) for g in grads]))
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))
        buffers = [b for b in model.buffers() if b.is_floating_point()]
        if buffers:
            flat = self.all_reduce(torch.cat([b.reshape(-1) for b in buffers])) / self.world
            for b, part in zip(buffers, flat.split([b.numel() for b in buffers])):
                b.copy_(part.view_as(b))


@dataclass(frozen=True)
class FrlWeights:
    """FRL's class weights of the current fine-tuning epoch (``reweight.frl_class_weights``)."""

    nat: torch.Tensor
    """a: weights of the clean term, per class."""
    bndy: torch.Tensor
    """b: weights of the boundary term, per class."""
    eps_scale: torch.Tensor | None = None
    """FRL-Remargin's per-class attack radius factor (None: eps for every class)."""


def training_adversary(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: Config,
    generator: torch.Generator | None,
    frl: FrlWeights | None = None,
    share: attack.Share | None = None,
) -> torch.Tensor | None:
    """The base loss's training attack: PGD-CE (pgd_at) or TRADES-KL (trades).

    FRL-Remargin attacks class ``c`` with radius ``eps * eps_scale_c`` and step ``max radius / 4``
    (the reference's ``utils_frl2.trades_adv``).
    """
    common = dict(
        step_size=cfg.step_size, steps=cfg.train_steps, bn=cfg.attack_bn_mode, generator=generator, share=share
    )
    base = cfg.base()
    if base == "standard":
        return None
    if base == "trades":
        if frl is not None and frl.eps_scale is not None:
            eps = cfg.eps * frl.eps_scale[y].view(-1, *[1] * (x.dim() - 1)).to(x.dtype)
            common["step_size"] = float(cfg.eps * frl.eps_scale.max()) / 4
            return attack.trades_attack(model, x, eps=eps, **common)
        return attack.trades_attack(model, x, eps=cfg.eps, **common)
    return attack.pgd(model, x, y, eps=cfg.eps, **common)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    index: torch.Tensor,
    cfg: Config,
    *,
    epoch: int,
    history: History,
    loss_threshold: float,
    frl: FrlWeights | None = None,
    generator: torch.Generator | None = None,
    shard: Shard = Shard(),
    batch_rows: int | None = None,
    num_classes: int | None = None,
) -> dict[str, torch.Tensor]:
    """One step on the batch ``(x, y)`` (inputs in [0, 1]) of training samples ``index``.

    ``loss_threshold`` is tri-regime's ``tau_l`` for this epoch (``reweight.loss_threshold``);
    ``frl`` FRL's class weights during its fine-tuning stage (None: the plain base loss). With
    several workers, ``(x, y, index)`` is this worker's part (``shard.part``) of a batch of
    ``batch_rows`` rows. The batch loss is a sum of terms ``c * sum_i w_i l_i / sum_i w_i`` over
    the whole batch:

    - plain base loss: ``w_i = 1`` (the batch mean);
    - tri_regime: the regime weights ``w_i`` on the base loss's per-sample loss;
    - frl on trades: ``sum a CE / sum a + frl_beta * sum b KL / sum b`` (the reference);
    - frl on pgd_at: one term, ``w_i = (a + b)_{y_i} / 2`` on ``CE(f(x'_i), y_i)`` (PGD-AT has
      one term, bounding clean plus boundary error).

    For the regimes, the clean logits come from one extra forward pass without gradient (in
    the attack's BatchNorm mode; TRADES has them already). Returns this worker's share of the
    batch loss, its count of robustly correct samples and its regime counts per class
    ``[C, 3]`` (outlier, boundary, safe), as tensors (no device sync here).
    """
    rows = len(x) if batch_rows is None else batch_rows
    first = shard.part(rows)[0]
    base = cfg.base()
    x_adv = training_adversary(model, x, y, cfg, generator, frl, share=(rows, first))
    clean_seen = None  # clean logits for the regimes, without gradient
    if base == "pgd_at":
        with torch.no_grad(), attack.bn_mode(model, cfg.attack_bn_mode):
            clean_seen = model(x)
    model.train()
    terms, logits_adv, clean_seen = loss_terms(model, x, x_adv, y, cfg, frl, clean_seen)

    margin, clean_correct, clean_ce, regimes = regimes_of(
        logits_adv, clean_seen, y, index, history, cfg, loss_threshold
    )
    if cfg.method == "tri_regime":
        weights = tri_regime_weights(margin, regimes, cfg, epoch)
        terms = [(values, weights, coef) for values, _, coef in terms]
    batch_loss = weighted_sum(terms, cfg, rows, shard)

    optimizer.zero_grad(set_to_none=True)
    batch_loss.backward()
    shard.sync_gradients(model)
    optimizer.step()

    with torch.no_grad():
        correct = margin > 0
        reweight.update_history(
            history.ema_correct, history.ema_loss, history.visits, index, clean_correct, clean_ce, cfg.tri_ema_momentum
        )
    classes = logits_adv.shape[1] if num_classes is None else num_classes
    return {
        "loss": batch_loss.detach(),
        "robust_correct": correct.sum(),
        "regimes": reweight.regime_counts_per_class(regimes, y, classes),
    }


@torch.no_grad()
def regimes_of(
    logits_adv: torch.Tensor,
    clean_seen: torch.Tensor,
    y: torch.Tensor,
    index: torch.Tensor,
    history: History,
    cfg: Config,
    loss_threshold: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each sample's probability margin under attack, clean correctness and clean loss, and its
    regime (``reweight.assign_regimes`` on its history)."""
    margin = attack.prob_margin(logits_adv.detach(), y)
    clean_correct = clean_seen.argmax(1) == y
    clean_ce = loss.cross_entropy(clean_seen, y)
    regimes = reweight.assign_regimes(
        margin,
        clean_correct,
        history.ema_correct[index],
        history.ema_loss[index],
        history.visits[index],
        loss_threshold=loss_threshold,
        outlier_max_correct=cfg.tri_outlier_max_correct,
        min_history=cfg.tri_min_history,
        safe_margin=cfg.tri_safe_margin,
    )
    return margin, clean_correct, clean_ce, regimes


def tri_regime_weights(margin: torch.Tensor, regimes: torch.Tensor, cfg: Config, epoch: int) -> torch.Tensor:
    """tri_regime's per-sample weights at ``epoch`` (``reweight.tri_regime_weights`` with the
    config's settings)."""
    return reweight.tri_regime_weights(
        margin,
        regimes,
        epoch=epoch,
        warmup_epochs=cfg.tri_warmup_epochs,
        outlier_weight=cfg.tri_outlier_weight,
        safe_weight=cfg.tri_safe_weight,
        boundary_gain=cfg.tri_boundary_gain,
        ramp_epochs=cfg.tri_boundary_ramp_epochs,
        safe_margin=cfg.tri_safe_margin,
    )


def loss_terms(
    model: torch.nn.Module,
    x: torch.Tensor,
    x_adv: torch.Tensor | None,
    y: torch.Tensor,
    cfg: Config,
    frl: FrlWeights | None,
    clean_seen: torch.Tensor | None,
) -> tuple[list, torch.Tensor, torch.Tensor]:
    """The batch loss's terms ``(per-sample values, weights w_i, coefficient c)`` (``train_step``),
    the adversarial logits, and the clean logits the regimes read (``clean_seen``, or those of
    this forward where TRADES or standard training has them)."""
    ones = torch.ones(len(y), device=y.device)
    if cfg.base() == "trades":
        logits_clean, logits_adv = model(x), model(x_adv)
        clean_seen = logits_clean.detach()
        ce, kl = loss.trades_terms(logits_clean, logits_adv, y)
        if frl is not None:
            terms = [(ce, frl.nat[y].to(ce.dtype), 1.0), (kl, frl.bndy[y].to(kl.dtype), cfg.frl_beta)]
        else:
            terms = [(ce + cfg.trades_beta * kl, ones, 1.0)]
    else:
        logits_adv = model(x if x_adv is None else x_adv)
        per_sample = loss.cross_entropy(logits_adv, y)
        if clean_seen is None:  # standard training: the clean input is the trained one
            clean_seen = logits_adv.detach()
        weights = ones if frl is None else ((frl.nat + frl.bndy) / 2)[y].to(per_sample.dtype)
        terms = [(per_sample, weights, 1.0)]
    return terms, logits_adv, clean_seen


def weighted_sum(terms: list, cfg: Config, rows: int, shard: Shard) -> torch.Tensor:
    """``sum_terms c * sum_i w_i l_i / sum_i w_i``, ``sum_i w_i`` over the whole batch of ``rows``
    rows (one all-reduce), or the batch size (tri_regime with ``tri_normalize`` off)."""
    device = terms[0][0].device
    if cfg.method == "tri_regime" and not cfg.tri_normalize:
        totals = torch.full((len(terms),), float(rows), device=device)
    else:
        totals = shard.all_reduce(torch.stack([w.detach().sum() for _, w, _ in terms]).float())
    totals = totals.clamp(min=torch.finfo(torch.float32).tiny)
    return sum(coef * (w * values).sum() / total for (values, w, coef), total in zip(terms, totals))


def merge_history(history: History, visited: torch.Tensor, shard: Shard) -> None:
    """After an epoch on several workers: give every worker the history of every sample.

    Each sample is visited by exactly one worker per epoch, and its regime reads only its own
    history (and the threshold fixed at the epoch's start), so workers update their own samples
    during the epoch and exchange them here: one all-reduce of each tensor masked to the
    worker's visits (a sum with zeros, so exact).
    """
    if shard.world == 1:
        return
    seen = shard.all_reduce(visited.long()) > 0
    for tensor in (history.ema_correct, history.ema_loss, history.visits):
        mine = torch.where(visited, tensor, torch.zeros_like(tensor))
        tensor.copy_(torch.where(seen, shard.all_reduce(mine), tensor))


def train_epoch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    cfg: Config,
    *,
    epoch: int,
    history: History,
    frl: FrlWeights | None,
    order_gen: torch.Generator,
    aug_gen: torch.Generator | None,
    attack_gen: torch.Generator,
    num_classes: int,
    to_input=lambda b: b,
    shard: Shard = Shard(),
) -> dict[str, torch.Tensor]:
    """One pass over the training set in batches of ``cfg.batch_size`` (this worker's parts).

    Every worker draws the same batch order and the augmentation of the whole batch, then
    takes its part, so the epoch does not depend on the number of workers (up to floating
    point and, without SyncBatchNorm, BatchNorm's per-worker batch statistics; a last batch
    with fewer rows than workers is skipped). Returns the
    epoch's totals over all workers: summed batch loss, batches, robustly correct samples and
    regime counts per class ``[C, 3]``.
    """
    device = train_y.device
    n_train = len(train_y)
    threshold = reweight.loss_threshold(history.ema_loss, history.visits, cfg.tri_outlier_loss_quantile)
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    regimes = torch.zeros(num_classes, 3, dtype=torch.long, device=device)
    visited = torch.zeros(n_train, dtype=torch.bool, device=device)
    perm = torch.randperm(n_train, generator=order_gen).to(device)
    batches = 0
    model.train()
    for start in range(0, n_train, cfg.batch_size):
        batch = perm[start : start + cfg.batch_size]
        xb = train_x[batch]
        if cfg.augment and aug_gen is not None:
            xb = augment.random_crop_flip(
                xb, padding=4, generator=aug_gen, pad_mode="reflect" if cfg.augment_padding == "reflect" else "constant"
            )
        if len(batch) < shard.world:  # a last batch with fewer rows than workers: skipped
            continue
        first, stop = shard.part(len(batch))
        index = batch[first:stop]
        batches += 1
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled(cfg.amp_bf16, device)):
            stats = train_step(
                model,
                optimizer,
                to_input(xb[first:stop]),
                train_y[index],
                index,
                cfg,
                epoch=epoch,
                history=history,
                loss_threshold=threshold,
                frl=frl,
                generator=attack_gen,
                shard=shard,
                batch_rows=len(batch),
                num_classes=num_classes,
            )
        visited[index] = True
        loss_sum += stats["loss"]
        correct += stats["robust_correct"]
        regimes += stats["regimes"]
    merge_history(history, visited, shard)
    for total in (loss_sum, correct, regimes):
        shard.all_reduce(total)
    return {"loss_sum": loss_sum, "batches": batches, "robust_correct": correct, "regimes": regimes}
