"""`--dask [ADDRESS|SCHEDULER_FILE]`: the parts of a parse (exports, time windows: parallel.py)
run as tasks of a Dask cluster instead of this machine's worker processes (docs/parse.md, "On a
Dask cluster"). Only where the work runs changes: parallel.run plans, orders, settles and writes
the parts as with -j, so the output is byte for byte the same. dask and distributed are optional
(pip install 'pyprof-nvtx[dask]')."""
from __future__ import annotations

import collections
import contextlib
import os
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable, Iterator

from pyprof.errors import EXIT_INTERRUPTED, EXIT_TOOL, PyprofError

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
        yield Settled(client.get_executor(pure=False), where, threads), threads


class Settled(Executor):
    """A cluster's executor that hands out at most `threads` parts at a time, the next one as a
    worker ends one, and whose futures fail with one line where the cluster lost the work: a
    worker that died running a part (distributed's KilledWorker, after its retries: out of memory,
    most often) or a scheduler gone (CommClosedError), as parallel.run reports a local worker
    killed; any other outcome passes through.

    Parts submitted all at once are placed by the scheduler as they come, a fixed queue per
    worker (64 parts on 32 workers: two each), and parts of one size take from 0.8 to 1.7 times
    as long as one alone when every core parses: the worker whose two run slow ends last while
    others idle. Handed out as workers free up, they balance as -j's local workers do. Workers
    that join later get no more parts than the threads there were at the start."""

    def __init__(self, inner: Executor, where: str, threads: int) -> None:
        from distributed import KilledWorker
        from distributed.comm import CommClosedError

        self._inner, self._where = inner, where or "(a LocalCluster)"
        self._lost = (KilledWorker, CommClosedError)
        self._free = threads
        self._waiting: collections.deque = collections.deque()
        self._lock = threading.Lock()

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        """Run fn(*args, **kwargs) on the cluster, once a worker thread is free."""
        out: Future = Future()
        out.set_running_or_notify_cancel()
        with self._lock:
            start = self._free > 0
            if start:
                self._free -= 1
            else:
                self._waiting.append((out, fn, args, kwargs))
        if start:
            self._start(out, fn, args, kwargs)
        return out

    def _start(self, out: Future, fn: Callable, args: tuple, kwargs: dict) -> None:
        self._inner.submit(fn, *args, **kwargs).add_done_callback(lambda done: self._settle(out, done))

    def _settle(self, out: Future, done: Any) -> None:
        with self._lock:
            following = self._waiting.popleft() if self._waiting else None
            if following is None:
                self._free += 1
        if following is not None:  # first: the worker that ended this one is idle
            self._start(*following)
        try:
            out.set_result(done.result())
        except self._lost as err:
            why = (str(err).strip().splitlines() or [type(err).__name__])[0]
            out.set_exception(PyprofError(f"--dask {self._where}: the cluster lost a part ({type(err).__name__}: "
                                          f"{why}); a worker that died running it was most often out of "
                                          "memory: give workers more", EXIT_INTERRUPTED))
        except BaseException as err:
            out.set_exception(err)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut the cluster's executor down; parts not handed out yet are dropped."""
        with self._lock:
            self._waiting.clear()
        self._inner.shutdown(wait=wait)
