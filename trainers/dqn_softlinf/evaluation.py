"""Evaluation games acted through the device path, as training acts with the replay on the device.

The evaluation envs are host emulators of their own (``eval_episodes`` games, one per env);
their observations are not in the device replay. Per agent step the host draws the
epsilon-greedy coins exactly as the host path does (``loop.epsilon_greedy``: ``u = gen.random(n)``
then ``r = gen.integers(0, num_actions, n)`` from the evaluation's numpy generator) and
``EvalStaging`` packs them with the observations into one byte buffer, sent in one copy (on
CUDA from a pinned buffer, non-blocking). On the device, ``eval_actions`` is graph-friendly (no
read, no data-dependent shape): ``a_i = r_i`` where ``u_i < epsilon``, else ``argmax_a Q(s_i, a)``,
with ``epsilon`` a float64 device scalar (float64 as numpy compares: the same coins to the bit).
The one read per step is the actions, which the emulators need.

The draws, the comparison and the forward pass are those of the host path, so the same seed
gives the same actions and the same returns (a test, on the CPU); only where every env
explores does the host path skip the forward pass, which draws nothing.
"""

from __future__ import annotations

import numpy as np
import torch


def eval_actions(forward, obs: torch.Tensor, uniform: torch.Tensor, random_actions: torch.Tensor, epsilon):
    """Epsilon-greedy actions on the device: ``a_i = random_i`` if ``uniform_i < epsilon`` else
    ``argmax_a Q(obs_i, a)`` (``forward`` gives ``Q``; ``epsilon`` a device scalar, or a float).
    Nothing here reads the device or has a data-dependent shape."""
    best = forward(obs).argmax(1)
    return torch.where(uniform < epsilon, random_actions, best)


class EvalStaging:
    """One step's observations and epsilon-greedy draws, sent to ``device`` in one copy.

    Layout of the byte buffer (8-byte arrays first, aligned): ``uniform`` float64 (n) |
    ``random_actions`` int64 (n) | the observations' bytes. On CUDA the host side is pinned and
    the copy non-blocking; one buffer is enough, since each step's read of the actions waits
    for the copy before the host refills it."""

    def __init__(self, num_envs: int, obs_shape: tuple[int, ...], obs_dtype, device: torch.device):
        self.n, self.obs_shape, self.device = num_envs, tuple(obs_shape), torch.device(device)
        self.obs_np_dtype = np.dtype(obs_dtype)
        self.obs_dtype = torch.from_numpy(np.zeros(0, self.obs_np_dtype)).dtype
        obs_bytes = num_envs * int(np.prod(self.obs_shape)) * self.obs_np_dtype.itemsize
        size = 16 * num_envs + obs_bytes
        if self.device.type == "cuda":
            self.pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            self.host = self.pinned.numpy()
        else:
            self.pinned, self.host = None, np.empty(size, np.uint8)
        self.dev = torch.empty(size, dtype=torch.uint8, device=self.device)

    def send(self, obs: np.ndarray, uniform: np.ndarray, random_actions: np.ndarray):
        """``(obs, uniform, random_actions)`` on the device, views of one buffer copied once."""
        n, host, dev = self.n, self.host, self.dev
        host[: 8 * n].view(np.float64)[:] = uniform
        host[8 * n : 16 * n].view(np.int64)[:] = random_actions
        host[16 * n :] = np.ascontiguousarray(obs, self.obs_np_dtype).reshape(-1).view(np.uint8)
        if self.pinned is not None:
            dev.copy_(self.pinned, non_blocking=True)  # the one copy
        else:
            dev.copy_(torch.from_numpy(host))
        return (
            dev[16 * n :].view(self.obs_dtype).view(n, *self.obs_shape),
            dev[: 8 * n].view(torch.float64),
            dev[8 * n : 16 * n].view(torch.int64),
        )


class DeviceEvalActor:
    """``choose(obs) -> actions`` for ``loop.play_games``: the host path's draws from ``gen``,
    staged with ``obs`` (``EvalStaging``), the actions chosen on the device (``eval_actions``
    under ``autocast``) and read back, the step's one read."""

    def __init__(self, forward, num_actions: int, epsilon: float, gen: np.random.Generator, device, autocast):
        self.forward, self.num_actions, self.gen, self.autocast = forward, num_actions, gen, autocast
        self.device, self.staging = torch.device(device), None  # made at the first step, for its shape
        self.epsilon = torch.zeros((), dtype=torch.float64, device=device)
        self.epsilon.fill_(epsilon)  # a kernel argument: nothing copied, nothing read

    @torch.inference_mode()
    def __call__(self, obs: np.ndarray) -> np.ndarray:
        n = len(obs)
        if self.staging is None:
            self.staging = EvalStaging(n, obs.shape[1:], obs.dtype, self.device)
        uniform = self.gen.random(n)  # the host path's draws, in its order
        random_actions = self.gen.integers(0, self.num_actions, size=n)
        x, u, r = self.staging.send(obs, uniform, random_actions)
        with self.autocast():
            actions = eval_actions(self.forward, x, u, r, self.epsilon)
        return actions.cpu().numpy()  # the read: the emulators need the actions
