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
        return {"ema_correct": self.ema_correct.cpu(), "ema_loss": self.ema_loss.cpu(),
                "visits": self.visits.cpu()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for key in ("ema_correct", "ema_loss", "visits"):
            getattr(self, key).copy_(state[key])


def training_adversary(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: Config,
    generator: torch.Generator | None,
) -> torch.Tensor | None:
    """The method's training attack: PGD-CE (pgd_at, tri_regime), TRADES-KL (trades, frl)."""
    common = dict(eps=cfg.eps, step_size=cfg.step_size, steps=cfg.train_steps,
                  bn=cfg.attack_bn_mode, generator=generator)
    if cfg.method == "standard":
        return None
    if cfg.method in ("trades", "frl"):
        return attack.trades_attack(model, x, **common)
    return attack.pgd(model, x, y, **common)


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
    frl_weights: tuple[torch.Tensor, torch.Tensor] | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """One step on the batch ``(x, y)`` (inputs in [0, 1]) of training samples ``index``.

    ``loss_threshold`` is tri-regime's ``tau_l`` for this epoch (``reweight.loss_threshold``);
    ``frl_weights`` the FRL class weights ``(a, b)``. For the regimes, the clean logits come
    from one extra forward pass without gradient (in the attack's BatchNorm mode; TRADES and
    FRL have them already). Returns the batch's loss, its count of
    robustly correct samples and its regime counts ``[outlier, boundary, safe]``, as tensors
    (no device sync here).
    """
    x_adv = training_adversary(model, x, y, cfg, generator)
    clean_seen = None  # clean logits for the regimes, without gradient
    if x_adv is not None and cfg.method not in ("trades", "frl"):
        with torch.no_grad(), attack.bn_mode(model, cfg.attack_bn_mode):
            clean_seen = model(x)
    model.train()
    if cfg.method in ("trades", "frl"):
        logits_clean, logits_adv = model(x), model(x_adv)
        clean_seen = logits_clean.detach()
        ce, kl = loss.trades_terms(logits_clean, logits_adv, y)
        if cfg.method == "frl":
            a, b = frl_weights if frl_weights is not None else (None, None)
            if a is not None:
                ce, kl = a[y] * ce, b[y] * kl
        per_sample = ce + cfg.trades_beta * kl
    else:
        logits_adv = model(x if x_adv is None else x_adv)
        per_sample = loss.cross_entropy(logits_adv, y)
        if clean_seen is None:  # standard training: the clean input is the trained one
            clean_seen = logits_adv.detach()

    with torch.no_grad():
        margin = attack.prob_margin(logits_adv.detach(), y)
        clean_correct = clean_seen.argmax(1) == y
        clean_ce = loss.cross_entropy(clean_seen, y)
        regimes = reweight.assign_regimes(
            margin, clean_correct, history.ema_correct[index], history.ema_loss[index], history.visits[index],
            loss_threshold=loss_threshold,
            outlier_max_correct=cfg.tri_outlier_max_correct,
            min_history=cfg.tri_min_history,
            safe_margin=cfg.tri_safe_margin,
        )
    weights = None
    normalize = True
    if cfg.method == "tri_regime":
        weights = reweight.tri_regime_weights(
            margin, regimes,
            epoch=epoch,
            warmup_epochs=cfg.tri_warmup_epochs,
            outlier_weight=cfg.tri_outlier_weight,
            safe_weight=cfg.tri_safe_weight,
            boundary_gain=cfg.tri_boundary_gain,
            ramp_epochs=cfg.tri_boundary_ramp_epochs,
            safe_margin=cfg.tri_safe_margin,
        )
        normalize = cfg.tri_normalize
    batch_loss = loss.weighted_mean(per_sample, weights, normalize=normalize)

    optimizer.zero_grad(set_to_none=True)
    batch_loss.backward()
    optimizer.step()

    with torch.no_grad():
        correct = margin > 0
        reweight.update_history(history.ema_correct, history.ema_loss, history.visits, index,
                                clean_correct, clean_ce, cfg.tri_ema_momentum)
    return {
        "loss": batch_loss.detach(),
        "robust_correct": correct.sum(),
        "regimes": reweight.regime_counts(regimes),
    }
