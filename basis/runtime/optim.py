"""Adam without ``torch.optim``'s first-use cost.

``torch.optim.Optimizer`` imports ``torch._dynamo`` the first time one is built (about a
second of a job's start-up on the development box, more than a short run's training).
:class:`Adam` is its single-tensor update, the path ``torch.optim.Adam`` takes for CPU
tensors, in the same operations and order, so its floats are torch's. On CUDA the
estimators keep ``torch.optim.Adam(fused=True)`` (:func:`adam_for`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from basis.runtime.device import is_cuda


class Adam:
    """``torch.optim.Adam(params, lr)`` (no weight decay, no amsgrad, not maximising) on
    the CPU: a parameter without a gradient is skipped, and counts its own steps, as there."""

    def __init__(
        self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ):
        self.params = list(params)
        self.lr, self.betas, self.eps = lr, betas, eps
        self.steps = [0] * len(self.params)
        self.first = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.second = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor | None] | None = None) -> None:
        """One update from ``grads`` (default: each parameter's ``.grad``)."""
        beta1, beta2 = self.betas
        grads = [p.grad for p in self.params] if grads is None else grads
        for i, (param, grad) in enumerate(zip(self.params, grads)):
            if grad is None:
                continue
            self.steps[i] += 1
            # torch keeps the count as a float32 tensor and reads it back as a float.
            step = float(self.steps[i])
            self.first[i].lerp_(grad, 1 - beta1)
            self.second[i].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = self.lr / (1 - beta1**step)
            correction2_sqrt = (1 - beta2**step) ** 0.5
            param.addcdiv_(self.first[i], (self.second[i].sqrt() / correction2_sqrt).add_(self.eps), value=-step_size)


def adam_for(
    params: Iterable[torch.Tensor], lr: float, device: torch.device, *, capturable: bool = False
) -> Adam | torch.optim.Optimizer:
    """The estimators' optimiser: :class:`Adam` on the CPU (torch's floats, none of its
    start-up), ``torch.optim.Adam(fused=True)`` on CUDA (its step counters stay on the
    device: no host read per step), ``capturable`` where its step is recorded in a CUDA graph.
    The fused kernel reads a gradient in its parameter's memory layout, so a gradient set by
    hand must be laid out as its parameter (:func:`as_parameter_layout`)."""
    if is_cuda(device):
        return torch.optim.Adam(params, lr=lr, fused=True, capturable=capturable)
    return Adam(params, lr)


def as_parameter_layout(grad: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``grad`` in ``param``'s memory layout (strides), copied only where they differ. A
    gradient computed apart from ``.backward()`` (``torch.autograd.grad`` under ``vmap``)
    can come transposed; the fused Adam reads it element by element in the parameter's
    order, and would move the wrong weights."""
    if grad.stride() == param.stride():
        return grad
    return torch.empty_like(param).copy_(grad)
