"""Cost of the backdoor loop's early probes per trial: per-sample gradients by a Python loop of
``torch.autograd.grad`` (before) against ``torch.func.vmap`` (after, ``probe.gradient_coherence``).

    python benchmarks/probe_cost.py                 # CPU: width 16, 8 images per group
    python benchmarks/probe_cost.py --width 64 --coherence-size 32   # the paper-scale probe

Both compute the same number, the mean pairwise cosine of per-sample cross-entropy gradients
over every parameter of a CIFAR ResNet-18 in eval mode, for each of the four probe groups; the
script checks that they agree. One probe is the four groups' coherence (the part that differs;
losses, margins and gates are one forward pass per group and are the same in both). The cost
per trial is one probe's time times the probes a default trial runs:
``1 + floor(early_epochs * ceil(50000 / batch_size) / early_log_every)`` (2 epochs, batch 128,
every 20 steps: 40 probes).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn import functional as F

from raylab import session
from raylab.models import resnet18
from trainers.backdoor import GROUPS, probe
from trainers.backdoor.config import Config


def coherence_by_loop(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The former implementation: one ``autograd.grad`` per sample, summing unit gradients."""
    params = [p for p in net.parameters() if p.requires_grad]
    unit_sum = None
    for i in range(len(x)):
        grads = torch.autograd.grad(F.cross_entropy(net(x[i : i + 1]), y[i : i + 1]), params)
        flat = torch.cat([g.flatten() for g in grads])
        unit = flat / flat.norm().clamp_min(probe.EPS)
        unit_sum = unit if unit_sum is None else unit_sum + unit
    return probe.mean_pairwise_cosine_from_unit_sum(unit_sum, len(x))


def timed(fn, groups, device) -> tuple[float, list[float]]:
    sync(device)
    start = time.perf_counter()
    values = [fn(x, y) for x, y in groups]
    sync(device)
    return time.perf_counter() - start, values


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=0, help="ResNet-18 width (default: 16 on CPU, 64 on a GPU)")
    parser.add_argument(
        "--coherence-size",
        type=int,
        default=0,
        help="images per group (default: 8 on CPU, 32 = Config's default on a GPU)",
    )
    parser.add_argument("--chunk", type=int, default=8, help="images per vmap call")
    args = parser.parse_args()
    device = session.device()
    gpu = device.type == "cuda"
    width = args.width or (64 if gpu else 16)
    n = args.coherence_size or (Config().coherence_size if gpu else 8)
    cfg = Config()
    probes = 1 + (cfg.early_epochs * -(-50000 // cfg.batch_size)) // cfg.early_log_every
    print(f"device: {device} ({torch.cuda.get_device_name(device) if gpu else f'{torch.get_num_threads()} threads'})")
    print(
        f"ResNet-18 width {width}, {len(GROUPS)} groups x {n} images, vmap chunk {args.chunk}; "
        f"{probes} probes per default trial"
    )

    torch.manual_seed(0)
    net = resnet18(10, width=width).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    groups = [
        (torch.rand(n, 3, 32, 32, generator=gen).to(device), torch.randint(0, 10, (n,), generator=gen).to(device))
        for _ in GROUPS
    ]
    warm = groups[0][0][:2], groups[0][1][:2]
    coherence_by_loop(net, *warm)
    probe.gradient_coherence(net, *warm, chunk=args.chunk)

    before, loop_values = timed(lambda x, y: coherence_by_loop(net, x, y), groups, device)
    after, vmap_values = timed(lambda x, y: probe.gradient_coherence(net, x, y, chunk=args.chunk), groups, device)
    worst = max(abs(a - b) for a, b in zip(loop_values, vmap_values))
    print(f"before (autograd.grad loop): {before:8.2f} s per probe, {before * probes / 60:8.1f} min per trial")
    print(f"after  (torch.func vmap)   : {after:8.2f} s per probe, {after * probes / 60:8.1f} min per trial")
    print(f"speed-up before / after    : {before / after:8.2f}x   (largest difference in coherence {worst:.1e})")


if __name__ == "__main__":
    main()
