"""Count what would make a CUDA host wait for its device, on any device (the CPU included).

A GPU step is fast only if the host queues work without waiting for results. Each of these
waits on CUDA: reading a value into Python (``.item()``, ``float(t)``, ``bool(t)``: the
``_local_scalar_dense`` op), ops whose output shape depends on the data (``nonzero``,
boolean-mask indexing and ``masked_select``), copies to the host (``.cpu()``, ``.to("cpu")``),
and handing a tensor to numpy or scipy (``.numpy()``, ``np.asarray(t)``, ``.tolist()``).
:class:`HostSyncCounter` counts them by name while it is active, through a
``TorchDispatchMode`` (for the ops) and by wrapping the tensor methods that leave torch. On
the CPU none of these costs a wait, which is why they must be counted rather than timed.

Two things look like waits on the CPU but are none on CUDA, and are kept apart:

- the step counters of a non-fused, non-capturable optimizer (``torch.optim.Adam``'s default),
  which torch keeps on the host on every device: their ``.item()`` inside ``optimizer.step``
  is counted under ``exempt`` (the estimators use :class:`basis.runtime.optim.Adam` on the CPU and
  the fused Adam on CUDA, neither of which reads one);
- the decompositions that torch documents to synchronise a CUDA device with the host to
  check their convergence (``svd``, ``eigh``, ``lstsq``): these are real waits on CUDA, but
  of another kind (no value is read), counted under ``linalg_checks`` and not in ``total``.

The mode is thread-local: count a training loop with one torch thread, where BASiS runs its
pipeline's stages in turn on the calling thread.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

#: Ops that read a device value into the host, or whose output size depends on the data
#: (``_linalg_check_errors``: ``inv``, ``solve`` and ``cholesky`` read their LAPACK info
#: code back to raise on a singular matrix; their ``_ex`` forms do not).
_DATA_DEPENDENT = {
    aten._local_scalar_dense.default: "item",
    aten._linalg_check_errors.default: "linalg_error_check",
    aten.nonzero.default: "nonzero",
    aten.masked_select.default: "masked_select",
}
#: Decompositions that check their convergence on the host on CUDA (torch's docs: "this
#: function synchronizes that device with the CPU").
_LINALG_CHECKED = {
    aten._linalg_svd.default: "svd",
    aten._linalg_eigh.default: "eigh",
    aten.linalg_lstsq.default: "lstsq",
}
#: Tensor methods that hand data to numpy or Python, or to the host (each a device-to-host
#: copy on CUDA; ``cpu`` is counted here only where it is a no-op, on CPU tensors, since on
#: CUDA its copy is counted as an op).
_LEAVING_TORCH = ("numpy", "tolist", "cpu")


class HostSyncCounter(TorchDispatchMode):
    """``with HostSyncCounter() as syncs: ...`` then ``syncs.counts`` (a Counter by kind),
    ``syncs.total``, ``syncs.linalg_checks`` and ``syncs.exempt`` (see the module docs), and
    ``syncs.ops``: every op dispatched, what a CUDA host launches (views included) one by one."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.linalg_checks: Counter[str] = Counter()
        self.exempt: Counter[str] = Counter()
        self._originals: dict[str, Any] = {}
        self._hooks: list[Any] = []
        self._in_host_counted_optimizer = False
        self.ops = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        if func in _LINALG_CHECKED:
            self.linalg_checks[_LINALG_CHECKED[func]] += 1
            return func(*args, **kwargs)
        kind = _DATA_DEPENDENT.get(func)
        if kind == "item" and self._in_host_counted_optimizer and args[0].device.type == "cpu":
            self.exempt["optimizer_step_counter"] += 1
            return func(*args, **kwargs)
        if kind is None and func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default):
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None):
                kind = "boolean_mask"
        if kind is None and func is aten._to_copy.default and _to_host(args[0], kwargs):
            kind = "copy_to_host"
        if kind is not None:
            self.counts[kind] += 1
        return func(*args, **kwargs)

    def __enter__(self) -> "HostSyncCounter":
        for name in _LEAVING_TORCH:
            original = getattr(torch.Tensor, name)
            self._originals[name] = original
            setattr(torch.Tensor, name, _counted(original, name, self.counts))
        self._hooks = [
            register_optimizer_step_pre_hook(self._optimizer_starts),
            register_optimizer_step_post_hook(self._optimizer_ends),
        ]
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        self._originals.clear()
        for hook in self._hooks:
            hook.remove()
        return super().__exit__(*exc)

    def _optimizer_starts(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self._in_host_counted_optimizer = not any(
            group.get("fused") or group.get("capturable") for group in optimizer.param_groups
        )

    def _optimizer_ends(self, *_: Any) -> None:
        self._in_host_counted_optimizer = False


def _to_host(tensor: torch.Tensor, kwargs: dict) -> bool:
    target = kwargs.get("device")
    return target is not None and torch.device(target).type == "cpu" and tensor.device.type != "cpu"


def _counted(method, name: str, counts: Counter):
    def wrapper(self, *args, **kwargs):
        if name != "cpu" or self.device.type == "cpu":
            counts["copy_to_host" if name == "cpu" else name] += 1
        return method(self, *args, **kwargs)

    return wrapper
