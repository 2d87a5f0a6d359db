"""A train loop for report tests: the toy loop, but seed 1 fails and eval/mse is never reported.

Ray workers import it as ``tests.raylab.report.faulty_loop`` (the driver's working directory, the
repository root, is on their path).
"""

from raylab import session
from trainers.toy.loop import train_loop as toy_loop

FAILING_SEED = 1


def train_loop(config: dict) -> None:
    if config.get("seed") == FAILING_SEED:
        raise RuntimeError(f"injected failure for seed {FAILING_SEED}")
    report = session.report

    def without_eval(metrics, state=None, **kwargs):
        report({k: v for k, v in metrics.items() if k != "eval/mse"}, state, **kwargs)

    session.report = without_eval
    try:
        toy_loop(config)
    finally:
        session.report = report
