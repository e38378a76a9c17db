"""Finding Nsight Systems' `nsys` and telling its version: shared by capture and parse (.nsys-rep)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from pyprof.errors import EXIT_TOOL, PyprofError

# Older releases write exports whose kernel table is missing under recent drivers (seen: 2022.4
# on a CUDA 13 driver) and lack --capture-range-end; 2023.1 is the oldest we rely on.
MIN_VERSION = (2023, 1)


def find_nsys(why: str) -> str:
    """Path of `nsys`: $NSYS when set, else the one on PATH; PyprofError saying `why` it is needed."""
    path = os.environ.get("NSYS") or shutil.which("nsys")
    if not path or not os.access(path, os.X_OK):
        raise PyprofError(f"{why} needs Nsight Systems' 'nsys': put it on PATH or set NSYS=/path/to/nsys",
                          EXIT_TOOL)
    return path


def nsys_version(nsys: str) -> tuple[int, ...] | None:
    """(year, minor, ...) from `nsys --version` ("NVIDIA Nsight Systems version 2025.3.1.0"), or None."""
    try:
        done = subprocess.run([nsys, "--version"], capture_output=True, text=True, errors="replace", timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?", done.stdout + done.stderr)
    return tuple(int(g) for g in found.groups() if g is not None) if found else None
