"""CUDA-graph capture of the fixed-shape parts of a training step.

A BASiS step on a GPU is bound by the host launching several hundred small kernels, not
by the kernels. A part of the step that reads nothing back to the host and keeps its
shapes from step to step (the batch graph and its components, the Chebyshev filter, the
gradient step) can be recorded once as a CUDA graph and replayed with one launch. The
decompositions between those parts (``eigh``, ``svd``) check their convergence on the
host and stay outside.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

#: Tests set this to record and replay on the CPU (by calling the function on the
#: segment's own buffers), which checks everything but the CUDA graph itself.
EMULATE = False

#: One capture at a time: the step's thread and the batch worker both record segments.
_CAPTURING = threading.Lock()

Signature = tuple[tuple[tuple[int, ...], torch.dtype, torch.device], ...]


def _signature(inputs: Sequence[torch.Tensor]) -> Signature:
    return tuple((tuple(x.shape), x.dtype, x.device) for x in inputs)


class CapturedSegment:
    """``function(*inputs) -> tuple of tensors``, replayed from a CUDA graph.

    On CUDA, the first ``warmup`` calls of each input signature (shapes, dtypes, device)
    run eagerly, so that libraries set up their handles and workspaces; the next one
    records the function into a CUDA graph over input buffers of its own, and every later
    call copies its inputs into those buffers, replays the graph on the current stream and
    returns copies of the outputs (the next replay overwrites the graph's own). Elsewhere,
    or for a function that cannot be captured (it reads the device on the host), every
    call runs the function: :attr:`failure` then says why.

    The function must be pure in its tensor inputs: anything else it reads (a network's
    weights, the optimiser's state) must live at the same address for the graph's life.
    ``emulate`` (default :data:`EMULATE`) replays on the CPU by calling the function on
    the buffers, so the buffer handling can be tested without a GPU.
    """

    def __init__(
        self, function: Callable[..., tuple[torch.Tensor, ...]], *, warmup: int = 2, emulate: bool | None = None
    ):
        self.function, self.warmup = function, warmup
        self.emulate = EMULATE if emulate is None else emulate
        self.failure: str | None = None
        self.replays = 0
        self._calls: dict[Signature, int] = {}
        self._graphs: dict[Signature, tuple[torch.cuda.CUDAGraph | None, list[torch.Tensor], tuple]] = {}

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        key = _signature(inputs)
        capturable = self.emulate or (inputs[0].device.type == "cuda" and self.failure is None)
        if not capturable:
            return self.function(*inputs)
        if key not in self._graphs:
            self._calls[key] = self._calls.get(key, 0) + 1
            if self._calls[key] <= self.warmup or not self._capture(key, inputs):
                return self.function(*inputs)
        graph, buffers, outputs = self._graphs[key]
        for buffer, value in zip(buffers, inputs):
            buffer.copy_(value)
        if graph is None:  # emulated
            outputs = self.function(*buffers)
        else:
            graph.replay()
        self.replays += 1
        return tuple(output.clone() for output in outputs)

    def _capture(self, key: Signature, inputs: Sequence[torch.Tensor]) -> bool:
        buffers = [x.clone() for x in inputs]
        if self.emulate:
            self._graphs[key] = (None, buffers, ())
            return True
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: another thread (the step's or the batch worker's) may launch
            # work or read the device while this one captures, on a stream of its own.
            stream = torch.cuda.Stream(buffers[0].device)
            with _CAPTURING, torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                outputs = self.function(*buffers)
        except RuntimeError as err:
            self.failure = f"{type(err).__name__}: {str(err).splitlines()[0]}"
            torch.cuda.synchronize()
            return False
        self._graphs[key] = (graph, buffers, tuple(outputs))
        return True
