"""The measurements of the backdoor study, as pure functions of tensors.

Attack metrics (over test images whose true class is not the target):

    clean_acc = mean[argmax f(x) == y]                      over all clean test images
    asr       = mean[argmax f(T(x)) == target]              over y != target
    ra        = mean[argmax f(T(x)) == y]                   over y != target

ASR is reported only where the model has learned the task (``reported_asr``):

    asr_reported = asr if clean_acc > floor else NaN,   floor = k / C   (k = 2: twice chance)

Early-stage signatures, per group G (a fixed sample of images with their labels):

    loss_G         = mean_{i in G} CE(f(x_i), y_i)
    loss_drop_G(t) = loss_G(0) - loss_G(t)                       (nats)
    rel_drop_G(t)  = (loss_G(0) - loss_G(t)) / loss_G(0)
    coherence_G    = mean_{i != j in G} cos(g_i, g_j),  g_i = grad_theta CE(f(x_i), y_i)
                   = (||sum_i g_i / ||g_i|| ||^2 - n) / (n (n - 1))
    gate_flip_G    = mean over i in G and units u of [h_u(x_i; t) > 0] != [h_u(x_i; t') > 0]
    margin_G       = mean_{i in G} (z_{y_i}(x_i) - max_{k != y_i} z_k(x_i))

Contrasts (``gap``): a signature of the poisoned group minus the same signature of a control
group that shares its label, so that whatever comes from the label alone cancels:

    gap_vs_C(s) = s_poison - s_C

Per-sample cross-entropy gradients share the factor ``softmax(z) - e_y``, so any group whose
images all carry one label is coherent with or without a trigger; and a network that learns
only the class prior (the target class's share grows with poisoning) lowers the loss of every
target-labelled image alike. Both effects are the same for the poisoned group and for a control
group with the target label, and cancel in the gap.

Prior-corrected loss (``prior_corrected_loss``): poisoning raises the target class's share of
the training set, and a network that learns only that prior lowers the loss of every
target-labelled image. The logits are adjusted by the log prior the network itself predicts on
the training distribution, the mean log-softmax over a random sample ``R`` of the training set,

    log_prior_k    = (1/|R|) sum_{j in R} log softmax(f(x_j))_k
    loss_pc(x, y)  = CE(f(x) - log_prior, y)

A change of the final bias by any ``delta`` moves every ``log softmax(f(x_j))`` by ``delta``
less one constant per image, so ``log_prior`` moves by ``delta`` plus a constant and
``loss_pc`` does not change at all; once the network predicts the training class frequencies
``pi`` everywhere, ``log_prior = log pi`` (logit adjustment by the class frequencies). The
contrast ``loss_drop_prior_corrected_gap_vs_clean`` compares the poisoned group with clean images
of every class on this loss.

Trigger-dominant neurons, for penultimate features ``phi`` on paired inputs (each test image
with and without the trigger), the standardized mean difference (Cohen's d) per neuron:

    selectivity_k = (mean phi_k(T(x)) - mean phi_k(x)) / sqrt((var phi_k(T(x)) + var phi_k(x)) / 2)
"""

from __future__ import annotations

import math

import torch
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

EPS = 1e-12


# ----------------------------------------------------------------------------- attack metrics


def accuracy(pred: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of ``pred == y`` (0 for an empty set)."""
    return float((pred == y).float().mean()) if len(y) else 0.0


def attack_success_rate(pred_triggered: torch.Tensor, y_true: torch.Tensor, target: int) -> float:
    """Fraction of triggered images of non-target classes classified as ``target``.

    Images whose true class is ``target`` are left out (their "success" would be free).
    """
    keep = y_true != target
    return float((pred_triggered[keep] == target).float().mean()) if keep.any() else 0.0


def clean_acc_floor(x_chance: float, num_classes: int) -> float:
    """The clean accuracy a model must exceed for its ASR to mean anything: ``x_chance / C``
    (``Config.clean_acc_floor_x_chance`` times chance, C classes; 0.2 at the default 2x on 10)."""
    return x_chance / num_classes


def reported_asr(asr: float, clean_acc: float, floor: float) -> float:
    """ASR where the model has learned the task, NaN where it has not:
    ``ASR_reported = ASR if clean_acc > floor else NaN``.

    A model at chance that predicts the target class for every input has ASR 1 without any
    backdoor (and 0 when it predicts another class): its ASR measures the collapse, not the
    trigger, and is withheld. ``floor`` 0 reports every ASR."""
    return asr if clean_acc > floor else math.nan


def robust_accuracy(pred_triggered: torch.Tensor, y_true: torch.Tensor, target: int) -> float:
    """Fraction of triggered images of non-target classes still classified as their true class."""
    keep = y_true != target
    return float((pred_triggered[keep] == y_true[keep]).float().mean()) if keep.any() else 0.0


# ----------------------------------------------------------------------------- signatures


def logit_margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample ``z_y - max_{k != y} z_k``."""
    true = logits.gather(1, y[:, None]).squeeze(1)
    others = logits.scatter(1, y[:, None], float("-inf"))
    return true - others.max(1).values


def relative_drop(initial: float, now: float) -> float:
    """``(initial - now) / initial``."""
    return (initial - now) / max(abs(initial), EPS)


def gap(signature: dict[str, float], control: str, treated: str = "poison") -> float:
    """``signature[treated] - signature[control]``: the contrast of a signature between the
    poisoned group and a control group with the same label."""
    return signature[treated] - signature[control]


def mean_pairwise_cosine_from_unit_sum(unit_sum: torch.Tensor, n: int) -> float:
    """Mean of ``cos(g_i, g_j)`` over ordered pairs ``i != j`` from ``sum_i g_i / ||g_i||``.

    ``||sum_i u_i||^2 = n + sum_{i != j} u_i . u_j`` for unit vectors ``u_i``.
    """
    if n < 2:
        return 0.0
    return float((unit_sum.double().pow(2).sum() - n) / (n * (n - 1)))


def mean_pairwise_cosine(vectors: torch.Tensor) -> float:
    """Mean pairwise cosine of the rows of ``vectors`` (``[n, P]``), via the unit sum."""
    units = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(EPS)
    return mean_pairwise_cosine_from_unit_sum(units.sum(0), len(vectors))


def gradient_coherence(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 8) -> float:
    """Mean pairwise cosine of the per-sample gradients of ``CE(net(x_i), y_i)`` with respect to
    every trainable parameter of ``net`` (taken as it is: call it in eval mode).

    The per-sample gradients come from ``torch.func.vmap(grad(...))`` over ``chunk`` images at
    a time; only the running sum of unit gradients is kept, so memory is ``chunk + 1``
    parameter copies whatever ``len(x)`` is.
    """
    params = {k: v.detach() for k, v in net.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in net.named_buffers()}

    def loss(p: dict, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(net, (p, buffers), (xi[None],)), yi[None])

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    unit_sum = None
    for start in range(0, len(x), chunk):
        grads = per_sample(params, x[start : start + chunk], y[start : start + chunk])
        flat = torch.cat([g.flatten(1) for g in grads.values()], dim=1)
        units = (flat / flat.norm(dim=1, keepdim=True).clamp_min(EPS)).sum(0)
        unit_sum = units if unit_sum is None else unit_sum + units
    return mean_pairwise_cosine_from_unit_sum(unit_sum, len(x))


def loss_gradient(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of the mean ``CE(net(x), y)`` with respect to every trainable parameter of
    ``net`` (as it is: call it in eval mode), flattened into one vector."""
    params = [p for p in net.parameters() if p.requires_grad]
    grads = torch.autograd.grad(F.cross_entropy(net(x), y), params)
    return torch.cat([g.flatten() for g in grads])


def gradient_alignment(group: torch.Tensor, whole: torch.Tensor) -> dict[str, float]:
    """The theory's signal on the network: ``signal = <grad L_G, grad L>``, the rate at which a
    gradient step on the whole training loss ``L`` lowers the group's loss ``L_G`` (per unit
    learning rate, to first order: ``L_G(w - eta grad L) = L_G(w) - eta signal + O(eta^2)``), and
    ``alignment``, the cosine of the two gradients."""
    dot = float(group @ whole)
    return {"signal": dot, "alignment": dot / max(float(group.norm() * whole.norm()), EPS)}


def log_prior(logits: torch.Tensor) -> torch.Tensor:
    """``[K]``: the mean over the rows of ``log softmax(logits)`` (the network's log class prior
    on the sample whose ``logits`` these are)."""
    return F.log_softmax(logits.double(), dim=1).mean(0)


def prior_corrected_loss(logits: torch.Tensor, y: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """Per-sample ``CE(logits - prior, y)`` (``prior``: ``log_prior`` of a training sample)."""
    return F.cross_entropy(logits.double() - prior, y, reduction="none")


def gate_flip_fraction(before: torch.Tensor, after: torch.Tensor) -> float:
    """Fraction of ReLU gates (booleans, any shape) that differ between two logging points."""
    return float((before != after).float().mean())


# ----------------------------------------------------------------------------- neurons


def selectivity(features_triggered: torch.Tensor, features_clean: torch.Tensor) -> torch.Tensor:
    """Per-neuron standardized mean difference (Cohen's d) of triggered over clean features.

    Inputs ``[n, K]``; output ``[K]``. Variances are the biased (1/n) ones.
    """
    mean_t, mean_c = features_triggered.mean(0), features_clean.mean(0)
    var_t, var_c = features_triggered.var(0, unbiased=False), features_clean.var(0, unbiased=False)
    return (mean_t - mean_c) / torch.sqrt((var_t + var_c) / 2 + EPS)


def top_neurons(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest scores, largest first."""
    return scores.topk(min(k, len(scores))).indices


def ablate(features: torch.Tensor, neurons: torch.Tensor) -> torch.Tensor:
    """``features`` with the given columns set to zero (ReLU features: "never fire")."""
    out = features.clone()
    out[:, neurons] = 0
    return out


def cross_entropy_per_sample(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")


# ----------------------------------------------------------------------------- one early probe


def early_signature(
    baseline: dict[str, dict],
    now: dict[str, dict],
    gates_before: dict[str, torch.Tensor],
    gates_now: dict[str, torch.Tensor],
    controls: tuple[str, ...] | None = None,
) -> dict[str, float]:
    """The early-stage signatures of every probe group at one probe, and their contrasts.

    ``baseline`` and ``now`` hold each group's ``loss``, ``loss_prior_corrected``, ``margin``
    and ``coherence`` at step 0 and now; ``gates_before``/``gates_now`` its ReLU gates at the
    previous probe and now. Per group G (see the module docstring): ``early/loss_G``,
    ``loss_drop_G = loss_G(0) - loss_G(t)``, ``rel_drop_G``, ``grad_coherence_G``,
    ``gate_flip_since_last_G``, ``margin_G``, ``margin_growth_G = margin_G(t) - margin_G(0)``
    and ``loss_drop_prior_corrected_G``; where ``now`` has them, ``grad_signal_G`` and
    ``grad_alignment_G`` (``gradient_alignment``); then ``gap_vs_C(s) = s_poison - s_C`` of the
    signatures for each control C (the groups that share the poisoned group's label,
    ``trainers.backdoor.CONTROLS``), and both loss drops' gaps against the clean group.
    """
    if controls is None:
        from trainers.backdoor import CONTROLS as controls
    row: dict[str, float] = {}
    signature: dict[str, dict[str, float]] = {
        "loss_drop": {},
        "grad_coherence": {},
        "margin_growth": {},
        "gate_flip_since_last": {},
    }
    aligned = all("signal" in now[g] for g in now)  # the alignment probe (loop.probe_groups)
    if aligned:
        signature |= {"grad_signal": {}, "grad_alignment": {}}
    prior_corrected = {}
    for g in now:
        signature["loss_drop"][g] = baseline[g]["loss"] - now[g]["loss"]
        signature["grad_coherence"][g] = now[g]["coherence"]
        signature["margin_growth"][g] = now[g]["margin"] - baseline[g]["margin"]
        signature["gate_flip_since_last"][g] = gate_flip_fraction(gates_before[g], gates_now[g])
        prior_corrected[g] = baseline[g]["loss_prior_corrected"] - now[g]["loss_prior_corrected"]
        row |= {
            f"early/loss_drop_prior_corrected_{g}": prior_corrected[g],
            f"early/loss_{g}": now[g]["loss"],
            f"early/loss_drop_{g}": signature["loss_drop"][g],
            f"early/rel_drop_{g}": relative_drop(baseline[g]["loss"], now[g]["loss"]),
            f"early/grad_coherence_{g}": now[g]["coherence"],
            f"early/gate_flip_since_last_{g}": signature["gate_flip_since_last"][g],
            f"early/margin_{g}": now[g]["margin"],
            f"early/margin_growth_{g}": signature["margin_growth"][g],
        }
        if aligned:
            signature["grad_signal"][g] = now[g]["signal"]
            signature["grad_alignment"][g] = now[g]["alignment"]
            row |= {f"early/grad_signal_{g}": now[g]["signal"], f"early/grad_alignment_{g}": now[g]["alignment"]}
    for name, values in signature.items():
        row |= {f"early/{name}_gap_vs_{c}": gap(values, c) for c in controls}
    row["early/loss_drop_prior_corrected_gap_vs_clean"] = gap(prior_corrected, "clean")
    row["early/loss_drop_gap_vs_clean"] = gap(signature["loss_drop"], "clean")
    return row
