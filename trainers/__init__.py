"""The workload registry: one entry per workload, imported only when used.

To add a workload, make a folder here with ``config.py`` (a frozen ``Config`` dataclass) and
``loop.py`` (``train_loop(config: dict)``), add one line below, and an experiment YAML in
``tune_configs/``. See README.md, "Adding a workload".
"""

from raylab.workloads import Workload

WORKLOADS: dict[str, Workload] = {
    "toy": Workload(
        config="trainers.toy.config:Config",
        loop="trainers.toy.loop:train_loop",
        metrics=("train/loss", "eval/mse", "train/step"),
        description="linear regression by SGD: the framework's own test and overhead workload",
    ),
}
