"""Compare the attribution of two captures of the same program: pyprof's default mode (markers and
backward node hooks) against pyprof with emit_nvtx (attribution by PyTorch's sequence numbers).

Per kernel, in launch order: direction, op, module, call site, FLOPs and bytes (prof's columns). When the
two captures launched the same kernels (same names in the same order) they are compared kernel by
kernel; otherwise (a library picked other kernels in the other process) per (dir, mod, op,
module, site): kernel count aside, the summed FLOPs.

    python benchmarks/attribution_compare.py default.sqlite aten.sqlite
"""
from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any, Dict, List, Tuple

import os

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyprof  # noqa: E402

COLUMNS = "kernel,dir,mod,op,module,trace,flops,bytes"
KEY = ("dir", "mod", "op", "module", "trace")


def kernels(path: str) -> List[Dict[str, Any]]:
    """prof's rows of the kernels (memcpy/memset left out) of a capture."""
    return list(pyprof.rows(path, COLUMNS))


def differences(default: List[Dict[str, Any]], aten: List[Dict[str, Any]]) -> Tuple[str, List[str]]:
    """("kernel" or "op", lines describing each difference; empty when the attribution agrees)."""
    if [r["kernel"] for r in default] == [r["kernel"] for r in aten]:
        out = []
        for i, (a, b) in enumerate(zip(default, aten)):
            fa = tuple(a[k] for k in KEY + ("flops", "bytes"))
            fb = tuple(b[k] for k in KEY + ("flops", "bytes"))
            if fa != fb:
                out.append(f"kernel {i} {a['kernel']}: default {fa} != aten {fb}")
        return "kernel", out
    sums: List[Dict[tuple, int]] = []
    for rows in (default, aten):
        s: Dict[tuple, int] = defaultdict(int)
        for r in rows:
            s[tuple(r[k] for k in KEY)] += r["flops"] or 0
        sums.append(s)
    out = [f"{k}: default {sums[0].get(k)} FLOPs != aten {sums[1].get(k)}"
           for k in sorted(set(sums[0]) | set(sums[1]), key=repr) if sums[0].get(k) != sums[1].get(k)]
    return "op", out


def main() -> None:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        sys.exit(2)
    a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
    how, diffs = differences(a, b)
    print(f"{sys.argv[1]}: {len(a)} kernels; {sys.argv[2]}: {len(b)} kernels; compared per {how}")
    for line in diffs:
        print(line)
    print("attribution equal" if not diffs else f"{len(diffs)} differences")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
