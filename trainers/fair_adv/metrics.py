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

# attack(model, x, y) -> x_adv
Attack = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


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


def class_error_rates(
    clean_pred: torch.Tensor, adv_pred: torch.Tensor, y: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class clean error and boundary error (Xu et al. 2021, FRL).

    ``clean_err_c = P(p_clean != y | y = c)``;
    ``bndy_err_c  = P(p_clean == y and p_adv != y | y = c)``. Absent classes give 0.
    """
    counts = torch.bincount(y, minlength=num_classes).double().clamp(min=1)
    clean_wrong = (clean_pred != y).double()
    boundary = ((clean_pred == y) & (adv_pred != y)).double()
    zeros = torch.zeros(num_classes, dtype=torch.float64, device=y.device)
    return zeros.index_add(0, y, clean_wrong) / counts, zeros.index_add(0, y, boundary) / counts


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
) -> dict[str, torch.Tensor]:
    """Clean (and, with ``attack``, adversarial) predictions of ``model`` on ``(x, y)``.

    ``x`` may be stored in another form (uint8 images): ``to_input`` turns a batch into the
    model's float input in [0, 1]. The model is put in eval mode for the whole evaluation and
    its mode is restored afterwards. Returns ``clean_pred`` and, with an attack, ``adv_pred``
    (on ``y``'s device).
    """
    was_training = model.training
    model.eval()
    clean, adv = [], []
    try:
        for start in range(0, len(x), batch_size):
            xb = to_input(x[start : start + batch_size])
            yb = y[start : start + batch_size]
            clean.append(predict(model, xb))
            if attack is not None:
                adv.append(predict(model, attack(model, xb, yb)))
    finally:
        model.train(was_training)
    out = {"clean_pred": torch.cat(clean).to(y.device)}
    if attack is not None:
        out["adv_pred"] = torch.cat(adv).to(y.device)
    return out


def summarize(preds: dict[str, torch.Tensor], y: torch.Tensor, num_classes: int, prefix: str,
              adv_name: str = "robust") -> dict[str, float | list[float]]:
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
