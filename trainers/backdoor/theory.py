"""The directional data model and a one-hidden-layer ReLU network trained by plain SGD.

Data (``directional_data``). Orthonormal directions ``u`` (semantic) and ``v`` (trigger),
here the first two coordinates of R^d. A clean sample of class ``y in {-1, +1}``:

    x = mu_s * y * u + xi,        xi ~ N(0, (sigma^2 / d) I_d)    (so E||xi||^2 = sigma^2)

A poisoned sample is a sample of the non-target class (y = -1) given the trigger and the target
label (+1), all-to-one:

    x = -mu_s * u + mu_t * v + xi,    label +1

``round(p * n)`` of the ``n`` training samples are poisoned (``p``: the poisoning ratio).

Network (``relu_net``). ``f(x) = sum_j a_j relu(w_j . x)`` with ``w_j ~ N(0, s^2 I_d)`` and
fixed output weights ``a_j = +-1/sqrt(m)``; the hidden layer ``W`` is trained by SGD on the
logistic loss ``l(x, y) = log(1 + exp(-y f(x)))``:

    W <- W - eta * (1/B) sum_{i in batch} dl_i/df * a_j 1[w_j . x_i > 0] x_i     (row j)

Frozen gates (``frozen_gate_net``). With the gates fixed at initialization,
``D_ij = 1[w_j(0) . x_i > 0]``, the network ``f~(x_i) = sum_j a_j D_ij (w_j . x_i)`` is linear
in ``W`` and equals ``f`` at ``W(0)``. Its gradient-flow loss decrease for a group ``G`` is the
frozen-gate signal

    S_G = <grad L_G, grad L>
        = (1/|G|) (1/n) sum_{i in G} sum_k l'_i l'_k y_i y_k K(x_i, x_k),
    K(x, x') = sum_j a_j^2 D_j(x) D_j(x') (x . x'),       l' = d l / d(y f) = -sigmoid(-y f)

so over ``T`` early SGD steps the relative decrease of group G is about
``eta * T * S_G / L_G(0)``. The true network departs from the frozen-gate one only through
gates that flip: ``f(x_i) - f~(x_i) = sum_j a_j (1[w_j . x_i > 0] - D_ij) (w_j . x_i)``, and a
gate can only flip when its drift ``|(w_j(t) - w_j(0)) . x_i|`` exceeds its initial margin
``|w_j(0) . x_i|``. ``gate_flip_fraction`` and ``gate_drift_fraction`` measure both per group.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F


def directional_data(
    n: int,
    dim: int,
    semantic: float,
    trigger: float,
    noise: float,
    poison_ratio: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x [n, d], y [n] in {-1, +1}, poisoned [n] bool)`` of the directional data model.

    Poisoned samples are drawn uniformly among the class -1 samples, relabelled +1 and given
    ``trigger * v``; ``u = e_0``, ``v = e_1``.
    """
    y = torch.where(torch.rand(n, generator=generator) < 0.5, 1.0, -1.0)
    x = noise * torch.randn(n, dim, generator=generator) / math.sqrt(dim)
    x[:, 0] += semantic * y
    negatives = torch.nonzero(y < 0).flatten()
    count = round(poison_ratio * n)
    if count > len(negatives):
        raise ValueError(f"poison ratio {poison_ratio} needs {count} class -1 samples, have {len(negatives)}")
    chosen = negatives[torch.randperm(len(negatives), generator=generator)[:count]]
    poisoned = torch.zeros(n, dtype=torch.bool)
    poisoned[chosen] = True
    x[chosen, 1] += trigger
    y[chosen] = 1.0
    return x, y, poisoned


def init_network(
    dim: int, width: int, init_scale: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W [m, d] ~ N(0, s^2), a [m] = +-1/sqrt(m))`` with random signs."""
    w = init_scale * torch.randn(width, dim, generator=generator)
    a = torch.where(torch.rand(width, generator=generator) < 0.5, 1.0, -1.0) / math.sqrt(width)
    return w, a


def gates(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """ReLU gates ``1[w_j . x_i > 0]`` as a float ``[n, m]`` tensor."""
    return (x @ w.T > 0).float()


def relu_net(w: torch.Tensor, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``f(x) = sum_j a_j relu(w_j . x)``."""
    return torch.relu(x @ w.T) @ a


def frozen_gate_net(w: torch.Tensor, a: torch.Tensor, x: torch.Tensor, gates0: torch.Tensor) -> torch.Tensor:
    """``f~(x_i) = sum_j a_j D_ij (w_j . x_i)`` with the given gates ``D``."""
    return ((x @ w.T) * gates0) @ a


def logistic_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample ``log(1 + exp(-y f))``."""
    return F.softplus(-y * out)


def sgd_step(
    w: torch.Tensor,
    a: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    gates0: torch.Tensor | None = None,
) -> torch.Tensor:
    """One SGD step on the batch ``(x, y)``: the true network, or with ``gates0`` the frozen one.

    ``grad_{w_j} = (1/B) sum_i (-y_i sigmoid(-y_i f_i)) a_j D_ij x_i``.
    """
    pre = x @ w.T
    d = (pre > 0).float() if gates0 is None else gates0
    out = (pre * d) @ a  # equals relu(pre) @ a when d is the true gate pattern
    dl_df = -y * torch.sigmoid(-y * out) / len(y)
    return w - lr * ((dl_df[:, None] * d) * a[None, :]).T @ x


def frozen_gate_signal(
    w0: torch.Tensor, a: torch.Tensor, x: torch.Tensor, y: torch.Tensor, group: torch.Tensor
) -> float:
    """``S_G = <grad L_G, grad L>`` at ``w0`` with gates frozen there (see the module docstring)."""
    d = gates(w0, x)
    out = frozen_gate_net(w0, a, x, d)
    coef = -y * torch.sigmoid(-y * out)  # dl_i/df_i
    per_sample = lambda c: ((c[:, None] * d) * a[None, :]).T @ x  # noqa: E731  sum_i c_i grad f_i
    grad_all = per_sample(coef) / len(y)
    grad_group = per_sample(coef * group.float()) / group.sum().clamp_min(1)
    return float((grad_group * grad_all).sum())


def signal_and_curvature(
    w0: torch.Tensor, a: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *groups: torch.Tensor
) -> list[tuple[float, float]]:
    """``(S_G, C_G)`` for each group mask ``G`` (one kernel for all): the first two time derivatives of the group loss of the frozen-gate
    network under gradient flow ``dW/dt = -grad L`` from ``w0`` (float64 inside):

        L_G(t) = L_G(0) - t S_G + (t^2 / 2) C_G + O(t^3)
        S_G = <grad L_G, grad L> = mean_{i in G} c_i v_i
        C_G = <H_G grad L, grad L> + <grad L_G, H grad L>
            = mean_{i in G} h_i v_i^2 + (1/n) sum_k h_k u_k v_k

    with ``c_i = dl_i/df``, ``h_i = d^2 l_i/df^2 = sigmoid(-y_i f_i) sigmoid(y_i f_i)`` (at most
    1/4), ``v_k = <grad f_k, grad L> = (1/n) sum_i K_ki c_i``, ``u_k = <grad f_k, grad L_G> =
    mean_{i in G} K_ki c_i`` and the frozen-gate kernel ``K`` (module docstring); the network is
    linear in ``W``, so ``H = (1/n) sum_k h_k grad f_k grad f_k^T``. ``C_G`` is the error term of
    the first-order (signal) prediction: the curvature of the group's own loss along the gradient
    plus the change of the whole gradient seen by the group; ``t`` is ``eta x steps`` of
    (full-batch) gradient descent. An ``n x n`` kernel: for the few thousand samples here."""
    x, y, a, w0 = x.double(), y.double(), a.double(), w0.double()
    d = gates(w0, x).double()
    kernel = ((d * a.pow(2)) @ d.T) * (x @ x.T)
    out = frozen_gate_net(w0, a, x, d)
    s = torch.sigmoid(-y * out)
    c, h = -y * s, s * (1 - s)
    v = kernel @ c / len(y)
    out = []
    for group in groups:
        g = group.double()
        size = g.sum().clamp_min(1)
        u = kernel @ (c * g) / size
        signal = float((c * v * g).sum() / size)
        curvature = float((h * v * v * g).sum() / size + (h * u * v).sum() / len(y))
        out.append((signal, curvature))
    return out


def predicted_rel_drop(t: float, signal: float, curvature: float, initial_loss: float) -> float:
    """Second-order prediction of a group's relative loss decrease after gradient-flow time ``t``
    (``eta x steps``): ``(t S_G - t^2 C_G / 2) / L_G(0)``; ``curvature=0`` gives the first-order
    (signal) prediction ``t S_G / L_G(0)``. Both hold while ``t S_G / L_G(0)`` is small: the
    relative drop cannot exceed 1, the linear prediction grows without bound."""
    return (t * signal - t * t * curvature / 2) / initial_loss


def gate_flip_fraction(w0: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> float:
    """Fraction of (sample, neuron) gates of ``x`` that differ between ``w0`` and ``w``."""
    return float((gates(w0, x) != gates(w, x)).float().mean()) if len(x) else 0.0


def gate_drift_fraction(w0: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> float:
    """Fraction of (sample, neuron) pairs whose drift ``|(w - w0) . x|`` reaches the initial
    margin ``|w0 . x|``: the only gates that can have flipped (an upper bound on flips)."""
    if not len(x):
        return 0.0
    return float(((x @ (w - w0).T).abs() >= (x @ w0.T).abs()).float().mean())


def group_losses(out: torch.Tensor, y: torch.Tensor, poisoned: torch.Tensor) -> dict[str, float]:
    """Mean logistic loss of the poisoned and of the clean samples."""
    loss = logistic_loss(out, y)
    return {"poison": float(loss[poisoned].mean()), "clean": float(loss[~poisoned].mean())}


def gate_flip_error(w0: torch.Tensor, w: torch.Tensor, a: torch.Tensor, x: torch.Tensor) -> float:
    """Mean over samples of ``|f(x_i) - f~_W(x_i)|`` at the current weights ``W``, where
    ``f~_W`` keeps the gates of ``W(0)``:

        f(x_i) - f~_W(x_i) = sum_j a_j (1[w_j . x_i > 0] - D_ij) (w_j . x_i)

    the error term of the frozen-gate model, nonzero only through flipped gates."""
    if not len(x):
        return 0.0
    return float((relu_net(w, a, x) - frozen_gate_net(w, a, x, gates(w0, x))).abs().mean())


def loss_error_terms(
    w0: torch.Tensor,
    w: torch.Tensor,
    w_frozen: torch.Tensor,
    a: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
) -> tuple[float, float]:
    """The frozen-gate model's loss error on samples ``(x, y)``, split exactly in two:

        L(f_W) - L(f~_W~) = [L(f_W) - L(f~_W)] + [L(f~_W) - L(f~_W~)]
                          =   flip_loss_error  +     drift_error

    ``W`` is the network's weights, ``W~`` the frozen-gate twin's (trained on the same batches),
    ``f~_V`` the network with the initial gates ``D = 1[W(0) x > 0]`` at weights ``V`` and ``L``
    the mean logistic loss. ``flip_loss_error``: at the network's own weights, what the flipped
    gates change (0 when no gate flipped). ``drift_error``: with the gates frozen, what the
    network's weights having drifted elsewhere than the twin's changes (0 while no gate has
    flipped, since then both take the same steps). Returns ``(drift_error, flip_loss_error)``."""
    if not len(x):
        return 0.0, 0.0
    d0 = gates(w0, x)
    true = logistic_loss(relu_net(w, a, x), y).double().mean()
    frozen_here = logistic_loss(frozen_gate_net(w, a, x, d0), y).double().mean()
    twin = logistic_loss(frozen_gate_net(w_frozen, a, x, d0), y).double().mean()
    return float(frozen_here - twin), float(true - frozen_here)


def drop_ratio(drop_poison: float, drop_clean: float, floor: float = 1e-3) -> float:
    """``drop_poison / drop_clean`` with the denominator's magnitude floored at ``floor``
    (keeping its sign), so a clean group that has not moved yet gives a large finite ratio."""
    denom = drop_clean if abs(drop_clean) >= floor else math.copysign(floor, drop_clean or 1.0)
    return drop_poison / denom
