"""Several exports, or one export cut into time windows, parsed by worker processes into one
output (docs/parse.md: "Ranks side by side" and "One export, several workers").

Each task (an export, or a window of one) is parsed by a worker into a part file of its own;
when all are done the parts are copied into the output in a fixed order (by rank, then by
window), so the output never depends on which worker finished first. Windows are checked and,
where needed, parsed again with the exact carried state (window.py) before anything is written:
the output of a windowed export is byte for byte what one process writes.
"""
from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import shutil
import tempfile
from bisect import bisect_left, bisect_right
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, TextIO

from pyprof.errors import EXIT_NO_INPUT, EXIT_USAGE, PyprofError
from pyprof.parse import queries
from pyprof.parse.attribute import FWD_OPS_PER_PROCESS, SCHEMA_VERSION, Stats, lines
from pyprof.parse.compiled import CompiledStats, joined_lines
from pyprof.parse.export import KERNEL, RUNTIME, Export, check_export
from pyprof.parse.nsysrep import sqlite_path
from pyprof.parse.output import deferred_interrupt, open_output
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
_HEAD = f'{{"v":{SCHEMA_VERSION},'


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
    captured CUDA graph nodes (Report.captured, from any run), or the fatal error (message, exit
    status) that stopped it."""

    index: int
    rank: Rank | None
    stats: Stats
    report: Report | None
    error: tuple[str, int] | None = None
    captured: dict[int, str] | None = None


def _work(part: Part) -> Done:
    """Parse one part (in a worker process)."""
    stats = Stats()
    rank = part.rank
    try:
        with sqlite_path(part.path, True) as db, Export(db) as exp:
            check_export(exp, part.memcpy)
            if part.ranked and rank is None:
                rank = resolve(from_trace(exp), part.path, part.position)
            # Each nsys session counts time from its own start: ranks share a clock once their
            # times count from the epoch (the sessions of one job start tens of ms apart).
            clock = session_start(exp) if part.ranked else 0
            # Each part joins its compiled-graph kernels to the export's table (docs/compiled.md).
            part_lines = functools.partial(lines, window=part.window, clock=clock)
            with open(part.out, "w", encoding="utf-8") as out, \
                    contextlib.closing(joined_lines(exp, stats, part.memcpy, part_lines)) as recs:
                if part.ranked:
                    prefix, cut = f'{_HEAD}"rank":{rank.rank},', len(_HEAD)
                    out.writelines(prefix + line[cut:] + "\n" for line in recs)
                else:
                    out.writelines(line + "\n" for line in recs)
    except PyprofError as err:  # returned, not raised: it does not pickle with its status
        return Done(part.index, rank, stats, None, (str(err), err.status))
    if part.window is not None and part.window.start is not None:
        stats.compiled.graphs = 0  # the export's first window counts them
    speculative = part.window is not None and part.window.seed is None
    return Done(part.index, rank, stats, part.window.report if speculative else None,
                captured=part.window.report.captured if part.window is not None else None)


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
        every = max(1, total // SAMPLES)
        starts = sorted(r[0] for r in exp.rows(f"SELECT start FROM {RUNTIME} WHERE rowid % ? = 0", (every,))
                        if r[0] is not None)
        if len(starts) < 2 * windows:
            return []
        marks = sorted({starts[len(starts) * k // windows] for k in range(1, windows)})
        slack = max(1, int((starts[-1] - starts[0]) * SLACK / windows))
        where = " OR ".join(["start BETWEEN ? AND ?"] * len(marks))
        near = sorted(r[0] for r in exp.rows(f"SELECT start FROM {RUNTIME} WHERE {where}",
                                             [v for m in marks for v in (m - slack, m + slack)]))
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


def _windows(path: str, jobs: int, memcpy: bool) -> tuple[list[Window], int | None]:
    """`path` cut for `jobs` workers (one window when it is too small or cannot be cut), and the
    rank its trace names."""
    if path.endswith(".nsys-rep"):
        return [Window(None, None)], None
    with Export(path) as exp:
        check_export(exp, memcpy)
        trace = from_trace(exp)
        if not exp.has(RUNTIME, "start", "correlationId"):
            return [Window(None, None)], trace
        with exp.errors():
            kernels = exp.scalar(f"SELECT count(*) FROM {KERNEL}") or 0
        n = min(jobs, kernels // MIN_WINDOW)
        bounds = cuts(exp, n) if n > 1 else []
    edges = [None, *bounds, None]
    return [Window(a, b) for a, b in zip(edges, edges[1:])], trace


def plan(paths: list[str], jobs: int, memcpy: bool, ranked: bool) -> list[list[Part]]:
    """Per export (in `paths` order), its parts in output order: the export whole, or cut into
    windows when there are fewer exports than `jobs` and it is large enough."""
    groups: list[list[Part]] = []
    index = 0
    for position, path in enumerate(paths):
        if len(paths) < jobs:
            windows, trace = _windows(path, -(-jobs // len(paths)), memcpy)  # spare workers go to windows
        else:
            windows, trace = [Window(None, None)], None
        rank = resolve(trace, path, position) if ranked and len(windows) > 1 else None
        group = []
        for w in windows:
            group.append(Part(index, path, position, "", memcpy, ranked, rank, w if len(windows) > 1 else None))
            index += 1
        groups.append(group)
    return groups


@contextlib.contextmanager
def _pool(jobs: int) -> Iterator[ProcessPoolExecutor]:
    # fork where there is one: workers start without importing everything again.
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    ex = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx)
    try:
        yield ex
    except BaseException:
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


def _run(ex: ProcessPoolExecutor, parts: list[Part], progress: Progress) -> dict[int, Done]:
    done: dict[int, Done] = {}
    futures = [ex.submit(_work, p) for p in parts]
    for fut in as_completed(futures):
        d = fut.result()
        done[d.index] = d
        progress.update(len(done))
    progress.finish()
    errors = [d for d in done.values() if d.error is not None]
    if errors:
        message, status = min(errors, key=lambda d: d.index).error
        raise PyprofError(message, status)
    return done


def _stale_windows(groups: list[list[Part]], reports: dict[int, Report], done: dict[int, Done],
                   seeded: dict[int, Part] | None = None) -> list[Part]:
    """Windows whose records may differ from one sweep's, each with its exact Seed.

    First (`seeded` None) those whose speculative run read state an earlier window sets. A
    captured CUDA graph node's attribution is exact only from a run that had the exact state at
    the capture (a backward op finds its forward op there), so, once those are parsed again
    (`seeded`: part index -> the part parsed again, `done` their outcomes), the seeds are made
    again from every window's exact captured nodes, and the windows whose replays looked up a
    node that now reads otherwise are given once more."""
    again = []
    for group in groups:
        if group[0].window is None:
            continue
        seed = Seed()
        for part in group:
            report = reports[part.index]
            if seeded is not None:
                report = replace(report, captured=done[part.index].captured)
            if part.window.start is not None:
                if seeded is None:
                    if stale(seed, report):
                        again.append(replace(part, window=Window(part.window.start, part.window.end, seed)))
                else:
                    used = seeded[part.index].window.seed.captured if part.index in seeded else {}
                    if any(seed.captured.get(n) != used.get(n) for n in report.captured_misses):
                        again.append(replace(part, window=Window(part.window.start, part.window.end, seed)))
            seed = compose(seed, report, FWD_OPS_PER_PROCESS)
    return again


def _copy(src: str, out: TextIO) -> None:
    out.flush()
    dst = out.buffer if hasattr(out, "buffer") else out
    with open(src, "rb") as f:
        try:
            fd, size, offset = dst.fileno(), os.fstat(f.fileno()).st_size, 0
            dst.flush()
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


class Result(Stats):
    """Stats over all parts, plus how the work was split."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0
        self.windows = 0
        self.reparsed = 0
        self.ranks: list[Rank] = []
        self.compiled = CompiledStats()


def run(groups: list[list[Part]], output: str | None, jobs: int, progress: bool = False) -> Result:
    """Parse the parts of `groups` (plan()) with up to `jobs` workers into `output` (a file
    created only on success, or stdout), exports in rank order. Raises PyprofError."""
    tmp = tempfile.mkdtemp(prefix=".pyprof-parse-", dir=os.path.dirname(os.path.abspath(output)) if output else None)
    result = Result()
    ranked = groups[0][0].ranked
    try:
        for g in groups:
            for part in g:
                part.out = os.path.join(tmp, f"part{part.index}.jsonl")
        parts = [p for g in groups for p in g]
        workers = max(1, min(jobs, len(parts)))
        with _pool(workers) as ex:
            done = _run(ex, parts, Progress("pyprof.parse", len(parts), progress, unit="parts parsed"))
            reports = {i: d.report for i, d in done.items()}
            again = _stale_windows(groups, reports, done)
            if again:
                done.update(_run(ex, again, Progress("pyprof.parse", len(again), progress, unit="windows re-parsed")))
                more = _stale_windows(groups, reports, done, {p.index: p for p in again})
                if more:
                    done.update(_run(ex, more, Progress("pyprof.parse", len(more), progress,
                                                        unit="windows re-parsed")))
                    again += more
        order = sorted(groups, key=lambda g: (done[g[0].index].rank.rank if ranked else 0, g[0].index))
        if ranked:
            seen: dict[int, str] = {}
            for g in order:
                rank = done[g[0].index].rank
                if rank.rank in seen:
                    raise PyprofError(f"{g[0].path} and {seen[rank.rank]} are both rank {rank.rank} (ranks come from "
                                      "pyprof's torch.distributed markers, else the file name's last number)",
                                      EXIT_USAGE)
                seen[rank.rank] = g[0].path
                result.ranks.append(rank)
        result.exports, result.windows, result.reparsed = len(groups), len(parts), len(again)
        with open_output(output) as out, deferred_interrupt() as interrupted:
            for g in order:
                for part in g:
                    _copy(part.out, out)
                    s = done[part.index].stats
                    for name, value in vars(s).items():
                        setattr(result, name, getattr(result, name) + value)
                    if interrupted:
                        if output is None:
                            out.write(f"pyprof.parse: interrupted - the {result.records} records above are incomplete\n")
                        raise KeyboardInterrupt
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def note_ranks(result: Result) -> str:
    """How ranks were found, for the summary: `ranks 0-63 (from file names)`."""
    if not result.ranks:
        return ""
    nums = [r.rank for r in result.ranks]
    span = f"rank {nums[0]}" if len(nums) == 1 else f"ranks {min(nums)}-{max(nums)}"
    sources = sorted({r.source for r in result.ranks})
    words = {"trace": "pyprof markers", "name": "file names", "order": "file order"}
    return f"{span} (from {', '.join(words[s] for s in sources)})"
