"""The toy workload's train loop: minimal, but it checkpoints and resumes like a real one."""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from raylab import session
from raylab.checkpoint import rng_state, set_rng_state
from raylab.config import from_dict
from trainers.toy.config import Config


def batch_seed(seed: int, rank: int, step: int) -> int:
    """The seed of worker ``rank``'s batch at ``step``: each worker its own batches, and a
    resumed worker draws exactly the batches it would have drawn (nothing to checkpoint)."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1, np.uint64)[0] >> 1)


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    data_gen = torch.Generator().manual_seed(cfg.seed)
    true_w = torch.randn(cfg.dim, generator=data_gen)
    x_eval = torch.randn(512, cfg.dim, generator=data_gen)
    y_eval = x_eval @ true_w

    rank = session.world_rank()
    torch.manual_seed(cfg.seed)
    model = session.prepare_model(torch.nn.Linear(cfg.dim, 1, bias=False))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    step, loss = 0, float("nan")
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:  # this trial's lr (PBT may have mutated it)
            group["lr"] = cfg.lr
        set_rng_state(state["rng"])
        step, loss = state["step"], state["loss"]
    resumed_from_step = step  # 0 on a fresh start: lets a reader see where each run began

    def report() -> None:
        with torch.no_grad():
            eval_mse = torch.nn.functional.mse_loss(model(x_eval).squeeze(-1), y_eval)
        session.report(
            {"train/loss": float(loss), "eval/mse": eval_mse.item(), "train/step": step,
             "train/resumed_from_step": resumed_from_step},
            state=lambda: {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": rng_state(),
                "step": step,
                "loss": float(loss),
                "resumed_from_step": resumed_from_step,
                "config": config,
            },
            checkpoint=True if step == cfg.steps else None,
        )

    if step >= cfg.steps:
        # Restored from a finished run's checkpoint (PBT can clone a donor at its last step):
        # report it once, so the trial ends with its metrics rather than its own earlier ones.
        report()
    while step < cfg.steps:
        batch_gen = torch.Generator().manual_seed(batch_seed(cfg.seed, rank, step))
        x = torch.randn(cfg.batch_size, cfg.dim, generator=batch_gen)
        y = x @ true_w + cfg.noise * torch.randn(cfg.batch_size, generator=batch_gen)
        batch_loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        batch_loss.backward()
        optimizer.step()
        step, loss = step + 1, batch_loss.detach()  # read (a device sync) only when reported
        if cfg.step_time_s:
            time.sleep(cfg.step_time_s)
        if step % cfg.report_every == 0 or step == cfg.steps:
            report()
        if step == cfg.hold_at_step:
            while not os.path.exists(cfg.release_file):  # the release gate (see Config)
                time.sleep(0.05)
