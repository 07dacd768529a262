"""Which torch device a job runs on."""

from __future__ import annotations

import torch

from basis.errors import InputError


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
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
