"""The toy workload's train loop: minimal, but it checkpoints and resumes like a real one."""

from __future__ import annotations

import time

import torch

from raylab import session
from raylab.checkpoint import rng_state, set_rng_state
from raylab.config import from_dict
from trainers.toy.config import Config


def train_loop(config: dict) -> None:
    cfg = from_dict(Config, config, "trial config")
    data_gen = torch.Generator().manual_seed(cfg.seed)
    true_w = torch.randn(cfg.dim, generator=data_gen)
    x_eval = torch.randn(512, cfg.dim, generator=data_gen)
    y_eval = x_eval @ true_w

    data_gen.manual_seed(cfg.seed + 1000 * session.world_rank())  # each worker its own batches
    torch.manual_seed(cfg.seed)
    model = session.prepare_model(torch.nn.Linear(cfg.dim, 1, bias=False))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    step = 0
    state = session.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        data_gen.set_state(state["data_rng"])
        set_rng_state(state["rng"])
        step = state["step"]

    while step < cfg.steps:
        x = torch.randn(cfg.batch_size, cfg.dim, generator=data_gen)
        y = x @ true_w + cfg.noise * torch.randn(cfg.batch_size, generator=data_gen)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if cfg.step_time_s:
            time.sleep(cfg.step_time_s)
        if step % cfg.report_every == 0 or step == cfg.steps:
            with torch.no_grad():
                eval_mse = torch.nn.functional.mse_loss(model(x_eval).squeeze(-1), y_eval)
            session.report(
                {"train/loss": loss.item(), "eval/mse": eval_mse.item(), "train/step": step},
                state=lambda: {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "data_rng": data_gen.get_state(),
                    "rng": rng_state(),
                    "step": step,
                    "config": config,
                },
                checkpoint=True if step == cfg.steps else None,
            )
