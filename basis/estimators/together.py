"""Seeds trained together: one method's seeds as one batched network in one process.

Each seed keeps its own estimator, data draws and set-up, so every batch and its target
are those of the seed's solo run (BASiS's target, Algorithm 1's first half, SpectralNet's
and SpecNet2's batch graphs and Diffusion Net's sample do not depend on the network). A
method trains its seeds together when it states its loss as a function of the network
(:meth:`~basis.estimators.base.SpectralEstimator._loss_with`): all four do, SpecNet2 with
its local gradient only (with its neighbour gradient a batch's size differs from seed to
seed). What is batched is the gradient step: the seeds' parameters are stacked along a
leading seed axis, one vectorised forward and backward (:func:`torch.func.vmap`) computes
every seed's loss and gradients at once, and one Adam update moves them all. A GPU runs
each layer of K seeds as one launch instead of K.

The batched matrix products are not the solo ones bit for bit (a CPU's ``bmm`` and
``addmm`` sum in different orders), so a seed's numbers equal its solo run to float
rounding, not bit for bit; the CLI trains seeds together on CUDA only and keeps the CPU
on the solo path, whose bytes the tests pin (:func:`basis.runtime.device.seeds_together_by_default`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, vmap

from basis.errors import InputError
from basis.estimators.base import SpectralEstimator
from basis.estimators.training import PreparedBatch, StepTimer, run_now, split_cores
from basis.runtime.optim import adam_for, as_parameter_layout


def fit_together(estimators: Sequence[SpectralEstimator], inputs: Sequence[tuple[Any, Any]]) -> list[SpectralEstimator]:
    """Fit ``estimators`` (one method, one set of parameters but the seed) on their
    ``inputs`` (``(X, y)`` each) in lockstep, one batched gradient step for all per
    iteration. Each estimator ends fitted as by its own ``fit``: loss curve, callbacks,
    post-processing."""
    _check_together(estimators, inputs)
    for estimator, (X, y) in zip(estimators, inputs):
        estimator.start(X, y)
    stacked = _stack_parameters(estimators)
    device = estimators[0].device_
    optimizer = adam_for(list(stacked.values()), estimators[0].lr, device)
    template = estimators[0].model_
    loss_with = estimators[0]._loss_with

    def loss_of_one(params: dict[str, torch.Tensor], *tensors: torch.Tensor):
        return loss_with(_Network(template, params), *tensors)

    batched_loss = vmap(loss_of_one)
    n_iter = estimators[0].n_iter
    unread: list[tuple[int, torch.Tensor, dict[str, torch.Tensor], list[tuple[dict[str, float], PreparedBatch]]]] = []
    # As in a solo fit, the next step's batches are prepared while this step's gradient
    # step runs (a worker thread on the CPU, each seed's own stream on CUDA), on the same
    # split of the thread budget.
    with split_cores(device) as pipelined, ThreadPoolExecutor(max_workers=1) as worker:
        prepare = worker.submit if pipelined else run_now
        pending = prepare(_prepare_all, estimators, _marks(estimators))
        for step in range(n_iter):
            start = time.perf_counter()
            batches = pending.result()
            if step + 1 < n_iter:
                pending = prepare(_prepare_all, estimators, _marks(estimators))
            parts = [estimator._loss_tensors(estimator._await(batch)) for estimator, batch in zip(estimators, batches)]
            tensors = [torch.stack(column) for column in zip(*(part[0] for part in parts))]
            gradient_timer = StepTimer(device)
            with gradient_timer("gradient"):
                for estimator in estimators:
                    estimator.model_.train()
                losses, terms = batched_loss(stacked, *tensors)
                grads = torch.autograd.grad(losses.sum(), list(stacked.values()))
                for param, grad in zip(stacked.values(), grads):
                    param.grad = as_parameter_layout(grad, param)
                optimizer.step()
            for estimator in estimators:
                estimator.n_steps_ += 1
                estimator._after_step()
            ms_step = (time.perf_counter() - start) * 1e3
            infos = []
            for (_, info), batch in zip(parts, batches):
                # The step's gradient part and its wall time are those of all seeds together.
                batch.timer.include(gradient_timer)
                infos.append(({**info, "ms_step": ms_step, "seeds_together": float(len(estimators))}, batch))
            unread.append((step, losses.detach(), terms, infos))
            if len(unread) >= SpectralEstimator.LOSS_BLOCK or step + 1 == n_iter:
                _deliver(estimators, unread)
                unread = []
    _unstack_parameters(estimators)
    return [estimator.finish() for estimator in estimators]


def nudged_fit(estimator: SpectralEstimator, X: Any, y: Any = None) -> SpectralEstimator:
    """``estimator`` fitted alone with its initial weights moved by one unit in the last
    place: how much its training amplifies a difference of rounding size, the yardstick
    for a seed trained together against its solo run."""
    estimator.start(X, y)
    with torch.no_grad():
        for weight in estimator.model_.parameters():
            weight.copy_(torch.nextafter(weight, torch.full_like(weight, float("inf"))))
    estimator.fit_steps(estimator.n_iter)
    return estimator.finish()


def _marks(estimators: Sequence[SpectralEstimator]) -> list[Any]:
    """On CUDA, an event per seed after which its next batch may be prepared (everything
    queued so far); None on the CPU."""
    return [estimator._mark() if estimator._prepare_stream is not None else None for estimator in estimators]


def _prepare_all(estimators: Sequence[SpectralEstimator], marks: list[Any]) -> list[PreparedBatch]:
    return [estimator.prepare_batch(None, None, mark) for estimator, mark in zip(estimators, marks)]


def _check_together(estimators: Sequence[SpectralEstimator], inputs: Sequence[tuple[Any, Any]]) -> None:
    if not estimators:
        raise InputError("no estimators to train together")
    if len(inputs) != len(estimators):
        raise InputError(f"{len(estimators)} estimators but {len(inputs)} training sets")
    first = estimators[0]
    reason = first._why_not_together()
    if reason is not None:
        raise InputError(f"{type(first).__name__} cannot train its seeds together: {reason}")
    shared = {k: v for k, v in first.get_params(deep=False).items() if k not in ("seed", "callback")}
    for other in estimators[1:]:
        if type(other) is not type(first):
            names = f"{type(first).__name__} and {type(other).__name__}"
            raise InputError(f"seeds trained together are of one method: {names}")
        params = other.get_params(deep=False)
        mismatched = sorted(k for k, v in params.items() if k in shared and _differs(v, shared[k]))
        if mismatched:
            raise InputError(f"seeds trained together differ only in their seed, not in {', '.join(mismatched)}")


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, (np.ndarray, list, tuple)) or isinstance(b, (np.ndarray, list, tuple)):
        return not np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    return a != b


def _stack_parameters(estimators: Sequence[SpectralEstimator]) -> dict[str, torch.Tensor]:
    """The seeds' parameters stacked along a leading seed axis; each seed's network then
    holds views of its slice, so that it sees every update (its weight averaging, ...)."""
    per_seed = [dict(estimator.model_.named_parameters()) for estimator in estimators]
    stacked = {}
    for name in per_seed[0]:
        values = [parameters[name] for parameters in per_seed]
        stacked[name] = torch.stack([value.detach() for value in values]).requires_grad_(True)
        for k, value in enumerate(values):
            value.data = stacked[name].data[k]
    return stacked


def _unstack_parameters(estimators: Sequence[SpectralEstimator]) -> None:
    """Each seed's network back to parameters of its own (a saved model holds its seed's
    weights only, not every seed's storage)."""
    for estimator in estimators:
        for value in estimator.model_.parameters():
            value.data = value.data.clone()


class _Network:
    """The network of one seed inside the batched loss: the template module called with
    that seed's slice of the stacked parameters."""

    def __init__(self, template: torch.nn.Module, params: dict[str, torch.Tensor]):
        self.template, self.params = template, params

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.template, self.params, (x,))

    def weight_matrices(self) -> list[torch.Tensor]:
        names = {id(value): name for name, value in self.template.named_parameters()}
        return [self.params[names[id(weight)]] for weight in self.template.weight_matrices()]


def _deliver(estimators: Sequence[SpectralEstimator], unread: list) -> None:
    """A block of steps' losses and logged terms, read from the device at once, handed to
    each seed's estimator as its own steps (its loss curve, its divergence check, its
    callback)."""
    values = torch.stack([torch.stack([losses, *terms.values()]) for _, losses, terms, _ in unread]).tolist()
    for k, estimator in enumerate(estimators):
        # The terms' tensors mark where the seed's values go, as in a solo fit's read.
        steps = [(step, None, {**infos[k][0], **terms}, infos[k][1]) for step, _, terms, infos in unread]
        estimator._deliver(steps, [value[k] for row in values for value in row])
