"""ResNet-18 training images/s: raylab's backdoor loop against a plain PyTorch loop.

    python benchmarks/image_throughput.py            # CPU: 10 steps of 128 images each
    python benchmarks/image_throughput.py --steps 200
    python benchmarks/image_throughput.py --variants all   # also bf16, channels_last and both

Both train the same CIFAR ResNet-18 (width 64) with the same batch (128), optimizer (SGD 0.01,
momentum 0.9, weight decay 5e-4), loss and augmentation (batch random crop + flip on the device,
``raylab.data.augment``) for one epoch over the same synthetic CIFAR-format training set, and
both time the training steps of that epoch only. raylab's figure is the ``perf/images_per_s``
the backdoor loop reports (``trainers/backdoor/loop.py`` run in a local raylab session, with
early probes and fine-tuning off); its whole-trial wall time, including data loading, poisoning
and evaluation, is printed beside it. One process, one run each, plain loop first (after an
untimed warm-up of both code paths' kernels). ``--variants`` repeats the pair with bfloat16
autocast (backdoor's ``amp_bf16``), NHWC layout (``channels_last``) or both, each variant's
plain loop and raylab loop side by side, and prints every variant's images/s against float32's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from raylab import session
from raylab.data.augment import random_crop_flip, to_float
from raylab.data.cifar import MEAN, STD, load_cifar, write_synthetic_cifar
from raylab.models import resnet18
from trainers.backdoor.loop import train_loop

BATCH = 128
VARIANTS = {
    "fp32": {"amp_bf16": False, "channels_last": False},
    "bf16": {"amp_bf16": True, "channels_last": False},
    "channels_last": {"amp_bf16": False, "channels_last": True},
    "bf16+channels_last": {"amp_bf16": True, "channels_last": True},
}
"""The training variants: backdoor's ``amp_bf16`` and ``channels_last`` options."""


def plain_loop(
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    steps: int,
    device: torch.device,
    amp_bf16: bool = False,
    channels_last: bool = False,
) -> float:
    """The textbook loop; returns training images/s over ``steps`` steps."""
    torch.manual_seed(0)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model = resnet18(10, MEAN["cifar10"], STD["cifar10"]).to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x_all, y_all = x_all.to(device), y_all.to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    order = torch.randperm(len(y_all), device=device)
    model.train()
    sync(device)
    start = time.perf_counter()
    for step in range(steps):
        idx = order[step * BATCH : (step + 1) * BATCH]
        x = to_float(random_crop_flip(x_all[idx], generator=gen)).contiguous(memory_format=layout)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp_bf16):
            loss = F.cross_entropy(model(x), y_all[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    sync(device)
    return steps * BATCH / (time.perf_counter() - start)


def raylab_loop(data_dir: Path, n_train: int, **variant: bool) -> tuple[float, float]:
    """The backdoor workload's loop for one epoch; returns (its images/s, trial wall time)."""
    config = {
        "synthetic_data": True,
        "data_dir": str(data_dir),
        "synthetic_train_size": n_train,
        "synthetic_test_size": 128,
        "epochs": 1,
        "batch_size": BATCH,
        "early_epochs": 0,
        "finetune_epochs": 0,
        "poison_ratio": 0.01,
        "attack": "badnets",
        **variant,
    }
    s = session.start(backend="local")
    start = time.perf_counter()
    train_loop(config)
    wall = time.perf_counter() - start
    rows = [r for r in s.history if "perf/images_per_s" in r]
    return rows[-1]["perf/images_per_s"], wall


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps", type=int, default=0, help="training steps per loop (default: 10 on CPU, 390 on a GPU)"
    )
    parser.add_argument(
        "--variants", default="fp32", help=f"comma-separated of {', '.join(VARIANTS)}, or all (default: fp32)"
    )
    args = parser.parse_args()
    names = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; valid: {', '.join(VARIANTS)}, all")
    device = session.device()
    steps = args.steps or (390 if device.type == "cuda" else 10)
    n_train = steps * BATCH
    print(
        f"device: {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'})"
    )
    print(f"ResNet-18, batch {BATCH}, {steps} steps ({n_train} images), crop+flip on the device")

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        write_synthetic_cifar(data_dir, "cifar10", n_train=n_train, n_test=128, seed=0)
        data = load_cifar("cifar10", data_dir)
        for name in names:
            variant = VARIANTS[name]
            plain_loop(data.train_x[: 2 * BATCH], data.train_y[: 2 * BATCH], 2, device, **variant)  # warm-up
            plain = plain_loop(data.train_x, data.train_y, steps, device, **variant)
            ours, wall = raylab_loop(data_dir, n_train, **variant)
            results[name] = (plain, ours, wall)

    for name, (plain, ours, wall) in results.items():
        tag = "" if name == "fp32" else f" [{name}]"
        print(f"plain PyTorch loop{tag} : {plain:10.1f} images/s")
        print(f"raylab backdoor loop{tag}: {ours:10.1f} images/s   (whole trial incl. data and eval: {wall:.1f} s)")
        print(f"ratio raylab / plain{tag}: {ours / plain:10.3f}   (target >= 0.95)")
    if len(results) > 1 and "fp32" in results:
        base = results["fp32"][1]
        for name, (_, ours, _) in results.items():
            if name != "fp32":
                print(f"raylab {name} vs float32: {ours:10.1f} vs {base:.1f} images/s, ratio {ours / base:.2f}")


if __name__ == "__main__":
    main()
