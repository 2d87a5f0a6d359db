"""Per-class and worst-class accuracy, and the evaluation of a model under an attack.

For predictions ``p`` and labels ``y`` over classes ``c = 0..C-1``::

    acc_c        = |{i : y_i = c, p_i = y_i}| / |{i : y_i = c}|     (NaN when class c is absent)
    acc          = |{i : p_i = y_i}| / N                               (over examples, not classes)
    acc_worst    = min over the classes present of acc_c

Robust accuracy is the same computed on predictions for adversarial inputs.
"""

from __future__ import annotations

from typing import Callable

import torch

# attack(model, x, y, share) -> x_adv; share as in attack.batch_noise (None: the whole batch)
Attack = Callable[..., torch.Tensor]


def per_class_accuracy(pred: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``acc_c`` for every class as a float64 vector ``[num_classes]``; NaN for absent classes."""
    correct = (pred == y).double()
    hits = torch.zeros(num_classes, dtype=torch.float64, device=y.device).index_add_(0, y, correct)
    counts = torch.bincount(y, minlength=num_classes).double()
    return torch.where(counts > 0, hits / counts.clamp(min=1), torch.full_like(hits, float("nan")))


def worst_class(per_class: torch.Tensor) -> float:
    """The smallest accuracy among the classes that are present (NaN entries ignored)."""
    present = per_class[~torch.isnan(per_class)]
    return float(present.min()) if len(present) else float("nan")


def frl_error_rates(
    clean_pred: torch.Tensor, adv_pred: torch.Tensor, y: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """Clean and boundary errors per class and overall, as FRL's ``evaluate`` computes them.

    ``clean_err_c = 1 - acc_clean_c``, ``bndy_err_c = acc_clean_c - acc_adv_c`` (absent
    classes: 0), and over all examples ``E_nat = 1 - acc_clean``, ``E_bndy = acc_clean - acc_adv``.
    """
    present = torch.bincount(y, minlength=num_classes) > 0
    acc_clean = per_class_accuracy(clean_pred, y, num_classes).nan_to_num(1.0)
    acc_adv = per_class_accuracy(adv_pred, y, num_classes).nan_to_num(1.0)
    clean_err = torch.where(present, 1 - acc_clean, torch.zeros_like(acc_clean))
    bndy_err = torch.where(present, acc_clean - acc_adv, torch.zeros_like(acc_clean))
    total_clean = float((clean_pred == y).double().mean())
    total_adv = float((adv_pred == y).double().mean())
    return clean_err, bndy_err, 1 - total_clean, total_clean - total_adv


@torch.no_grad()
def predict(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).argmax(1)


def evaluate(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    attack: Attack | None,
    batch_size: int = 256,
    to_input: Callable[[torch.Tensor], torch.Tensor] = lambda b: b,
    shard=None,
) -> dict[str, torch.Tensor]:
    """Clean (and, with ``attack``, adversarial) predictions of ``model`` on ``(x, y)``.

    ``x`` may be stored in another form (uint8 images): ``to_input`` turns a batch into the
    model's float input in [0, 1]. The model is put in eval mode for the whole evaluation and
    its mode is restored afterwards. Returns ``clean_pred`` and, with an attack, ``adv_pred``
    (on ``y``'s device). With a ``step.Shard`` of several workers, each attacks its part of
    every batch (random starts drawn for the whole batch) and the predictions are summed into
    place over the workers (one all-reduce), so every worker returns all of them.
    """
    was_training = model.training
    model.eval()
    clean = torch.zeros(len(x), dtype=torch.long, device=y.device)
    adv = torch.zeros(len(x), dtype=torch.long, device=y.device)
    try:
        for start in range(0, len(x), batch_size):
            rows = min(batch_size, len(x) - start)
            first, stop = shard.part(rows) if shard is not None else (0, rows)
            xb = to_input(x[start + first : start + stop])
            yb = y[start + first : start + stop]
            if len(yb) == 0:
                continue
            clean[start + first : start + stop] = predict(model, xb).to(y.device)
            if attack is not None:
                x_adv = attack(model, xb, yb, share=(rows, first))
                adv[start + first : start + stop] = predict(model, x_adv).to(y.device)
    finally:
        model.train(was_training)
    if shard is not None:
        shard.all_reduce(clean)
        shard.all_reduce(adv)
    out = {"clean_pred": clean}
    if attack is not None:
        out["adv_pred"] = adv
    return out


def summarize(
    preds: dict[str, torch.Tensor], y: torch.Tensor, num_classes: int, prefix: str, adv_name: str = "robust"
) -> dict[str, float | list[float]]:
    """Metrics named ``{prefix}/clean_acc``, ``_worst_class``, ``_per_class`` (and ``adv_name``)."""
    out: dict[str, float | list[float]] = {}
    for key, name in (("clean_pred", "clean"), ("adv_pred", adv_name)):
        if key not in preds:
            continue
        per_class = per_class_accuracy(preds[key], y, num_classes)
        out[f"{prefix}/{name}_acc"] = float((preds[key] == y).double().mean())
        out[f"{prefix}/{name}_acc_worst_class"] = worst_class(per_class)
        out[f"{prefix}/{name}_acc_per_class"] = [float(v) for v in per_class]
    return out


def worst_over_restarts(adv_preds: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    """The adversarial predictions of the worst case over restarts ``r = 1..R``: per image, the
    first restart's prediction that is wrong (``p_{r,i} != y_i``), else ``y_i``; so image ``i`` is
    robust iff ``p_{r,i} = y_i`` for every ``r``."""
    stacked = torch.stack(adv_preds)  # [R, N]
    first_wrong = (stacked != y).int().argmax(0)  # 0 where no restart is wrong, and then p_0 = y
    return stacked.gather(0, first_wrong[None]).squeeze(0)


def restart_noise(adv_preds: list[torch.Tensor], y: torch.Tensor, num_classes: int) -> dict[str, float]:
    """The evaluation noise of worst-class robust accuracy over ``R >= 2`` restarts:
    ``robust_acc_worst_class_restart_range = max_r W(p_r) - min_r W(p_r)`` (one restart's noise)
    and ``robust_acc_worst_class_half_gap = W(worst(p_1..p_h)) - W(worst(p_{h+1}..p_{2h}))``,
    ``h = floor(R / 2)`` (two independent h-restart evaluations of the same model), where
    ``W(p)`` is the worst-class accuracy of predictions ``p``."""
    if len(adv_preds) < 2:
        raise ValueError(f"restart noise needs two or more restarts, got {len(adv_preds)}")
    single = [worst_class(per_class_accuracy(p, y, num_classes)) for p in adv_preds]
    h = len(adv_preds) // 2
    halves = [worst_over_restarts(part, y) for part in (adv_preds[:h], adv_preds[h : 2 * h])]
    first, second = (worst_class(per_class_accuracy(p, y, num_classes)) for p in halves)
    return {
        "robust_acc_worst_class_restart_range": max(single) - min(single),
        "robust_acc_worst_class_half_gap": first - second,
    }


SELECTION_RULES = ("worst_class", "average")


def selection_key(adv_pred: torch.Tensor, y: torch.Tensor, num_classes: int, rule: str) -> tuple[float, float]:
    """The key that ranks checkpoints on validation (larger is better), from robust predictions.

    ``worst_class`` (this workload's default, the claim's own statistic):
    ``(acc_worst, acc)``, the worst class's robust accuracy, ties to the better average;
    ``average`` (Rice et al.'s rule): ``(acc, acc_worst)``, the average robust accuracy over
    examples, ties to the better worst class.
    """
    acc = float((adv_pred == y).double().mean())
    worst = worst_class(per_class_accuracy(adv_pred, y, num_classes))
    if rule == "worst_class":
        return worst, acc
    if rule == "average":
        return acc, worst
    raise ValueError(f"unknown selection rule {rule!r}; choose one of {SELECTION_RULES}")
