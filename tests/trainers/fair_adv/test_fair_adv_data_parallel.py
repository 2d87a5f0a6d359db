"""fair_adv data-parallel: one worker and two gloo workers train the same model.

Two processes are spawned with ``torch.distributed`` (gloo, CPU) and run the workload's own
``train_epoch``, sharded evaluation and FRL multiplier update; the single-worker run is the
same code with ``Shard()``. The model has no BatchNorm (per-worker batch statistics are the one
part that does depend on the number of workers without SyncBatchNorm), batches have an odd size
so the parts are uneven, and the last batch is partial.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp

from trainers.fair_adv import attack, metrics
from trainers.fair_adv.config import Config
from trainers.fair_adv.loop import frl_state, frl_step
from trainers.fair_adv.step import History, Shard, train_epoch

N_TRAIN, N_VAL, CLASSES = 430, 120, 3
ARMS = {
    "tri_regime_trades": dict(
        method="tri_regime", base_loss="trades", tri_warmup_epochs=1, tri_min_history=1, tri_boundary_ramp_epochs=1
    ),
    "frl_remargin": dict(
        method="frl",
        base_loss="trades",
        frl_remargin=True,
        frl_finetune_epochs=2,
        frl_tau_nat=0.0,
        frl_tau_bndy=0.0,
        frl_lr=0.05,
    ),
}


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    centers = torch.tensor([[0.3, 0.3], [0.7, 0.3], [0.5, 0.65]])
    return (centers[y] + 0.12 * torch.randn(n, 2, generator=g)).clamp(0, 1), y


def run_arm(arm: str, shard: Shard) -> dict[str, torch.Tensor]:
    cfg = Config(eps=0.05, step_size=0.02, train_steps=3, epochs=3, lr=0.1, batch_size=101, augment=False, **ARMS[arm])
    x, y = make_data(N_TRAIN, 1)
    x_val, y_val = make_data(N_VAL, 2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ReLU(), torch.nn.Linear(32, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=5e-4)
    history = History.empty(N_TRAIN)
    order, attack_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(4)
    lam = {k: torch.zeros(CLASSES, dtype=torch.float64) for k in ("nat", "bndy", "margin")}
    start = cfg.finetune_start()
    eval_gen = torch.Generator().manual_seed(5)

    def pgd(m, xb, yb, share=None):
        return attack.pgd(m, xb, yb, eps=0.05, step_size=0.02, steps=5, generator=eval_gen, share=share)

    out = {}
    for epoch in range(cfg.epochs):
        if epoch >= start:
            val = metrics.evaluate(model, x_val, y_val, CLASSES, pgd, batch_size=50, shard=shard)
            lam = frl_step(lam, val, y_val, CLASSES, cfg, epoch - start + 1)
            out["val_adv_pred"] = val["adv_pred"]
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr if epoch < start else cfg.frl_lr
        totals = train_epoch(
            model,
            optimizer,
            x,
            y,
            cfg,
            epoch=epoch,
            history=history,
            frl=frl_state(lam, cfg) if epoch >= start else None,
            order_gen=order,
            aug_gen=None,
            attack_gen=attack_gen,
            num_classes=CLASSES,
            shard=shard,
        )
    return {
        **out,
        **{f"param/{k}": v for k, v in model.state_dict().items()},
        **{f"history/{k}": v for k, v in history.state_dict().items()},
        **{f"lambda/{k}": v for k, v in lam.items()},
        "loss_sum": totals["loss_sum"],
        "robust_correct": totals["robust_correct"],
        "regimes": totals["regimes"],
    }


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for arm in ARMS:
            torch.save(run_arm(arm, Shard(rank, world)), os.path.join(out_dir, f"{arm}-{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_workers_match_one_worker(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for arm in ARMS:
        single = run_arm(arm, Shard())
        rank0 = torch.load(tmp_path / f"{arm}-0.pt", weights_only=True)
        rank1 = torch.load(tmp_path / f"{arm}-1.pt", weights_only=True)
        assert set(single) == set(rank0)
        for key, value in single.items():
            assert torch.equal(rank0[key], rank1[key]), (arm, key)  # the workers agree exactly
            if value.is_floating_point():
                assert torch.allclose(rank0[key], value, rtol=1e-4, atol=1e-5), (arm, key)
            else:
                assert torch.equal(rank0[key], value), (arm, key)
        if arm == "frl_remargin":  # the class weights moved, from the global validation errors
            assert single["lambda/nat"].abs().sum() > 0 or single["lambda/bndy"].abs().sum() > 0
        assert single["history/visits"].tolist() == [3] * N_TRAIN
