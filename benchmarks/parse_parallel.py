"""Parse in parallel: many rank exports side by side, and one large export in time windows.

    python benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --jobs 16 [--dask [--dask-at tcp://host:8786]]
    python benchmarks/parse_parallel.py huge --kernels 10000000 --jobs 16 [--single 1000000,2000000]
        [--single-limit 90 | --race 8]

`ranks`: a synthetic data-parallel job (tests/nsys_synth.py rank_export: forward and backward
GEMMs, DDP bucket all-reduces with record_param_comms and NCCL ranges, pyprof markers), one
export per rank of about --kernels kernels each. Times `python -m pyprof.parse -j JOBS FOLDER`
against the largest export parsed alone by one process (`-j 1`). Goal: <= 2x. With --together,
also the JOBS largest exports each parsed by a process of its own, all at once: how much slower a
process parses when JOBS of them share the machine (cores, caches, memory, disk), whatever pyprof
does to split the work.

`huge`: one export of about --kernels kernels (tests/nsys_synth.py workload, 100k kernels,
repeated along the timeline by nsys_synth.repeat at SQLite's speed). Times `-j JOBS` and checks
the output's SHA-256 against `-j 1` on the same export when --single-full is given; --race X
starts `-j JOBS` and `-j 1` together and stops `-j 1` at X times the `-j JOBS` time (race()); --single
sizes are parsed by one process too (the first N kernels' worth of the same workload), so the
one-process time of the large export can be read off their (linear) growth when running it in
full does not fit the time at hand. --single-limit S runs `-j 1` on the large export for at
most S seconds: when its first record came (SQLite sorts everything first), how many it wrote,
and whether they are the first bytes of the `-j JOBS` output. Goal: >= 8x, byte-identical,
<= 200 MB per worker.

Every parse writes to a file under --out (default --work; choose a RAM disk: outputs are ~1.1 kB
per kernel);
peak RSS is the largest of the parse process and its workers (getrusage of the children).
Exports are generated once and kept in --work.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import nsys_synth  # noqa: E402  (the one generator, shared with the tests)

LAYERS, BUCKETS = 16, 4
PER_STEP = LAYERS * 3 + BUCKETS + 3  # forward + 2 backward GEMMs per layer, buckets, loss, gather, optimizer


def _rank(args: tuple) -> str:
    folder, rank, world, steps = args
    path = os.path.join(folder, f"trace_{rank}.sqlite")
    if not os.path.exists(path):
        nsys_synth.rank_export(path + ".partial", rank, world, steps=steps, layers=LAYERS, buckets=BUCKETS)
        os.rename(path + ".partial", path)
    return path


def make_ranks(work: Path, ranks: int, kernels: int, procs: int) -> Path:
    folder = work / f"ranks-{ranks}x{kernels}"
    folder.mkdir(parents=True, exist_ok=True)
    steps = max(1, kernels // PER_STEP)
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(procs) as ex:
        list(ex.map(_rank, [(str(folder), r, ranks, steps) for r in range(ranks)]))
    print(f"# {ranks} rank exports of {steps * PER_STEP} kernels in {folder} ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    return folder


def make_huge(work: Path, kernels: int, base_kernels: int = 100_000) -> Path:
    base = work / f"workload-{base_kernels}.sqlite"
    if not base.exists():
        t0 = time.perf_counter()
        nsys_synth.workload(str(base) + ".partial", base_kernels)
        os.rename(str(base) + ".partial", base)
        print(f"# generated {base} in {time.perf_counter() - t0:.0f} s", flush=True)
    copies = max(1, kernels // base_kernels)
    path = work / f"workload-{copies * base_kernels}.sqlite"
    if not path.exists():
        t0 = time.perf_counter()
        nsys_synth.repeat(str(base), str(path) + ".partial", copies)
        os.rename(str(path) + ".partial", path)
        print(f"# generated {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


# Runs a command and prints the largest RSS (kB) among it and its descendants: measured in a
# process of its own, so that other children of this script (the generators) do not count.
_PEAK = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def parse(inputs: list, out: Path, jobs: int, digest: bool = True, keep: bool = False,
          extra: tuple = (), notes: Path | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) of the parse and its workers (a Dask cluster's workers are not
    its children: not counted), SHA-256 (when `digest`) and size of the output (removed unless
    `keep`); `extra`: more parse options (--dask); `notes`: a file for its -v notes."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "pyprof.parse", "-q", "-j", str(jobs),
                           *(("-v",) if notes else ()), *extra, *map(str, inputs), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"parse_parallel: the parse failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    wall = time.perf_counter() - t0
    if notes:
        notes.write_text(done.stderr)
    sha = hashlib.sha256()
    if digest:
        with open(out, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                sha.update(chunk)
    size = out.stat().st_size
    if not keep:
        out.unlink()
    return wall, int(done.stdout.split()[-1]) / 1024, f"{sha.hexdigest()[:16] if digest else '-'} {size / 1e9:.2f} GB"


def together(files: list, out: Path) -> list[float]:
    """Each export parsed by a `-j 1` process of its own, all started at once: their wall seconds."""
    def one(i: int) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pyprof.parse", "-q", "-j", "1", str(files[i]), "-o", f"{out}.{i}"],
                       cwd=ROOT, check=True, capture_output=True)
        wall = time.perf_counter() - t0
        os.unlink(f"{out}.{i}")
        return wall
    with concurrent.futures.ThreadPoolExecutor(len(files)) as ex:
        return list(ex.map(one, range(len(files))))


def bounded(path: Path, out: Path, limit: float, reference: Path) -> str:
    """`-j 1` on `path` for at most `limit` seconds: when its first record came, how many it wrote
    at what rate, its peak RSS, and whether its bytes are the first bytes of `reference`."""
    for old in out.parent.glob(f".{out.name}.*.partial"):
        old.unlink()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pyprof.parse", "-q", "-j", "1", str(path), "-o", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = None
    samples = []
    while proc.poll() is None and time.perf_counter() - t0 < limit:
        time.sleep(0.5)
        partial = next(out.parent.glob(f".{out.name}.*.partial"), None)
        size = partial.stat().st_size if partial else 0
        now = time.perf_counter() - t0
        if size and first is None:
            first = now
        samples.append((now, size))
    finished = proc.poll() is not None
    if not finished:
        proc.kill()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    partial = out if finished else next(out.parent.glob(f".{out.name}.*.partial"))
    data = partial.read_bytes()
    partial.unlink()
    data = data[:data.rfind(b"\n") + 1]
    n = data.count(b"\n")
    with open(reference, "rb") as f:
        same = f.read(len(data)) == data
    # The rate over the second half of the records written: the sort is over by then.
    half = next(((t, sz) for t, sz in samples if sz >= len(data) / 2), samples[-1])
    rate = (n / 2) / max(1e-9, samples[-1][0] - half[0]) if n else 0.0
    came = "no record came" if first is None else f"first record at {first:.1f} s"
    return (f"{'finished' if finished else 'stopped'} after {wall:.1f} s: {came}, {n} records written ({rate / 1e3:.1f}k records/s over "
            f"the second half), peak {usage.ru_maxrss / 1024:.0f} MB; "
            f"{'the same bytes as' if same else 'DIFFERENT BYTES from'} the first {len(data) / 1e9:.2f} GB of -j N's output")


def _sha(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _same_start(data: Path, reference: Path) -> tuple[int, bool]:
    """(bytes of `data` up to its last full line, whether they begin `reference`), in chunks."""
    size = data.stat().st_size
    with open(data, "rb") as f:
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
    whole = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
    with open(data, "rb") as a, open(reference, "rb") as b:
        left = whole
        while left:
            n = min(left, 1 << 24)
            if a.read(n) != b.read(n):
                return whole, False
            left -= n
    return whole, True


def race(path: Path, out: Path, jobs: int, times: float, margin: float, until: float = 0,
         apart: bool = False) -> None:
    """-j JOBS and -j 1 started together on `path`; -j 1 is stopped `times` x the -j JOBS wall
    time (+ `margin` s) after its start. -j 1 shares the machine with -j JOBS only while that
    runs (1/`times` of its time at most): -j JOBS gets 16/17 of the cores then, -j 1 about one.
    Prints: -j JOBS's time, peak and SHA-256; then -j 1's time, peak and SHA-256 and the ratio
    when it finishes, else how long it ran (so the ratio is at least `times`) and whether the
    records it wrote are the first bytes of -j JOBS's output. `until` (s, 0: none): -j 1 is
    stopped then at the latest (the time a device call has left). `apart`: -j 1 starts only when
    -j JOBS has finished, so that each runs alone on the machine; its time and limit then count
    from its own start."""
    par_out, one_out = out.with_name("par.dict"), out.with_name("one.dict")
    for old in [par_out, one_out, *out.parent.glob(".one.dict.*.partial")]:
        old.unlink(missing_ok=True)
    t0 = time.perf_counter()
    # -v: its summary and where its time went (each window's start, first record, end) on stderr.
    par = subprocess.Popen([sys.executable, "-c", _PEAK, sys.executable, "-m", "pyprof.parse", "-v", "-j", str(jobs),
                            str(path), "-o", str(par_out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    def start_one() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "pyprof.parse", "-q", "-j", "1", str(path), "-o", str(one_out)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    one = None if apart else start_one()
    t_one = t0  # when -j 1 started
    limit = wall_par = None
    sha_par: concurrent.futures.Future | None = None
    hasher = concurrent.futures.ThreadPoolExecutor(1)
    said = 0.0
    ended = (0, 0, None)  # os.wait4 of -j 1, once it has ended (Popen.poll would reap it: no rusage)
    while True:
        time.sleep(0.2)
        now = time.perf_counter() - t0
        if limit is None and par.poll() is not None:
            wall_par = now
            if par.returncode:
                raise SystemExit(f"-j {jobs} failed: exit {par.returncode}")
            peak = int(par.stdout.read().split()[-1]) / 1024
            limit = times * wall_par + margin + (wall_par if apart else 0)  # since t0
            if until and limit > until:
                print(f"# -j 1 can only be given until {until:.0f} s, not {limit:.1f} s", flush=True)
                limit = until
            size = par_out.stat().st_size
            if apart:
                one, t_one = start_one(), time.perf_counter()
            print(f"{path.name}, -j {jobs} ({'alone' if apart else 'with -j 1 beside it'}): {wall_par:.2f} s, peak {peak:.0f} MB, "
                  f"{size / 1e9:.2f} GB; -j 1 gets until {limit:.1f} s ({times:g} x {wall_par:.2f} + {margin:g})",
                  flush=True)
            sha_par = hasher.submit(_sha, par_out)  # while -j 1 runs on its own core
        if one is not None and not ended[0]:
            ended = os.wait4(one.pid, os.WNOHANG)
            wall_one = time.perf_counter() - t_one
        if limit is not None and (ended[0] or now >= limit):
            break
        if now - said >= 60:
            said = now
            partial = next(out.parent.glob(".one.dict.*.partial"), None)
            print(f"# {now:.0f} s: -j 1 has written {partial.stat().st_size / 1e9 if partial else 0:.2f} GB", flush=True)
    finished = bool(ended[0])
    if not finished:
        one.kill()
        ended = os.wait4(one.pid, 0)
        wall_one = time.perf_counter() - t_one
    _, status, usage = ended
    code = os.waitstatus_to_exitcode(status)
    digest = sha_par.result()
    print(f"{path.name}, -j {jobs}: sha256 {digest}", flush=True)
    if finished:
        same = code == 0 and _sha(one_out) == digest
        print(f"{path.name}, -j 1: finished in {wall_one:.2f} s (exit {code}), peak "
              f"{usage.ru_maxrss / 1024:.0f} MB, {'the same sha256' if same else 'DIFFERENT BYTES'}; "
              f"-j {jobs} is {wall_one / wall_par:.2f}x faster", flush=True)
    else:
        partial = next(out.parent.glob(".one.dict.*.partial"))
        size, same = _same_start(partial, par_out)
        print(f"{path.name}, -j 1: stopped after {wall_one:.1f} s unfinished ({wall_one / wall_par:.2f} x the -j {jobs} "
              f"time: -j {jobs} is at least that much faster), peak {usage.ru_maxrss / 1024:.0f} MB; its "
              f"{size / 1e9:.2f} GB of whole records are {'the same bytes as' if same else 'DIFFERENT BYTES from'} "
              f"the start of -j {jobs}'s output", flush=True)
        partial.unlink()
    for f in (par_out, one_out):
        f.unlink(missing_ok=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["ranks", "huge"])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--kernels", type=int, default=100_000)
    p.add_argument("--jobs", type=int, default=16)
    p.add_argument("--gen-procs", type=int, default=os.cpu_count())
    p.add_argument("--single", default="", help="huge: also parse these sizes (kernels) with one process")
    p.add_argument("--single-full", action="store_true", help="huge: also parse the large export with one process")
    p.add_argument("--single-limit", type=float, default=0,
                   help="huge: also run -j 1 on the large export for at most this many seconds")
    p.add_argument("--race", type=float, default=0, metavar="X",
                   help="huge: -j JOBS and -j 1 started together, -j 1 stopped at X times the -j JOBS time")
    p.add_argument("--margin", type=float, default=5, help="--race: seconds added to -j 1's limit")
    p.add_argument("--until", type=float, default=0, help="--race: stop -j 1 after this many seconds at the latest")
    p.add_argument("--apart", action="store_true", help="--race: start -j 1 when -j JOBS has finished (each alone)")
    p.add_argument("--together", action="store_true", help="ranks: also JOBS exports parsed by JOBS processes at once")
    p.add_argument("--dask", action="store_true",
                   help="ranks: also parse the folder on a Dask LocalCluster of JOBS worker processes (parse --dask), "
                        "its output's SHA-256 against the -j JOBS one's")
    p.add_argument("--dask-at", metavar="ADDRESS", default="",
                   help="--dask: a running cluster's scheduler (tcp://host:8786) instead of a LocalCluster started "
                        "by each run (its start then not timed)")
    p.add_argument("--notes", type=Path, metavar="DIR",
                   help="ranks: write each parse's -v notes (per part: started, first record, ended, CPU s) "
                        "to DIR/j<JOBS>.v, DIR/dask.v")
    p.add_argument("--base", type=int, default=100_000, help="huge: kernels of the export that is repeated")
    p.add_argument("--work", type=Path, default=Path("/tmp/pyprof-parallel-bench"))
    p.add_argument("--out", type=Path, help="where outputs are written (default: --work)")
    p.add_argument("--gen-only", action="store_true", help="generate the exports and stop")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"# {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; wall seconds; peak = largest RSS of parse "
          "and its workers", flush=True)
    (args.out or args.work).mkdir(parents=True, exist_ok=True)
    out = (args.out or args.work) / "out.dict"
    if args.what == "ranks":
        folder = make_ranks(args.work, args.ranks, args.kernels, args.gen_procs)
        if args.gen_only:
            return
        files = sorted(folder.glob("trace_*.sqlite"), key=lambda f: f.stat().st_size)
        if args.notes:
            args.notes.mkdir(parents=True, exist_ok=True)
        note = (lambda name: args.notes / name) if args.notes else (lambda name: None)
        wall_all, peak_all, digest = parse([folder], out, args.jobs, digest=args.dask, notes=note(f"j{args.jobs}.v"))
        print(f"{args.ranks} exports, -j {args.jobs}: {wall_all:.2f} s, peak {peak_all:.0f} MB, {digest}", flush=True)
        wall_one, peak_one, _ = parse([files[-1]], out, 1, digest=False)
        print(f"largest export alone, -j 1: {wall_one:.2f} s, peak {peak_one:.0f} MB", flush=True)
        print(f"ratio {wall_all / wall_one:.2f}x (goal <= 2x; {-(-args.ranks // args.jobs)}x is the floor with "
              f"{args.jobs} workers at the speed of one alone)", flush=True)
        if args.dask:
            extra = ("--dask", args.dask_at) if args.dask_at else ("--dask",)
            where = f"the cluster at {args.dask_at}" if args.dask_at else \
                f"a LocalCluster of {args.jobs} processes started by the run"
            wall_dask, _, digest_dask = parse([folder], out, args.jobs, extra=extra, notes=note("dask.v"))
            print(f"{args.ranks} exports, --dask ({where}): "
                  f"{wall_dask:.2f} s, {digest_dask}; ratio {wall_dask / wall_one:.2f}x; "
                  f"{'same bytes as' if digest_dask == digest else 'DIFFERENT bytes from'} -j {args.jobs}", flush=True)
        if args.together:
            walls = together(files[-args.jobs:], out)
            print(f"{len(walls)} largest exports, each by a -j 1 process of its own, all at once: slowest "
                  f"{max(walls):.2f} s, mean {sum(walls) / len(walls):.2f} s ({max(walls) / wall_one:.2f}x alone)",
                  flush=True)
        return
    path = make_huge(args.work, args.kernels, args.base)
    if args.gen_only:
        for size in [int(s) for s in args.single.split(",") if s]:
            make_huge(args.work, size, args.base)
        return
    if args.race:
        race(path, out, args.jobs, args.race, args.margin, args.until, args.apart)
        return
    # The digest is compared only with a full -j 1 run (a bounded one compares bytes itself).
    wall_par, peak_par, digest_par = parse([path], out, args.jobs, digest=args.single_full or bool(args.single),
                                           keep=args.single_limit > 0)
    print(f"{path.name}, -j {args.jobs}: {wall_par:.2f} s, peak {peak_par:.0f} MB, sha256 {digest_par}", flush=True)
    if args.single_limit:
        reference = out.with_suffix(".ref")
        out.rename(reference)
        print(f"{path.name}, -j 1 for at most {args.single_limit:.0f} s: "
              f"{bounded(path, out, args.single_limit, reference)}", flush=True)
        reference.unlink()
    for size in [int(s) for s in args.single.split(",") if s]:
        small = make_huge(args.work, size, args.base)
        wall, peak, digest = parse([small], out, 1)
        wall_j, _, digest_j = parse([small], out, args.jobs)
        print(f"{small.name}, -j 1: {wall:.2f} s, peak {peak:.0f} MB; -j {args.jobs}: {wall_j:.2f} s "
              f"({wall / wall_j:.2f}x), {'same bytes' if digest == digest_j else 'DIFFERENT BYTES'} ({digest})",
              flush=True)
    if args.single_full:
        wall, peak, digest = parse([path], out, 1)
        print(f"{path.name}, -j 1: {wall:.2f} s, peak {peak:.0f} MB, sha256 {digest}; -j {args.jobs} is "
              f"{wall / wall_par:.2f}x faster, {'same bytes' if digest == digest_par else 'DIFFERENT BYTES'}",
              flush=True)


if __name__ == "__main__":
    main()
