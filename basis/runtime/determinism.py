"""Find what would make a CUDA run differ from itself, on any device (the CPU included).

CUDA kernels that accumulate floating-point values into slots chosen by an index
(``index_add_``, ``scatter_add_``, ``scatter_reduce`` and ``index_reduce`` with a sum, mean
or product, ``index_put_`` and ``put_`` with ``accumulate``, ``bincount`` with weights) add
with atomics, in whatever order the GPU's threads reach each slot. A slot that receives
three or more addends can then round differently from one run to the next, most of all
while another process shares the GPU. Two addends cannot (IEEE addition commutes), and
order-free reductions (max, min) never do. On the CPU the same ops add in index order, so
the difference cannot be seen there, only counted: :class:`OrderDependentSums` counts,
while it is active, the calls whose index sends three or more addends to one slot (the
slot's own value is one where the op adds to it), by op name. Convolutions are counted too
(forward and backward) unless cuDNN is held to its deterministic algorithms, as
:func:`fixed_order_convolutions` holds it: its fastest ones, and any that ``benchmark`` mode
picks by timing, may add by atomics.

Like :class:`~basis.runtime.syncs.HostSyncCounter`, the mode is thread-local: count a training loop
with one torch thread, where BASiS runs its pipeline's stages in turn on the calling thread.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

#: The order-dependent reductions of ``scatter_reduce`` and ``index_reduce``.
_SUMS = ("sum", "mean", "prod")


class OrderDependentSums(TorchDispatchMode):
    """``with OrderDependentSums() as sums: ...`` then ``sums.counts``: by op name, the calls
    that would sum three or more floating-point addends into one slot in an order CUDA does
    not fix (see the module docs)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = func.overloadpacket
        if _most_addends(op, args, kwargs) >= 3 or (op in _CONVOLUTIONS and not _convolutions_in_fixed_order()):
            self.counts[op.__name__] += 1
        return func(*args, **kwargs)


_CONVOLUTIONS = (aten.convolution, aten.convolution_backward)


def _convolutions_in_fixed_order() -> bool:
    return torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


@contextlib.contextmanager
def fixed_order_convolutions() -> Iterator[None]:
    """Within the block, cuDNN uses only its deterministic convolution algorithms and picks
    them without timing (``torch.backends.cudnn.deterministic``, no ``benchmark``), so that
    a network's features and gradients are the same on every run; the settings are
    restored after it. Nothing changes on the CPU."""
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


def _argument(args: Sequence, kwargs: dict, position: int, name: str, default: Any) -> Any:
    return args[position] if len(args) > position else kwargs.get(name, default)


def _most_addends(op, args: Sequence, kwargs: dict) -> int:
    """The most addends any one slot receives from this call of ``op`` (0 where it sums
    nothing in an order-dependent way)."""
    if op in (aten.index_add, aten.index_add_):
        target, _, index = args[:3]
        return _most_often(index) + 1 if target.is_floating_point() else 0
    if op in (aten.index_reduce, aten.index_reduce_):
        target, _, index, _, reduce = args[:5]
        if not target.is_floating_point() or reduce not in _SUMS:
            return 0
        return _most_often(index) + bool(_argument(args, kwargs, 5, "include_self", True))
    if op in (aten.scatter_add, aten.scatter_add_):
        target, dim, index = args[:3]
        return _most_per_slot(target, dim, index) + 1 if target.is_floating_point() else 0
    if op in (aten.scatter_reduce, aten.scatter_reduce_):
        target, dim, index = args[:3]
        reduce = _argument(args, kwargs, 4, "reduce", None)
        if not target.is_floating_point() or reduce not in _SUMS:
            return 0
        return _most_per_slot(target, dim, index) + bool(_argument(args, kwargs, 5, "include_self", True))
    if op in (aten.index_put, aten.index_put_, aten._index_put_impl_):
        target, indices = args[:2]
        if not target.is_floating_point() or not _argument(args, kwargs, 3, "accumulate", False):
            return 0
        return _most_indexed(target, indices) + 1
    if op in (aten.put, aten.put_):
        target, index = args[:2]
        if not target.is_floating_point() or not _argument(args, kwargs, 3, "accumulate", False):
            return 0
        return _most_often(index.reshape(-1) % max(target.numel(), 1)) + 1
    if op is aten.bincount:
        weights = _argument(args, kwargs, 1, "weights", None)
        return _most_often(args[0]) if weights is not None and weights.is_floating_point() else 0
    return 0


def _most_often(keys: torch.Tensor) -> int:
    """How often the most frequent value of the integer tensor ``keys`` occurs."""
    if keys.numel() == 0:
        return 0
    keys = keys.reshape(-1)
    return int(torch.bincount(keys - keys.min()).max())


def _most_per_slot(target: torch.Tensor, dim: int, index: torch.Tensor) -> int:
    """The most addends a scatter along ``dim`` sends to one slot of ``target``: each entry of
    ``index`` goes to its own position with the ``dim`` coordinate replaced by its value."""
    if index.dim() == 0:
        return int(index.numel() > 0)
    dim %= index.dim()
    rows = index.movedim(dim, -1).reshape(-1, index.shape[dim])
    positions = torch.arange(rows.shape[0], device=index.device).unsqueeze(1)
    return _most_often(rows % target.shape[dim] + positions * target.shape[dim])


def _most_indexed(target: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> int:
    """The most addends ``target[indices] += values`` sends to one slot: the slots are told
    apart by the advanced indices alone (a full slice adds one addend per slot it spans)."""
    parts, sizes, dim = [], [], 0
    for index in indices:
        if index is None:
            dim += 1
            continue
        if index.dtype == torch.bool:
            parts.extend(index.nonzero().unbind(1))
            sizes.extend(target.shape[dim : dim + index.dim()])
            dim += index.dim()
        else:
            parts.append(index)
            sizes.append(target.shape[dim])
            dim += 1
    if not parts:
        return 1
    key = torch.zeros((), dtype=torch.int64, device=target.device)
    for part, size in zip(torch.broadcast_tensors(*parts), sizes):
        key = key * size + part % size
    return _most_often(key)
