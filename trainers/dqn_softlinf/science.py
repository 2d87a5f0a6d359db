"""The small-scale science: soft-linf against MSE on FeatureMDP, read as a time average.

The claim compares time averages (stats.py): per trial the mean over the last half of its
reports, per seed the ratio soft-linf / MSE of those, over seeds a t interval, a bootstrap
interval and a sign test.

Run directly, this module runs the comparison at a longer budget under two exploration
schedules, prints the per-seed tables and draws the curve the workload page shows::

    python -m trainers.dqn_softlinf.science --steps 12000 --seeds 20 --out science-12k

(the science test, tests/trainers/dqn_softlinf/test_dqn_learning.py, calls the same functions).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from trainers.dqn_softlinf.stats import last_half_mean, paired_ratios, summary_text

EXPERIMENT = "dqn_softlinf_small"

CLAIM_KEYS = {
    "exact": "bellman/residual_linf_exact",
    "insample": "bellman/residual_linf_insample",
    "qstar": "bellman/qstar_dist_linf",
    "gap": "bellman/greedy_value_gap_exact",
    "progress": "inner/progress_ratio_exact",
}
"""The figures the small-scale claim compares, by short name."""

SCHEDULES = {"decay-1200": 1200, "decay-30pct": None}
"""Exploration schedules of the long comparison: epsilon decays linearly over the first 1,200
agent steps (the shipped schedule, 30% of 4,000 steps) or over 30% of the run, whatever its
length (3,600 of 12,000 steps)."""


# ------------------------------------------------------------------------------ running trials
def small_config(
    loss: str,
    seed: int,
    total_steps: int = 4000,
    decay_steps: int | None = 1200,
    report_every: int | None = None,
    **overrides,
) -> dict:
    """``dqn_softlinf_small``'s settings as the file holds them, with the loss, seed, budget
    and exploration schedule given: epsilon decays over ``decay_steps`` agent steps (None: over
    the file's fraction of the run)."""
    from raylab import experiment as experiments

    config = experiments.load(EXPERIMENT).resolved_config()
    config.pop("variant", None)
    config |= {"loss": loss, "seed": seed, "total_steps": total_steps}
    if decay_steps is not None:
        config["epsilon_fraction"] = decay_steps / total_steps
    if report_every is not None:
        config["report_every"] = report_every
    config["eval_every"] = total_steps  # evaluation at the first report and the end, as the file does
    return config | overrides


def run_trial(config: dict) -> list[dict]:
    """One trial of the workload's loop in this process (no Ray, no checkpoints): its rows."""
    from raylab import session
    from trainers.dqn_softlinf.loop import train_loop

    history = session.start(backend="local").history
    train_loop(dict(config))
    return [{k: float(v) for k, v in row.items() if isinstance(v, (int, float))} for row in history]


def _run_one(args: tuple) -> tuple:
    key, config = args
    import torch

    torch.set_num_threads(1)
    return key, run_trial(config)


def run_grid(configs: dict, processes: int = 1) -> dict:
    """``{key: config}`` -> ``{key: rows}``, ``processes`` trials at a time."""
    if processes <= 1:
        return dict(map(_run_one, configs.items()))
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        return dict(pool.imap_unordered(_run_one, configs.items()))


# ------------------------------------------------------------------------------ the long comparison
def per_seed_table(histories: dict, seeds: Sequence[int]) -> str:
    """Markdown rows: per seed, each arm's time-averaged exact residual and the ratios."""
    lines = [
        "| seed | mse exact (tavg) | soft-linf exact (tavg) | exact ratio | in-sample ratio | "
        "qstar ratio | greedy gap ratio | exact ratio at the last report |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ratios = {name: paired_ratios(histories, key) for name, key in CLAIM_KEYS.items()}
    last = paired_ratios(histories, CLAIM_KEYS["exact"], reduce=lambda v: v[-1])
    for i, seed in enumerate(seeds):
        mse = last_half_mean(histories["mse", seed], CLAIM_KEYS["exact"])
        soft = last_half_mean(histories["soft_linf", seed], CLAIM_KEYS["exact"])
        lines.append(
            f"| {seed} | {mse:.3f} | {soft:.3f} | {ratios['exact'][i]:.3f} | {ratios['insample'][i]:.3f} "
            f"| {ratios['qstar'][i]:.3f} | {ratios['gap'][i]:.3f} | {last[i]:.3f} |"
        )
    return "\n".join(lines)


def ratio_curve(histories: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Steps and, per report, the per-seed ratio soft-linf / MSE of ``key``: ``(steps, (seeds, reports))``."""
    seeds = sorted({s for (loss, s) in histories if loss == "mse"})
    steps = np.array([row["env/steps"] for row in histories["mse", seeds[0]] if key in row])
    curves = []
    for seed in seeds:
        soft = {row["env/steps"]: row[key] for row in histories["soft_linf", seed] if key in row}
        mse = {row["env/steps"]: row[key] for row in histories["mse", seed] if key in row}
        curves.append([soft[s] / mse[s] for s in steps])
    return steps, np.array(curves)


def draw(results: dict, path: Path) -> None:
    """The figure the workload page shows: per schedule, the exact residual ratio and the greedy-value
    gap ratio (soft-linf / MSE) against agent steps, mean over seeds with a 95% t band, the
    window the time average reads shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import stats

    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for ax, (short, title) in zip(
        axes, (("exact", "exact sup-norm Bellman residual"), ("gap", "greedy policy's value gap to V*"))
    ):
        for name, color in zip(names, ("tab:blue", "tab:orange", "tab:green")):
            steps, curves = ratio_curve(results[name], CLAIM_KEYS[short])
            mean = curves.mean(0)
            half = stats.t.ppf(0.975, len(curves) - 1) * curves.std(0, ddof=1) / np.sqrt(len(curves))
            ax.plot(steps, mean, color=color, label=f"{name} ({len(curves)} seeds)")
            ax.fill_between(steps, mean - half, mean + half, color=color, alpha=0.2)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axvspan(steps[len(steps) // 2], steps[-1], color="grey", alpha=0.12, lw=0)
        if steps[-1] > 4000:  # the default science test's budget and its time-average window
            ax.axvspan(2250, 4000, color="tab:purple", alpha=0.08, lw=0, label="4,000-step test's window")
        ax.set_title(f"{title}: soft-linf / MSE", fontsize=10)
        ax.set_xlabel("agent steps")
        ax.set_ylabel("ratio (per seed, mean and 95% t band)")
        ax.legend(fontsize=8)
    fig.suptitle("FeatureMDP (dqn_softlinf_small); grey: the last half of the reports (the time average)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12_000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--report-every", type=int, default=250)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument(
        "--schedule", action="append", choices=list(SCHEDULES), help="exploration schedule(s) to run (default: both)"
    )
    parser.add_argument("--out", type=Path, default=Path("science-12k"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.schedule or list(SCHEDULES):
        decay = SCHEDULES[name]
        cache = args.out / f"{name}.json"
        if cache.exists():
            rows = {tuple(json.loads(k)): v for k, v in json.loads(cache.read_text()).items()}
        else:
            configs = {
                (loss, seed): small_config(loss, seed, args.steps, decay, args.report_every)
                for loss in ("mse", "soft_linf")
                for seed in range(args.seeds)
            }
            rows = run_grid(configs, args.processes)
            cache.write_text(json.dumps({json.dumps(list(k)): v for k, v in rows.items()}))
        results[name] = rows
        seeds = sorted({s for (_, s) in rows})
        print(
            f"\n## {name}: {args.steps} steps, epsilon decay over "
            f"{decay or int(0.3 * args.steps)} steps, {len(seeds)} seeds, time average over the last half"
        )
        print(per_seed_table(rows, seeds))
        for short, key in CLAIM_KEYS.items():
            print(summary_text(short, paired_ratios(rows, key)))
    draw(results, args.out / "ratio_curve.png")
    print(f"\nfigure: {args.out / 'ratio_curve.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
