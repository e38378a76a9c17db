"""Parse in parallel: many rank exports side by side, and one large export in time windows.

    python benchmarks/parse_parallel.py ranks --ranks 64 --kernels 100000 --jobs 16
    python benchmarks/parse_parallel.py huge --kernels 10000000 --jobs 16 [--single 1000000,2000000]

`ranks`: a synthetic data-parallel job (tests/nsys_synth.py rank_export: forward and backward
GEMMs, DDP bucket all-reduces with record_param_comms and NCCL ranges, pyprof markers), one
export per rank of about --kernels kernels each. Times `python -m pyprof.parse -j JOBS FOLDER`
against the largest export parsed alone by one process (`-j 1`). Goal: <= 2x.

`huge`: one export of about --kernels kernels (tests/nsys_synth.py workload, 100k kernels,
repeated along the timeline by nsys_synth.repeat at SQLite's speed). Times `-j JOBS` and checks
the output's SHA-256 against `-j 1` on the same export when --single-full is given; --single
sizes are parsed by one process too (the first N kernels' worth of the same workload), so the
one-process time of the large export can be read off their (linear) growth when running it in
full does not fit the time at hand. Goal: >= 8x, byte-identical, <= 200 MB per worker.

Every parse writes to a file under --work (choose a RAM disk: outputs are ~1.1 kB per kernel);
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


def make_huge(work: Path, kernels: int) -> Path:
    base = work / "workload-100000.sqlite"
    if not base.exists():
        nsys_synth.workload(str(base) + ".partial", 100_000)
        os.rename(str(base) + ".partial", base)
    copies = max(1, kernels // 100_000)
    path = work / f"workload-{copies * 100_000}.sqlite"
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


def parse(inputs: list, out: Path, jobs: int, digest: bool = True) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) of the parse and its workers, SHA-256 (when `digest`) and size
    of the output."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "pyprof.parse", "-q", "-j", str(jobs),
                           *map(str, inputs), "-o", str(out)], cwd=ROOT, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    sha = hashlib.sha256()
    if digest:
        with open(out, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                sha.update(chunk)
    size = out.stat().st_size
    out.unlink()
    return wall, int(done.stdout.split()[-1]) / 1024, f"{sha.hexdigest()[:16] if digest else '-'} {size / 1e9:.2f} GB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["ranks", "huge"])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--kernels", type=int, default=100_000)
    p.add_argument("--jobs", type=int, default=16)
    p.add_argument("--gen-procs", type=int, default=os.cpu_count())
    p.add_argument("--single", default="", help="huge: also parse these sizes (kernels) with one process")
    p.add_argument("--single-full", action="store_true", help="huge: also parse the large export with one process")
    p.add_argument("--work", type=Path, default=Path("/tmp/pyprof-parallel-bench"))
    p.add_argument("--gen-only", action="store_true", help="generate the exports and stop")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"# {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; wall seconds; peak = largest RSS of parse "
          "and its workers", flush=True)
    out = args.work / "out.dict"
    if args.what == "ranks":
        folder = make_ranks(args.work, args.ranks, args.kernels, args.gen_procs)
        if args.gen_only:
            return
        files = sorted(folder.glob("trace_*.sqlite"), key=lambda f: f.stat().st_size)
        wall_all, peak_all, digest = parse([folder], out, args.jobs, digest=False)
        print(f"{args.ranks} exports, -j {args.jobs}: {wall_all:.2f} s, peak {peak_all:.0f} MB, {digest}", flush=True)
        wall_one, peak_one, _ = parse([files[-1]], out, 1, digest=False)
        print(f"largest export alone, -j 1: {wall_one:.2f} s, peak {peak_one:.0f} MB", flush=True)
        print(f"ratio {wall_all / wall_one:.2f}x (goal <= 2x)", flush=True)
        return
    path = make_huge(args.work, args.kernels)
    if args.gen_only:
        for size in [int(s) for s in args.single.split(",") if s]:
            make_huge(args.work, size)
        return
    wall_par, peak_par, digest_par = parse([path], out, args.jobs)
    print(f"{path.name}, -j {args.jobs}: {wall_par:.2f} s, peak {peak_par:.0f} MB, sha256 {digest_par}", flush=True)
    for size in [int(s) for s in args.single.split(",") if s]:
        small = make_huge(args.work, size)
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
