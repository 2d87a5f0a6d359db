"""The toy workload's train loop: minimal, but it checkpoints and resumes like a real one."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import torch

from raylab import session
from raylab.checkpoint import GlobalRNG, LoopState, saved_only
from raylab.config import from_dict
from raylab.seeds import derive_seed
from trainers.toy.config import Config


@dataclass
class ToyState(LoopState):
    """What a toy checkpoint holds, each field saved and restored (``raylab.checkpoint.LoopState``)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    rng: GlobalRNG = field(default_factory=GlobalRNG)
    step: int = 0
    loss: float = math.nan
    """The last step's loss (a tensor on the device until it is reported)."""
    resumed_from_step: int = saved_only(0)
    """The step this run started from: 0 on a fresh start (a reader sees where each run began)."""
    config: dict = saved_only()


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
    st = ToyState(model, optimizer, config=config)
    saved = session.restore()
    if saved is not None:
        st.load_state_dict(saved)
        for group in optimizer.param_groups:  # this trial's lr (PBT may have mutated it)
            group["lr"] = cfg.lr
    st.resumed_from_step = st.step

    def report() -> None:
        with torch.no_grad():
            eval_mse = torch.nn.functional.mse_loss(model(x_eval).squeeze(-1), y_eval)
        st.loss = float(st.loss)
        session.report(
            {
                "train/loss": st.loss,
                "eval/mse": eval_mse.item(),
                "train/step": st.step,
                "train/resumed_from_step": st.resumed_from_step,
            },
            state=st.state_dict,
            checkpoint=True if st.step == cfg.steps else None,
        )

    if st.step >= cfg.steps:
        # Restored from a finished run's checkpoint (PBT can clone a donor at its last step):
        # report it once, so the trial ends with its metrics rather than its own earlier ones.
        report()
    while st.step < cfg.steps:
        batch_gen = torch.Generator().manual_seed(derive_seed(cfg.seed, rank, st.step))
        x = torch.randn(cfg.batch_size, cfg.dim, generator=batch_gen)
        y = x @ true_w + cfg.noise * torch.randn(cfg.batch_size, generator=batch_gen)
        batch_loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        batch_loss.backward()
        optimizer.step()
        st.step, st.loss = st.step + 1, batch_loss.detach()  # read (a device sync) only when reported
        if cfg.step_time_s:
            time.sleep(cfg.step_time_s)
        if st.step % cfg.report_every == 0 or st.step == cfg.steps:
            report()
        if st.step == cfg.hold_at_step:
            while not os.path.exists(cfg.release_file):  # the release gate (see Config)
                time.sleep(0.05)
