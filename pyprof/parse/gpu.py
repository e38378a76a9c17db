"""Which GPU ran a kernel: TARGET_INFO_GPU, reached through TARGET_INFO_CUDA_DEVICE when present
(queries.gpu_sql, queries.cuda_device_sql)."""
from __future__ import annotations

from typing import Any

from pyprof.parse import queries
from pyprof.parse.export import Export

_PID_BITS = 0xFFFFFF


class GpuInfo:
    """Maps (pid, CUDA device id) to the record's `gpu` object, or None when the export has none.

    The tables are tiny (one row per GPU / per process and device), so they are read once.
    """

    def __init__(self, exp: Export) -> None:
        self._gpus: dict[int, dict[str, Any]] = {}
        self._by_pid: dict[tuple[int, int], int] = {}
        self._by_cuda: dict[int, int | None] = {}
        self._cache: dict[tuple[int, int], dict[str, Any] | None] = {}
        gpus = queries.gpu_sql(exp)
        if gpus is None:
            return
        sql, fields = gpus
        devices = queries.cuda_device_sql(exp)
        with exp.errors():
            for row in exp.rows(sql):
                self._gpus[row[0]] = dict(zip(fields, row[1:]))
            if devices is not None:
                for gpu_id, cuda_id, p in exp.rows(devices):
                    if p is not None:
                        # Some exports may store a globalPid here: the pid is then in bits 24-47.
                        self._by_pid[(p >> 24 & _PID_BITS if p > _PID_BITS else p, cuda_id)] = gpu_id
                    # A CUDA ordinal that means different GPUs in different processes is
                    # ambiguous without the pid: remember that, do not guess.
                    prev = self._by_cuda.get(cuda_id, gpu_id)
                    self._by_cuda[cuda_id] = gpu_id if prev == gpu_id else None

    def lookup(self, pid: int | None, device: int | None) -> dict[str, Any] | None:
        """The `gpu` object for a kernel of process `pid` on CUDA device `device`."""
        key = (pid, device)
        try:
            return self._cache[key]
        except KeyError:
            pass
        gpus = self._gpus
        gpu_id = self._by_pid.get(key)
        if gpu_id is None:
            gpu_id = self._by_cuda.get(device)
        if gpu_id is None and device in gpus and not self._by_cuda:
            gpu_id = device
        if gpu_id is None and len(gpus) == 1:
            gpu_id = next(iter(gpus))
        info = gpus.get(gpu_id) if gpu_id is not None else None
        self._cache[key] = info
        return info
