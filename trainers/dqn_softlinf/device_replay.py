"""The frame-deduplicated replay (replay.py) kept on the trial's device, sampled and gathered there.

Same rows, same layout, same checkpoint format as ``FrameReplay``; the arrays are torch
tensors on ``device`` (a GPU's memory, or host memory when the device is the CPU: the same
code then runs on host tensors). Per vector step the new rows arrive with one pinned,
non-blocking host-to-device copy per array; per update nothing crosses the bus and nothing
waits for the device:

- ``sample_index_device(n, gen)`` draws the batch's ``(row, env)`` pairs on the device. The
  number of rows written is a device tensor (``count_dev``, advanced on the device with each
  new row), so the window ``lo .. hi`` of sampleable rows is computed there too. Each sample
  draws ``CANDIDATES`` pairs uniformly over ``[lo, hi] x envs`` and keeps the first that is not
  a final row: conditioned on at least one being a transition, that is a uniform draw among
  transitions, as ``FrameReplay.sample_index``'s redraw loop gives (which must read the flags
  on the host). All ``CANDIDATES`` land on final rows with probability ``f^16`` for a fraction
  ``f`` of final rows (1e-16 at f = 10%, CartPole's first episodes; Pong: f < 0.2%); that
  sample is then the first candidate, a final row whose successor is a reset.
- ``gather(row, env)`` builds the ``(n, k + 1, *frame)`` window of each transition with one
  ``index_select`` on the flattened ring and zeroes the frames before an episode's first
  observation by multiplying with a 0/1 mask (no boolean indexing: that would read the device); ``obs``
  and ``next_obs`` are views of that window.

``sample_index(n, rng)`` (numpy, the host's copy of the ``final`` flags) draws exactly as
``FrameReplay`` does, for the probes, whose draws are the same whichever replay a trial uses.
``newest_obs()`` is the observation each env is in now, rebuilt from the ring (what acting
needs, with nothing copied from the host).

``add_step`` (the loop's per-vector-step write: the step's action, reward and done, then the
next row's frame and flags) packs all six arrays into one byte buffer and sends it in one
copy: on CUDA from one of two pinned staging buffers, used in turn (the host fills one while
the copy from the other may still run; before refilling a buffer it waits on the event of the
copy that last read it, two vector steps ago), and the rows are unpacked on the device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from raylab.accel import to_device
from trainers.dqn_softlinf.replay import can_sample, sample_index

CANDIDATES = 16
"""Pairs drawn per sample by ``sample_index_device``; the first that is a transition is kept."""
NAMES = ("frame", "action", "reward", "done", "first", "final")


class DeviceFrameReplay:
    """``FrameReplay``'s ring of per-step rows as tensors on ``device``."""

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        frame_shape: tuple[int, ...],
        frame_dtype: Any = np.uint8,
        stack: int = 4,
        device: torch.device | str = "cpu",
    ):
        self.rows = capacity // num_envs
        if self.rows < stack + 2:
            raise ValueError(
                f"replay: {capacity} transitions over {num_envs} envs is fewer than {stack + 2} rows per env"
            )
        self.num_envs, self.stack, self.frame_shape = num_envs, stack, tuple(frame_shape)
        self.device = torch.device(device)
        shape = (self.rows, num_envs)
        dtype = torch.from_numpy(np.zeros(0, frame_dtype)).dtype
        on = {"device": self.device}
        self.frame = torch.zeros(shape + self.frame_shape, dtype=dtype, **on)
        self.action = torch.zeros(shape, dtype=torch.int32, **on)
        self.reward = torch.zeros(shape, dtype=torch.float32, **on)
        self.done = torch.zeros(shape, dtype=torch.bool, **on)
        self.first = torch.zeros(shape, dtype=torch.bool, **on)
        self.final = torch.zeros(shape, dtype=torch.bool, **on)
        self.final_host = np.zeros(shape, dtype=bool)  # for can_sample and the probes' draws
        self.frame_np_dtype = np.dtype(frame_dtype)
        self._stage: torch.Tensor | None = None  # add_step's buffers, made at its first call
        self._stage_host: list[np.ndarray] = []
        self._stage_pinned: list[torch.Tensor] = []
        self._events: list = [None, None]
        self._slot = 0
        self.count = 0
        self.count_dev = torch.zeros((), dtype=torch.long, **on)
        self.env_ids = torch.arange(num_envs, **on)
        self.offsets = torch.arange(-stack + 1, 2, **on)  # a transition's window: t-k+1 .. t+1

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in NAMES)

    def __len__(self) -> int:
        return min(self.count, self.rows) * self.num_envs

    # ------------------------------------------------------------------ writing

    def _put(self, dst: torch.Tensor, values: np.ndarray) -> None:
        """``dst[...] = values`` from the host: pinned and non-blocking on CUDA (a copy from
        pageable memory would wait for everything queued on the device)."""
        src = torch.from_numpy(np.ascontiguousarray(values))
        if self.device.type == "cuda":
            dst.copy_(src.pin_memory(), non_blocking=True)
        else:
            dst.copy_(src)

    def add_observation(self, frame: np.ndarray, first: np.ndarray, final: np.ndarray) -> None:
        row = self.count % self.rows
        self._put(self.frame[row], frame)
        self._put(self.first[row], first)
        self._put(self.final[row], final)
        self.done[row] = False
        self.final_host[row] = final
        self.count += 1
        self.count_dev += 1

    def set_step(self, action: np.ndarray, reward: np.ndarray, done: np.ndarray) -> None:
        row = (self.count - 1) % self.rows
        self._put(self.action[row], np.asarray(action, np.int32))
        self._put(self.reward[row], np.asarray(reward, np.float32))
        self._put(self.done[row], np.asarray(done, bool))

    def add_step(self, action, reward, done, frame: np.ndarray, first: np.ndarray, final: np.ndarray) -> None:
        """``set_step(action, reward, done)`` then ``add_observation(frame, first, final)``,
        the same rows, in one host-to-device copy (module docstring)."""
        n, prev, row = self.num_envs, (self.count - 1) % self.rows, self.count % self.rows
        frame = np.ascontiguousarray(frame, dtype=self.frame_np_dtype)
        if self._stage is None:
            self._make_stage(frame.nbytes)
        slot = self._slot
        self._slot ^= 1
        if self._events[slot] is not None:
            self._events[slot].synchronize()  # the copy that last read this buffer (two steps ago)
        host = self._stage_host[slot]
        # layout, 4-byte arrays first (aligned): action int32 | reward float32 | frame | done | first | final
        host[: 4 * n].view(np.int32)[:] = action
        host[4 * n : 8 * n].view(np.float32)[:] = reward
        f_end = 8 * n + frame.nbytes
        host[8 * n : f_end] = frame.reshape(-1).view(np.uint8)
        host[f_end : f_end + n] = np.asarray(done, bool)
        host[f_end + n : f_end + 2 * n] = np.asarray(first, bool)
        host[f_end + 2 * n : f_end + 3 * n] = np.asarray(final, bool)
        dev = self._stage
        if self.device.type == "cuda":
            dev.copy_(self._stage_pinned[slot], non_blocking=True)  # the one copy
            self._events[slot] = torch.cuda.Event()
            self._events[slot].record()
        else:
            dev.copy_(torch.from_numpy(host))
        self.action[prev] = dev[: 4 * n].view(torch.int32)
        self.reward[prev] = dev[4 * n : 8 * n].view(torch.float32)
        self.done[prev] = dev[f_end : f_end + n].bool()
        self.frame[row] = dev[8 * n : f_end].view(self.frame.dtype).view(n, *self.frame_shape)
        self.first[row] = dev[f_end + n : f_end + 2 * n].bool()
        self.final[row] = dev[f_end + 2 * n : f_end + 3 * n].bool()
        self.done[row] = False
        self.final_host[row] = final
        self.count += 1
        self.count_dev += 1

    def _make_stage(self, frame_bytes: int) -> None:
        """The byte buffers of ``add_step``: two host ones (pinned on CUDA) and one on the device."""
        size = 11 * self.num_envs + frame_bytes
        if self.device.type == "cuda":
            self._stage_pinned = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
            self._stage_host = [t.numpy() for t in self._stage_pinned]
        else:
            self._stage_host = [np.empty(size, np.uint8) for _ in range(2)]
        self._stage = torch.empty(size, dtype=torch.uint8, device=self.device)

    def cut(self) -> None:
        if self.count:
            row = (self.count - 1) % self.rows
            self.final[row] = True
            self.final_host[row] = True

    # ------------------------------------------------------------------ sampling

    def can_sample(self) -> bool:
        return can_sample(self.count, self.rows, self.stack, self.final_host)

    def sample_index(self, n: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``FrameReplay.sample_index``'s draw (numpy ``rng``, host flags), as device tensors."""
        row, env = sample_index(self.final_host, self.count, self.stack, n, rng)
        return to_device(torch.from_numpy(row), self.device), to_device(torch.from_numpy(env), self.device)

    def sample_index_device(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` (row, env) pairs drawn on the device with ``gen``, without reading it (module
        docstring). Call only when ``can_sample()``."""
        rows = self.rows
        lo = (self.count_dev - rows + self.stack - 1).clamp(min=0)
        span = self.count_dev - 1 - lo  # hi - lo + 1 with hi = count - 2
        shape = (n, CANDIDATES)
        t = lo + torch.randint(0, 2**62, shape, generator=gen, device=self.device) % span
        env = torch.randint(0, self.num_envs, shape, generator=gen, device=self.device)
        ok = ~self.final.view(-1)[(t % rows) * self.num_envs + env]
        pick = ok.to(torch.int32).argmax(1, keepdim=True)  # the first transition (0 if none)
        return t.gather(1, pick).squeeze(1) % rows, env.gather(1, pick).squeeze(1)

    def _window(self, row: torch.Tensor, env: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Frames at rows ``row + offsets`` of ``env``, ``(n, len(offsets), *frame)``; those
        before an episode's first observation (a ``first`` among positions 1 .. k - 1) are zero."""
        k, n, width = self.stack, len(row), len(offsets)
        flat = ((row[:, None] + offsets) % self.rows) * self.num_envs + env[:, None]  # (n, width)
        frames = self.frame.view(-1, *self.frame_shape).index_select(0, flat.view(-1))
        frames = frames.view(n, width, *self.frame_shape)
        if k == 1:
            return frames
        first = self.first.view(-1)[flat[:, 1:k]]  # positions 1 .. k - 1
        # position j < k - 1 is zero when a later position up to k - 1 starts an episode
        later = first.flip(1).to(torch.int32).cumsum(1).flip(1) > 0
        keep = torch.cat([~later, torch.ones(n, width - k + 1, dtype=torch.bool, device=self.device)], 1)
        return frames * keep.to(frames.dtype).view(n, width, *([1] * len(self.frame_shape)))

    def gather(self, row: torch.Tensor, env: torch.Tensor) -> dict[str, torch.Tensor]:
        """The transitions at ``(row, env)`` (device tensors) as the update reads them: obs and
        next_obs (views of the contiguous window), action (long), reward, done (float)."""
        k = self.stack
        window = self._window(row, env, self.offsets)
        flat = row * self.num_envs + env
        return {
            "window": window,
            "obs": window[:, :k],
            "next_obs": window[:, 1:],
            "action": self.action.view(-1)[flat].long(),
            "reward": self.reward.view(-1)[flat],
            "done": self.done.view(-1)[flat].float(),
        }

    def newest_obs(self) -> torch.Tensor:
        """Each env's current observation, ``(num_envs, k, *frame)``, from the newest rows."""
        row = ((self.count_dev - 1) % self.rows).expand(self.num_envs)
        return self._window(row, self.env_ids, self.offsets[:-1])

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """``FrameReplay.state_dict``'s format: the stored rows as host tensors."""
        n = min(self.count, self.rows)
        arrays = {name: getattr(self, name)[:n].cpu() for name in NAMES}
        return {"count": self.count, "rows": self.rows, "num_envs": self.num_envs, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a ``state_dict`` of either replay."""
        if state["rows"] != self.rows or state["num_envs"] != self.num_envs:
            raise ValueError(
                f"replay checkpoint has {state['rows']} rows x {state['num_envs']} envs, "
                f"this replay {self.rows} x {self.num_envs}"
            )
        n = min(state["count"], self.rows)
        for name in NAMES:
            getattr(self, name)[:n].copy_(state[name])
        self.final_host[:n] = state["final"].numpy()
        self.count = state["count"]
        self.count_dev.fill_(self.count)
