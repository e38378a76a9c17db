"""`--dask [ADDRESS|SCHEDULER_FILE]`: the parts of a parse (exports, time windows: parallel.py)
run as tasks of a Dask cluster instead of this machine's worker processes (docs/parse.md, "On a
Dask cluster"). Only where the work runs changes: parallel.run plans, orders, settles and writes
the parts as with -j, so the output is byte for byte the same. dask and distributed are optional
(pip install 'pyprof-nvtx[dask]')."""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import Executor
from typing import Iterator

from pyprof.errors import EXIT_TOOL, PyprofError

NEEDS = "--dask needs dask and distributed: pip install 'dask[distributed]' (or pip install 'pyprof-nvtx[dask]')"


def is_input(value: str) -> bool:
    """Whether the word after --dask is an input rather than a cluster (`--dask a.sqlite b.sqlite`:
    no address given, a LocalCluster): an export, a report or a folder."""
    return value.endswith((".sqlite", ".nsys-rep")) or os.path.isdir(value)


@contextlib.contextmanager
def cluster(where: str, workers: int) -> Iterator[tuple[Executor, int]]:
    """(an Executor running tasks on the cluster, its worker threads). `where`: a scheduler file
    (a path that exists, as `dask scheduler --scheduler-file` writes), a scheduler address
    (tcp://host:8786), or "" for a LocalCluster of `workers` single-threaded processes on this
    machine. PyprofError (EXIT_TOOL) when distributed is missing or the cluster cannot be reached."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise PyprofError(NEEDS, EXIT_TOOL) from None
    with contextlib.ExitStack() as stack:
        try:
            if not where:
                # Parsing is Python: one thread per process, or the GIL serialises the parts.
                local = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                         dashboard_address=None))
                client = stack.enter_context(Client(local))
            elif os.path.isfile(where):
                client = stack.enter_context(Client(scheduler_file=where, timeout="30s"))
            else:
                client = stack.enter_context(Client(where, timeout="30s"))
        except OSError as err:  # distributed's timeouts are OSErrors too
            raise PyprofError(f"--dask {where or '(a LocalCluster)'}: cannot reach the cluster ({err})",
                              EXIT_TOOL) from None
        threads = sum(client.nthreads().values())
        if not threads:
            raise PyprofError(f"--dask {where}: the cluster has no workers", EXIT_TOOL)
        # pure=False: a part parsed again (a window seeded) is a new task, not the cached first run.
        yield client.get_executor(pure=False), threads
