"""Nature DQN's optimizer: centered RMSProp with its epsilon inside the square root.

DeepMind's Lua DQN (``NeuralQLearner:qLearnMinibatch``) updates the weights ``w`` with the
batch gradient ``d`` (the sum over the 32 samples, as ``nn``'s backward accumulates it) as

    g  <- 0.95 g  + 0.05 d
    g2 <- 0.95 g2 + 0.05 d^2
    w  <- w - lr d / sqrt(g2 - g^2 + 0.01)

(``g``, ``g2`` start at 0; lr 2.5e-4, no momentum). torch's ``RMSprop`` adds its ``eps``
outside the root, ``d / (sqrt(g2 - g^2) + eps)``, so no value of it reproduces this rule.

Scaling the gradient by ``c`` (a mean instead of a sum over the batch: ``c = 1/32``) gives the
same step with ``eps / c^2`` inside the root: ``c d / sqrt(c^2 (g2 - g^2) + eps c^2)``. So
0.01 on a summed loss equals 0.01 / 32^2 = 9.8e-6 on a mean loss, Dopamine's ``1e-5`` with
TensorFlow's RMSProp (which also adds epsilon inside the root) on its mean Huber loss.
"""

from __future__ import annotations

import torch


class CenteredRMSprop(torch.optim.Optimizer):
    """RMSProp with ``eps`` inside the square root (Nature DQN's rule, module docstring).

    ``centered``: divide by ``sqrt(g2 - g^2 + eps)`` (the gradient's running variance);
    otherwise by ``sqrt(g2 + eps)``. ``alpha`` is the decay of the running averages.
    """

    def __init__(self, params, lr: float = 2.5e-4, alpha: float = 0.95, eps: float = 0.01, centered: bool = True):
        if lr <= 0 or eps <= 0 or not 0 < alpha < 1:
            raise ValueError(f"CenteredRMSprop: need lr > 0, eps > 0, 0 < alpha < 1; got {lr}, {eps}, {alpha}")
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "centered": centered})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, alpha, eps, centered = group["lr"], group["alpha"], group["eps"], group["centered"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.zeros_like(p)
                    if centered:
                        state["grad_avg"] = torch.zeros_like(p)
                g2 = state["square_avg"].mul_(alpha).addcmul_(d, d, value=1 - alpha)
                if centered:
                    g = state["grad_avg"].mul_(alpha).add_(d, alpha=1 - alpha)
                    denom = torch.addcmul(g2, g, g, value=-1).add_(eps).sqrt_()
                else:
                    denom = (g2 + eps).sqrt_()
                p.addcdiv_(d, denom, value=-lr)
        return loss
