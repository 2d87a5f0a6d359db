"""bfloat16 autocast against float32 for dqn_softlinf's update on this CPU: a side-by-side ratio.

One update = the loop's forward passes (target on s', online on s), the loss, backward and an
Adam step, Nature CNN, batch 32, uint8 84x84x4 stacks; float32 and ``amp_bf16`` alternate in
rounds, so load from other jobs falls on both. Prints updates/s of each and their ratio.

    python benchmarks/bf16_update.py                       # this CPU
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/bf16_update.py
        # the same CPU with its AVX512 (and so AVX512-BF16 and AMX) kernels off in oneDNN and
        # ATen: how amp_bf16 fares on a CPU without bfloat16 instructions
"""

from __future__ import annotations

import argparse
import time

import torch


def updates_per_s(bf16: bool, n: int, net, target, opt, batch) -> float:
    obs, next_obs, action, reward = batch
    start = time.perf_counter()
    for _ in range(n):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = reward + 0.99 * target(next_obs).float().max(1).values
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            q = net(obs).float().gather(1, action[:, None]).squeeze(1)
        loss = torch.nn.functional.mse_loss(q, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return n / (time.perf_counter() - start)


def main() -> None:
    from trainers.dqn_softlinf.model import NatureCNN

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net, target = NatureCNN(4, 6), NatureCNN(4, 6).requires_grad_(False)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    batch = (
        torch.randint(0, 255, (32, 4, 84, 84), dtype=torch.uint8, generator=g),
        torch.randint(0, 255, (32, 4, 84, 84), dtype=torch.uint8, generator=g),
        torch.randint(0, 6, (32,), generator=g),
        torch.rand(32, generator=g),
    )
    updates_per_s(False, 3, net, target, opt, batch)  # warm up both paths
    updates_per_s(True, 3, net, target, opt, batch)
    rates = {False: [], True: []}
    for _ in range(args.rounds):
        for bf16 in (False, True):
            rates[bf16].append(updates_per_s(bf16, args.updates, net, target, opt, batch))
    fp32, bf16 = sum(rates[False]) / args.rounds, sum(rates[True]) / args.rounds
    print(
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}: float32 {fp32:.1f} updates/s, "
        f"amp_bf16 {bf16:.1f} updates/s, ratio {bf16 / fp32:.2f}x"
    )


if __name__ == "__main__":
    main()
