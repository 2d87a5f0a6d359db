"""DQN learns CartPole with each loss; soft-linf ends with a lower sup-norm Bellman residual.

Both run the workload's real loop in this process (no Ray) on a CPU budget of seconds.
"""

import os

import numpy as np
import pytest

from raylab import session
from trainers.dqn_softlinf import science
from trainers.dqn_softlinf.loop import train_loop
from trainers.dqn_softlinf.stats import (
    bootstrap_interval,
    last_half_mean,
    paired_ratios,
    sign_test,
    summary_text,
    t_interval,
    time_averaged_name,
)

RANDOM_CARTPOLE_RETURN = 22.0  # mean return of uniformly random actions on CartPole-v1

CARTPOLE = dict(
    suite="gymnasium",
    game="CartPole-v1",
    total_steps=15_000,
    num_envs=4,
    buffer_size=15_000,
    learning_starts=1000,
    train_every=2,
    batch_size=64,
    lr=1e-3,
    target_period=500,
    gamma=0.99,
    epsilon_fraction=0.4,
    epsilon_end=0.05,
    reward_clip=False,
    mlp_hidden=[64, 64],
    report_every=5000,
    eval_every=15_000,
    eval_episodes=10,
    eval_max_steps=500,
    probe_size=256,
    beta=10.0,
    torch_threads=1,
)


def run(config: dict) -> list[dict]:
    history = session.start(backend="local").history
    train_loop(config)
    return history


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["mse", "huber", "soft_linf"])
def test_cartpole_learns_with_each_loss(loss):
    rows = run({**CARTPOLE, "loss": loss, "seed": 0})
    last = rows[-1]
    assert last["env/steps"] == 15_000
    assert last["eval/return_mean"] >= 5 * RANDOM_CARTPOLE_RETURN, last
    assert last["episode/return_mean"] >= 3 * RANDOM_CARTPOLE_RETURN, last
    # the training episodes improved steadily
    assert rows[0]["episode/return_mean"] < last["episode/return_mean"]


# The science at small scale: a random 24-state MDP seen through 4 Gaussian features
# (raylab/FeatureMDP-v0, trainers/dqn_softlinf/feature_mdp.py). A 16-unit Q-network cannot fit
# Q* there, so each inner loop must trade errors between states. The model is known, so the
# test measures exact quantities (exact.py): the sup-norm residual max |Q - TQ| over every
# state and action, the distance to Q*, the greedy policy's value. Same budget, paired seeds,
# the experiment file's settings as they are. Every figure is a time average, the mean over
# the last half of a trial's reports (stats.time_average): a claim read off one report depends
# on when training stops. The claims are statistics over the seeds: 10 by default, 20 with
# RAYLAB_FULL_SCIENCE=1; the long test adds a second exploration schedule and 3x the budget.
SEEDS = list(range(20 if os.environ.get("RAYLAB_FULL_SCIENCE") == "1" else 10))


def science_runs(steps: int, decay: int | None, seeds) -> dict:
    configs = {
        (loss, seed): science.small_config(loss, seed, steps, decay) for loss in ("mse", "soft_linf") for seed in seeds
    }
    histories = science.run_grid(configs)
    for rows in histories.values():
        assert rows[-1]["env/steps"] == steps
        # the loop's own time average is the statistic the claims read
        for key in science.CLAIM_KEYS.values():
            assert rows[-1][time_averaged_name(key)] == pytest.approx(last_half_mean(rows, key), rel=1e-9)
    return histories


def ratios_and_table(histories: dict, seeds) -> dict[str, np.ndarray]:
    """Per seed, soft-linf's time average over MSE's, for each claim figure (printed)."""
    ratios = {name: paired_ratios(histories, key) for name, key in science.CLAIM_KEYS.items()}
    print(f"\nsoft-linf / mse over {len(seeds)} seeds, each figure the mean over the last half of the reports")
    print(science.per_seed_table(histories, seeds))
    for name, r in ratios.items():
        print(summary_text(name, r))
    return ratios


def assert_residual_claim(ratios: dict, n: int) -> None:
    """What the exact metrics support, under every schedule and budget measured (docs/workloads/dqn_softlinf.md)."""
    # positive control: the in-sample one-sample figure's bias (an l-inf fit avoids the target's
    # noise floor, an l2 fit pays it) is a large effect the instrument must see on every seed
    assert (ratios["insample"] < 0.8).all() and t_interval(ratios["insample"])[1] < 0.6
    # 1. soft-linf lowers the time-averaged exact sup-norm Bellman residual on average, with
    #    95% confidence, and on a majority of seeds (not on every seed)
    exact = ratios["exact"]
    assert t_interval(exact)[1] < 1 and bootstrap_interval(exact)[1] < 1
    assert sign_test(exact)[0] > n / 2
    # 2. the one-sample in-sample figure overstates that gain
    assert ratios["insample"].mean() < exact.mean() - 0.25
    # 3. yet soft-linf ends farther from Q*, on every seed
    assert t_interval(ratios["qstar"])[0] > 1.1 and sign_test(ratios["qstar"])[0] == 0


@pytest.mark.slow
def test_soft_linf_against_mse_on_exact_bellman_quantities():
    """dqn_softlinf_small as shipped: 4,000 steps, epsilon to 0.1 over the first 1,200, 16
    reports; the time average reads the last 8 (2,250-4,000 steps)."""
    histories = science_runs(4000, 1200, SEEDS)
    ratios = ratios_and_table(histories, SEEDS)
    assert_residual_claim(ratios, len(SEEDS))
    # 4. ... and its greedy policy is no better (time-averaged value gap to V*)
    gap = {
        loss: np.mean([last_half_mean(histories[loss, s], science.CLAIM_KEYS["gap"]) for s in SEEDS])
        for loss in ("mse", "soft_linf")
    }
    print(f"mean time-averaged gap to V*: {gap}")
    assert gap["soft_linf"] > 0.9 * gap["mse"], gap
    # 5. per inner loop MSE contracts max |Q - T Q_target| more, at this budget
    progress = {
        loss: np.mean([last_half_mean(histories[loss, s], science.CLAIM_KEYS["progress"]) for s in SEEDS])
        for loss in ("mse", "soft_linf")
    }
    print(f"mean time-averaged exact inner-loop progress ratio: {progress}")
    assert progress["mse"] < progress["soft_linf"] - 0.02, progress
    # 6. the softmax weights concentrate on a few samples of the batch of 64
    ess = [histories["soft_linf", s][-1]["train/soft_linf_ess"] for s in SEEDS]
    assert max(ess) < 16, ess


LONG_SEEDS = list(range(20))


@pytest.mark.long
@pytest.mark.timeout(3600)  # 40 trials of 12,000 steps: 5-6 min on an idle core, 15-20 min at load 10
@pytest.mark.parametrize("schedule", list(science.SCHEDULES))
def test_time_averaged_claim_holds_at_12k_steps_under_both_schedules(schedule):
    """3x the budget (12,000 steps, 48 reports, the time average over 6,000-12,000), with
    epsilon decaying over the first 1,200 steps (the shipped schedule) or over 30% of the run
    (3,600 steps, under which the ratio sits near 1 from 3k to 5k steps), 20 seeds each."""
    histories = science_runs(12_000, science.SCHEDULES[schedule], LONG_SEEDS)
    ratios = ratios_and_table(histories, LONG_SEEDS)
    assert_residual_claim(ratios, len(LONG_SEEDS))
    # the greedy policy is still no better on the time average (gap ratio above 1 on average)
    assert t_interval(ratios["gap"])[0] > 1.0
    # at this budget the two losses make the same exact inner-loop progress (the 4,000-step
    # test's finding 5 is an early-training one): soft-linf's over MSE's within 2%
    assert abs(ratios["progress"].mean() - 1) < 0.02
