"""`--plot roofline.png`: every kernel as a point on the GPU's roofline (matplotlib, optional).

x: arithmetic intensity (FLOP/B), y: achieved TFLOP/s, log-log; marker area grows with the
kernel's time; colour says Tensor Cores (tc 1), a matrix kernel on CUDA cores (tc 0) or
anything else. Roofs come from peaks.py: the memory roof (peak bandwidth x intensity) and one
compute roof per math path the plotted kernels ran on. Only kernels with known, non-zero FLOPs
and bytes can be placed; the others are counted in the note the plot returns. Points are kept
in memory (a few numbers and a name per kernel): a plot of millions of kernels is unreadable
anyway, so no streaming reduction is attempted.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from types import ModuleType
from typing import NamedTuple

from ...errors import EXIT_TOOL, PyprofError
from ..analysis import Facts
from ..peaks import FP16_TC, FP32, FP64, FP64_TC, INT8_TC, TF32_TC, Peaks

FLAG = "--plot"
ORDER = 2
JSON = False
NEEDS = "--plot needs matplotlib: pip install matplotlib (or pip install 'pyprof[plot]')"
MEMORY_ROOF = "#b5651d"
LABELS = 8          # ops (by total plotted time) whose longest kernel is labelled
PATH_NAMES = {FP16_TC: "FP16/BF16 Tensor Cores", TF32_TC: "TF32 Tensor Cores", INT8_TC: "INT8 Tensor Cores (TOPS)",
              FP64_TC: "FP64 Tensor Cores", FP32: "FP32 CUDA cores", FP64: "FP64 CUDA cores"}
COLOURS = {True: ("#2a9d3f", "Tensor Cores (tc 1)"), False: ("#d62728", "matrix kernel on CUDA cores (tc 0)"),
           None: ("#1f77b4", "other kernels (element-wise, norms, ...)")}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--plot PNG."""
    group.add_argument("--plot", metavar="PNG", help="write a roofline plot of every kernel (needs matplotlib)")


def wanted(args: argparse.Namespace) -> bool:
    """--plot given."""
    return bool(args.plot)


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """matplotlib is there, when the plot is asked for (before anything is read)."""
    if wanted(args):
        require_matplotlib()


def require_matplotlib() -> None:
    """Raise PyprofError with the install hint when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PyprofError(NEEDS, EXIT_TOOL) from None


class Point(NamedTuple):
    ai: float        # FLOP/B
    tflops: float    # achieved TFLOP/s
    dur: int         # ns
    tc: bool | None  # Facts.tc
    op: str
    kernel: str      # short name


class Points:
    """Kernels to plot, fed one analysed record at a time: a scan.Sink."""

    needs_facts = True

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.skipped = 0               # kernels without known non-zero FLOPs and bytes
        self.peaks: Peaks | None = None
        self.gpu: str | None = None
        self.paths: set = set()

    def add(self, rec: dict, f: Facts) -> None:
        """Place one record (memcpy/memset records are not kernels and are ignored)."""
        if rec.get("kind", "kernel") != "kernel":
            return
        gpu = rec.get("gpu")
        if self.gpu is None and isinstance(gpu, dict) and gpu.get("name"):
            self.gpu = gpu["name"]
        if self.peaks is None and f.peaks is not None:
            self.peaks = f.peaks
        dur = rec.get("kDuration")
        if not f.flops or not f.bytes or not dur or dur <= 0:
            self.skipped += 1
            return
        if f.path:
            self.paths.add(f.path)
        self.points.append(Point(f.flops / f.bytes, f.flops / dur * 1e-3, dur, f.tc, rec.get("op") or "?",
                                 rec.get("kShortName") or "?"))


def sink(args: argparse.Namespace) -> Points:
    """No points yet."""
    return Points()


def write(pts: Points, args: argparse.Namespace) -> None:
    """Draw the plot; what it shows and leaves out goes to stderr."""
    for line in plot(pts, args.plot):
        print(f"pyprof.prof: {line}", file=sys.stderr)


def short_kernel(name: str, keep: int = 26) -> str:
    """A kernel name cut to `keep` characters (with an ellipsis) for labels."""
    return name if len(name) <= keep else name[:keep - 1] + "\u2026"


def _labelled(points: list[Point]) -> list[tuple]:
    """(point, text) for the LABELS ops with the most plotted time: one label per op (its kernels
    often sit in one cluster), at its longest kernel, naming the kernel and how many others."""
    total: dict[str, int] = defaultdict(int)
    longest: dict[str, Point] = {}
    kernels: dict[str, set] = defaultdict(set)
    for p in points:
        total[p.op] += p.dur
        kernels[p.op].add(p.kernel)
        if p.op not in longest or p.dur > longest[p.op].dur:
            longest[p.op] = p
    out = []
    for op in sorted(total, key=lambda k: (-total[k], k))[:LABELS]:
        p = longest[op]
        more = len(kernels[op]) - 1
        out.append((p, f"{op}: {short_kernel(p.kernel)}" + (f" (+{more} kernel{'s' if more > 1 else ''})" if more else "")))
    return out


def plot(pts: Points, path: str) -> list[str]:
    """Draw `pts` to the image file `path`; returns notes for stderr (what is not shown, why)."""
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")  # files only: no display needed or wanted
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    notes = []
    fig, ax = plt.subplots(figsize=(11, 7), dpi=120)
    ax.set_xscale("log")
    ax.set_yscale("log")
    pk = pts.peaks
    roofs = {p: pk.flops[p] for p in sorted(pts.paths) if pk and p in pk.flops} if pk else {}
    xs = [p.ai for p in pts.points] or [1.0]
    ys = [p.tflops for p in pts.points] or [1.0]
    lo_x, hi_x = min(xs) / 4, max(xs) * 4
    if pk and pk.gbps:
        for peak in roofs.values():
            hi_x = max(hi_x, peak * 1e3 / pk.gbps * 4)  # show every ridge point
    lo_y = min(ys) / 4
    hi_y = max(ys + list(roofs.values())) * 3
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)

    handles = []
    if pk and pk.gbps:
        bw = pk.gbps / 1e3  # TFLOP/s per FLOP/B
        top_roof = max(roofs.values(), default=hi_y)
        x_end = top_roof / bw
        ax.plot([lo_x, x_end], [bw * lo_x, top_roof], color=MEMORY_ROOF, lw=1.8)
        handles.append(Line2D([], [], color=MEMORY_ROOF, lw=1.8, label=f"memory roof {pk.gbps:,.0f} GB/s"))
        styles = ["-", "--", "-.", ":"]
        for i, (path_name, peak) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
            # Roof values go in the legend: text on the plot would collide with kernel labels.
            ax.plot([peak / bw, hi_x], [peak, peak], color="#444", lw=1.6, ls=styles[i % 4])
            handles.append(Line2D([], [], color="#444", lw=1.6, ls=styles[i % 4],
                                  label=f"{PATH_NAMES.get(path_name, path_name)} roof {peak:g} TFLOP/s"))
    if not pk:
        notes.append(f"roofline: GPU {pts.gpu or 'unknown'} not in the peak table: kernels plotted without roofs")
    elif not roofs:
        notes.append("roofline: no compute peak known for the kernels' math paths: memory roof only")

    # Biggest first so small markers stay visible on top. Area ~ time, relative to the longest.
    longest = max((p.dur for p in pts.points), default=1)
    for tc in (None, False, True):
        sel = sorted((p for p in pts.points if p.tc is tc), key=lambda p: -p.dur)
        if not sel:
            continue
        colour, name = COLOURS[tc]
        ax.scatter([p.ai for p in sel], [p.tflops for p in sel], s=[20 + 380 * p.dur / longest for p in sel],
                   c=colour, alpha=0.55, edgecolors="white", linewidths=0.5, zorder=3)
        handles.append(Line2D([], [], ls="", marker="o", ms=8, color=colour, alpha=0.7,
                              label=f"{name}: {len(sel)}"))
    _label(fig, ax, _labelled(pts.points))

    gpu = pts.gpu or "unknown GPU"
    peaks_of = f"peaks of {pk.name}" if pk and roofs else "no roofs: GPU not in the peak table" if not pk else \
        "memory roof only"
    ax.set_title(f"Roofline on {gpu} ({peaks_of})\n{len(pts.points)} kernels plotted, marker area ~ kernel time",
                 fontsize=11)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, algorithmic bytes)")
    ax.set_ylabel("achieved performance (TFLOP/s)")
    ax.grid(True, which="major", ls=":", lw=0.6, color="#bbb")
    ax.legend(handles=handles, loc="upper left", fontsize=9, framealpha=0.9)
    if pts.skipped:
        notes.append(f"roofline: {pts.skipped} kernels without known non-zero FLOPs and bytes are not plotted")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except (OSError, ValueError) as err:
        raise PyprofError(f"cannot write {path}: {err}", EXIT_TOOL) from None
    finally:
        plt.close(fig)
    notes.append(f"roofline of {len(pts.points)} kernels written to {path}")
    return notes


def _label(fig, ax, chosen: list[tuple]) -> None:
    """Label points: to the right of the point (to the left in the right third of the plot),
    trying offsets further up and down until the label overlaps no label placed before."""
    from math import log10

    renderer = fig.canvas.get_renderer()
    lo, hi = (log10(v) for v in ax.get_xlim())
    placed = []
    for p, text in sorted(chosen, key=lambda pt: -pt[0].tflops):
        left = (log10(p.ai) - lo) / (hi - lo) > 0.66
        for step in range(17):
            dy = 13 * ((step + 1) // 2) * (1 if step % 2 else -1)
            t = ax.annotate(text, (p.ai, p.tflops), xytext=(-14 if left else 14, dy), textcoords="offset points",
                            fontsize=8, va="center", ha="right" if left else "left", color="#111", zorder=5,
                            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8),
                            arrowprops=dict(arrowstyle="-", color="#666", lw=0.6))
            box = t.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
            t.remove()  # no free slot in reach: that point stays unlabelled
