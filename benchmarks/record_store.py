"""The Parquet record store against JSON Lines on one large synthetic export (issue 32's goals:
store <= 1/5 of the JSON Lines size, `prof --summary` >= 5x faster on it, peak memory <= 500 MB,
pyprof.dataframe() on the store without a Python dict per record).

The export is benchmarks/parse_speed.py's cached synthetic workload; it is parsed once to JSON
Lines (`python -m pyprof.parse -q`), and the store is written from those lines by the same code
`parse -o X.parquet` runs after parsing (pyprof.store.write.convert), timed on its own. Each prof
run is a child process as users run it (stdout to a file; the two summaries' files are compared
byte for byte); figures are the child's CPU time (steadier than wall time on a shared machine)
and its peak RSS (what /usr/bin/time -v reports as maximum resident set size).

    python benchmarks/record_store.py --kernels 1000000      # the export takes minutes to make once

With --records (the lines) and --store (the store written from them) both runs read files made
before; the store's writing is then not timed.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from parse_speed import export_for  # noqa: E402  (the cached synthetic exports)
from prof_speed import timed  # noqa: E402  (CPU seconds and peak RSS of one child)

DATAFRAME = ("import pyprof, pyarrow.dataset as ds, sys; "
             "df = pyprof.dataframe(sys.argv[1], fields=['op', 'kShortName', 'kDuration', 'layer'], "
             "where=ds.field('kind') == 'kernel'); print(len(df), int(df.kDuration.sum()))")


def size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000, help="kernels in the synthetic export")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "pyprof-parse-bench",
                    help="where generated exports are kept between runs")
    ap.add_argument("--records", type=Path, help="the export's JSON Lines, already parsed (else parsed now)")
    ap.add_argument("--store", type=Path, help="the store already written from those lines (else written now, timed)")
    args = ap.parse_args()
    export = export_for(args.kernels, args.cache)
    with tempfile.TemporaryDirectory() as tmp:
        lines = args.records or Path(tmp) / "net.dict"
        if args.records is None:
            timed([sys.executable, "-m", "pyprof.parse", "-q", str(export)], str(lines))
        store = args.store or Path(tmp) / "net.parquet"
        conv = None
        if args.store is None:
            c0, t0 = time.process_time(), time.perf_counter()
            from pyprof.store.write import convert
            with open(lines, "rb") as stream:
                convert(stream, str(lines), str(store), str(store))
            conv = time.process_time() - c0, time.perf_counter() - t0
        n = sum(1 for _ in open(lines, "rb"))
        print(f"record_store: {n} records of {export.name}; {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
        js, pq = size(lines), size(store)
        print(f"  JSON Lines {js / 1e6:9.1f} MB   Parquet store {pq / 1e6:7.1f} MB   ratio 1/{js / pq:.1f}"
              "   (goal <= 1/5)")
        if conv:
            print(f"  writing the store from the lines: {conv[0]:.1f} CPU s ({conv[1]:.1f} s wall)")
        print(f"  {'run':<34} {'CPU s':>7} {'wall s':>7} {'peak MiB':>9}")
        cpu, out = {}, {}
        for label, cmd in (
                ("prof --summary, JSON Lines", [sys.executable, "-m", "pyprof.prof", "--summary", str(lines)]),
                ("prof --summary, Parquet", [sys.executable, "-m", "pyprof.prof", "--summary", str(store)]),
                ("dataframe(fields=4, where), Parquet", [sys.executable, "-c", DATAFRAME, str(store)])):
            out[label] = Path(tmp) / f"out{len(out)}.txt"
            wall, cpu[label], rss = timed(cmd, str(out[label]))
            print(f"  {label:<34} {cpu[label]:7.1f} {wall:7.1f} {rss:9.0f}")
        speedup = cpu["prof --summary, JSON Lines"] / cpu["prof --summary, Parquet"]
        print(f"  prof --summary: Parquet {speedup:.2f}x the speed of JSON Lines (goal >= 5x); peak goal <= 500 MB")
        same = out["prof --summary, JSON Lines"].read_bytes() == out["prof --summary, Parquet"].read_bytes()
        print(f"  --summary output identical: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
