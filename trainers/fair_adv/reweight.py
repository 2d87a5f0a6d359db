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
          gamma_t = gamma * min(1, (t - T_w + 1) / R)            the larger; ramped over the first
                                                                 R weighted epochs)

and ``w_i = 1`` for every sample during the first ``T_w`` epochs (history still accumulates).
The batch loss is ``sum_i w_i CE(f(x'_i), y_i) / sum_i w_i``. The history is then updated with
this visit: ``c_i <- mu c_i + (1 - mu) k_i``, ``l_i <- mu l_i + (1 - mu) CE(f(x_i), y_i)`` (set
to the observation on the first visit). Class labels enter only through each sample's own
loss and margins; no class statistics are used.

FRL (Xu et al., "To be Robust or to be Fair", ICML 2021), the class-wise baseline
---------------------------------------------------------------------------------
As in the authors' code (``utils_frl.py``, ``frlrw.py``, ``frlrmrw.py``). Before each epoch of
FRL fine-tuning, the model's class-wise clean error ``e_nat_c`` and boundary error
``e_bndy_c = acc_clean_c - acc_adv_c`` are measured on the validation split under PGD-20, with
``E_nat``, ``E_bndy`` the same over all validation examples. Each constraint
``e_c - E - tau <= 0`` has a Lagrange multiplier per class, raised by one dual step and then
projected back onto ``{lambda >= 0, sum_c lambda_c <= cap}``::

    lambda_nat  <- P_cap( lambda_nat  + alpha_nat  (e_nat  - E_nat  - tau_nat ) )
    lambda_bndy <- P_cap( lambda_bndy + alpha_bndy (e_bndy - E_bndy - tau_bndy) )
    P_cap(v) = max(v, 0) * min(1, cap / sum_c max(v_c, 0))

(``alpha_bndy = 2 alpha_nat`` in the reference; both halve every 40 fine-tuning epochs). The
class weights are the cost-sensitive weights of the Lagrangian,
``w_c = 1/Y + lambda_c - mean(lambda)`` (``Y`` classes; they sum to 1 and, with the cap,
stay positive), and the batch loss divides each term by its own weight sum::

    L = sum_i a_{y_i} CE(f(x_i), y_i) / sum_i a_{y_i}
        + beta * sum_i b_{y_i} KL(p(x_i) || p(x'_i)) / sum_i b_{y_i}      (a = w(lambda_nat),
                                                                            b = w(lambda_bndy))

FRL-Remargin (``frl_remargin``) also keeps ``lambda_margin <- lambda_margin + alpha_margin
(e_bndy - E_bndy - tau_bndy)`` (no projection, as in the reference) and attacks class ``c``
with radius ``eps * clip(exp(2 lambda_margin_c), 0.98, 3)`` and step ``max radius / 4``.
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
    # torch.where, not boolean indexing: a masked write reads the mask's count back to the host
    boundary = torch.full_like(margin, BOUNDARY, dtype=torch.long)
    regimes = torch.where(safe, torch.full_like(boundary, SAFE), boundary)
    return torch.where(outlier, torch.full_like(boundary, OUTLIER), regimes)


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
    weighted_epoch = epoch - warmup_epochs + 1  # 1 at the first weighted epoch
    gain = boundary_gain * (min(1.0, weighted_epoch / ramp_epochs) if ramp_epochs > 0 else 1.0)
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


def fixed_counts(keys: torch.Tensor, size: int) -> torch.Tensor:
    """``counts[k] = #{i : keys_i = k}`` for ``k < size``, as a fixed-size ``index_add_``.

    ``torch.bincount`` gives the same counts but reads the keys' minimum and maximum back to
    the host and sizes its output by them: a sync per call on a GPU, and a shape no CUDA graph
    or ``torch.compile`` can hold. Every key must lie in ``[0, size)``.
    """
    counts = torch.zeros(size, dtype=torch.long, device=keys.device)
    return counts.index_add_(0, keys.reshape(-1), torch.ones_like(keys.reshape(-1), dtype=torch.long))


def regime_counts(regimes: torch.Tensor) -> torch.Tensor:
    """How many samples fell in each regime: ``[outlier, boundary, safe]``."""
    return fixed_counts(regimes, 3)


def regime_counts_per_class(regimes: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``[num_classes, 3]``: row ``c`` counts the visits of class-``c`` samples per regime,
    ``n_{c,r} = #{i : y_i = c, regime_i = r}`` (``fixed_counts`` of ``3 y_i + regime_i``).

    Read only for logging (which classes the outlier gate removes); never for the weights.
    """
    return fixed_counts(y * 3 + regimes, 3 * num_classes).view(num_classes, 3)


def project_multipliers(lam: torch.Tensor, cap: float) -> torch.Tensor:
    """``P_cap``: clip at 0, then rescale so that ``sum_c lambda_c <= cap`` (module docstring)."""
    lam = lam.clamp(min=0)
    total = lam.sum()
    return lam * (cap / total) if total > cap else lam


def frl_multiplier_step(
    lam: torch.Tensor,
    class_err: torch.Tensor,
    total_err: float,
    *,
    tolerance: float,
    rate: float,
    cap: float | None,
) -> torch.Tensor:
    """One dual step ``lambda + rate (e_c - E - tau)``, projected with ``P_cap`` (None: none).

    ``class_err`` is the per-class error, ``total_err`` the error over all validation examples.
    """
    lam = lam + rate * (class_err - total_err - tolerance)
    return lam if cap is None else project_multipliers(lam, cap)


def frl_rate(rate: float, finetune_epoch: int, halve_every: int) -> float:
    """The dual step size of (1-based) fine-tuning epoch ``k``: ``rate / 2^floor(k / halve_every)``.

    The reference halves its rate at the start of every epoch divisible by 40, before that
    epoch's update; 0 turns halving off.
    """
    return rate if halve_every <= 0 else rate * 0.5 ** (finetune_epoch // halve_every)


def frl_class_weights(lam: torch.Tensor) -> torch.Tensor:
    """``w_c = 1/Y + lambda_c - mean(lambda)``: the cost-sensitive class weights (sum 1)."""
    return 1.0 / len(lam) + lam - lam.mean()


def frl_margin_scale(lam_margin: torch.Tensor) -> torch.Tensor:
    """FRL-Remargin's per-class radius factor ``clip(exp(2 lambda_margin), 0.98, 3)``."""
    return torch.exp(2 * lam_margin).clamp(0.98, 3.0)
