"""How many GPUs this host lends a job, counted without torch and without starting a
process: the workflow reads it at parse time (a dry run included) to decide whether GPU
jobs claim a ``gpu_slot``. Which GPU a job then takes is :mod:`basis.runtime.device`'s."""

from __future__ import annotations

import os
import re
from pathlib import Path

#: The NVIDIA driver's device file of each GPU (not its control files, nvidiactl, nvidia-uvm):
#: a container is given those of its GPUs only.
_GPU_FILE = re.compile(r"nvidia\d+")


def visible_gpu_count(devices: str | Path = "/dev", visible: str | None = None) -> int:
    """The GPUs whose device files are in ``devices``, as many as ``visible``
    (``CUDA_VISIBLE_DEVICES``, read when not given) lists of them: ``""`` or ``-1`` hides
    them all, as CUDA reads it."""
    try:
        count = sum(bool(_GPU_FILE.fullmatch(entry.name)) for entry in os.scandir(devices))
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is None:
        return count
    listed = []
    for name in (part.strip() for part in visible.split(",")):
        if not name or name.startswith("-"):
            break  # CUDA stops at the first entry that names no device
        listed.append(name)
    return min(count, len(listed))
