"""Issue 32's collectives goal: NCCL kernels with bytes and bus bandwidth on every real
multi-rank capture in the repository.

    python benchmarks/nccl_coverage.py [tests/data]   # > benchmarks/results/nccl_coverage.txt

Each capture's rank exports (NAME_0.sqlite.xz, NAME_1.sqlite.xz, ...) are unpacked into a
temporary folder and parsed together, as `python -m pyprof.parse NAME_*.sqlite` would; a kernel
counts as sized where prof's collective for it (prof/comms/collectives.py) has a size, and as
with busbw where that and its group size give nccl-tests' bus bandwidth for its duration.
"""
from __future__ import annotations

import collections
import json
import lzma
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pyprof.prof.comms.collectives import of_record


def captures(folder: Path) -> dict[str, list[Path]]:
    """Capture name -> its rank exports, in rank order."""
    found: dict[str, list[tuple[int, Path]]] = collections.defaultdict(list)
    for p in folder.glob("*_[0-9].sqlite.xz"):
        m = re.fullmatch(r"(.+)_(\d+)\.sqlite\.xz", p.name)
        if m:
            found[m[1]].append((int(m[2]), p))
    return {name: [p for _, p in sorted(v)] for name, v in sorted(found.items()) if len(v) > 1}


def coverage(paths: list[Path], work: Path) -> tuple[int, int, int]:
    """(NCCL kernels, those with a size, those with busbw) of one capture's ranks."""
    unpacked = []
    for p in paths:
        out = work / p.name[:-3]
        with lzma.open(p) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        unpacked.append(out)
    records = work / "job.dict"
    subprocess.run([sys.executable, "-m", "pyprof.parse", *map(str, unpacked), "-o", str(records)],
                   check=True, capture_output=True)
    n = sized = bus = 0
    with open(records) as f:
        for line in f:
            rec = json.loads(line)
            coll = of_record(rec)
            if coll is None:
                continue
            n += 1
            sized += coll.size is not None
            bus += coll.busbw(rec.get("kDuration")) is not None
    return n, sized, bus


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
    print(f"{'capture':<24} {'ranks':>5} {'NCCL kernels':>12} {'with bytes':>11} {'with busbw':>11}")
    for name, paths in captures(folder).items():
        with tempfile.TemporaryDirectory() as tmp:
            n, sized, bus = coverage(paths, Path(tmp))
        if n:
            print(f"{name:<24} {len(paths):>5} {n:>12} {sized:>11} {bus:>11}")


if __name__ == "__main__":
    main()
