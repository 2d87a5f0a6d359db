"""The ``backdoor_theory`` loop: train the ReLU network and its frozen-gate twin on the same SGD
batches, and compare group-wise early loss decreases (see ``theory.py`` for the equations).

Reported every ``report_every`` steps: both groups' losses for the network and its frozen-gate
twin, gate-flip and gate-drift fractions against initialization. The summary below is over the
first ``min(step, T)`` steps, ``T = early_steps``: it grows with each row until T and is then
carried unchanged in every later row (so every row has it, as Ray Tune requires of the metric):

- ``theory/loss_drop_ratio``: ``rel_drop_poison / rel_drop_clean`` of the network over the
  first T steps, ``rel_drop_G = (L_G(0) - L_G(T)) / L_G(0)`` (the denominator's magnitude
  floored at 1e-3, ``theory.drop_ratio``);
- ``theory/predicted_drop_ratio``: the same for the frozen-gate network;
- ``theory/frozen_gate_rel_error``: ``max_G |rel_drop_G - rel_drop~_G| / |rel_drop_G|``;
- ``theory/signal_ratio``: ``(S_poison / L_poison(0)) / (S_clean / L_clean(0))`` from the
  frozen-gate signal at initialization (no training needed);
- ``theory/signal_predicted_drop_*``: the first-order prediction ``eta t S_G / L_G(0)`` of each
  group's relative decrease; ``theory/second_order_predicted_drop_*`` adds the error term
  ``-(eta t)^2 C_G / (2 L_G(0))`` (``theory/curvature_*``: ``C_G``, ``theory.signal_and_curvature``).
  The signal ratio predicts the drop ratio only while ``signal_predicted_drop_poison`` is small
  (docs/workloads/backdoor.md, "Where the signal holds");
- ``theory/gate_flip_at_t_*``: the gate-flip fractions since initialization at ``min(step, T)``.

Every row also has ``theory/gate_flip_error_*``: the frozen-gate error term itself,
``mean_i |f(x_i) - f~_W(x_i)|`` at the current weights with the initial gates
(``theory.gate_flip_error``), beside the fractions of gates flipped and drifted, and the exact
split of the loss error ``theory/loss_* - theory/frozen_loss_*`` into
``theory/flip_loss_error_*`` (flipped gates at the network's weights) and
``theory/drift_error_*`` (the two weight trajectories apart, gates frozen)
(``theory.loss_error_terms``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from raylab import session
from raylab.checkpoint import LoopState, saved_only
from raylab.config import from_dict
from raylab.seeds import derive_seed
from trainers.backdoor import theory
from trainers.backdoor.config import TheoryConfig
from trainers.backdoor.theory import drop_ratio


@dataclass
class TheoryState(LoopState):
    """What a ``backdoor_theory`` checkpoint holds, each field saved and restored."""

    w: torch.Tensor
    """The network's first-layer weights."""
    w_frozen: torch.Tensor
    """Its frozen-gate twin's."""
    batches: torch.Generator
    """The SGD batches' generator (both networks see the same batches)."""
    step: int = 0
    latest: dict = field(default_factory=dict)
    """Every metric's latest value (each row carries them all)."""
    config: dict = saved_only()


def train_loop(config: dict) -> None:
    cfg = from_dict(TheoryConfig, config, "trial config")
    gen = torch.Generator().manual_seed(cfg.seed)
    x, y, poisoned = theory.directional_data(
        cfg.n_train, cfg.dim, cfg.semantic_strength, cfg.trigger_strength, cfg.noise, cfg.poison_ratio, gen
    )
    w0, a = theory.init_network(cfg.dim, cfg.width, cfg.init_scale, gen)
    gates0 = theory.gates(w0, x)
    initial = theory.group_losses(theory.relu_net(w0, a, x), y, poisoned)
    derivatives = dict(zip(("poison", "clean"), theory.signal_and_curvature(w0, a, x, y, poisoned, ~poisoned)))
    signal = {g: s for g, (s, _) in derivatives.items()}
    curvature = {g: c for g, (_, c) in derivatives.items()}
    batches = torch.Generator().manual_seed(derive_seed(cfg.seed, "batches"))

    st = TheoryState(w0.clone(), w0.clone(), batches, config=config)
    saved = session.restore()
    if saved is not None:
        st.load_state_dict(saved)

    while st.step < cfg.steps:
        idx = torch.randint(0, cfg.n_train, (cfg.batch_size,), generator=batches)
        st.w = theory.sgd_step(st.w, a, x[idx], y[idx], cfg.lr)
        st.w_frozen = theory.sgd_step(st.w_frozen, a, x[idx], y[idx], cfg.lr, gates0=gates0[idx])
        st.step += 1
        w, w_frozen, step = st.w, st.w_frozen, st.step
        in_window = step <= cfg.early_steps
        if not (step == cfg.early_steps or step % cfg.report_every == 0 or step == cfg.steps):
            continue
        losses = theory.group_losses(theory.relu_net(w, a, x), y, poisoned)
        frozen = theory.group_losses(theory.frozen_gate_net(w_frozen, a, x, gates0), y, poisoned)
        row = {"theory/step": step}
        for g, mask in (("poison", poisoned), ("clean", ~poisoned)):
            drift_error, flip_loss_error = theory.loss_error_terms(w0, w, w_frozen, a, x[mask], y[mask])
            row |= {
                f"theory/drift_error_{g}": drift_error,
                f"theory/flip_loss_error_{g}": flip_loss_error,
                f"theory/loss_{g}": losses[g],
                f"theory/frozen_loss_{g}": frozen[g],
                f"theory/gate_flip_since_init_{g}": theory.gate_flip_fraction(w0, w, x[mask]),
                f"theory/gate_flip_error_{g}": theory.gate_flip_error(w0, w, a, x[mask]),
                f"theory/gate_drift_{g}": theory.gate_drift_fraction(w0, w, x[mask]),
            }
        if in_window:
            drop = {g: (initial[g] - losses[g]) / initial[g] for g in initial}
            pred = {g: (initial[g] - frozen[g]) / initial[g] for g in initial}
            rate = {g: signal[g] / initial[g] for g in initial}
            row |= {
                "theory/rel_drop_poison": drop["poison"],
                "theory/rel_drop_clean": drop["clean"],
                "theory/loss_drop_ratio": drop_ratio(drop["poison"], drop["clean"]),
                "theory/predicted_drop_ratio": drop_ratio(pred["poison"], pred["clean"]),
                "theory/frozen_gate_rel_error": max(abs(drop[g] - pred[g]) / max(abs(drop[g]), 1e-12) for g in drop),
                "theory/signal_poison": signal["poison"],
                "theory/signal_clean": signal["clean"],
                "theory/signal_ratio": drop_ratio(rate["poison"], rate["clean"], floor=1e-12),
                **{
                    f"theory/{name}_{g}": theory.predicted_rel_drop(cfg.lr * step, signal[g], c, initial[g])
                    for g in initial
                    for name, c in (("signal_predicted_drop", 0.0), ("second_order_predicted_drop", curvature[g]))
                },
                "theory/curvature_poison": curvature["poison"],
                "theory/curvature_clean": curvature["clean"],
                "theory/gate_flip_at_t_poison": row["theory/gate_flip_since_init_poison"],
                "theory/gate_flip_at_t_clean": row["theory/gate_flip_since_init_clean"],
            }
        st.latest.update(row)
        session.report(dict(st.latest), state=st.state_dict, checkpoint=True if step == cfg.steps else None)
