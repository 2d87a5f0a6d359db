"""Replay memory for vectorized environments that stores each frame once.

A stacked Atari observation is 4 frames, and consecutive observations share 3 of them: storing
``(s, s')`` per transition would keep each frame 8 times (56 KB per transition at 84x84). This
memory keeps one row per agent step and env instead: the newest frame of the observation
(7,056 bytes at 84x84) and the action, reward and flags of the step taken from it, 7,067 bytes
in all (``bytes_per_transition``). ``s`` and ``s'`` are rebuilt at sampling time from the rows
``t - k + 1 .. t + 1`` with numpy fancy indexing (one gather per batch, no per-sample Python).

Layout: arrays of shape ``(rows, num_envs, ...)``, written one row per vector step for all envs
at once, as a ring (``rows = buffer_size // num_envs``). Row ``t`` of env ``e`` holds

    frame[t]  the newest frame of observation o_t
    action[t], reward[t], done[t]   the step taken from o_t (done: no bootstrap from o_t+1)
    first[t]  o_t is the first observation of an episode (a reset)
    final[t]  o_t is the last observation of an episode (terminated or truncated)

Environments autoreset on the step after a final observation (gymnasium's NEXT_STEP mode, which
AtariVectorEnv uses): the row after a final row is a reset, and the "transition" between them
is not one, so final rows are never sampled as ``s``. Frames in a stack that come before an
episode's first observation are zero, exactly as AtariVectorEnv fills its stack on reset, so a
rebuilt observation equals the one the agent saw. With ``stack = 1`` (flat observations)
``frame`` is the whole observation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FLAG_BYTES = 3  # done, first, final


def bytes_per_transition(frame_shape: tuple[int, ...], frame_dtype: Any = np.uint8) -> int:
    """Bytes one stored transition takes: a frame, an int32 action, a float32 reward, 3 flags."""
    return int(np.prod(frame_shape)) * np.dtype(frame_dtype).itemsize + 4 + 4 + FLAG_BYTES


class FrameReplay:
    """A ring of per-step rows for ``num_envs`` envs holding ``capacity`` transitions in all."""

    def __init__(
        self, capacity: int, num_envs: int, frame_shape: tuple[int, ...], frame_dtype: Any = np.uint8, stack: int = 4
    ):
        self.rows = capacity // num_envs
        if self.rows < stack + 2:
            raise ValueError(
                f"replay: {capacity} transitions over {num_envs} envs is fewer than {stack + 2} rows per env"
            )
        self.num_envs, self.stack = num_envs, stack
        self.frame_shape = tuple(frame_shape)
        shape = (self.rows, num_envs)
        self.frame = np.zeros(shape + self.frame_shape, dtype=frame_dtype)
        self.action = np.zeros(shape, dtype=np.int32)
        self.reward = np.zeros(shape, dtype=np.float32)
        self.done = np.zeros(shape, dtype=bool)
        self.first = np.zeros(shape, dtype=bool)
        self.final = np.zeros(shape, dtype=bool)
        self.count = 0  # rows written so far (absolute time of the next row)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.frame, self.action, self.reward, self.done, self.first, self.final))

    def __len__(self) -> int:
        """Transitions held (rows written, up to capacity, times envs)."""
        return min(self.count, self.rows) * self.num_envs

    # ------------------------------------------------------------------ writing

    def add_observation(self, frame: np.ndarray, first: np.ndarray, final: np.ndarray) -> None:
        """Append a row: the newest frame of each env's observation and its flags."""
        row = self.count % self.rows
        self.frame[row] = frame
        self.first[row] = first
        self.final[row] = final
        self.done[row] = False
        self.count += 1

    def set_step(self, action: np.ndarray, reward: np.ndarray, done: np.ndarray) -> None:
        """Record the step taken from the newest row's observations."""
        row = (self.count - 1) % self.rows
        self.action[row] = action
        self.reward[row] = reward
        self.done[row] = done

    def add_step(self, action, reward, done, frame: np.ndarray, first: np.ndarray, final: np.ndarray) -> None:
        """``set_step(action, reward, done)`` then ``add_observation(frame, first, final)``: one
        vector step's rows (the device replay sends them in one copy)."""
        self.set_step(action, reward, done)
        self.add_observation(frame, first, final)

    def cut(self) -> None:
        """Mark the newest row as the end of its episode (the envs restart after a resume)."""
        if self.count:
            self.final[(self.count - 1) % self.rows] = True

    # ------------------------------------------------------------------ sampling

    def _start_range(self) -> tuple[int, int]:
        return start_range(self.count, self.rows, self.stack)

    def can_sample(self) -> bool:
        return can_sample(self.count, self.rows, self.stack, self.final)

    def transition_index(self) -> tuple[np.ndarray, np.ndarray]:
        """Every stored transition's ``(row, env)``: each row that can be sampled, final rows left out."""
        lo, hi = self._start_range()
        t = np.repeat(np.arange(lo, hi + 1), self.num_envs)
        env = np.tile(np.arange(self.num_envs), max(0, hi - lo + 1))
        keep = ~self.final[t % self.rows, env]
        return t[keep] % self.rows, env[keep]

    def sample_index(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` (row, env) pairs drawn uniformly among stored transitions (final rows redrawn)."""
        return sample_index(self.final, self.count, self.stack, n, rng)

    def gather(self, row: np.ndarray, env: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at ``(row, env)``: obs, action, reward, done, next_obs.

        obs and next_obs have shape ``(n, stack, *frame_shape)``; frames before an episode's
        first observation are zero. They are views of ``window`` (``(n, stack + 1,
        *frame_shape)``, contiguous): ``obs = window[:, :stack]``, ``next_obs = window[:, 1:]``.
        """
        k = self.stack
        window = (row[:, None] + np.arange(-k + 1, 2)) % self.rows  # (n, k + 1)
        envs = env[:, None]
        frames = self.frame[window, envs]  # (n, k + 1, *frame_shape): one gather
        if k > 1:
            first = self.first[window, envs]
            # zero[:, j]: a later frame of the window (up to the newest of s) starts an episode.
            later = np.logical_or.accumulate(first[:, k - 1 : 0 : -1], axis=1)[:, ::-1]
            zero = np.zeros_like(first)
            zero[:, : k - 1] = later
            # position k - 1 is o_t; a start at o_t+1 cannot happen since o_t is not final.
            frames[zero] = 0
        return {
            "window": frames,  # contiguous: what a batch sends to the device, once
            "obs": frames[:, :k],
            "next_obs": frames[:, 1:],
            "action": self.action[row, env],
            "reward": self.reward[row, env],
            "done": self.done[row, env],
        }

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return self.gather(*self.sample_index(n, rng))

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The stored rows as tensors (sharing memory with the arrays: no copy)."""
        import torch

        n = min(self.count, self.rows)
        arrays = {
            name: torch.from_numpy(getattr(self, name)[:n])
            for name in ("frame", "action", "reward", "done", "first", "final")
        }
        return {"count": self.count, "rows": self.rows, "num_envs": self.num_envs, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["rows"] != self.rows or state["num_envs"] != self.num_envs:
            raise ValueError(
                f"replay checkpoint has {state['rows']} rows x {state['num_envs']} envs, "
                f"this replay {self.rows} x {self.num_envs}"
            )
        n = min(state["count"], self.rows)
        for name in ("frame", "action", "reward", "done", "first", "final"):
            getattr(self, name)[:n] = state[name].numpy()
        self.count = state["count"]


# ---------------------------------------------------------------------- the ring's index arithmetic
# (shared with device_replay.DeviceFrameReplay, which keeps ``final`` on the host too)


def start_range(count: int, rows: int, stack: int) -> tuple[int, int]:
    """Absolute rows ``t`` whose whole window ``t-k+1 .. t+1`` is still stored, after ``count``
    rows were written to a ring of ``rows``: ``lo = max(0, count - rows + k - 1)``, ``hi = count - 2``."""
    return max(0, count - rows + stack - 1), count - 2


def can_sample(count: int, rows: int, stack: int, final: np.ndarray) -> bool:
    lo, hi = start_range(count, rows, stack)
    # a final row is always followed by a reset row, which is not final: of two or more
    # candidate rows at least one is a transition
    return hi > lo or (hi == lo and not final[lo % rows].all())


def sample_index(
    final: np.ndarray, count: int, stack: int, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (row, env) pairs drawn uniformly among stored transitions: absolute rows uniform in
    ``start_range``, envs uniform, pairs on a final row redrawn (``final`` has shape ``(rows, envs)``)."""
    rows, num_envs = final.shape
    lo, hi = start_range(count, rows, stack)
    if hi < lo:
        raise ValueError("replay: not enough rows to sample a transition yet")
    t = rng.integers(lo, hi + 1, size=n)
    env = rng.integers(0, num_envs, size=n)
    bad = final[t % rows, env]
    while bad.any():  # rare: one final row per episode
        k = int(bad.sum())
        t[bad] = rng.integers(lo, hi + 1, size=k)
        env[bad] = rng.integers(0, num_envs, size=k)
        bad = final[t % rows, env]
    return t % rows, env
