"""Which torch device a job runs on."""

from __future__ import annotations

import torch


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
