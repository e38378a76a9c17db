"""How much of a compiled step's GPU time prof explains, and its FLOPs against an eager capture.

    python benchmarks/compiled_coverage.py examples/gpt_compiled.sqlite examples/gpt_graphs.sqlite \\
        --eager examples/gpt.sqlite

Per capture (an nsys export or parse's records): kernels, GPU time, and the share of GPU time in
kernels whose op, module path, FLOPs and bytes are known (all four, and each alone); the share
joined to the compile-time table; total FLOPs, and with `--eager` the difference from the eager
capture's total. A kernel's module path counts as known when it names the source module(s), or
when the kernel ran outside every module (the loss, the optimizer step); the compiled wrapper's
own name (`OptimizedModule`, left where a node sits in the compiled root's own forward) does not.
"""
from __future__ import annotations

import argparse
from typing import Optional

import pyprof

WRAPPER = "OptimizedModule"


def measure(path: str) -> dict:
    """The coverage figures of one capture."""
    total = joined = 0
    known = {"op": 0, "module": 0, "flops": 0, "bytes": 0, "all": 0}
    flops = 0
    kernels = 0
    for rec, row in zip(pyprof.records(path), pyprof.rows(path, columns="op,module,flops,bytes,sil")):
        if rec.get("kind", "kernel") != "kernel":
            continue
        kernels += 1
        t = row["sil"]
        total += t
        has = {"op": row["op"] not in (None, "-"),
               "module": row["module"] != WRAPPER,
               "flops": row["flops"] is not None,
               "bytes": row["bytes"] is not None}
        for k, v in has.items():
            known[k] += t if v else 0
        known["all"] += t if all(has.values()) else 0
        joined += t if rec.get("compiled") else 0
        flops += row["flops"] or 0
    pct = {k: 100.0 * v / total for k, v in known.items()}
    return {"kernels": kernels, "gpu_ns": total, "pct": pct, "joined_pct": 100.0 * joined / total, "flops": flops}


def main(argv: Optional[list] = None) -> int:
    """Print one line per capture."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("captures", nargs="+")
    p.add_argument("--eager", help="an eager capture of the same step: FLOPs compared")
    args = p.parse_args(argv)
    base = measure(args.eager)["flops"] if args.eager else None
    print(f"{'capture':28} {'kernels':>7} {'GPU us':>8} {'all4 %':>7} {'op %':>6} {'module %':>8} {'FLOPs %':>7} "
          f"{'bytes %':>7} {'joined %':>8} {'GFLOP':>9} {'vs eager':>9}")
    if args.eager:
        m = measure(args.eager)
        print(_line(args.eager, m, base))
    for path in args.captures:
        print(_line(path, measure(path), base))
    return 0


def _line(path: str, m: dict, base: Optional[int]) -> str:
    p = m["pct"]
    diff = f"{100.0 * (m['flops'] - base) / base:+.2f}%" if base else "-"
    return (f"{path.rsplit('/', 1)[-1]:28} {m['kernels']:>7} {m['gpu_ns'] / 1e3:>8.1f} {p['all']:>7.1f} {p['op']:>6.1f} "
            f"{p['module']:>8.1f} {p['flops']:>7.1f} {p['bytes']:>7.1f} {m['joined_pct']:>8.1f} "
            f"{m['flops'] / 1e9:>9.4f} {diff:>9}")


if __name__ == "__main__":
    raise SystemExit(main())
