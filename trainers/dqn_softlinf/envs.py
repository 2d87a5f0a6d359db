"""Vectorized environments behind one small interface: ALE's AtariVectorEnv and gymnasium's.

Both autoreset on the step after an episode ends (gymnasium's NEXT_STEP mode): the step that
returns ``terminated`` or ``truncated`` returns the episode's final observation, and the next
step ignores its action and returns the first observation of a new episode with reward 0.

``Envs.send(actions)`` starts a step and ``Envs.recv()`` finishes it. AtariVectorEnv steps its
emulators in C++ threads, so work done between the two (the network update) overlaps with
emulation; the gymnasium envs step inside ``recv``.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from raylab.errors import UserError
from trainers.dqn_softlinf import feature_mdp

feature_mdp.register()  # gymnasium id raylab/FeatureMDP-v0 (a registry entry, nothing runs)


def ale_rom_name(game: str) -> str:
    """``Pong`` -> ``pong``, ``MsPacman`` -> ``ms_pacman``; snake_case names pass through."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", game).lower()


def ale_games() -> list[str]:
    """The ROM names that ship with ale-py."""
    from ale_py import roms

    return sorted(roms.get_all_rom_ids())


def check_game(suite: str, game: str, where: str = "config.game") -> None:
    """``UserError`` naming a few valid names when ``game`` is not an ALE game / gymnasium id."""
    if suite == "atari":
        games = ale_games()
        if ale_rom_name(game) not in games:
            usual = [
                g
                for g in (
                    "pong",
                    "breakout",
                    "space_invaders",
                    "seaquest",
                    "qbert",
                    "beam_rider",
                    "enduro",
                    "ms_pacman",
                )
                if g in games
            ]
            raise UserError(
                f"{where}: '{game}' is not an ALE game; valid names include "
                f"{', '.join(usual)} (CamelCase works too: Pong, SpaceInvaders); "
                f"all {len(games)}: python -c 'from ale_py import roms; print(roms.get_all_rom_ids())'"
            )
    else:
        import gymnasium

        if game not in gymnasium.envs.registry:
            usual = [
                g
                for g in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3")
                if g in gymnasium.envs.registry
            ]
            raise UserError(f"{where}: '{game}' is not a registered gymnasium id; valid ids include {', '.join(usual)}")


MAX_ENVS = 4096
"""Env seeds come in blocks of this many: env ``i`` of a block gets ``base + i``."""


def env_seed(seed: int, stream: int, index: int = 0) -> int:
    """The base seed of the env block for ``(trial seed, stream, index)``.

    Vector envs seed env ``i`` with ``base + i``, so plain ``seed + i`` would give env 1 of
    seed 0 the same episodes as env 0 of seed 1. Here the base is a hash of the three numbers
    (numpy's SeedSequence) rounded down to a multiple of ``MAX_ENVS``: two different triples
    share a block with probability 2^-18, and blocks never partly overlap.
    """
    block = int(np.random.SeedSequence([seed, stream, index]).generate_state(1, np.uint32)[0]) % 2**18
    return block * MAX_ENVS  # < 2^30: ALE and gymnasium take it as an int32 seed


class Envs:
    """What the loop needs of a vector env (subclasses below)."""

    num_envs: int
    num_actions: int
    obs_shape: tuple[int, ...]  # one env's observation as the network sees it
    frame_shape: tuple[int, ...]  # what the replay stores per step
    frame_dtype: Any
    stack: int
    fire_action: int | None = None  # the FIRE action of games that need it after a life loss

    def reset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Reset every env (env ``i`` seeded ``seed + i``; see env_seed): observations and lives."""
        raise NotImplementedError

    def send(self, actions: np.ndarray) -> None:
        raise NotImplementedError

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """obs, reward (float32, unclipped), terminated, truncated, lives."""
        raise NotImplementedError

    def newest_frame(self, obs: np.ndarray) -> np.ndarray:
        """The part of each observation that the replay stores for this step."""
        raise NotImplementedError

    def state(self) -> dict[str, Any] | None:
        """Everything needed to continue the envs exactly, or None where that is impossible."""
        return None

    def exact_model(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """``(P, R, continue_prob)`` where the env's model is known (FeatureMDP), else None."""
        return None

    def exact_observations(self) -> np.ndarray:
        """The observation of every state, in the model's state order."""
        raise NotImplementedError

    def set_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class AtariEnvs(Envs):
    """ALE's AtariVectorEnv with the DQN preprocessing done in C++: frame skip with max-pool,
    84x84 grayscale, frame stack, noop starts, FIRE on reset, sticky actions, time limit.

    Rewards come back unclipped and episodes end only at game over: reward clipping and
    episodic life (a lost life as a terminal for the TD target) are applied by the loop, so
    returns are always whole-game scores.
    """

    def __init__(self, cfg, num_envs: int):
        from ale_py.vector_env import AtariVectorEnv

        threads = cfg.env_threads or min(num_envs, os.cpu_count() or 1)
        self.env = AtariVectorEnv(
            ale_rom_name(cfg.game),
            num_envs,
            num_threads=threads,
            max_num_frames_per_episode=cfg.max_episode_frames,
            repeat_action_probability=cfg.sticky_action_prob,
            full_action_space=cfg.full_action_space,
            img_height=cfg.screen_size,
            img_width=cfg.screen_size,
            stack_num=cfg.frame_stack,
            frameskip=cfg.frame_skip,
            noop_max=cfg.noop_max,
            episodic_life=False,
            life_loss_info=False,
            reward_clipping=False,
            use_fire_reset=cfg.fire_reset,
            autoreset_mode="NextStep",
        )
        self.num_envs = num_envs
        self.num_actions = int(self.env.single_action_space.n)
        self.stack = cfg.frame_stack
        self.obs_shape = (cfg.frame_stack, cfg.screen_size, cfg.screen_size)
        self.frame_shape = (cfg.screen_size, cfg.screen_size)
        self.frame_dtype = np.uint8
        names = [a.name for a in self.env.ale.get_action_set()]
        self.fire_action = names.index("FIRE") if cfg.fire_reset and "FIRE" in names else None

    def reset(self, seed: int):
        obs, info = self.env.reset(seed=int(seed))
        return obs, info["lives"].astype(np.int32)

    def send(self, actions: np.ndarray) -> None:
        self.env.send(actions.astype(np.int32, copy=False))

    def recv(self):
        obs, reward, terminated, truncated, info = self.env.recv()
        return obs, reward.astype(np.float32), terminated, truncated, info["lives"].astype(np.int32)

    def newest_frame(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, -1]

    def close(self) -> None:
        self.env.close()


class GymEnvs(Envs):
    """gymnasium's SyncVectorEnv of a flat-observation env (CartPole-v1...)."""

    def __init__(self, cfg, num_envs: int):
        import gymnasium

        self.env = gymnasium.vector.SyncVectorEnv(
            [lambda: gymnasium.make(cfg.game) for _ in range(num_envs)],
            autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP,
        )
        space = self.env.single_action_space
        if not isinstance(space, gymnasium.spaces.Discrete):
            raise UserError(f"config.game: '{cfg.game}' has action space {space}; DQN needs Discrete")
        self.num_envs = num_envs
        self.num_actions = int(space.n)
        self.stack = 1
        self.obs_shape = tuple(self.env.single_observation_space.shape)
        self.frame_shape = self.obs_shape
        self.frame_dtype = np.float32
        self._actions = None

    def reset(self, seed: int):
        obs, _ = self.env.reset(seed=int(seed))
        return obs.astype(np.float32), np.zeros(self.num_envs, np.int32)

    def send(self, actions: np.ndarray) -> None:
        self._actions = actions

    def recv(self):
        obs, reward, terminated, truncated, _ = self.env.step(self._actions)
        return (
            obs.astype(np.float32),
            reward.astype(np.float32),
            terminated,
            truncated,
            np.zeros(self.num_envs, np.int32),
        )

    def newest_frame(self, obs: np.ndarray) -> np.ndarray:
        return obs

    def exact_model(self):
        base = self.env.envs[0].unwrapped
        return base.exact_model() if hasattr(base, "exact_model") else None

    def exact_observations(self) -> np.ndarray:
        return self.env.envs[0].unwrapped.features.astype(np.float32)

    def state(self) -> dict[str, Any]:
        """The plain attributes of every wrapper layer and env, and the vector env's own."""
        return {
            "vector": _plain_attrs(self.env),
            "envs": [[_plain_attrs(layer) for layer in _layers(env)] for env in self.env.envs],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        _set_attrs(self.env, state["vector"])
        for env, layers in zip(self.env.envs, state["envs"]):
            for layer, attrs in zip(_layers(env), layers):
                _set_attrs(layer, attrs)

    def close(self) -> None:
        self.env.close()


def make_envs(cfg, num_envs: int) -> Envs:
    return AtariEnvs(cfg, num_envs) if cfg.suite == "atari" else GymEnvs(cfg, num_envs)


# ------------------------------------------------------------------ exact state of gymnasium envs
# Classic-control envs keep their whole state in plain attributes (numbers, arrays, a numpy
# Generator): saving those of every wrapper layer continues an episode exactly after a resume.
# Values are stored as checkpoint-safe types (tensors, numbers, dicts) so that the checkpoint
# loads with torch.load(weights_only=True).

_SCALARS = (bool, int, float, str, type(None))


def _layers(env) -> list:
    layers = [env]
    while hasattr(layers[-1], "env"):
        layers.append(layers[-1].env)
    return layers


def _plain_attrs(obj) -> dict[str, Any]:
    out = {}
    for name, value in vars(obj).items():
        encoded = _encode(value)
        if encoded is not _SKIP:
            out[name] = encoded
    return out


def _set_attrs(obj, attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        setattr(obj, name, _decode(value, getattr(obj, name, None)))


_SKIP = object()


def _encode(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, np.generic):
        return {"__np_scalar__": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, np.ndarray) and value.dtype != object:
        import torch

        return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(value).copy()), "dtype": str(value.dtype)}
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    if isinstance(value, tuple) and all(isinstance(v, _SCALARS) for v in value):
        return {"__tuple__": list(value)}
    return _SKIP


def _decode(value: Any, current: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return value["__ndarray__"].numpy().astype(value["dtype"], copy=True)
        if "__np_scalar__" in value:
            return np.dtype(value["dtype"]).type(value["__np_scalar__"])
        if "__generator__" in value:
            state = value["__generator__"]
            gen = (
                current
                if isinstance(current, np.random.Generator)
                else np.random.Generator(getattr(np.random, state["bit_generator"])())
            )
            gen.bit_generator.state = state
            return gen
        if "__tuple__" in value:
            return tuple(value["__tuple__"])
    return value
