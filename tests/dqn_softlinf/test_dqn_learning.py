"""DQN learns CartPole with each loss; soft-linf ends with a lower sup-norm Bellman residual.

Both run the workload's real loop in this process (no Ray) on a CPU budget of seconds.
"""

import os

import numpy as np
import pytest
from scipy import stats

from raylab import session
from trainers.dqn_softlinf.loop import train_loop

RANDOM_CARTPOLE_RETURN = 22.0  # mean return of uniformly random actions on CartPole-v1

CARTPOLE = dict(
    suite="gymnasium", game="CartPole-v1", total_steps=15_000, num_envs=4, buffer_size=15_000,
    learning_starts=1000, train_every=2, batch_size=64, lr=1e-3, target_period=500, gamma=0.99,
    epsilon_fraction=0.4, epsilon_end=0.05, reward_clip=False, mlp_hidden=[64, 64],
    report_every=5000, eval_every=15_000, eval_episodes=10, eval_max_steps=500, probe_size=256,
    beta=10.0, torch_threads=1,
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
# state and action, the distance to Q*, the greedy policy's value. Same budget (4,000 steps,
# 1,750 updates), paired seeds, the experiment file's settings as they are. The claims are
# statistics over the seeds: 10 by default, 20 with RAYLAB_FULL_SCIENCE=1.
SEEDS = list(range(20 if os.environ.get("RAYLAB_FULL_SCIENCE") == "1" else 10))


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of ``x``."""
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return x.mean() - half, x.mean() + half


def bootstrap_interval(x: np.ndarray, level: float = 0.95, draws: int = 10_000) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` (fixed generator)."""
    means = np.random.default_rng(0).choice(x, size=(draws, len(x))).mean(1)
    return tuple(np.quantile(means, [0.5 - level / 2, 0.5 + level / 2]))


def sign_test(x: np.ndarray) -> tuple[int, float]:
    """How many ratios are below 1, and the one-sided binomial p-value of that many or more."""
    below = int((x < 1).sum())
    return below, float(stats.binomtest(below, len(x), 0.5, alternative="greater").pvalue)


@pytest.mark.slow
def test_soft_linf_against_mse_on_exact_bellman_quantities(local_trial, tmp_path):
    final = {}
    for loss in ("mse", "soft_linf"):
        for seed in SEEDS:
            rows = local_trial(
                "dqn_softlinf_small", f"config.loss={loss}", f"config.seed={seed}",
                "config.total_steps=4000", "stop.env/steps=4000",
                trial_dir=tmp_path / f"{loss}-{seed}",
            )
            assert rows[-1]["env/steps"] == 4000
            final[loss, seed] = rows[-1]

    def ratio(key):  # soft_linf over mse, per seed
        return np.array([final["soft_linf", s][key] / final["mse", s][key] for s in SEEDS])

    keys = {"exact": "bellman/residual_linf_exact", "insample": "bellman/residual_linf_insample",
            "qstar": "bellman/qstar_dist_linf", "gap": "bellman/greedy_value_gap_exact"}
    ratios = {name: ratio(key) for name, key in keys.items()}
    print(f"\nsoft-linf / mse over {len(SEEDS)} seeds")
    print("seed  " + "  ".join(f"{n:>8}" for n in ratios) + "   mse exact  soft exact")
    for i, seed in enumerate(SEEDS):
        print(f"{seed:>4}  " + "  ".join(f"{r[i]:8.3f}" for r in ratios.values())
              + f"   {final['mse', seed][keys['exact']]:9.3f}  {final['soft_linf', seed][keys['exact']]:10.3f}")
    for name, r in ratios.items():
        below, p = sign_test(r)
        print(f"{name:>8}: mean {r.mean():.3f}, 95% t [{t_interval(r)[0]:.3f}, {t_interval(r)[1]:.3f}], "
              f"bootstrap [{bootstrap_interval(r)[0]:.3f}, {bootstrap_interval(r)[1]:.3f}], "
              f"below 1 on {below}/{len(r)} (sign test p = {p:.3f})")
    # positive control: the in-sample one-sample figure's bias (an l-inf fit avoids the target's
    # noise floor, an l2 fit pays it) is a large effect the instrument must see on every seed
    # (measured over seeds 0-11: mean 0.42x, 0.33-0.62x)
    assert (ratios["insample"] < 0.8).all() and t_interval(ratios["insample"])[1] < 0.6
    # 1. soft-linf lowers the exact sup-norm Bellman residual on average, with 95% confidence
    #    (measured over seeds 0-11: mean 0.83x, t interval [0.73, 0.93], below 1 on 10 of 12;
    #    seeds 5 and 9 go the other way, 1.06x and 1.08x): the mean, not every seed
    exact = ratios["exact"]
    assert t_interval(exact)[1] < 1 and bootstrap_interval(exact)[1] < 1
    assert sign_test(exact)[0] > len(SEEDS) / 2
    # 2. the one-sample in-sample figure overstates that gain
    assert ratios["insample"].mean() < exact.mean() - 0.25
    # 3. yet soft-linf ends farther from Q* (measured: 1.38-1.81x, below 1 on no seed)
    assert t_interval(ratios["qstar"])[0] > 1.1 and sign_test(ratios["qstar"])[0] == 0
    # 4. ... and its greedy policy is no better (measured mean gap ratio 1.38x, t [1.03, 1.73])
    gap = {loss: np.mean([final[loss, s][keys["gap"]] for s in SEEDS]) for loss in ("mse", "soft_linf")}
    print(f"mean gap to V*: {gap}")
    assert gap["soft_linf"] > 0.9 * gap["mse"], gap
    # 5. per inner loop MSE contracts max |Q - T Q_target| more (measured mean 0.93 vs 0.99)
    progress = {loss: np.mean([final[loss, s]["inner/progress_ratio_exact"] for s in SEEDS])
                for loss in ("mse", "soft_linf")}
    print(f"mean exact inner-loop progress ratio: {progress}")
    assert progress["mse"] < progress["soft_linf"] - 0.03, progress
    # 6. the softmax weights concentrate on a few samples of the batch of 64 (measured ESS 3.7-6.7)
    ess = [final["soft_linf", s]["train/soft_linf_ess"] for s in SEEDS]
    assert max(ess) < 16, ess
