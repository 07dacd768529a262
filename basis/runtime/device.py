"""Which torch device a job runs on."""

from __future__ import annotations

import torch

from basis.errors import InputError


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is the GPU with the most free memory when there is one (so that jobs
    started side by side on a box with several GPUs spread over them), else the CPU;
    anything else is passed to torch and must exist."""
    if device == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        free = [torch.cuda.mem_get_info(index)[0] for index in range(torch.cuda.device_count())]
        return torch.device("cuda", max(range(len(free)), key=free.__getitem__))
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
    if resolved.type == "cuda":
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if available == 0 or (resolved.index or 0) >= available:
            raise InputError(
                f"device {device!r} was asked for, but torch sees {available} CUDA device(s);"
                " use --device cpu, or auto to take a GPU when there is one"
            )
    return resolved
