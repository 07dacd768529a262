"""The training loop every learned spectral embedding shares (:class:`TrainingLoop`): batches
prepared ahead of the gradient step, losses read from the device in blocks, steps timed by
part (:class:`StepTimer`), and the seeded draws of training nodes (:meth:`TrainingLoop._sample`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from threadpoolctl import threadpool_limits

from basis.errors import TrainingDiverged
from basis.runtime import device as devices

#: ``features_of(indices)``: the features of training nodes, on the estimator's device.
FeaturesOf = Callable[[torch.Tensor], torch.Tensor]


@contextmanager
def split_cores(device: torch.device):
    """Split this process's thread budget (torch's thread count, which ``--threads`` sets)
    between the gradient step (torch) and the worker's eigensolves (BLAS) on the CPU, so
    the two pipeline stages together use no more threads than the budget. Yields whether
    there is room for the worker at all (a budget of one thread runs the stages in turn).
    Thread settings are restored afterwards."""
    budget = torch.get_num_threads()
    if devices.is_cuda(device):
        yield True
        return
    if budget == 1:
        with threadpool_limits(limits=1, user_api="blas"):
            yield False
        return
    torch_threads = budget // 2
    torch.set_num_threads(torch_threads)
    try:
        with threadpool_limits(limits=budget - torch_threads, user_api="blas"):
            yield True
    finally:
        torch.set_num_threads(budget)


def _tensors(content: Any) -> list[torch.Tensor]:
    """The tensors in a batch's content (nested tuples, lists and dicts)."""
    if isinstance(content, torch.Tensor):
        return [content]
    if isinstance(content, dict):
        content = list(content.values())
    if isinstance(content, (tuple, list)):
        return [tensor for item in content for tensor in _tensors(item)]
    return []


def run_now(function: Callable, *args: Any) -> Future:
    """``function(*args)`` run at once, as a finished future (the worker's stand-in)."""
    future: Future = Future()
    future.set_result(function(*args))
    return future


def _readings(steps: list) -> torch.Tensor:
    """Steps' losses, each followed by the measures its info left on the device (0-d
    tensors, e.g. a loss's terms), as one float64 vector: one read for all of them.
    (float32 values are exact in float64, so they read as they would alone.)"""
    return torch.cat(
        [
            torch.stack([loss.double(), *(v.detach().double() for v in info.values() if isinstance(v, torch.Tensor))])
            for _, loss, info, _ in steps
        ]
    )


def _read_back(info: dict[str, Any], values: Iterator[float]) -> dict[str, Any]:
    """``info`` with each measure it left on the device replaced by its value, taken in
    order from ``values`` (as :func:`_readings` laid them out)."""
    return {k: next(values) if isinstance(v, torch.Tensor) else v for k, v in info.items()}


class StepTimer:
    """Time per named part of a training step, in milliseconds: host wall time on the CPU;
    on CUDA, the device time between two CUDA events around the part, which costs the host
    no wait (the events are read by :meth:`read`, after the step's values have been read)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.ms: dict[str, float] = {}
        self._events: list[tuple[str, Any, Any]] = []

    @contextmanager
    def __call__(self, part: str):
        if devices.is_cuda(self.device):
            # On the device's current stream (the job's GPU, not device 0's).
            start = devices.record_event(self.device, timing=True)
            yield
            self._events.append((part, start, devices.record_event(self.device, timing=True)))
            return
        start_time = time.perf_counter()
        yield
        self.ms[f"ms_{part}"] = self.ms.get(f"ms_{part}", 0.0) + (time.perf_counter() - start_time) * 1e3

    def include(self, other: StepTimer) -> None:
        """Count ``other``'s parts as this timer's too (a step's part shared by several
        timers, such as the gradient step of seeds trained together)."""
        for part, ms in other.ms.items():
            self.ms[part] = self.ms.get(part, 0.0) + ms
        self._events += other._events

    def read(self) -> dict[str, float]:
        """Milliseconds per part (on CUDA, waits for the parts' end events)."""
        for part, start, end in self._events:
            end.synchronize()
            self.ms[f"ms_{part}"] = self.ms.get(f"ms_{part}", 0.0) + start.elapsed_time(end)
        self._events.clear()
        return self.ms


@dataclass
class PreparedBatch:
    """A batch from :meth:`SpectralEstimator.prepare_batch`: the method's data for one
    step and the time spent preparing it."""

    content: Any
    timer: StepTimer
    #: The values of the ``riders`` handed to :meth:`SpectralEstimator.prepare_batch`.
    rider_values: list[float] | None = None
    #: On CUDA, the event after which the batch's tensors are ready (see prepare_batch).
    ready: Any = None


class TrainingLoop:
    """The shared training loop of :class:`~basis.estimators.base.SpectralEstimator`: batches
    prepared ahead of the gradient step (a worker thread on the CPU, a stream of their own on
    CUDA), losses read from the device in blocks, and one step at a time for a loop of one's
    own (Algorithm 2's). A method supplies the hooks it calls (``_next_batch``,
    ``_batch_loss``, ...; see :class:`~basis.estimators.base.SpectralEstimator`)."""

    def fit_steps(self, n_steps: int) -> None:
        """``n_steps`` gradient steps after :meth:`start`, pipelined as in :meth:`fit`."""
        # The next batch and its analytic target do not depend on the network, so a
        # worker thread prepares batch t+1 while the main thread steps on batch t
        # (LAPACK and torch release the GIL). Draws happen in the same order either way,
        # so a one-thread budget, which prepares each batch in turn, gives the same run.
        # Losses stay on the device; every LOSS_BLOCK steps they ride with the next
        # batch's preparation, which reads them in the transfer it makes anyway, and the
        # callbacks for those steps run when they are back.
        unread: list[tuple[int, torch.Tensor, dict[str, float], PreparedBatch]] = []
        riding: list[tuple[int, torch.Tensor, dict[str, float], PreparedBatch]] = []
        first = len(self.loss_curve_)
        with split_cores(self.device_) as pipelined, ThreadPoolExecutor(max_workers=1) as worker:
            prepare = worker.submit if pipelined else run_now
            pending = prepare(self.prepare_batch)
            for step in range(n_steps):
                start = time.perf_counter()
                batch = pending.result()
                if batch.rider_values is not None:
                    self._deliver(riding, batch.rider_values)
                    riding = []
                if step + 1 < n_steps:
                    riders = None
                    if len(unread) >= self.LOSS_BLOCK:
                        riding, unread = unread, []
                        riders = _readings(riding)
                    after = self._mark() if self._prepare_stream is not None else None
                    pending = prepare(self.prepare_batch, None, riders, after)
                loss, info = self._train_step(batch)
                info["ms_step"] = (time.perf_counter() - start) * 1e3
                unread.append((first + step, loss, info, batch))
        if unread:
            self._deliver(unread, _readings(unread).tolist())

    def _check_loss(self, step: int, value: float) -> None:
        """Stop at once, with the step and the likely cause, where the loss stops being a
        number (training has diverged; nothing after it would mean anything)."""
        if not math.isfinite(value):
            raise TrainingDiverged(
                f"training diverged: the loss is {value} at step {step} of {type(self).__name__}"
                f" (lr={getattr(self, 'lr', '?')}); lower lr or check the inputs' scale"
            )

    #: Steps whose losses are read from the device together, by :meth:`fit_steps`.
    LOSS_BLOCK = 50

    def _deliver(self, steps: list, values: list[float]) -> None:
        """Record a block of steps' losses, read from the device, and call back for each.
        ``values`` holds each step's loss followed by the values of the measures its info
        left on the device (see :func:`_readings`), step after step."""
        values_in_order = iter(values)
        for step, _, info, batch in steps:
            value = next(values_in_order)
            info = _read_back(info, values_in_order)
            self._check_loss(step, value)
            self.loss_curve_.append(value)
            if self.callback is not None:
                self.callback(step, {"loss": value, **info, **batch.timer.read()})

    def _training_features(self, indices: torch.Tensor) -> torch.Tensor:
        return self._training_data[indices.to(self._training_data.device)]

    def prepare_batch(
        self,
        features_of: FeaturesOf | None = None,
        riders: torch.Tensor | None = None,
        after: Any = None,
    ) -> PreparedBatch:
        """Draw the next batch and compute everything about it that does not need the
        network (graph, analytic target, alignment), timed by part. ``features_of``
        gives the features of training nodes by index (default: the rows of the
        training data; Algorithm 2 passes the current features). Safe to run in a
        worker thread while :meth:`step` runs on the previous batch. ``riders``, a 1-D
        tensor of values to read from the device (the fit loop's losses), are read in the
        method's own read of the batch where it makes one (BASiS), or else on their own, and
        come back as ``rider_values``.

        On CUDA the batch is prepared on a stream of its own, so that it overlaps with the
        gradient step on the default stream: it starts after ``after`` (a CUDA event the
        caller recorded; by default, everything queued so far on the caller's stream) and
        :meth:`step` waits for its ``ready`` event."""
        timer = StepTimer(self.device_)
        n_train = len(self._training_data)
        self._riders, self._rider_values = riders, None
        stream = self._prepare_stream
        if stream is None:
            content = self._next_batch(features_of or self._training_features, n_train, timer)
            ready = None
        else:
            after = after if after is not None else self._mark()
            with devices.on_stream(stream):
                stream.wait_event(after)
                if riders is not None:
                    devices.keep_for(riders, stream)
                content = self._next_batch(features_of or self._training_features, n_train, timer)
                ready = self._mark()
        if riders is not None and self._rider_values is None:
            self._rider_values = riders.tolist()
        return PreparedBatch(content, timer, self._rider_values, ready)

    def _mark(self) -> Any:
        """A CUDA event recorded now on the current stream."""
        return devices.record_event(self.device_)

    def _take_riders(self) -> torch.Tensor | None:
        """For a method's :meth:`_next_batch`: the riders to read with its own read (once);
        it hands their values back to :meth:`_riders_read`."""
        riders, self._riders = getattr(self, "_riders", None), None
        return riders

    def _riders_read(self, values: list[float]) -> None:
        self._rider_values = values

    def step(self, batch: PreparedBatch | None = None) -> dict[str, float]:
        """One gradient step on ``batch`` (from :meth:`prepare_batch`; drawn now when
        None). Returns the loss, the method's own measures and milliseconds per part."""
        start = time.perf_counter()
        batch = batch if batch is not None else self.prepare_batch()
        loss, info = self._train_step(batch)
        values = iter(_readings([(None, loss, info, batch)]).tolist())
        value = next(values)
        info = _read_back(info, values)
        self._check_loss(len(self.loss_curve_), value)
        self.loss_curve_.append(value)
        ms_step = (time.perf_counter() - start) * 1e3
        return {"loss": value, **info, **batch.timer.read(), "ms_step": ms_step}

    def _train_step(self, batch: PreparedBatch) -> tuple[torch.Tensor, dict[str, float | torch.Tensor]]:
        """The gradient step; the loss is left on the device (see :meth:`step` and :meth:`fit`)."""
        self._await(batch)
        self.model_.train()
        if self._gradient_step is not None:
            tensors, info = self._loss_tensors(batch.content)
            with batch.timer("gradient"):
                (loss,) = self._gradient_step(*tensors)
        else:
            loss, info = self._batch_loss(batch.content, batch.timer)
            with batch.timer("gradient"):
                self.optimizer_.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer_.step()
        self.n_steps_ += 1
        self._after_step()
        return loss.detach(), info

    def _await(self, batch: PreparedBatch) -> Any:
        """``batch``'s content, ready for the current stream: one prepared on a stream of
        its own (CUDA) is waited for, and its memory kept until this stream is done with it."""
        if batch.ready is not None:
            main = devices.current_stream(self.device_)
            main.wait_event(batch.ready)
            for tensor in _tensors(batch.content):
                devices.keep_for(tensor, main)
        return batch.content

    def _gradient_step_on(self, *tensors: torch.Tensor) -> tuple[torch.Tensor]:
        """The gradient step as a function of the loss's tensors, which
        :class:`~basis.runtime.capture.CapturedSegment` records: the gradients it makes and the
        optimiser's state keep their addresses from one replay to the next."""
        self.optimizer_.zero_grad(set_to_none=True)
        loss = self._loss_of(*tensors)
        loss.backward()
        self.optimizer_.step()
        return (loss.detach(),)

    def _sample(self, n: int, size: int, exclude: torch.Tensor | None = None, *, on_host: bool = False) -> torch.Tensor:
        """``size`` distinct random indices of [0, n), avoiding ``exclude``, on the device
        of the training data: drawn there on CUDA (its own generator, seeded by ``seed``),
        from ``generator_`` on the CPU. ``on_host`` draws from ``generator_`` on the host
        whatever the device, for a batch that indexes a graph held on the host (SpecNet2's
        neighbour gradient). The pool of allowed indices is built once per ``exclude``
        (BASiS's anchors), so a step does no O(n) host work."""
        if on_host or not devices.is_cuda(self.device_):
            generator, device = self.generator_, None
        else:
            if getattr(self, "device_generator_", None) is None:
                self.device_generator_ = devices.generator(self.device_, self.seed)
            generator, device = self.device_generator_, devices.draw_device(self.device_)
        if exclude is None:
            return torch.randperm(n, generator=generator, device=device)[:size]
        cached = getattr(self, "_sample_pool", None)
        if cached is None or cached[0] is not exclude or cached[1] != n:
            allowed = torch.ones(n, dtype=torch.bool)
            allowed[exclude.cpu()] = False
            self._sample_pool = (exclude, n, allowed.nonzero().squeeze(1).to(device or "cpu"))
        pool = self._sample_pool[2]
        return pool[torch.randperm(len(pool), generator=generator, device=device)[:size]]
