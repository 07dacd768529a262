"""The device policy: every decision that depends on the device a job runs on.

Nothing outside :mod:`basis.runtime` tests a device's type; it asks here which side of a
decision to take (:func:`is_cuda`) and gets the device's streams, events, generators,
memory figures and defaults from here. That makes the CUDA side of the whole library
runnable without a GPU: under :func:`emulating_cuda` (or ``BASIS_EMULATE_CUDA=N`` in the
environment, N the number of devices to report) every CPU tensor takes the CUDA side of
every decision: batches are prepared on a stand-in side stream, steps are timed with
stand-in events, the optimiser is ``torch.optim.Adam(fused=True)`` as CUDA runs it, the
solvers and references take their GPU defaults, step parts are captured (emulated), and
draws come from a device generator of their own. The stand-ins log which device index
each call was for (:attr:`StandInCuda.calls`), so that a test can see a job bound to
``cuda:1`` touch no other device.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from basis.errors import InputError

DeviceLike = torch.device | str | torch.Tensor


class StandInCuda:
    """The CUDA runtime as the emulated CUDA side sees it: ``devices`` GPUs with the free
    memory ``free`` (bytes, one per device), the bound device (:meth:`bind`), and a log of
    the calls made for each device index (``calls``: ``(what, index)`` pairs)."""

    def __init__(self, devices: int = 1, free: Sequence[int] | None = None):
        self.devices = devices
        self.free = list(free) if free is not None else [8 * 2**30] * devices
        self.bound = 0
        self.calls: list[tuple[str, int]] = []
        self.peak: dict[int, int] = {}
        self._lock = threading.Lock()
        self._current = threading.local()

    def log(self, what: str, index: int | None = None) -> int:
        index = self.bound if index is None else index
        with self._lock:
            self.calls.append((what, index))
        return index

    def current_stream(self) -> StandInStream:
        stream = getattr(self._current, "stream", None)
        return stream if stream is not None else StandInStream(self, self.bound, default=True)


class StandInStream:
    """A CUDA stream on the emulated side: work runs at once on the host, so waiting on
    an event or another stream only checks that the event was recorded."""

    def __init__(self, cuda: StandInCuda, index: int, default: bool = False):
        self.cuda, self.index, self.default = cuda, index, default

    def wait_event(self, event: StandInEvent) -> None:
        if event.time is None:
            raise RuntimeError("a stream waits on an event that was never recorded")
        self.cuda.log("wait_event", self.index)

    def wait_stream(self, other: StandInStream) -> None:
        self.cuda.log("wait_stream", self.index)


class StandInEvent:
    """A CUDA event on the emulated side: the host's clock when it was recorded."""

    def __init__(self, cuda: StandInCuda, enable_timing: bool = False):
        self.cuda, self.enable_timing = cuda, enable_timing
        self.time: float | None = None
        self.index: int | None = None

    def record(self, stream: StandInStream | None = None) -> None:
        stream = stream or self.cuda.current_stream()
        self.time, self.index = time.perf_counter(), self.cuda.log("record_event", stream.index)

    def synchronize(self) -> None:
        self.cuda.log("event_synchronize", self.index)

    def elapsed_time(self, end: StandInEvent) -> float:
        if not (self.enable_timing and end.enable_timing) or self.time is None or end.time is None:
            raise RuntimeError("elapsed_time needs two recorded timing events")
        return (end.time - self.time) * 1e3


def _emulated_from_environment() -> StandInCuda | None:
    value = os.environ.get("BASIS_EMULATE_CUDA", "")
    if not value or value == "0":
        return None
    if not value.isdigit():
        raise InputError(f"BASIS_EMULATE_CUDA must be a number of devices, got {value!r}")
    return StandInCuda(int(value))


#: The emulated CUDA runtime while the CUDA side is emulated (see the module docs).
_EMULATED: StandInCuda | None = _emulated_from_environment()


def emulated() -> StandInCuda | None:
    """The emulated CUDA runtime, or None when the real device's side is taken."""
    return _EMULATED


@contextmanager
def emulating_cuda(devices: int = 1, free: Sequence[int] | None = None) -> Iterator[StandInCuda]:
    """Take the CUDA side of every decision for CPU tensors inside the block (tests)."""
    global _EMULATED
    previous, _EMULATED = _EMULATED, StandInCuda(devices, free)
    try:
        yield _EMULATED
    finally:
        _EMULATED = previous


def _type(device: DeviceLike) -> str:
    if isinstance(device, torch.Tensor):
        return device.device.type
    return torch.device(device).type


def is_cuda(device: DeviceLike) -> bool:
    """Whether work on ``device`` (a device, its name, or a tensor on it) takes the CUDA
    side of a decision: a CUDA device, or any device while the CUDA side is emulated."""
    return _EMULATED is not None or _type(device) == "cuda"


def _real_cuda(device: DeviceLike) -> bool:
    return _EMULATED is None and _type(device) == "cuda"


# -- which device ------------------------------------------------------------------------
def resolve_device(device: str) -> torch.device:
    """``"auto"`` is the GPU with the most free memory when there is one (so that jobs
    started side by side on a box with several GPUs spread over them), else the CPU;
    anything else is passed to torch and must exist. A GPU chosen or named becomes the
    process's current device (:func:`bind`), so that streams, events, graphs and memory
    figures taken without a device are its. Emulated, the tensors stay on the CPU."""
    if device == "auto":
        count = device_count()
        if count == 0:
            return torch.device("cpu")
        free = free_memory_per_device()
        resolved = torch.device("cuda", max(range(count), key=free.__getitem__))
    else:
        try:
            resolved = torch.device(device)
        except RuntimeError as err:
            raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
        if resolved.type not in ("cpu", "cuda"):
            raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        if resolved.type == "cuda":
            available = device_count()
            if available == 0 or (resolved.index or 0) >= available:
                raise InputError(
                    f"device {device!r} was asked for, but torch sees {available} CUDA device(s);"
                    " use --device cpu, or auto to take a GPU when there is one"
                )
    if resolved.type == "cuda":
        bind(resolved)
        if _EMULATED is not None:
            return torch.device("cpu")
    return resolved


def device_count() -> int:
    """The GPUs this process may use (the emulated ones while emulating)."""
    if _EMULATED is not None:
        return _EMULATED.devices
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def bind(device: torch.device) -> None:
    """Make the GPU ``device`` the current one (``torch.cuda.set_device``)."""
    index = device.index or 0
    if _EMULATED is not None:
        _EMULATED.bound = index
        _EMULATED.log("bind", index)
        return
    torch.cuda.set_device(index)


def free_memory_per_device() -> list[int]:
    """Free bytes of each visible GPU, from NVML's view (``nvidia-smi``), which opens no
    CUDA context; only where it cannot be asked, from each device's CUDA context."""
    if _EMULATED is not None:
        return list(_EMULATED.free)
    count = torch.cuda.device_count()
    free = _free_memory_from_smi(count)
    if free is None:
        free = [torch.cuda.mem_get_info(index)[0] for index in range(count)]
    return free


def _free_memory_from_smi(count: int) -> list[int] | None:
    """Free bytes per visible device in torch's numbering (``CUDA_VISIBLE_DEVICES`` by
    index or UUID), or None where ``nvidia-smi`` is missing or its answer does not fit."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        answer = subprocess.run(
            [smi, "--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return free_memory_by_visibility(answer, os.environ.get("CUDA_VISIBLE_DEVICES"), count)


def free_memory_by_visibility(answer: str, visible: str | None, count: int) -> list[int] | None:
    """``nvidia-smi``'s ``index, uuid, memory.free`` (MiB) lines as free bytes per device
    in torch's numbering, which ``visible`` (``CUDA_VISIBLE_DEVICES``) reorders."""
    by_index, by_uuid = {}, {}
    for line in answer.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
            return None
        by_index[parts[0]] = by_uuid[parts[1]] = int(parts[2]) * 2**20
    order = list(by_index) if visible is None else [name.strip() for name in visible.split(",") if name.strip()]
    free = []
    for name in order[:count]:
        if name in by_index:
            match = by_index[name]
        else:  # a UUID, or its leading part, as CUDA_VISIBLE_DEVICES allows
            match = next((v for uuid, v in by_uuid.items() if uuid.startswith(name)), None)
        if match is None:
            return None
        free.append(match)
    return free if len(free) == count else None


# -- streams, events, synchronisation ----------------------------------------------------
def side_stream(device: torch.device) -> Any:
    """A stream of its own on ``device`` for work that overlaps the current stream's (a
    batch's preparation), or None on the CPU, where such work runs in a thread."""
    if _EMULATED is not None:
        return StandInStream(_EMULATED, _EMULATED.log("side_stream"))
    return torch.cuda.Stream(device) if _type(device) == "cuda" else None


def current_stream(device: torch.device) -> Any:
    """The stream work on ``device`` is queued on now."""
    if _EMULATED is not None:
        return _EMULATED.current_stream()
    return torch.cuda.current_stream(device)


def on_stream(stream: Any):
    """A block whose work is queued on ``stream`` (from :func:`side_stream`)."""
    if isinstance(stream, StandInStream):
        return _stand_in_stream(stream)
    return torch.cuda.stream(stream)


@contextmanager
def _stand_in_stream(stream: StandInStream) -> Iterator[None]:
    local = stream.cuda._current
    previous, local.stream = getattr(local, "stream", None), stream
    try:
        yield
    finally:
        local.stream = previous


def record_event(device: torch.device, *, timing: bool = False) -> Any:
    """An event recorded now on ``device``'s current stream."""
    if _EMULATED is not None:
        event = StandInEvent(_EMULATED, enable_timing=timing)
        event.record()
        return event
    event = torch.cuda.Event(enable_timing=timing)
    event.record(torch.cuda.current_stream(device))
    return event


def keep_for(tensor: torch.Tensor, stream: Any) -> None:
    """Keep ``tensor``'s memory until the work queued on ``stream`` so far is done (it was
    made on another stream)."""
    if isinstance(stream, StandInStream):
        stream.cuda.log("record_stream", stream.index)
        return
    tensor.record_stream(stream)


def synchronize(device: DeviceLike) -> None:
    """Wait until ``device`` has done its queued work (a no-op on the CPU)."""
    if _EMULATED is not None:
        _EMULATED.log("synchronize")
    elif _type(device) == "cuda":
        torch.cuda.synchronize(device if not isinstance(device, torch.Tensor) else device.device)


def generator(device: torch.device, seed: int) -> torch.Generator:
    """A generator seeded with ``seed`` that draws on ``device`` (the emulated side: on the
    CPU, a generator of its own, as a GPU's is)."""
    if _EMULATED is not None:
        return torch.Generator().manual_seed(seed)
    return torch.Generator(device=device).manual_seed(seed)


@contextmanager
def global_draws_seeded(device: torch.device, seed: int) -> Iterator[None]:
    """torch's global generators seeded with ``seed`` inside the block and as they were after
    it, the CPU's and, on a real CUDA device, that device's: for code that draws from them
    and takes no generator (a third-party package's training)."""
    with torch.random.fork_rng(devices=[torch.device(device).index or 0] if _real_cuda(device) else []):
        torch.manual_seed(seed)
        yield


def draw_device(device: torch.device) -> torch.device | None:
    """Where draws for ``device`` are made: on the device itself on the CUDA side (no index
    crosses from the host per step), None (the host) on the CPU."""
    if _EMULATED is not None or _type(device) != "cuda":
        return None
    return device


# -- memory ------------------------------------------------------------------------------
def free_memory(device: torch.device) -> int | None:
    """Free bytes on the GPU ``device``; None on the CPU."""
    if _EMULATED is not None:
        return _EMULATED.free[_EMULATED.log("mem_get_info")]
    if _type(device) != "cuda":
        return None
    return torch.cuda.mem_get_info(device)[0]


def reset_peak_memory(device: torch.device) -> None:
    """Start counting ``device``'s peak allocated memory afresh."""
    if _EMULATED is not None:
        _EMULATED.peak[_EMULATED.log("reset_peak_memory")] = 0
    elif _type(device) == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """``device``'s peak allocated memory since :func:`reset_peak_memory`, in MiB (0 on the CPU)."""
    if _EMULATED is not None:
        return _EMULATED.peak.get(_EMULATED.log("max_memory_allocated"), 0) / 2**20
    if _type(device) != "cuda":
        return 0.0
    return torch.cuda.max_memory_allocated(device) / 2**20


def device_name(device: torch.device) -> str:
    """The GPU's name, or ``cpu``."""
    if _EMULATED is not None:
        return f"emulated cuda:{_EMULATED.log('get_device_name')}"
    return torch.cuda.get_device_name(device) if _type(device) == "cuda" else "cpu"


def warn_on_syncs(device: torch.device):
    """A block in which CUDA warns of every host wait (``set_sync_debug_mode``)."""
    if not _real_cuda(device):
        return nullcontext()
    return _sync_debug()


@contextmanager
def _sync_debug() -> Iterator[None]:
    torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


# -- what each side does by default ------------------------------------------------------
def captures_on(device: torch.device) -> bool:
    """Whether a step's fixed-shape parts can be replayed from CUDA graphs on ``device``
    (the emulated side replays them by calling the function on its buffers)."""
    return is_cuda(device)


def emulates_capture() -> bool:
    """Whether a capture records by calling the function (no CUDA graph can be made)."""
    return _EMULATED is not None


def subspace_by_default(device: torch.device) -> bool:
    """BASiS's ``eigensolver="auto"``: the subspace iteration on a GPU (no host check per
    step), LAPACK's subset driver on the CPU."""
    return is_cuda(device)


def sparse_solver_by_default(device: DeviceLike) -> str:
    """The reference's ``eigensolver="auto"``: ``chebyshev`` on the device on a GPU,
    ``arpack`` on the host on the CPU."""
    return "chebyshev" if is_cuda(device) else "arpack"


def seeds_together_by_default(device: DeviceLike) -> bool:
    """``--seeds-together auto``: on a GPU, where one launch serves every seed; the CPU
    keeps each seed's solo path, bit for bit."""
    return is_cuda(device)


def host_eigensolve(device: DeviceLike) -> bool:
    """Whether a dense batch eigenproblem is handed to LAPACK on the host (the CPU), or
    solved where the batch lives (a GPU)."""
    return not is_cuda(device)


def eigensolver_dtype(graph: torch.Tensor) -> torch.dtype:
    """The precision a dense batch eigenproblem is solved in. On the CPU: float64, the
    precision LAPACK's subset driver is fed in. On a GPU: the graph's own (float32 from
    float32 features), since a consumer GPU runs float64 at 1/32 to 1/64 of its float32
    rate and the batch solve is BASiS's hot loop; the float32 subspace of a 512-node batch
    is within 1e-6 rad of float64's where the eigengap is 0.3 or more (clustered, touching
    and Siamese-like batches), and the solver's tolerance follows the precision."""
    return graph.dtype if is_cuda(graph) else torch.float64
