"""Several exports, or one export cut into time windows, parsed by worker processes into one
output (docs/parse.md: "Ranks side by side" and "One export, several workers").

Each task (an export, or a window of one) is parsed by a worker into a part file of its own,
and the parts are copied into the output in a fixed order (by rank, then by window), each as
soon as those before it are in, while later ones are still parsed: the output never depends on
which worker finished first, and little is left to copy when the last one ends. Ranks are found
while planning, so the order is known before any worker starts. A window is checked, and where
needed parsed again with the exact carried state (window.py), before it is written: the output
of a windowed export is byte for byte what one process writes.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import io
import itertools
import mmap
import multiprocessing
import os
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from bisect import bisect_left, bisect_right
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, TextIO

try:
    import fcntl
except ImportError:  # Windows: no fcntl, and nothing there is opened with O_APPEND
    fcntl = None

from pyprof.errors import EXIT_INTERRUPTED, EXIT_NO_INPUT, EXIT_USAGE, PyprofError, cannot_write
from pyprof.parse import ddp_buckets, queries, zones
from pyprof.formats import VERSION
from pyprof.parse.attribute import Stats, lines
from pyprof.parse.intake import FWD_OPS_PER_PROCESS
from pyprof.parse.compiled_kernels import CompiledStats, Tail, joined_lines
from pyprof.parse.export import KERNEL, RUNTIME, Export, check_export
from pyprof.parse.nsysrep import sqlite_path
from pyprof.parse.output import deferred_interrupt, mark_incomplete, open_output
from pyprof.parse.ranks import Rank, by_name, from_trace, resolve
from pyprof.parse.window import Report, Seed, Window, compose, stale
from pyprof.progress import Progress

# A window should hold at least this many kernels: each worker scans the export's tables once
# (about a second per million kernels of a 16-core machine's core), which must stay small next
# to its share of the sweep (about 25 s per million).
MIN_WINDOW = 250_000
# Launch times sampled to place the cuts, and how far (in windows) a cut may move from its
# quantile to the widest pause in launching (between steps, nothing is open that a later window
# would need to know about).
SAMPLES = 20_000
SLACK = 1 / 64
# Parts go into a regular output file in slices of SLICE bytes, at most PLACERS threads at a
# time, each slice mapped only while it is filled: the parent holds at most 64 MiB of the output
# (_mapped).
SLICE = 4 << 20
PLACERS = 16
_HEAD = f'{{"v":{VERSION},'
PROG = "pyprof.parse"


@dataclass
class Part:
    """One task: the records of export `path` (the `position`-th input), or of its `window`,
    written to `out`; with `ranked`, each record gets the export's rank (`rank`, or found by the
    worker when None)."""

    index: int
    path: str
    position: int
    out: str
    memcpy: bool
    ranked: bool
    rank: Rank | None = None
    window: Window | None = None


@dataclass
class Done:
    """A task's outcome: the rank used, its counts, a speculative window's Report, a window's
    captured CUDA graph nodes, held compiled-graph join, forward ops and pending node spans
    (Report.captured, tail, fwd and pending, from any run), or the fatal error (message, exit
    status) that stopped it."""

    index: int
    rank: Rank | None
    stats: Stats
    report: Report | None
    error: tuple[str, int] | None = None
    captured: dict[int, str] | None = None
    tail: Tail | None = None
    fwd: dict | None = None
    pending: dict | None = None
    tops: dict | None = None
    calls: dict | None = None
    nccl: dict | None = None
    times: tuple[float, float, float, float] | None = None  # began, first record, ended (epoch s), CPU s


def _work(part: Part) -> Done:
    """Parse one part (in a worker process)."""
    stats = Stats()
    rank = part.rank
    began, cpu = time.time(), time.process_time()
    try:
        with sqlite_path(part.path, True) as db, Export(db) as exp:
            check_export(exp, part.memcpy)
            if part.window is not None and part.window.zones is not None:
                queries.know_domain_events(exp, part.window.zones.domains)
                if part.window.zones.ddp is not None:
                    ddp_buckets.know_ddp_calls(exp, part.window.zones.ddp)
            if part.ranked and rank is None:
                rank = resolve(from_trace(exp), part.path, part.position)
            # Each nsys session counts time from its own start: ranks share a clock once their
            # times count from the epoch (the sessions of one job start tens of ms apart).
            clock = session_start(exp) if part.ranked else 0
            # Each part joins its compiled-graph kernels to the export's table (docs/compiled.md).
            part_lines = functools.partial(lines, window=part.window, clock=clock)
            tails = part.window.tails() if part.window is not None else (None, None)
            with open(part.out, "w", encoding="utf-8") as out, \
                    contextlib.closing(joined_lines(exp, stats, part.memcpy, part_lines, *tails)) as joined:
                # The first record comes when SQLite has joined and sorted: the part's setup.
                head = next(joined, None)
                first = time.time()
                recs = itertools.chain(() if head is None else (head,), joined)
                if part.ranked:
                    prefix, cut = f'{_HEAD}"rank":{rank.rank},', len(_HEAD)
                    out.writelines(prefix + line[cut:] + "\n" for line in recs)
                else:
                    out.writelines(line + "\n" for line in recs)
    except PyprofError as err:  # returned, not raised: it does not pickle with its status
        return Done(part.index, rank, stats, None, (str(err), err.status))
    if part.window is not None and part.window.start is not None:
        stats.compiled.graphs = 0  # the export's first window counts them
    times = (began, first, time.time(), time.process_time() - cpu)
    if part.window is None:
        return Done(part.index, rank, stats, None, times=times)
    report = part.window.report
    return Done(part.index, rank, stats, report if part.window.seed is None else None,
                captured=report.captured, tail=report.tail, fwd=report.fwd, pending=report.pending,
                tops=report.tops, calls=report.calls, nccl=report.nccl, times=times)


def session_start(exp: Export) -> int:
    """The export's session start in UTC ns since the epoch; 0 when the export does not say."""
    sql = queries.session_start_sql(exp)
    start = exp.scalar(sql) if sql else None
    return start if type(start) is int else 0


def inputs(args: Iterable[str]) -> list[str]:
    """The exports named on the command line: files as given, folders as the `.sqlite` and
    `.nsys-rep` files directly inside them, in rank order by name (ranks.by_name)."""
    paths: list[str] = []
    for arg in args:
        if os.path.isdir(arg):
            found = [os.path.join(arg, n) for n in os.listdir(arg) if n.endswith((".sqlite", ".nsys-rep"))]
            if not found:
                raise PyprofError(f"{arg}: a folder with no .sqlite or .nsys-rep export in it", EXIT_NO_INPUT)
            paths += found
        else:
            paths.append(arg)
    return by_name(dict.fromkeys(paths))


def cuts(exp: Export, windows: int) -> list[int]:
    """Sort keys at which to cut `exp` into `windows` windows of about as many launches each,
    each moved to the widest pause in launching near it. Fewer when launches are too few."""
    with exp.errors():
        total = exp.scalar(f"SELECT count(*) FROM {RUNTIME}") or 0
        last = exp.scalar(f"SELECT max(rowid) FROM {RUNTIME}") or 0
        every = max(1, total // SAMPLES)
        # Every `every`-th rowid, looked up by rowid rather than tested on every row.
        sampled = exp.rows(f"WITH RECURSIVE k(r) AS (SELECT ? UNION ALL SELECT r + ? FROM k WHERE r + ? <= ?) "
                           f"SELECT start, rowid FROM {RUNTIME} WHERE rowid IN k", (every, every, every, last))
        samples = sorted((r[0], r[1]) for r in sampled if r[0] is not None)
        if len(samples) < 2 * windows:
            return []
        starts = [s for s, _ in samples]
        marks = sorted({starts[len(starts) * k // windows] for k in range(1, windows)})
        slack = max(1, int((starts[-1] - starts[0]) * SLACK / windows))
        # The launches within `slack` of a mark are read among the rows between the rowids of
        # the samples around it, by rowid, instead of scanning the table in this serial step:
        # nsys appends launches about in time order, so the spans are a small part of the table.
        # Rows out of that order may be missed, which moves a cut off the widest pause, never
        # the output: any cut gives the same records (window.py).
        spans: list[list[int]] = []
        for lo, hi in sorted((min(r for _, r in around) - every, max(r for _, r in around) + every)
                             for m in marks
                             for around in [samples[max(0, bisect_left(starts, m - slack) - 1):
                                                    bisect_right(starts, m + slack) + 1]]):
            if spans and lo <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], hi)
            else:
                spans.append([lo, hi])
        near = sorted(v for (v,) in exp.rows(
            f"SELECT start FROM {RUNTIME} WHERE ({' OR '.join(['rowid BETWEEN ? AND ?'] * len(spans))}) "
            f"AND start BETWEEN ? AND ?", (*[b for sp in spans for b in sp], marks[0] - slack, marks[-1] + slack)))
    out: list[int] = []
    for m in marks:
        around = near[bisect_left(near, m - slack):bisect_right(near, m + slack)]
        if len(around) < 2:
            cut = m
        else:
            gap = max(range(1, len(around)), key=lambda i: (around[i] - around[i - 1], -abs(around[i] - m)))
            cut = around[gap]
        if not out or cut > out[-1]:
            out.append(cut)
    return out


def _survey(path: str, jobs: int, memcpy: bool) -> tuple[list[Window], int | None]:
    """`path` checked and cut for `jobs` workers (one window when it is too small or cannot be
    cut, or `jobs` is 1), and the rank its trace names. A .nsys-rep is converted by its worker:
    neither is known here."""
    if path.endswith(".nsys-rep"):
        return [Window(None, None)], None
    with Export(path) as exp:
        check_export(exp, memcpy)
        trace = from_trace(exp)
        if jobs < 2 or not exp.has(RUNTIME, "start", "correlationId"):
            return [Window(None, None)], trace
        with exp.errors():
            kernels = exp.scalar(f"SELECT count(*) FROM {KERNEL}") or 0
        n = min(jobs, kernels // MIN_WINDOW)
        bounds = cuts(exp, n) if n > 1 else []
    edges = [None, *bounds, None]
    return [Window(a, b) for a, b in zip(edges, edges[1:])], trace


def plan(paths: list[str], jobs: int, memcpy: bool, ranked: bool) -> list[list[Part]]:
    """Per export (in `paths` order), its parts in output order: the export whole, or cut into
    windows when there are fewer exports than `jobs` and it is large enough. Every export is
    checked here, and its rank found (but a .nsys-rep's), so that parts can be written in rank
    order as soon as they are done."""
    groups: list[list[Part]] = []
    index = 0
    for position, path in enumerate(paths):
        # Spare workers go to windows.
        windows, trace = _survey(path, -(-jobs // len(paths)) if len(paths) < jobs else 1, memcpy)
        rank = resolve(trace, path, position) if ranked and not path.endswith(".nsys-rep") else None
        group = []
        for w in windows:
            group.append(Part(index, path, position, "", memcpy, ranked, rank, w if len(windows) > 1 else None))
            index += 1
        groups.append(group)
    return groups


@contextlib.contextmanager
def _pool(jobs: int, scratch: str) -> Iterator[ProcessPoolExecutor]:
    """Worker processes that end with the run: on any failure (Ctrl-C, SIGTERM, an export's
    error) they are stopped, not waited for; and they end with the parent, removing `scratch`
    (_orphaned)."""
    # fork where there is one: workers start without importing everything again.
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    ex = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_start,
                             initargs=(os.getpid(), scratch))
    try:
        yield ex
    except BaseException:
        # The executor keeps its processes in a private mapping; terminate() is the one way to
        # stop a part mid-way (the rest of its work would be thrown away anyway).
        for proc in list((getattr(ex, "_processes", None) or {}).values()):
            proc.terminate()
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


_STOPS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back while the workers are forked, and delivered after (raising
    here). Their handlers raise, and in the parent a raise inside fork's own hooks is printed as
    "Exception ignored" and lost (the run goes on); in a worker, before _worker_start, it is a
    traceback."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _worker_start(parent: int, scratch: str) -> None:
    """Set up a worker process: Ctrl-C, sent to the whole process group, is the parent's to
    handle (it stops the workers), and SIGTERM (the parent's way to stop one) ends it quietly;
    stdout is not held open (a reader of the parent's stdout sees its end when the parent is
    gone); and a watch ends the worker when its parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # held back while forking (_signals_held)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    threading.Thread(target=_orphaned, args=(parent, scratch), daemon=True).start()


def _orphaned(parent: int, scratch: str) -> None:
    """Wait until the parent is gone (killed: SIGKILL, a crash, the OOM killer), then remove its
    parts and .partial output in `scratch` and end the worker: no orphan parses on, no part file
    stays. A thread that polls, because the worker's main thread may be inside one SQLite query
    for minutes, where no signal handler runs."""
    while os.getppid() == parent:
        time.sleep(0.2)
    shutil.rmtree(scratch, ignore_errors=True)
    os._exit(1)


def _order(groups: list[list[Part]]) -> list[list[Part]]:
    """The groups in output order: by rank (two exports of one rank are an error), else as planned."""
    if not groups[0][0].ranked:
        return groups
    order = sorted(groups, key=lambda g: (g[0].rank.rank, g[0].index))
    seen: dict[int, str] = {}
    for g in order:
        rank = g[0].rank.rank
        if rank in seen:
            raise PyprofError(f"{g[0].path} and {seen[rank]} are both rank {rank} (ranks come from "
                              "pyprof's torch.distributed markers, else the file name's last number)", EXIT_USAGE)
        seen[rank] = g[0].path
    return order


def _copy(srcs: list[str], out: TextIO, spare: int = 0) -> None:
    """Append the files `srcs` to `out` in order. Into a regular file they are copied side by
    side, each at its own offset, by threads: the windows of one export, or the last exports, are
    mostly done together, and one thread copying their gigabytes one after the other would be the
    parse's serial tail. `spare`: the cores no worker is parsing on; with two or more the copy
    takes them (_mapped: the end of a run, or parts written late because an earlier one came
    last), while with the cores busy it only has to keep up with the workers, and takes the copy
    that costs them the least CPU and memory traffic. Into anything else, and into a file opened
    for appending (`>>`: every write lands at the end, whatever its offset, so parts written side
    by side would interleave), one after the other."""
    out.flush()
    dst = out.buffer if hasattr(out, "buffer") else out
    dst.flush()
    try:
        fd = dst.fileno()
        regular = stat.S_ISREG(os.fstat(fd).st_mode) and not _appending(fd)
    except (AttributeError, OSError, io.UnsupportedOperation):
        regular = False
    if regular:
        # Written past the Python buffers (flushed and empty), as sendfile below does.
        sizes = [os.path.getsize(s) for s in srcs]
        offsets = list(itertools.accumulate(sizes, initial=os.lseek(fd, 0, os.SEEK_CUR)))
        if not (spare > 1 and _mapped(srcs, sizes, offsets, fd, min(spare, PLACERS))):
            with ThreadPoolExecutor(min(len(srcs), default_jobs())) as pool:
                list(pool.map(functools.partial(_copy_at, fd=fd), srcs, offsets))
        os.lseek(fd, offsets[-1], os.SEEK_SET)
        return
    for src in srcs:
        with open(src, "rb") as f:
            try:
                fd, size, offset = dst.fileno(), os.fstat(f.fileno()).st_size, 0
                while offset < size:
                    sent = os.sendfile(fd, f.fileno(), offset, size - offset)
                    if not sent:
                        break
                    offset += sent
            except (AttributeError, OSError) as err:
                if isinstance(err, BrokenPipeError):
                    raise
                f.seek(0)
                shutil.copyfileobj(f, dst, 1 << 20)


def _mapped(srcs: list[str], sizes: list[int], offsets: list[int], fd: int, threads: int) -> bool:
    """Whether the files `srcs` (of `sizes`) were copied into `fd` at `offsets` through a shared
    mapping of it, SLICE bytes at a time by `threads` threads; False where `fd` cannot be mapped so (not open for
    reading and writing, no fallocate, a filesystem without shared mappings), for the copy by
    write. Writes into one file take turns on its inode's lock (tmpfs, ext4, XFS), whatever
    their offsets, so threads copying by copy_file_range or pwrite copy at one core's speed
    (about 1.5 GB/s on a RAM disk: 7.5 s for the 11 GB of a 10M-kernel export); the pages of a
    mapping fill side by side. The space is reserved first (fallocate): a full disk is then the
    OSError of a write (cannot_write), not a SIGBUS on a mapped page."""
    if not (hasattr(os, "preadv") and hasattr(os, "posix_fallocate") and fcntl is not None) or \
            fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDWR or offsets[-1] == offsets[0]:
        return False
    try:
        os.posix_fallocate(fd, offsets[0], offsets[-1] - offsets[0])
        pieces = [(src, at, offset + at, min(SLICE, size - at))
                  for src, size, offset in zip(srcs, sizes, offsets) for at in range(0, size, SLICE)]
        with ThreadPoolExecutor(min(len(pieces), threads)) as pool:
            list(pool.map(functools.partial(_place, fd=fd), pieces))
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        return False  # the copy by write puts every byte at its offset again
    return True


def _place(piece: tuple[str, int, int, int], fd: int) -> None:
    """Bytes [at, at + size) of file `src` copied into `fd` at `offset` through a shared mapping
    of that stretch of it (`piece`: src, at, offset, size), read into it by the kernel."""
    src, at, offset, size = piece
    base = offset - offset % mmap.ALLOCATIONGRANULARITY
    with open(src, "rb") as f, mmap.mmap(fd, offset + size - base, offset=base) as m, memoryview(m) as view:
        done = 0
        while done < size:
            with view[offset - base + done:offset - base + size] as room:
                got = os.preadv(f.fileno(), [room], at + done)
            if not got:
                raise OSError(errno.EIO, f"{src} changed while being copied")
            done += got


def _appending(fd: int) -> bool:
    """Whether `fd` was opened with O_APPEND (False where the flags cannot be read)."""
    if fcntl is None:
        return False
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND)


def _copy_at(src: str, offset: int, fd: int) -> None:
    """File `src` written into `fd` at `offset`."""
    with open(src, "rb") as f:
        size, done = os.fstat(f.fileno()).st_size, 0
        with contextlib.suppress(AttributeError, OSError):  # no copy_file_range here: pread/pwrite
            while done < size:
                copied = os.copy_file_range(f.fileno(), fd, size - done, done, offset + done)
                if not copied:
                    break
                done += copied
        while done < size:
            chunk = os.pread(f.fileno(), min(1 << 24, size - done), done)
            if not chunk:
                break
            done += os.pwrite(fd, chunk, offset + done)


class Result(Stats):
    """Stats over all parts, plus how the work was split."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0
        self.windows = 0
        self.reparsed = 0
        self.ranks: list[Rank] = []
        self.compiled = CompiledStats()
        # For -v: when run() began (epoch s), how long the surveys took, each run of a part
        # (index, parsed again, Done.times), when the last part was written.
        self.began = time.time()
        self.surveyed = 0.0
        self.runs: list[tuple[int, bool, tuple[float, float, float, float]]] = []
        self.written = 0.0


class _Stream:
    """Parts written to the output in order while later ones are still being parsed.

    The next part in order is written as soon as it is done, so the output grows while the
    workers run and nothing is left to copy when the last one ends. A window whose speculative
    run read state an earlier window set (window.stale) is parsed again, seeded, when its turn
    comes: every earlier window is written by then, so its seed is exact (captured graph nodes
    included: they are taken from each earlier window's exact run) and one more run suffices. An error is raised when the failing
    part's turn comes, so the output before it is the same whatever the workers' timing.
    """

    def __init__(self, ex: ProcessPoolExecutor, groups: list[list[Part]], out: TextIO, result: Result) -> None:
        self.ex = ex
        self.groups = groups
        self.out = out
        self.result = result
        self.first: dict[int, Done] = {}   # speculative or whole parts, by index
        self.exact: dict[int, Done] = {}   # windows parsed again with their Seed
        self.again: set[int] = set()       # ... of those, the ones submitted
        self.running: dict[Future, Part] = {}
        self.order: list[list[Part]] | None = None
        self.group = self.part = 0         # the next part to write: order[group][part]
        self.seed = Seed()                 # the exact state at that part's start, when it is a window

    def run(self, progress: Progress) -> None:
        """Parse every part and write them all in order."""
        self.order = _order(self.groups) if all(g[0].rank is not None for g in self.groups if g[0].ranked) else None
        surveyed = time.time()
        for group in self.groups:
            if group[0].window is not None:
                # What each window would read from the whole export, read once, in slices.
                found = zones.survey(self.ex, group[0].path, len(group))
                for part in group:
                    part.window.zones = found
        self.result.surveyed = time.time() - surveyed
        with _signals_held():  # the first submit forks the workers
            for p in [p for g in (self.order or self.groups) for p in g]:
                self.running[self.ex.submit(_work, p)] = p
        while self.running:
            finished, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for fut in finished:
                part = self.running.pop(fut)
                try:
                    d = fut.result()
                except BrokenProcessPool:  # a worker killed on its own: by the OOM killer, most often
                    raise PyprofError("a worker process was killed (out of memory?); fewer workers (-j) need less "
                                      "memory", EXIT_INTERRUPTED) from None
                if d.times is not None:
                    self.result.runs.append((d.index, part.window is not None and part.window.seed is not None, d.times))
                if part.window is not None and part.window.seed is not None:
                    self.exact[d.index] = d
                    continue
                self.first[d.index] = d
                progress.update(len(self.first))
                if part.ranked and part.rank is None:
                    if d.rank is None:  # failed before its rank was known: it may belong anywhere
                        raise PyprofError(*d.error)
                    part.rank = d.rank
            if self.order is None and all(g[0].rank is not None for g in self.groups):
                self.order = _order(self.groups)
            if self.order is not None:
                self._write_ready()
        progress.finish()
        self.result.written = time.time()
        self.result.ranks = [g[0].rank for g in self.order] if self.groups[0][0].ranked else []

    def _write_ready(self) -> None:
        ready: list[tuple[Part, Done]] = []
        try:
            self._settle(ready)
        finally:  # the parts before a failed one are written, whatever stopped the loop
            self._write(ready)

    def _settle(self, ready: list[tuple[Part, Done]]) -> None:
        """Append to `ready` the parts that can be written next, in order, advancing the state."""
        order = self.order
        while self.group < len(order):
            group = order[self.group]
            if self.part == len(group):
                self.group, self.part, self.seed = self.group + 1, 0, Seed()
                continue
            part = group[self.part]
            first = self.first.get(part.index)
            if first is None:
                return
            done = self.exact.get(part.index, first)
            if done.error is not None:
                raise PyprofError(*done.error)
            if self._needs_seed(part, first):
                return
            ready.append((part, done))
            if part.window is not None:
                # Captured graph nodes, the compiled-graph join's tail, forward ops and pending
                # node spans as the exact run left them (the speculative run may have missed a
                # forward op they need, started without the tail before it, or closed a span an
                # earlier window left pending): every window before this one is exact now.
                exact = replace(first.report, captured=done.captured, tail=done.tail, fwd=done.fwd,
                                pending=done.pending, tops=done.tops, calls=done.calls, nccl=done.nccl)
                self.seed = compose(self.seed, exact, FWD_OPS_PER_PROCESS)
            self.part += 1

    def _needs_seed(self, part: Part, first: Done) -> bool:
        """Whether `part` waits for its seeded run (submitted here when it is stale)."""
        if part.window is None or part.window.start is None or part.index in self.exact:
            return False
        if part.index in self.again:
            return True
        if not stale(self.seed, first.report):
            return False
        again = replace(part, window=Window(part.window.start, part.window.end, self.seed, part.window.zones))
        self.running[self.ex.submit(_work, again)] = again
        self.again.add(part.index)
        self.result.reparsed += 1
        return True

    def _write(self, ready: list[tuple[Part, Done]]) -> None:
        if not ready:
            return
        with deferred_interrupt() as interrupted:
            _copy([part.out for part, _ in ready], self.out, spare=default_jobs() - len(self.running))
            for _, done in ready:
                for name, value in vars(done.stats).items():
                    setattr(self.result, name, getattr(self.result, name) + value)
        for part, _ in ready:
            os.unlink(part.out)  # written: its disk space is not needed twice
        if interrupted:
            raise interrupted[0]


def run(groups: list[list[Part]], output: str | None, jobs: int, progress: bool = False,
        executor: Executor | None = None) -> Result:
    """Parse the parts of `groups` (plan()) with up to `jobs` workers into `output` (a file
    created only on success, or stdout), exports in rank order, each part written as soon as
    those before it are. `executor`: run the parts there (a Dask cluster's, dask.py) rather than
    in worker processes of this one. Raises PyprofError; after records went to stdout, a last
    line that is not JSON says the output is incomplete."""
    # Beside the output's file (through links): its .partial goes in there too, to be renamed.
    scratch = os.path.dirname(os.path.realpath(output)) if output else None
    # Named before it is made, so that a stop (Ctrl-C, SIGTERM) at any moment finds it in the
    # finally: one between mkdtemp's mkdir and its return would have left the folder behind.
    tmp = _scratch_name(scratch)
    try:
        _make_scratch(tmp, output)
        result = Result()
        parts = [p for g in groups for p in g]
        for part in parts:
            part.out = os.path.join(tmp, f"part{part.index}.jsonl")
        result.exports, result.windows = len(groups), len(parts)
        # The progress line shares the terminal with records written to it.
        meter = Progress("pyprof.parse", len(parts), progress and (output is not None or not sys.stdout.isatty()),
                         unit="parts parsed")
        pool = contextlib.nullcontext(executor) if executor is not None else _pool(max(1, min(jobs, len(parts))), tmp)
        with pool as ex, open_output(output, scratch=tmp) as out:
            try:
                _Stream(ex, groups, out, result).run(meter)
            except BaseException as err:
                if output is None:
                    mark_incomplete(out, err, result.records)
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _scratch_name(folder: str | None) -> str:
    """A fresh name for a run's scratch folder in `folder` (None: the system's temporary one)."""
    return os.path.join(folder or tempfile.gettempdir(), f".pyprof-parse-{secrets.token_hex(6)}")


def _make_scratch(path: str, output: str | None) -> None:
    """Make the scratch folder `path` (private to this user); a name taken gets a new one."""
    while True:
        try:
            os.mkdir(path, 0o700)
            return
        except FileExistsError:
            path = _scratch_name(os.path.dirname(path))
        except OSError as err:  # the parts go beside the output: its folder missing is the output's error
            raise cannot_write(output or tempfile.gettempdir(), err) from None


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def note_times(result: Result) -> str:
    """Where the wall time went, for -v: the surveys, then per run of a part, seconds since
    run() began when it started, got its first record (SQLite's join and sort done) and ended,
    and its CPU seconds; last, when the last part was written."""
    out = [f"{PROG}: survey of the windowed exports {result.surveyed:.2f} s"]
    for index, again, (began, first, ended, cpu) in sorted(result.runs, key=lambda r: (r[0], r[1])):
        out.append(f"{PROG}: part {index}{' again' if again else ''}: started {began - result.began:.2f} s, "
                   f"first record {first - result.began:.2f} s, ended {ended - result.began:.2f} s, "
                   f"CPU {cpu:.2f} s")
    out.append(f"{PROG}: all parts written at {result.written - result.began:.2f} s")
    return "\n".join(out)


def note_ranks(result: Result) -> str:
    """How ranks were found, for the summary: `ranks 0-63 (from file names)`."""
    if not result.ranks:
        return ""
    nums = [r.rank for r in result.ranks]
    span = f"rank {nums[0]}" if len(nums) == 1 else f"ranks {min(nums)}-{max(nums)}"
    sources = sorted({r.source for r in result.ranks})
    words = {"trace": "pyprof markers", "name": "file names", "order": "file order"}
    return f"{span} (from {', '.join(words[s] for s in sources)})"
