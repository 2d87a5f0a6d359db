"""The workload registry: one entry per workload, imported only when used.

To add a workload, make a folder here with ``config.py`` (a frozen ``Config`` dataclass) and
``loop.py`` (``train_loop(config: dict)``), add one line below, and an experiment YAML in
``tune_configs/``. See docs/tutorial.md, "Your first workload".
"""

from raylab.workloads import Workload
from trainers.backdoor import METRICS as BACKDOOR_METRICS
from trainers.backdoor import THEORY_METRICS as BACKDOOR_THEORY_METRICS
from trainers.boltz_distill import DISTILL_METRICS, PROBE_METRICS
from trainers.dqn_softlinf import METRICS as DQN_SOFTLINF_METRICS
from trainers.fair_adv import LAST_METRICS as FAIR_ADV_LAST_METRICS
from trainers.fair_adv import METRICS as FAIR_ADV_METRICS
from trainers.seagram import METRICS as SEAGRAM_METRICS

WORKLOADS: dict[str, Workload] = {
    "backdoor": Workload(
        config="trainers.backdoor.config:Config",
        loop="trainers.backdoor.loop:train_loop",
        metrics=BACKDOOR_METRICS,
        description="backdoor attacks on CIFAR ResNet-18: early-stage signatures, trigger-dominant neurons, clean fine-tuning",
        preflight="trainers.backdoor.loop:preflight",
        packages=("scikit-image",),
        extra="raylab[backdoor]",
        figures="trainers.backdoor.figures:REPORT",
        data_parallel=True,
    ),
    "backdoor_theory": Workload(
        config="trainers.backdoor.config:TheoryConfig",
        loop="trainers.backdoor.theory_loop:train_loop",
        metrics=BACKDOOR_THEORY_METRICS,
        description="directional data + one-hidden-layer ReLU net: frozen-gate prediction of group-wise early loss decrease",
        figures="trainers.backdoor.figures:THEORY_REPORT",
    ),
    "dqn_softlinf": Workload(
        config="trainers.dqn_softlinf.config:Config",
        loop="trainers.dqn_softlinf.loop:train_loop",
        metrics=DQN_SOFTLINF_METRICS,
        description="DQN on Atari with MSE, Huber, L1 or soft-linf inner-loop losses; sup-norm Bellman residual (exact, held-out, K-sample expected)",
        preflight="trainers.dqn_softlinf.preflight:preflight",
        memory="trainers.dqn_softlinf.preflight:memory_need",
        packages=("ale-py", "gymnasium"),
        requires=("gymnasium", "psutil"),
        extra="raylab[dqn_softlinf]",
        figures="trainers.dqn_softlinf.figures:REPORT",
    ),
    "seagram": Workload(
        config="trainers.seagram.config:Config",
        loop="trainers.seagram.loop:train_loop",
        metrics=SEAGRAM_METRICS,
        description="neural subgraph matching victims (GMN, NeuroMatch, IsoNet) under random, solver-checked greedy and SEAGRAM edge-flip attacks",
        preflight="trainers.seagram.preflight:preflight",
        packages=("networkx", "rdkit"),
        requires=("torch_geometric", "networkx"),
        extra="raylab[seagram]",
        figures="trainers.seagram.figures:REPORT",
    ),
    "toy": Workload(
        config="trainers.toy.config:Config",
        loop="trainers.toy.loop:train_loop",
        metrics=("train/loss", "eval/mse", "train/step"),
        description="linear regression by SGD: the framework's own test and overhead workload",
        figures="trainers.toy.figures:REPORT",
        data_parallel=True,
    ),
    "fair_adv": Workload(
        config="trainers.fair_adv.config:Config",
        loop="trainers.fair_adv.loop:train_loop",
        metrics=FAIR_ADV_METRICS + FAIR_ADV_LAST_METRICS,
        description="fair adversarial training on CIFAR: PGD-AT, TRADES, FRL, tri-regime reweighting",
        preflight="trainers.fair_adv.loop:preflight",
        packages=("pyautoattack",),
        extra="raylab[fair_adv]",
        figures="trainers.fair_adv.figures:REPORT",
        data_parallel=True,
    ),
    "boltz_distill": Workload(
        config="trainers.boltz_distill.config:Config",
        loop="trainers.boltz_distill.loop:train_loop",
        metrics=DISTILL_METRICS,
        description="distil Boltz-2 (or RDKit conformer/descriptor) per-atom ligand embeddings into a GINE student",
        preflight="trainers.boltz_distill.loop:preflight",
        packages=("rdkit", "chemprop", "datamol", "boltz"),
        requires=("torch_geometric", "rdkit"),
        extra="raylab[boltz_distill]",
        figures="trainers.boltz_distill.figures:REPORT",
        data_parallel=True,
    ),
    "admet_probe": Workload(
        config="trainers.boltz_distill.config:ProbeConfig",
        loop="trainers.boltz_distill.probe_loop:train_loop",
        metrics=PROBE_METRICS,
        description="linear/MLP probes of frozen molecule representations on the TDC ADMET group",
        preflight="trainers.boltz_distill.probe_loop:preflight",
        packages=("rdkit", "chemprop", "datamol"),
        requires=("torch_geometric", "rdkit"),
        extra="raylab[admet_probe]",
        figures="trainers.boltz_distill.figures:PROBE_REPORT",
    ),
}
