"""DQN on Pong, env steps per second with learning on: raylab vs a conventional loop vs RLlib.

    python benchmarks/dqn_throughput.py [--steps 3000] [--learning-starts 600] [--num-envs 8]

In one process, one run each, the same number of agent steps of Pong with learning on (one
update of batch 32 per 4 agent steps, target period 1000, epsilon 1 -> 0.01 over the first 10%
of the steps, the Nature CNN, Adam 1e-4), on the same device (a GPU when there is one):

1. raylab: this workload's loop (trainers/dqn_softlinf/loop.py): AtariVectorEnv, batched
   action selection, frame-deduplicated replay, emulation overlapped with the update, with all
   its probes on at their defaults (the in-sample probe, the held-out game stepped alongside
   training with 4,096 held-out transitions, the K = 8 expected residual on 256 of them; the
   time the report spends measuring them is counted); once with its defaults (float32) and
   once with amp_bf16 (bfloat16 autocast for acting and updates);
2. reference: one gymnasium env with AtariPreprocessing + FrameStackObservation, a replay of
   stacked (obs, next_obs) uint8 arrays, one forward pass per step, written the way the widely
   used single-file DQN implementations are;
3. RLlib: RLlib's DQN (new API stack) with the same network, schedule, batch and replay ratio,
   through this workload's DQNTorchLearner subclass, in this process;
4. env only: AtariVectorEnv stepping with random actions (an upper bound for any loop).

It prints env steps/s for each and the ratios, and the issue's targets: raylab >= 1.2x the
reference and >= 2x RLlib on a CPU, >= 2,000 env steps/s on a GPU. With ``--warmup-steps W``
raylab's loop also reports at step W, and its rate after warm-up (steps W to the end, the first
updates' kernel compilation, cuDNN's autotuning and the replay's filling behind it) is printed
beside the whole run's, in float32 and bf16; the GPU targets are then judged on it.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from raylab import session
from trainers.dqn_softlinf.model import NatureCNN
from trainers.dqn_softlinf.replay import bytes_per_transition

GAME = "Pong"


def settings(args) -> dict:
    """The shared DQN settings, as this workload's config fields."""
    return {
        "game": GAME,
        "loss": "mse",
        "total_steps": args.steps,
        "learning_starts": args.learning_starts,
        "buffer_size": max(args.steps, 10_000),
        "train_every": 4,
        "batch_size": 32,
        "lr": 1e-4,
        "target_period": 1000,
        "epsilon_fraction": 0.1,
        "epsilon_end": 0.01,
        "gamma": 0.99,
        "seed": 0,
        "torch_threads": args.torch_threads,
    }


REPORT_EVERY = 50_000
"""The experiment files' report cadence: the probes measure once per this many agent steps."""


def run_raylab(args, **overrides) -> tuple[float, float, float | None]:
    """(agent steps/s on the loop's clock, seconds the reports spent measuring probes, agent
    steps/s after ``args.warmup_steps``: None without a warm-up)."""
    from trainers.dqn_softlinf.loop import train_loop

    warmup = args.warmup_steps if 0 < args.warmup_steps < args.steps else 0
    config = (
        settings(args)
        | overrides
        | {
            "num_envs": args.num_envs,
            "report_every": warmup or args.steps,
            # one evaluation episode step at the end: the benchmark measures training
            "eval_episodes": 1,
            "eval_max_steps": 1,
            "eval_every": 10 * args.steps,
            "checkpoint_replay": False,
        }
    )
    history = session.start(backend="local").history
    train_loop(config)
    # the loop's own clock: from its first step to its last (setup and the evaluation excluded,
    # as the reference's clock excludes making its env); it includes stepping the held-out game;
    # each report's interval is timed on its own (the clock restarts after a report)
    last = history[-1]
    assert "bellman/residual_linf_expected" in last, "the held-out probes did not run"
    rows = [r for r in history if "perf/env_steps_per_s" in r]
    steps = [r["env/steps"] for r in rows]
    seconds = [(s - before) / r["perf/env_steps_per_s"] for r, s, before in zip(rows, steps, [0, *steps])]
    whole = steps[-1] / sum(seconds)
    after = (steps[-1] - steps[0]) / sum(seconds[1:]) if warmup and len(rows) > 1 else None
    return whole, last["perf/probe_s"], after


def time_full_heldout_probe(args) -> float:
    """Seconds one report's held-out measurement takes at full size (4,096 transitions, 256
    states x 8 redrawn successors), which a short benchmark run does not fill."""
    from trainers.dqn_softlinf.config import Config
    from trainers.dqn_softlinf.heldout import HeldoutProbe

    cfg = Config(game=GAME)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = NatureCNN(4, 6, channels_last=True).to(device).to(memory_format=torch.channels_last)
    probe = HeldoutProbe(cfg, seed=0)
    for _ in range(cfg.heldout_size + 10):
        probe.step(None, epsilon=1.0)
    start = time.perf_counter()
    with torch.no_grad():
        probe.metrics(lambda x: torch.cat([net(x[i : i + 256]) for i in range(0, len(x), 256)]), 0.99, device)
    return time.perf_counter() - start


def with_probes(rate: float, probe_s: float, steps: int, every: int) -> float:
    """Steps/s once the report's probe time is paid every ``every`` agent steps."""
    return steps / (steps / rate + probe_s * steps / every)


def run_reference(args) -> float:
    """One env, gymnasium wrappers, one forward per step, stacked-obs replay: the usual way."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    s = settings(args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = gym.make(f"ALE/{GAME}-v5", frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False, grayscale_obs=True
    )
    env = gym.wrappers.FrameStackObservation(env, 4)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    q = NatureCNN(4, int(env.action_space.n)).to(device)
    target = copy.deepcopy(q)
    optimizer = torch.optim.Adam(q.parameters(), lr=s["lr"])
    size = s["buffer_size"]
    obs_buf = np.zeros((size, 4, 84, 84), np.uint8)
    next_buf = np.zeros((size, 4, 84, 84), np.uint8)
    act_buf = np.zeros(size, np.int64)
    rew_buf = np.zeros(size, np.float32)
    done_buf = np.zeros(size, np.float32)
    obs, _ = env.reset(seed=0)
    start = time.perf_counter()
    for step in range(s["total_steps"]):
        eps = max(s["epsilon_end"], 1 - step / (s["epsilon_fraction"] * s["total_steps"]) * (1 - s["epsilon_end"]))
        if rng.random() < eps:
            action = int(rng.integers(env.action_space.n))
        else:
            with torch.no_grad():
                action = int(q(torch.as_tensor(np.asarray(obs), device=device)[None]).argmax(1).item())
        next_obs, reward, terminated, truncated, _ = env.step(action)
        i = step % size
        obs_buf[i], next_buf[i] = np.asarray(obs), np.asarray(next_obs)
        act_buf[i], rew_buf[i], done_buf[i] = action, np.sign(reward), float(terminated)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
        if step >= s["learning_starts"] and step % s["train_every"] == 0:
            idx = rng.integers(0, min(step + 1, size), s["batch_size"])
            b_obs = torch.as_tensor(obs_buf[idx], device=device)
            b_next = torch.as_tensor(next_buf[idx], device=device)
            with torch.no_grad():
                y = torch.as_tensor(rew_buf[idx], device=device) + s["gamma"] * target(b_next).max(1).values * (
                    1 - torch.as_tensor(done_buf[idx], device=device)
                )
            q_sa = q(b_obs).gather(1, torch.as_tensor(act_buf[idx], device=device)[:, None]).squeeze(1)
            loss = torch.nn.functional.mse_loss(q_sa, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if step % s["target_period"] == 0:
            target.load_state_dict(q.state_dict())
    elapsed = time.perf_counter() - start
    env.close()
    return s["total_steps"] / elapsed


def run_rllib(args) -> tuple[float, float]:
    """RLlib's DQN with the same settings; returns (env steps/s, build seconds)."""
    from trainers.dqn_softlinf.config import RLLIB_OFF, Config
    from trainers.dqn_softlinf.rllib_learner import dqn_config

    start_ray()
    cfg = Config(backend="rllib", **(settings(args) | RLLIB_OFF | {"num_envs": args.num_envs, "report_every": 200}))
    config = dqn_config(cfg).evaluation(evaluation_interval=None)  # the learner takes the GPU there is
    start = time.perf_counter()
    algo = config.build_algo()
    build = time.perf_counter() - start
    start, steps = time.perf_counter(), 0
    while steps < args.steps:
        result = algo.train()
        steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
    rate = steps / (time.perf_counter() - start)
    algo.stop()
    return rate, build


def start_ray(attempts: int = 3) -> None:
    """RLlib's Algorithm needs a Ray instance, even with everything in this process."""
    import ray

    for attempt in range(attempts):
        if ray.is_initialized():
            return
        try:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.ERROR)
        except Exception as err:
            print(f"ray.init failed ({err}); retrying", flush=True)
            if attempt == attempts - 1:
                raise


def run_env_only(args) -> float:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(
        "pong",
        args.num_envs,
        num_threads=min(args.num_envs, os.cpu_count() or 1),
        reward_clipping=False,
        autoreset_mode="NextStep",
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    n = env.single_action_space.n
    start = time.perf_counter()
    for _ in range(args.steps // args.num_envs):
        env.step(rng.integers(0, n, args.num_envs).astype(np.int32))
    rate = (args.steps // args.num_envs) * args.num_envs / (time.perf_counter() - start)
    env.close()
    return rate


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3000, help="agent steps per loop")
    p.add_argument("--learning-starts", type=int, default=600)
    p.add_argument("--num-envs", type=int, default=8, help="vector envs for raylab, RLlib and env-only")
    p.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads for every loop (0: torch's default)"
    )
    p.add_argument("--skip-rllib", action="store_true")
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=0,
        help="also report raylab's rate after this many agent steps (0: the whole run only)",
    )
    args = p.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    # import everything every loop uses before any clock starts (torch.optim's first use
    # imports torch._dynamo: seconds)
    import trainers.dqn_softlinf.loop  # noqa: F401

    torch.optim.Adam(torch.nn.Linear(1, 1).parameters())
    device = "cuda:" + torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(
        f"device {device}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
        f"{args.steps} agent steps of {GAME} per loop, learning from step {args.learning_starts}, "
        f"one update of batch 32 per 4 steps"
    )
    print(
        f"replay: {bytes_per_transition((84, 84), np.uint8):,} bytes per transition "
        f"(stacked obs + next_obs, as the reference stores them: {2 * 4 * 84 * 84:,})"
    )
    if not args.skip_rllib:
        start_ray()  # before any clock: Ray's own processes settle first

    def show(name: str, rate: float) -> float:
        print(f"{name:48s} {rate:10.1f} env steps/s", flush=True)
        return rate

    print()
    env_only = show("env only (AtariVectorEnv, random actions)", run_env_only(args))
    loop_rate, probe_s, after_warmup = run_raylab(args)
    show("raylab loop clock (held-out game stepping in)", loop_rate)
    if after_warmup:
        show(f"raylab loop clock after warm-up (steps {args.warmup_steps:,}+)", after_warmup)
    full_s = time_full_heldout_probe(args)
    print(f"{'  its one report measured the probes in':48s} {probe_s:10.2f} s")
    print(f"{'  a full-size held-out measurement takes':48s} {full_s:10.2f} s")
    probe_s += full_s  # per report at scale: counted on top of what this short run measured
    raylab = show(
        f"raylab, probe time per {REPORT_EVERY:,} steps counted",
        with_probes(loop_rate, probe_s, args.steps, REPORT_EVERY),
    )
    raylab_every_run = show(
        f"raylab, probe time per {args.steps:,} steps counted", with_probes(loop_rate, probe_s, args.steps, args.steps)
    )
    bf16_rate, bf16_probe_s, bf16_after = run_raylab(args, amp_bf16=True)
    raylab_bf16 = show(
        "raylab with amp_bf16: true (per 50k counted)", with_probes(bf16_rate, bf16_probe_s, args.steps, REPORT_EVERY)
    )
    if bf16_after:
        show(f"raylab amp_bf16 after warm-up (steps {args.warmup_steps:,}+)", bf16_after)
    reference = show("reference (1 env, gymnasium wrappers)", run_reference(args))
    rllib = None
    if not args.skip_rllib:
        rllib, build = run_rllib(args)
        show(f"RLlib DQN (build {build:.0f} s not counted)", rllib)
    print()
    print(
        f"raylab / reference: {raylab / reference:.2f}x (target >= 1.2x on CPU); "
        f"with amp_bf16 {raylab_bf16 / reference:.2f}x; "
        f"with this run's one report counted in full {raylab_every_run / reference:.2f}x"
    )
    if rllib:
        print(
            f"raylab / RLlib:     {raylab / rllib:.2f}x (target >= 2x on CPU); with amp_bf16 {raylab_bf16 / rllib:.2f}x"
        )
    print(f"raylab / env only:  {raylab / env_only:.2f}")
    if torch.cuda.is_available():
        judged = "after warm-up, probes not counted" if after_warmup else "whole run, probes per 50k counted"
        for name, rate in (("float32", after_warmup or raylab), ("amp_bf16", bf16_after or raylab_bf16)):
            print(
                f"GPU target, raylab {name} ({judged}): >= 2,000 env steps/s {'met' if rate >= 2000 else 'NOT met'} "
                f"({rate:.0f}); 10M steps would take {1e7 / rate / 60:.0f} min"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
