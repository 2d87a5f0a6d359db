"""Q-networks: the Nature DQN CNN for Atari frames and a small MLP for flat observations."""

from __future__ import annotations

import torch
from torch import nn


class NatureCNN(nn.Module):
    """Mnih et al. (2015): 3 conv layers and a 512-unit layer on uint8 frame stacks.

    Input: ``(B, frame_stack, 84, 84)`` uint8 (scaled to [0, 1] here, so the replay and the
    host-to-device copies stay uint8). Output: ``(B, num_actions)`` Q-values.

    ``channels_last`` lays the conv activations out as NHWC (call ``.to(memory_format=
    torch.channels_last)`` on the module too): the same arithmetic, about 10% faster per update
    with oneDNN on CPU and the usual layout for cuDNN.
    """

    def __init__(self, in_channels: int, num_actions: int, screen_size: int = 84, channels_last: bool = False):
        super().__init__()
        self.channels_last = channels_last
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.features(torch.zeros(1, in_channels, screen_size, screen_size)).shape[1]
        self.head = nn.Sequential(nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, num_actions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last:  # reorder the uint8 bytes, not the floats: 4x less to move
            x = x.contiguous(memory_format=torch.channels_last)
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float() / 255.0
        return self.head(self.features(x))


class MLP(nn.Module):
    """A ReLU MLP on flat float observations ``(B, obs_dim)`` -> ``(B, num_actions)``."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: tuple[int, ...] = (120, 84)):
        super().__init__()
        layers, width = [], obs_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float())


def q_network(
    suite: str, obs_shape: tuple[int, ...], num_actions: int, mlp_hidden=(120, 84), channels_last: bool = False
) -> nn.Module:
    """The Q-network for an environment suite and observation shape."""
    if suite == "atari":
        net = NatureCNN(obs_shape[0], num_actions, obs_shape[-1], channels_last)
        return net.to(memory_format=torch.channels_last) if channels_last else net
    return MLP(int(torch.tensor(obs_shape).prod()), num_actions, tuple(mlp_hidden))
