"""Adversarial training throughput: clean training, PGD-10 AT and TRADES side by side.

One process, one model, one batch size, the workload's own ``train_step`` (so the figures
include everything a training step of fair_adv does: the attack, the extra no-gradient clean
forward pass that feeds the regimes, the weighted loss, the optimizer step). Methods are
timed in interleaved rounds (one step of each per round) so that a machine's drift affects
them alike; the median step time is reported. A PGD-10 step costs 11 forward-backward passes
at most, so the target is PGD-AT at no more than 11.5x the cost per image of clean training.

    python benchmarks/adv_throughput.py [--model preact_resnet18] [--batch-size 128]
                                        [--rounds 5] [--device auto] [--threads 0]
                                        [--precision both|fp32|bf16]

``--precision both`` (the default) times every method at fp32 / NCHW and at fair_adv's CUDA
defaults, bf16 autocast with channels_last (as ``train_epoch`` runs ``train_step``), side by
side in the same rounds; each table ends with PGD-10 AT's seconds per CIFAR-10 epoch (50,000
images) at that precision.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from trainers.fair_adv.config import Config
from trainers.fair_adv.model import build_model
from trainers.fair_adv.step import History, train_step

METHODS = ("standard", "pgd_at", "trades", "tri_regime")
TARGET = 11.5
PRECISIONS = {"fp32": ("fp32/NCHW", False, False), "bf16": ("bf16/NHWC", True, True)}
"""``--precision``: (label, bf16 autocast, channels_last); ``both`` runs the two."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="preact_resnet18", choices=["preact_resnet18", "resnet18", "small_cnn"])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5, help="timed steps of each method")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps of each method first")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--precision", default="both", choices=["both", *PRECISIONS])
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    base = build_model(args.model, 10).to(device)
    n = args.batch_size
    x = torch.rand(n, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (n,), device=device)
    index = torch.arange(n, device=device)
    history = History.empty(n, device)
    gen = torch.Generator(device=device).manual_seed(0)
    configs = {m: Config(method=m, train_steps=10, tri_warmup_epochs=0) for m in METHODS}
    settings = {}
    for key in PRECISIONS if args.precision == "both" else (args.precision,):
        label, amp, channels_last = PRECISIONS[key]
        layout = torch.channels_last if channels_last else torch.contiguous_format
        model = copy.deepcopy(base).to(memory_format=layout)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        settings[label] = (model, optimizer, amp, x.contiguous(memory_format=layout))

    def step(label: str, method: str) -> float:
        model, optimizer, amp, xb = settings[label]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):  # as train_epoch runs it
            train_step(
                model,
                optimizer,
                xb,
                y,
                index,
                configs[method],
                epoch=1,
                history=history,
                loss_threshold=float("inf"),
                generator=gen,
            )
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    for _ in range(args.warmup):
        for label in settings:
            for method in METHODS:
                step(label, method)
    times = {(label, m): [] for label in settings for m in METHODS}
    for _ in range(args.rounds):  # interleaved: one step of each (precision, method) per round
        for label, method in times:
            times[(label, method)].append(step(label, method))

    print(
        f"model {args.model}, batch {n}, device {device}, {torch.get_num_threads()} CPU threads, "
        f"{args.rounds} timed steps per method (median), PGD/TRADES 10 steps, eps 8/255"
    )
    for label in settings:
        clean = statistics.median(times[(label, "standard")])
        print(f"{label}: {'method':<12} {'s/step':>8} {'images/s':>10} {'cost vs clean':>14}")
        for method in METHODS:
            median = statistics.median(times[(label, method)])
            print(f"{label}: {method:<12} {median:8.3f} {n / median:10.1f} {median / clean:13.2f}x")
        pgd = statistics.median(times[(label, "pgd_at")])
        ratio = pgd / clean
        verdict = "meets" if ratio <= TARGET else "MISSES"
        print(
            f"{label}: PGD-10 AT costs {ratio:.2f}x clean training per image: {verdict} the {TARGET}x target; "
            f"{50_000 * pgd / n:.1f} s per CIFAR-10 epoch (50,000 images)"
        )


if __name__ == "__main__":
    main()
