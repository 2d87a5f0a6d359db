"""L-inf attacks as pure functions: PGD (cross-entropy), CW-inf (margin) and the TRADES inner maximization.

All three are projected gradient ascent in the L-inf ball of radius ``eps`` around the clean
input ``x`` (a float tensor in [0, 1]), differing only in the loss they ascend::

    x^0     = clip_[0,1](x + U(-eps, eps))                       (random start)
    x^{k+1} = clip_[0,1]( Proj_{B_inf(x, eps)}( x^k + alpha * sign(grad_x L(f(x^k), y)) ) )

- PGD (Madry et al. 2018):   L = CE(f(x'), y), summed over the batch.
- CW-inf (Carlini & Wagner's margin loss under the L-inf PGD of Madry et al.):
                             L = min( max_{j != y} z_j(x') - z_y(x'),  kappa ).
- TRADES (Zhang et al. 2019): L = KL( p(x) || p(x') ), p = softmax(f(.)); start x + 0.001 N(0, I).

The model's BatchNorm mode while the attack runs is an argument (``bn_mode``): ``"eval"`` uses
the running statistics (TRADES's reference code); ``"train"`` uses batch statistics (Madry's
and Rice et al.'s PGD-AT code) and so also moves the running statistics. The model's own
modes are restored afterwards. Gradients are taken with respect to the input only
(``torch.autograd.grad``): the attack never touches parameter ``.grad`` fields.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Literal

import torch
import torch.nn.functional as F

BNMode = Literal["eval", "train"]

# loss(logits_adv, y) -> per-sample values to ascend
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# (rows of the whole batch, first row of this part): a data-parallel worker attacks its part of
# a batch but draws the random start of the whole batch, so that the examples do not depend on
# how many workers share it
Share = tuple[int, int]


def batch_noise(
    x: torch.Tensor,
    kind: Literal["uniform", "normal"],
    scale: float,
    generator: torch.Generator | None,
    share: Share | None = None,
) -> torch.Tensor:
    """``U(-scale, scale)`` or ``scale * N(0, 1)`` noise shaped like ``x``.

    With ``share = (n, first)`` the noise of an ``n``-row batch is drawn and rows
    ``first .. first + len(x) - 1`` returned: the same values as a single worker draws for them.
    """
    rows, first = share if share is not None else (len(x), 0)
    noise = torch.empty((rows, *x.shape[1:]), device=x.device, dtype=x.dtype)
    if kind == "uniform":
        noise.uniform_(-scale, scale, generator=generator)
    else:
        noise.normal_(0.0, 1.0, generator=generator).mul_(scale)
    return noise[first : first + len(x)]


@contextlib.contextmanager
def bn_mode(model: torch.nn.Module, mode: BNMode) -> Iterator[None]:
    """Put every BatchNorm layer of ``model`` in ``mode`` for the block, then restore all modes.

    Only normalization layers are switched; dropout and other layers keep their mode.
    """
    if mode not in ("eval", "train"):
        raise ValueError(f"bn_mode must be 'eval' or 'train', got {mode!r}")
    saved = [(m, m.training) for m in model.modules()]
    try:
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.train(mode == "train")
        yield
    finally:
        for m, training in saved:
            m.training = training


def logit_margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample margin ``z_y - max_{j != y} z_j`` (positive iff correctly classified)."""
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.scatter(1, y[:, None], float("-inf")).amax(1)
    return true - other


def prob_margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample margin of the softmax, ``p_y - max_{j != y} p_j``, in [-1, 1]."""
    return logit_margin(logits.softmax(1), y)


def ce_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy: the loss PGD ascends."""
    return F.cross_entropy(logits, y, reduction="none")


def cw_loss(kappa: float = 50.0) -> LossFn:
    """The CW margin loss ``min(max_{j != y} z_j - z_y, kappa)`` per sample."""

    def loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (-logit_margin(logits, y)).clamp(max=kappa)

    return loss


def linf_pgd(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    *,
    eps: float,
    step_size: float,
    steps: int,
    random_start: bool = True,
    bn: BNMode = "eval",
    generator: torch.Generator | None = None,
    start: torch.Tensor | None = None,
    share: Share | None = None,
) -> torch.Tensor:
    """Projected sign-gradient ascent of ``sum_i loss_fn(f(x'_i), y_i)`` in the L-inf ball.

    Returns the adversarial inputs, detached, with ``|x' - x|_inf <= eps`` and ``x'`` in [0, 1].
    The random start draws ``U(-eps, eps)`` from ``generator`` (the global RNG if None) with
    ``torch.empty_like(x).uniform_`` so that a reference implementation seeded the same way
    draws the same start (``share``: see ``batch_noise``). ``start``, when given, is the first
    iterate instead (TRADES). ``eps`` may be a per-sample tensor ``[N, 1, 1, 1]`` when a start
    is given (FRL-Remargin).
    """
    x = x.detach()
    if start is not None:
        x_adv = start.detach().clone()
    elif random_start and eps > 0:
        x_adv = (x + batch_noise(x, "uniform", eps, generator, share)).clamp(0.0, 1.0)
    else:
        x_adv = x.clone()
    with bn_mode(model, bn):
        for _ in range(steps):
            x_adv.requires_grad_(True)
            loss = loss_fn(model(x_adv), y).sum()
            (grad,) = torch.autograd.grad(loss, x_adv)
            with torch.no_grad():
                x_adv = x_adv + step_size * grad.sign()
                x_adv = torch.min(torch.max(x_adv, x - eps), x + eps).clamp(0.0, 1.0)
    return x_adv.detach()


def pgd(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    eps: float = 8 / 255,
    step_size: float = 2 / 255,
    steps: int = 10,
    random_start: bool = True,
    bn: BNMode = "eval",
    generator: torch.Generator | None = None,
    share: Share | None = None,
) -> torch.Tensor:
    """L-inf PGD on the cross-entropy (Madry et al. 2018): see the module docstring."""
    return linf_pgd(
        model,
        x,
        y,
        ce_loss,
        eps=eps,
        step_size=step_size,
        steps=steps,
        random_start=random_start,
        bn=bn,
        generator=generator,
        share=share,
    )


def cw_linf(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    eps: float = 8 / 255,
    step_size: float = 2 / 255,
    steps: int = 30,
    kappa: float = 50.0,
    random_start: bool = True,
    bn: BNMode = "eval",
    generator: torch.Generator | None = None,
    share: Share | None = None,
) -> torch.Tensor:
    """CW-inf: L-inf PGD on the margin loss ``min(max_{j != y} z_j - z_y, kappa)``."""
    return linf_pgd(
        model,
        x,
        y,
        cw_loss(kappa),
        eps=eps,
        step_size=step_size,
        steps=steps,
        random_start=random_start,
        bn=bn,
        generator=generator,
        share=share,
    )


def trades_attack(
    model: torch.nn.Module,
    x: torch.Tensor,
    *,
    eps: float | torch.Tensor = 8 / 255,
    step_size: float = 2 / 255,
    steps: int = 10,
    start_std: float = 0.001,
    bn: BNMode = "eval",
    generator: torch.Generator | None = None,
    share: Share | None = None,
) -> torch.Tensor:
    """TRADES inner maximization: ascend ``KL(p(x) || p(x'))`` from ``x + start_std * N(0, I)``.

    ``p(x)`` is computed once (no gradient) in the same BatchNorm mode as the attack. ``eps``
    may be a per-sample radius ``[N, 1, 1, 1]`` (FRL-Remargin).
    """
    x = x.detach()
    with bn_mode(model, bn):
        with torch.no_grad():
            p_clean = model(x).softmax(1)
    start = x + batch_noise(x, "normal", start_std, generator, share)
    start = torch.min(torch.max(start, x - eps), x + eps).clamp(0.0, 1.0)

    def kl(logits: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
        return F.kl_div(logits.log_softmax(1), p_clean, reduction="none").sum(1)

    return linf_pgd(
        model,
        x,
        torch.zeros(len(x), dtype=torch.long, device=x.device),
        kl,
        eps=eps,
        step_size=step_size,
        steps=steps,
        start=start,
        bn=bn,
    )
