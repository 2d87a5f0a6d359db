"""Checks that must fail before Ray starts: an unknown game, a replay that would not fit."""

from __future__ import annotations

import numpy as np

from raylab.errors import ThisMachine
from raylab.workloads import require_modules
from trainers.dqn_softlinf.envs import check_game
from trainers.dqn_softlinf.replay import bytes_per_transition

MEMORY_FRACTION = 0.8
"""At most this fraction of the memory available now may go to the replay and probe set."""


def frame_layout(cfg) -> tuple[tuple[int, ...], type]:
    """What the replay stores per step: an 84x84 uint8 frame, or a float32 observation."""
    if cfg.suite == "atari":
        return (cfg.screen_size, cfg.screen_size), np.uint8
    import gymnasium

    env = gymnasium.make(cfg.game)
    shape = tuple(env.observation_space.shape)
    env.close()
    return shape, np.float32


def replay_bytes(cfg) -> tuple[int, int]:
    """``(total, per_transition)`` bytes of the replay and the probe set this config allocates."""
    frame_shape, dtype = frame_layout(cfg)
    per = bytes_per_transition(frame_shape, dtype)
    stack = cfg.frame_stack if cfg.suite == "atari" else 1
    if cfg.backend == "rllib":
        per = rllib_bytes_per_transition(frame_shape, stack)
    probe = 2 * cfg.probe_size * int(np.prod(frame_shape)) * np.dtype(dtype).itemsize * stack
    if cfg.suite == "atari" and cfg.backend == "raylab" and cfg.heldout_size:
        probe += (cfg.heldout_size + cfg.frame_stack + 2) * per + cfg.heldout_size * HELDOUT_STATE_BYTES
    if cfg.suite == "atari" and cfg.backend == "raylab" and cfg.shared_states:  # stacks and successor frames
        probe += cfg.shared_states * (cfg.frame_stack + cfg.expected_samples) * int(np.prod(frame_shape))
    return cfg.buffer_size * per + probe, per


HELDOUT_STATE_BYTES = 12_000
"""An upper figure for one saved emulator state and frame stack of the held-out probe
(ALE's serialized state is a few KB; the stack 28,224 bytes is counted in the replay row)."""


def rllib_bytes_per_transition(frame_shape: tuple[int, ...], stack: int) -> int:
    """RLlib's episode replay keeps each observation once, as RLlib's Atari wrappers emit it:
    the whole ``stack``-frame observation in float32 (``NormalizedImageEnv`` scales to
    [-1, 1]), 112,896 bytes at 84x84x4, plus the action, reward and flags (16 bytes)."""
    return int(np.prod(frame_shape)) * 4 * stack + 16


def memory_need(cfg) -> int:
    """Bytes of host memory one trial of ``cfg`` allocates for its replay and probe sets
    (``replay_bytes``: as the backend stores them, RLlib's float32 stacks for ``backend:
    rllib``); the process itself (Python, torch, the emulators) comes on top."""
    return replay_bytes(cfg)[0]


def available_memory() -> int:
    """Bytes of memory available to a new allocation on this machine now."""
    import psutil

    return int(psutil.virtual_memory().available)


def preflight(cfg, available: int | None = None) -> None:
    """Refuse a missing package, an unknown game, a replay that does not fit in memory."""
    if cfg.suite == "atari":
        require_modules("dqn_softlinf", ["ale_py"], why="for suite atari (the ALE and its ROMs)")
    check_game(cfg.suite, cfg.game)
    if cfg.suite == "atari" and cfg.backend == "raylab" and (cfg.heldout_size or cfg.shared_states):
        # the held-out probe and the shared set resize their frames with OpenCV, as ALE's C++ does
        key = "heldout_size" if cfg.heldout_size else "shared_states"
        require_modules(
            "dqn_softlinf",
            ["cv2"],
            why=f"(OpenCV) for the held-out probe (config.{key})",
            otherwise="or set heldout_size: 0 and shared_states: 0",
        )
    if cfg.suite == "atari" and cfg.backend == "rllib":
        require_modules("dqn_softlinf", ["cv2"], why="(OpenCV) for RLlib's Atari wrappers (backend: rllib)")
    total, per = replay_bytes(cfg)
    available = available_memory() if available is None else available
    budget = MEMORY_FRACTION * available
    if total > budget:
        fits = max(0, int((budget - (total - cfg.buffer_size * per)) // per))
        raise ThisMachine(
            f"config.buffer_size: {cfg.buffer_size:,} transitions need {total / 1e9:.2f} GB "
            f"({per:,} bytes per transition) but this machine has {available / 1e9:.2f} GB "
            f"available ({MEMORY_FRACTION:.0%} usable: {budget / 1e9:.2f} GB); "
            f"use buffer_size <= {fits:,} or run on a machine with more memory"
        )
