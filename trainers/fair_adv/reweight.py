r"""Sample weights: the tri-regime method (label-free) and the FRL class-wise baseline.

Tri-regime (this workload's reading of the paper; every symbol is a ``tri_*`` config field)
-------------------------------------------------------------------------------------------
At its visit in epoch ``t`` a training sample ``i`` has

- its adversarial margin now, ``m_i = p_y(x'_i) - max_{j != y} p_j(x'_i)`` in [-1, 1]
  (softmax probabilities on the training attack's example ``x'_i``: scale-free, so one
  threshold works for every model and every stage of training),
- whether its clean input is classified correctly now, ``k_i = 1[argmax f(x_i) = y_i]``,
- its history from earlier epochs: ``c_i`` (exponential moving average of ``k_i``), ``l_i``
  (EMA of its clean cross-entropy), ``n_i`` (visits).

The outlier test reads the clean input on purpose: a mislabelled or unlearnable sample is
wrong even without an attack, while a genuine boundary threat is clean-correct and only
adversarially wrong (the clean/boundary error split of Zhang et al. 2019 and Xu et al. 2021).
With ``tau_l`` the ``q``-quantile of ``l`` over the samples seen so far (taken at the start of
each epoch), the sample falls in exactly one regime::

    outlier   (O): n_i >= H  and  c_i <= rho  and  l_i >= tau_l  and  k_i = 0
    safe      (S): not O     and  m_i >= s
    boundary  (B): otherwise                     (not O and m_i < s)

and is weighted::

    w_i = g                                             in O   (reliability gate)
    w_i = d                                             in S   (already safe: down-weighted)
    w_i = 1 + gamma_t * clip((s - m_i) / (1 + s), 0, 1) in B   (dynamic: the smaller the margin,
          gamma_t = gamma * min(1, (t + 1) / R)                  the larger; ramped over R epochs)

and ``w_i = 1`` for every sample during the first ``T_w`` epochs (history still accumulates).
The batch loss is ``sum_i w_i CE(f(x'_i), y_i) / sum_i w_i``. The history is then updated with
this visit: ``c_i <- mu c_i + (1 - mu) k_i``, ``l_i <- mu l_i + (1 - mu) CE(f(x_i), y_i)`` (set
to the observation on the first visit). Class labels enter only through each sample's own
loss and margins; no class statistics are used.

FRL-Reweight (Xu et al., "To be Robust or to be Fair", ICML 2021), the class-wise baseline
-----------------------------------------------------------------------------------------
Lagrange multipliers per class, ``phi_nat, phi_bndy >= 0`` (zero at the start), are raised by
dual ascent once per epoch on the validation split's class-wise clean error ``e_nat`` and
boundary error ``e_bndy`` (clean-correct but adversarially wrong)::

    phi_nat_c  <- max(0, phi_nat_c  + alpha_nat  (e_nat_c  - mean(e_nat)  - tau_nat))
    phi_bndy_c <- max(0, phi_bndy_c + alpha_bndy (e_bndy_c - mean(e_bndy) - tau_bndy))

and the TRADES loss of a sample of class ``c`` is weighted per term::

    l_i = a_c CE(f(x_i), y_i) + beta * b_c KL(p(x_i) || p(x'_i)),
    a = (1 + phi_nat) / mean(1 + phi_nat),   b = (1 + phi_bndy) / mean(1 + phi_bndy).
"""

from __future__ import annotations

import torch

OUTLIER, BOUNDARY, SAFE = 0, 1, 2
REGIMES = ("outlier", "boundary", "safe")


def assign_regimes(
    margin: torch.Tensor,
    clean_correct: torch.Tensor,
    ema_correct: torch.Tensor,
    ema_loss: torch.Tensor,
    visits: torch.Tensor,
    *,
    loss_threshold: float,
    outlier_max_correct: float,
    min_history: int,
    safe_margin: float,
) -> torch.Tensor:
    """The regime (``OUTLIER``, ``BOUNDARY`` or ``SAFE``) of each sample; see the module docstring.

    ``margin`` is this visit's adversarial probability margin, ``clean_correct`` whether the
    clean input is classified correctly now; the history tensors hold the state before this
    visit.
    """
    outlier = (
        (visits >= min_history)
        & (ema_correct <= outlier_max_correct)
        & (ema_loss >= loss_threshold)
        & ~clean_correct.bool()
    )
    safe = ~outlier & (margin >= safe_margin)
    regimes = torch.full_like(margin, BOUNDARY, dtype=torch.long)
    regimes[outlier] = OUTLIER
    regimes[safe] = SAFE
    return regimes


def tri_regime_weights(
    margin: torch.Tensor,
    regimes: torch.Tensor,
    *,
    epoch: int,
    warmup_epochs: int,
    outlier_weight: float,
    safe_weight: float,
    boundary_gain: float,
    ramp_epochs: int,
    safe_margin: float,
) -> torch.Tensor:
    """Per-sample weights ``w_i`` for the regimes (module docstring); all 1 during warm-up."""
    if epoch < warmup_epochs:
        return torch.ones_like(margin)
    gain = boundary_gain * (min(1.0, (epoch + 1) / ramp_epochs) if ramp_epochs > 0 else 1.0)
    closeness = ((safe_margin - margin) / (1.0 + safe_margin)).clamp(0.0, 1.0)
    weights = 1.0 + gain * closeness
    weights = torch.where(regimes == SAFE, torch.full_like(weights, safe_weight), weights)
    return torch.where(regimes == OUTLIER, torch.full_like(weights, outlier_weight), weights)


def loss_threshold(ema_loss: torch.Tensor, visits: torch.Tensor, quantile: float) -> float:
    """``tau_l``: the ``quantile`` of the loss EMA over samples seen at least once (inf if none)."""
    seen = ema_loss[visits > 0]
    if len(seen) == 0:
        return float("inf")
    return float(torch.quantile(seen.double(), quantile))


def update_history(
    ema_correct: torch.Tensor,
    ema_loss: torch.Tensor,
    visits: torch.Tensor,
    index: torch.Tensor,
    correct: torch.Tensor,
    loss: torch.Tensor,
    momentum: float,
) -> None:
    """In place: fold this visit's clean correctness and loss into samples ``index``'s EMAs.

    ``ema <- momentum * ema + (1 - momentum) * observation``, or the observation itself on a
    sample's first visit.
    """
    first = visits[index] == 0
    keep = torch.where(first, torch.zeros_like(loss), torch.full_like(loss, momentum))
    ema_correct[index] = keep * ema_correct[index] + (1 - keep) * correct.to(ema_correct.dtype)
    ema_loss[index] = keep * ema_loss[index] + (1 - keep) * loss.to(ema_loss.dtype)
    visits[index] += 1


def regime_counts(regimes: torch.Tensor) -> torch.Tensor:
    """How many samples fell in each regime: ``[outlier, boundary, safe]``."""
    return torch.bincount(regimes, minlength=3)[:3]


def frl_update(
    phi_nat: torch.Tensor,
    phi_bndy: torch.Tensor,
    clean_err: torch.Tensor,
    bndy_err: torch.Tensor,
    *,
    tau_nat: float,
    tau_bndy: float,
    rate_nat: float,
    rate_bndy: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One FRL dual-ascent step on the class-wise errors (module docstring)."""
    new_nat = (phi_nat + rate_nat * (clean_err - clean_err.mean() - tau_nat)).clamp(min=0)
    new_bndy = (phi_bndy + rate_bndy * (bndy_err - bndy_err.mean() - tau_bndy)).clamp(min=0)
    return new_nat, new_bndy


def frl_class_weights(phi: torch.Tensor) -> torch.Tensor:
    """``(1 + phi) / mean(1 + phi)``: class weights with mean 1."""
    raw = 1.0 + phi
    return raw / raw.mean()
