"""CUDA-graph capture of the fixed-shape parts of a training step.

A BASiS step on a GPU is bound by the host launching several hundred small kernels, not
by the kernels. A part of the step that reads nothing back to the host and keeps its
shapes from step to step (the batch graph and its components, the Chebyshev filter, the
gradient step) can be recorded once as a CUDA graph and replayed with one launch
(:class:`CapturedSegment`). The decompositions (``eigh``, ``svd``) check their
convergence on the host and cannot be recorded: a part that calls them through
:func:`checked` is recorded as a chain of graphs split at those calls, which are run
eagerly between the graphs' replays (:class:`SegmentedCapture`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from basis.runtime import device as devices

#: One capture at a time: the step's thread and the batch worker both record segments.
_CAPTURING = threading.Lock()

Signature = tuple[tuple[tuple[int, ...], torch.dtype, torch.device], ...]


def _signature(inputs: Sequence[torch.Tensor]) -> Signature:
    return tuple((tuple(x.shape), x.dtype, x.device) for x in inputs)


class _Recorded:
    """What :class:`CapturedSegment` and :class:`SegmentedCapture` share: ``function(*inputs)
    -> tuple of tensors`` run eagerly for the first ``warmup`` calls of each input signature
    (shapes, dtypes, device), so that libraries set up their handles and workspaces, then
    recorded over input buffers of its own, then replayed: every later call copies its
    inputs into those buffers and returns copies of the outputs (the next replay overwrites
    the recording's own). The warm-up calls run on a side stream, as torch's documentation
    of graph capture asks. Elsewhere than on CUDA (unless emulated: the CUDA side emulated by
    :mod:`basis.runtime.device` records by calling the function on its buffers), or once
    recording has failed (:attr:`failure` says why), every call runs the function. :attr:`replays` counts
    the calls served by a recording, the recording call included."""

    def __init__(
        self, function: Callable[..., tuple[torch.Tensor, ...]], *, warmup: int = 2, emulate: bool | None = None
    ):
        self.function, self.warmup = function, warmup
        self.emulate = devices.emulates_capture() if emulate is None else emulate
        self.failure: str | None = None
        self.replays = 0
        self._calls: dict[Signature, int] = {}
        self._recorded: dict[Signature, tuple[Any, list[torch.Tensor], tuple]] = {}

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        key = _signature(inputs)
        capturable = self.emulate or (devices.captures_on(inputs[0].device) and self.failure is None)
        if not capturable:
            return self.function(*inputs)
        if key in self._recorded:
            recording, buffers, outputs = self._recorded[key]
            for buffer, value in zip(buffers, inputs):
                buffer.copy_(value)
            outputs = self._replay(recording, buffers, outputs)
        else:
            self._calls[key] = self._calls.get(key, 0) + 1
            if self._calls[key] <= self.warmup:
                return self._warm_up(inputs)
            recorded = self._record(key, inputs)
            if recorded is None:
                return self.function(*inputs)
            outputs = recorded
        self.replays += 1
        return tuple(output.clone() for output in outputs)

    def _warm_up(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """One eager call on a side stream that starts after, and ends before, the current
        stream's work, its outputs kept for the current stream."""
        device = inputs[0].device
        side = devices.side_stream(device)
        if side is None:  # the CPU, where capture is emulated: no streams
            return tuple(self.function(*inputs))
        current = devices.current_stream(device)
        side.wait_stream(current)
        with devices.on_stream(side):
            outputs = tuple(self.function(*inputs))
        current.wait_stream(side)
        for output in outputs:
            devices.keep_for(output, current)
        return outputs

    def _record(self, key: Signature, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        """Record the function for ``key`` into :attr:`_recorded` and return its outputs,
        holding this call's values; None, with :attr:`failure` set, where it cannot be."""
        raise NotImplementedError

    def _replay(self, recording: Any, buffers: list[torch.Tensor], outputs: tuple) -> tuple[torch.Tensor, ...]:
        """Replay ``recording`` over ``buffers`` (which hold the call's inputs)."""
        raise NotImplementedError


class CapturedSegment(_Recorded):
    """``function(*inputs) -> tuple of tensors``, replayed from one CUDA graph (see
    :class:`_Recorded` for the warm-up calls, the buffers and the copies).

    The function must be pure in its tensor inputs: anything else it reads (a network's
    weights, the optimiser's state) must live at the same address for the graph's life;
    it may not read the device on the host, or it cannot be captured. ``emulate`` (default:
    while the CUDA side is emulated) replays on the CPU by calling the function on the buffers, so the
    buffer handling can be tested without a GPU.
    """

    def _record(self, key: Signature, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        buffers = [x.clone() for x in inputs]
        if self.emulate:
            self._recorded[key] = (None, buffers, ())
            return self.function(*buffers)
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: another thread (the step's or the batch worker's) may launch
            # work or read the device while this one captures, on a stream of its own.
            stream = torch.cuda.Stream(buffers[0].device)
            with _CAPTURING, torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                outputs = tuple(self.function(*buffers))
        except RuntimeError as err:
            self.failure = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            devices.synchronize(buffers[0].device)
            return None
        self._recorded[key] = (graph, buffers, outputs)
        graph.replay()
        return outputs

    def _replay(self, recording, buffers, outputs):
        if recording is None:  # emulated
            return self.function(*buffers)
        recording.replay()
        return outputs


#: The chain being recorded on this thread, if any (see :func:`checked`).
_RECORDING = threading.local()


def checked(
    decomposition: Callable[..., Sequence[torch.Tensor]], *args: Any, **kwargs: Any
) -> tuple[torch.Tensor, ...]:
    """``decomposition(*args, **kwargs)`` as a tuple: a decomposition that checks its
    convergence on the host (``torch.linalg.svd``, ``torch.linalg.eigh``). Called this
    way, it is where a :class:`SegmentedCapture` recording on this thread ends one graph
    and starts the next; anywhere else it is a plain call."""
    recording = getattr(_RECORDING, "chain", None)
    if recording is None:
        return tuple(decomposition(*args, **kwargs))
    return recording.split(decomposition, args, kwargs)


class _Split:
    """One decomposition between two graphs of a chain: what it is called with (tensors
    the graph before it writes) and the buffers its results are copied into (which the
    graph after it reads)."""

    def __init__(self, decomposition, args, kwargs, results: tuple[torch.Tensor, ...]):
        self.decomposition, self.args, self.kwargs = decomposition, args, kwargs
        self.results = tuple(r.clone() for r in results)

    def run(self) -> None:
        for buffer, value in zip(self.results, self.decomposition(*self.args, **self.kwargs)):
            buffer.copy_(value)


class _Chain:
    """The graphs and splits of one recording, in order. Recording: each :meth:`split`
    closes the graph being recorded, replays it (so that the decomposition sees real
    values), runs the decomposition and opens the next graph. Emulated (on the CPU), the
    function is run again at each replay, and the splits must come in the recorded order
    and shapes, as the CUDA graphs would need."""

    def __init__(self, device: torch.device | None):
        self.device = device  # None: emulated
        self.graphs: list[torch.cuda.CUDAGraph] = []
        self.splits: list[_Split] = []
        self.checking: int | None = None  # emulated replay: the next split expected
        if device is not None:
            self.pool = torch.cuda.graph_pool_handle()
            self.stream = torch.cuda.Stream(device)
            self._context = None

    def open(self) -> None:
        if self.device is None:
            return
        graph = torch.cuda.CUDAGraph()
        self._context = torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local")
        self._context.__enter__()
        self.graphs.append(graph)

    def close(self, failed: bool = False) -> None:
        if self.device is None or self._context is None:
            return
        context, self._context = self._context, None
        if not failed:
            context.__exit__(None, None, None)
            self.graphs[-1].replay()
            return
        try:  # ending a capture that an error invalidated raises again
            context.__exit__(RuntimeError, None, None)
        except RuntimeError:
            pass

    def split(self, decomposition, args, kwargs) -> tuple[torch.Tensor, ...]:
        if self.checking is not None:  # emulated replay
            step = self.splits[self.checking]
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            expected = [tuple(a.shape) for a in step.args if isinstance(a, torch.Tensor)]
            if decomposition is not step.decomposition or shapes != expected:
                raise RuntimeError("a recorded chain's decompositions changed between calls")
            step.args = args
            step.run()
            self.checking += 1
            return step.results
        self.close()
        step = _Split(decomposition, args, kwargs, tuple(decomposition(*args, **kwargs)))
        self.splits.append(step)
        self.open()
        return step.results

    def replay(self) -> None:
        for graph, step in zip(self.graphs, self.splits):
            graph.replay()
            step.run()
        self.graphs[-1].replay()


class SegmentedCapture(_Recorded):
    """``function(*inputs) -> tuple of tensors`` that calls decompositions through
    :func:`checked`, replayed as a chain of CUDA graphs with the decompositions run
    eagerly between them.

    As :class:`CapturedSegment` (warm-up calls, then a recording over input buffers of its
    own, copies of the outputs), except that the recording is split at each
    decomposition: a replay launches the graph up to the first decomposition, runs it
    (its host check is the only wait) and copies its results where the next graph reads
    them, and so on. The function must make the same decompositions in the same order on
    every call of one input signature: no host read may steer it (which a graph could not
    hold anyway). The graphs share one memory pool and are always replayed in the order
    they were recorded. ``emulate`` runs the function at each replay, checking that its
    decompositions are the recorded ones, so that the buffer handling can be tested on
    the CPU.
    """

    @property
    def splits(self) -> int:
        """The decompositions between the graphs of the last chain recorded."""
        return max((len(chain.splits) for chain, _, _ in self._recorded.values()), default=0)

    def _replay(self, chain, buffers, outputs):
        if not self.emulate:
            chain.replay()
            return outputs
        chain.checking, _RECORDING.chain = 0, chain
        try:
            outputs = self.function(*buffers)
        finally:
            _RECORDING.chain = None
        if chain.checking != len(chain.splits):
            raise RuntimeError("a recorded chain's decompositions changed between calls")
        return outputs

    def _record(self, key: Signature, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        buffers = [x.clone() for x in inputs]
        chain = _Chain(None if self.emulate else buffers[0].device)
        with _CAPTURING:
            _RECORDING.chain = chain
            try:
                chain.open()
                outputs = tuple(self.function(*buffers))
                chain.close()
            except RuntimeError as err:
                if self.emulate:
                    raise
                chain.close(failed=True)
                self.failure = f"{type(err).__name__}: {str(err).splitlines()[0]}"
                devices.synchronize(buffers[0].device)
                return None
            finally:
                _RECORDING.chain = None
        self._recorded[key] = (chain, buffers, outputs)
        return outputs
