"""Boltz-2 checkpoints: written as a training run writes them, loaded as ``boltz predict`` loads them.

Runs only in the boltz environment (``make boltz-env``).

How ``boltz predict`` (boltz 2.2.1, ``boltz/main.py``) loads ``boltz2_conf.ckpt``::

    Boltz2.load_from_checkpoint(path, strict=True, map_location="cpu", predict_args=...,
        diffusion_process_args=asdict(Boltz2DiffusionParams()), ema=False,
        use_kernels=not no_kernels, pairformer_args=asdict(PairformerArgsV2()),
        msa_args=asdict(MSAModuleArgs(..., use_paired_feature=True)),
        steering_args=asdict(BoltzSteeringParams()))

and Lightning (2.5.0, ``core/saving.py``) then: ``torch.load(weights_only=False)``; the
checkpoint's ``hyper_parameters`` updated with those keyword arguments (a top-level
``update``: each keyword *replaces* the checkpoint's value whole, so ``pairformer_args`` and
``msa_args`` are boltz's dataclass defaults, not the checkpoint's, and the architecture they
name must be the checkpoint's or strict loading fails); the class built from the merged
arguments its ``__init__`` takes; ``on_load_checkpoint(checkpoint)`` (Boltz2 reads
``training_args.max_lr`` there by attribute, which works on the OmegaConf ``DictConfig`` a
Hydra training run stores); ``load_state_dict(state_dict, strict=True)``.

``load_boltz2`` does the same steps in the same order, with one difference: the file is read
with ``torch.load(weights_only=True)`` and an allowlist of OmegaConf's data classes
(``SAFE_GLOBALS``), so an OmegaConf-pickled checkpoint loads without running code from it;
anything else the file pickles is refused, naming it, unless ``trust_checkpoint`` (then it is
``weights_only=False``, as ``boltz predict`` always does). ``use_kernels`` is False (the
cuequivariance kernels need CUDA; the teacher must also run on a CPU).
"""

from __future__ import annotations

import collections
import inspect
import typing
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from raylab.errors import UserError


def safe_globals() -> list:
    """OmegaConf's container and value classes (data only), for ``torch.load(weights_only=True)``."""
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode, BooleanNode, BytesNode, FloatNode, IntegerNode, StringNode

    return [
        DictConfig,
        ListConfig,
        ContainerMetadata,
        Metadata,
        AnyNode,
        BooleanNode,
        BytesNode,
        FloatNode,
        IntegerNode,
        StringNode,
        typing.Any,
        collections.defaultdict,
        dict,
        list,
    ]


def predict_overrides(recycling_steps: int = 3, use_kernels: bool = False) -> dict[str, Any]:
    """The keyword arguments ``boltz predict`` passes to ``Boltz2.load_from_checkpoint``
    (its defaults: no potentials, no MSA subsampling; ``use_kernels`` off here)."""
    from boltz.main import (
        Boltz2DiffusionParams,
        BoltzSteeringParams,
        MSAModuleArgs,
        PairformerArgsV2,
    )

    return dict(
        predict_args={
            "recycling_steps": recycling_steps,
            "sampling_steps": 200,
            "diffusion_samples": 1,
            "max_parallel_samples": 5,
            "write_confidence_summary": True,
            "write_full_pae": False,
            "write_full_pde": False,
        },
        diffusion_process_args=asdict(Boltz2DiffusionParams()),
        ema=False,
        use_kernels=use_kernels,
        pairformer_args=asdict(PairformerArgsV2()),
        msa_args=asdict(MSAModuleArgs(use_paired_feature=True)),
        steering_args=asdict(BoltzSteeringParams()),
    )


def _small_common() -> dict[str, Any]:
    return dict(
        atom_s=16,
        atom_z=8,
        token_s=32,
        token_z=16,
        num_bins=64,
        # what Boltz2.on_load_checkpoint reads, as a training config holds it
        training_args=dict(max_lr=0.0018, weight_decay=0.0, diffusion_multiplicity=16, recycling_steps=3),
        validation_args={},
        embedder_args=dict(atom_encoder_depth=1, atom_encoder_heads=2),
        score_model_args=dict(
            atom_encoder_depth=1,
            atom_encoder_heads=2,
            token_transformer_depth=1,
            token_transformer_heads=2,
            atom_decoder_depth=1,
            atom_decoder_heads=2,
            conditioning_transition_layers=1,
            dim_fourier=16,
            sigma_data=16,
        ),
        diffusion_process_args=dict(num_sampling_steps=2),
        diffusion_loss_args={},
        confidence_prediction=False,
        validate_structure=False,
        atom_feature_dim=388,  # ref_pos 3 + charge 1 + element 128 + atom-name chars 4 x 64
    )


def standin_hparams() -> dict[str, Any]:
    """A stand-in for the released model's hyperparameters, small where ``boltz predict`` lets it be.

    ``boltz predict`` replaces ``pairformer_args`` and ``msa_args`` with boltz's dataclass
    defaults, so a checkpoint it loads has their architecture: 64 Pairformer blocks of 16 heads,
    an MSA module of 4 blocks (msa_s 64). Those are kept (with the training values a Hydra run
    stores, dropout and activation checkpointing, which predict's defaults switch off); the
    widths (token_s 32, token_z 16, atom_s 16) are small, about 3.6M parameters, 0.3 s per
    ligand on one CPU thread. Random weights: it tests loading, not Boltz-2.
    """
    return dict(
        _small_common(),
        pairformer_args=dict(
            num_blocks=64, num_heads=16, dropout=0.25, activation_checkpointing=True, offload_to_cpu=False, v2=True
        ),
        msa_args=dict(
            msa_s=64,
            msa_blocks=4,
            msa_dropout=0.15,
            z_dropout=0.25,
            use_paired_feature=True,
            pairwise_head_width=32,
            pairwise_num_heads=4,
            activation_checkpointing=True,
            offload_to_cpu=False,
            subsample_msa=True,
            num_subsampled_msa=1024,
        ),
    )


def small_hparams() -> dict[str, Any]:
    """A much smaller Boltz-2 (about 0.25M parameters: 2 Pairformer blocks, 1 MSA block), 7x faster.

    ``boltz predict``'s overrides would not fit it (they name 64 blocks): load it with
    ``small_overrides()``. For tests of what the layers compute, not of loading.
    """
    return dict(
        _small_common(),
        msa_args=dict(
            msa_s=8,
            msa_blocks=1,
            msa_dropout=0.0,
            z_dropout=0.0,
            pairwise_head_width=8,
            pairwise_num_heads=2,
            use_paired_feature=True,
        ),
        pairformer_args=dict(
            num_blocks=2, num_heads=2, dropout=0.0, pairwise_head_width=8, pairwise_num_heads=2, v2=True
        ),
    )


def small_overrides(recycling_steps: int = 3) -> dict[str, Any]:
    """``predict_overrides`` with ``small_hparams``' own Pairformer and MSA architecture."""
    small = small_hparams()
    return dict(
        predict_overrides(recycling_steps),
        pairformer_args=dict(small["pairformer_args"], activation_checkpointing=False, offload_to_cpu=False),
        msa_args=dict(small["msa_args"], activation_checkpointing=False, offload_to_cpu=False, subsample_msa=False),
    )


def redraw_weights(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Draw every weight matrix of ``model`` from N(0, 1/fan_in) (biases and norms kept).

    Boltz's own initialization zeroes the output projections of its attention and transition
    blocks (AlphaFold-3's "final init"), so at that initialization every residual block is the
    identity and ``atom_attention`` equals ``atom_input`` exactly. Redrawn weights make each
    block compute a nonlinear function, as trained weights do; the tests use them to check
    which layers are more than a linear map of the inputs.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                fan_in = param[0].numel()
                param.copy_(torch.randn(param.shape, generator=generator) / fan_in**0.5)
    return model


def write_random_checkpoint(path: str | Path, seed: int = 0, hparams: dict | None = None, redraw: bool = False) -> Path:
    """Save a randomly initialized ``Boltz2`` as a training run saves one (for tests).

    As boltz's Hydra training does: the nested arguments are OmegaConf ``DictConfig`` objects
    (``hydra.utils.instantiate`` passes them so), the model records them with
    ``save_hyperparameters``, and a Lightning ``Trainer.save_checkpoint`` writes the file
    (state_dict, hyper_parameters, loops, optimizer and scheduler states, versions). Default
    ``hparams``: ``standin_hparams()``. ``redraw``: every weight matrix redrawn
    (``redraw_weights``).
    """
    from boltz.model.models.boltz2 import Boltz2
    from omegaconf import OmegaConf
    from pytorch_lightning import Trainer

    hparams = hparams or standin_hparams()
    kwargs = {k: OmegaConf.create(v) if isinstance(v, dict) else v for k, v in hparams.items()}
    torch.manual_seed(seed)
    model = Boltz2(**kwargs)
    if redraw:
        redraw_weights(model, seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path)
    return path


def read_checkpoint(path: Path, trust_checkpoint: bool = False) -> dict[str, Any]:
    """The checkpoint's dict: ``weights_only=True`` with ``safe_globals()``, or full unpickling."""
    try:
        if trust_checkpoint:
            return torch.load(path, map_location="cpu", weights_only=False)
        with torch.serialization.safe_globals(safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001
        if trust_checkpoint:
            raise UserError(f"--checkpoint {path}: cannot load: {str(err).splitlines()[0]}") from None
        try:
            allowed = {f"{g.__module__}.{g.__qualname__}" for g in safe_globals() if hasattr(g, "__qualname__")}
            extra = sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(path)) - allowed - {"typing.Any"})
        except Exception:  # noqa: BLE001 - not a zip checkpoint at all
            extra = []
        what = f"it pickles {', '.join(extra)}" if extra else str(err).splitlines()[0]
        raise UserError(
            f"--checkpoint {path}: weights-only loading refused: {what}; "
            "if you trust this file, --trust-checkpoint loads it with full unpickling (as boltz predict does)"
        ) from None


def load_boltz2(checkpoint: str | Path, trust_checkpoint: bool = False, overrides: dict | None = None):
    """A ``Boltz2`` model in eval mode, built as ``Boltz2.load_from_checkpoint`` builds it for
    ``boltz predict`` (see the module docstring); ``overrides``: ``predict_overrides()`` by default."""
    from boltz.model.models.boltz2 import Boltz2

    path = Path(checkpoint).expanduser()
    if not path.is_file():
        raise UserError(
            f"--checkpoint {path}: no such file (download boltz2_conf.ckpt yourself; nothing is downloaded here)"
        )
    ckpt = read_checkpoint(path, trust_checkpoint)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        raise UserError(f"--checkpoint {path}: not a Lightning checkpoint (no state_dict / hyper_parameters)")
    ckpt["hyper_parameters"].update(predict_overrides() if overrides is None else overrides)
    accepted = set(inspect.signature(Boltz2.__init__).parameters) - {"self"}
    kwargs = {k: v for k, v in ckpt["hyper_parameters"].items() if k in accepted}
    try:
        model = Boltz2(**kwargs)
        model.on_load_checkpoint(ckpt)
        model.load_state_dict(ckpt["state_dict"], strict=True)
    except (RuntimeError, TypeError, AttributeError, KeyError) as err:
        raise UserError(
            f"--checkpoint {path}: boltz predict's arguments do not build this checkpoint's model: "
            f"{' '.join(str(err).split())[:300]}"
        ) from None
    model.eval()
    # Representation extraction needs the trunk only: no diffusion sampling, confidence, affinity.
    model.skip_run_structure = True
    model.confidence_prediction = False
    model.affinity_prediction = False
    return model
