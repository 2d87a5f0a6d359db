"""The image loops' speed switches side by side: fp32/NCHW/eager, bf16/NHWC/eager,
bf16/NHWC/compile (and fp32/NCHW/compile) on the same training steps, in one process.

Two steps, each fair_adv's own ``train_step`` (so the attack, the extra clean forward pass and
the optimizer step are all in it): ``clean`` (``method: standard``, one forward-backward, as a
backdoor step) and ``pgd10`` (``method: pgd_at``, PGD-10 then the step). Every variant has its
own copy of the same initial network; compiled variants go through ``raylab.accel.compiled`` as
the loops do. A compiled variant's first call (compilation, for every graph the step needs:
the attack in eval mode, the training pass) is timed on its own; steady-state steps are then
timed in interleaved rounds (one step of each variant per round) and the median kept. It prints
images/s, the ratio to fp32/NCHW/eager, the compile time and the steps a compiled variant
needs to earn its compile time back (``never`` when it is not faster).

    python benchmarks/image_speed.py [--model preact_resnet18] [--width 64] [--batch-size 128]
                                     [--rounds 5] [--kinds clean,pgd10] [--device auto]

On this project's 2-core CPU machine use a small width and batch (``--width 16 --batch-size
32``); GPU figures come from the device benchmark (``benchmarks/gpu_throughput.py``) or from
this script run there.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from raylab.accel import compiled
from raylab.data.cifar import MEAN, STD
from raylab.models.resnet import preact_resnet18, resnet18
from trainers.fair_adv.config import Config
from trainers.fair_adv.step import History, train_step

VARIANTS = {  # name: (bf16 autocast, channels_last, compile)
    "fp32/NCHW/eager": (False, False, False),
    "bf16/NHWC/eager": (True, True, False),
    "fp32/NCHW/compile": (False, False, True),
    "bf16/NHWC/compile": (True, True, True),
}
KINDS = {"clean": "standard", "pgd10": "pgd_at"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="preact_resnet18", choices=["preact_resnet18", "resnet18"])
    p.add_argument("--width", type=int, default=64, help="channels of the first stage (64: the real one)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5, help="timed steps of each variant (median)")
    p.add_argument("--kinds", default="clean,pgd10")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    build = preact_resnet18 if args.model == "preact_resnet18" else resnet18
    torch.manual_seed(0)
    base = build(10, MEAN["cifar10"], STD["cifar10"], args.width)
    n = args.batch_size
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(n, 3, 32, 32, device=device, generator=gen)
    y = torch.randint(0, 10, (n,), device=device, generator=gen)
    index = torch.arange(n, device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    print(
        f"{args.model} width {args.width}, batch {n}, device {device}, {torch.get_num_threads()} CPU "
        f"threads, torch {torch.__version__}; median of {args.rounds} interleaved steps"
    )
    for kind in args.kinds.split(","):
        cfg = Config(method=KINDS[kind], train_steps=10, amp_bf16=False, channels_last=False)
        steps = {}
        first = {}
        for name in args.variants.split(","):
            bf16, nhwc, compile_ = VARIANTS[name]
            layout = torch.channels_last if nhwc else torch.contiguous_format
            model = copy.deepcopy(base).to(device, memory_format=layout)
            net = compiled(model, compile_, f"{name} network")
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
            inputs = x.contiguous(memory_format=layout)
            history = History.empty(n, device)
            attack_gen = torch.Generator(device=device).manual_seed(1)

            def step(net=net, optimizer=optimizer, inputs=inputs, history=history, attack_gen=attack_gen, bf16=bf16):
                sync()
                start = time.perf_counter()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    train_step(
                        net,
                        optimizer,
                        inputs,
                        y,
                        index,
                        cfg,
                        epoch=1,
                        history=history,
                        loss_threshold=float("inf"),
                        generator=attack_gen,
                    )
                sync()
                return time.perf_counter() - start

            first[name] = step()  # compiles, for a compiled variant
            step()  # a second call: any recompilation (a guard on the first call's state)
            steps[name] = step
        times = {name: [] for name in steps}
        for _ in range(args.rounds):
            for name, step in steps.items():
                times[name].append(step())
        median = {name: statistics.median(values) for name, values in times.items()}
        ref = median.get("fp32/NCHW/eager")
        print(f"{kind} ({KINDS[kind]}):")
        print(
            f"  {'variant':<18} {'s/step':>8} {'images/s':>9} {'vs fp32 eager':>14} {'first call':>11} "
            f"{'compile pays after':>19}"
        )
        for name, value in median.items():
            eager = median.get(name.replace("compile", "eager"))
            pays = ""
            if name.endswith("compile") and eager:
                gained = eager - value
                pays = f"{(first[name] - value) / gained:,.0f} steps" if gained > 0 else "never"
            ratio = f"{ref / value:.2f}x" if ref else "-"
            print(f"  {name:<18} {value:8.3f} {n / value:9.1f} {ratio:>14} {first[name]:10.1f}s {pays:>19}")


if __name__ == "__main__":
    main()
