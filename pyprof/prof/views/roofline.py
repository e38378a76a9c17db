"""`--plot roofline.png`: every kernel as a point on the GPU's roofline (matplotlib, optional).

x: arithmetic intensity (FLOP/B), y: achieved TFLOP/s, log-log; marker area grows with the
kernel's time; colour says Tensor Cores (tc 1), a matrix kernel on CUDA cores (tc 0) or
anything else. Roofs come from peaks.py: the memory roof (peak bandwidth x intensity) and one
compute roof per math path the plotted kernels ran on. Only kernels with known, non-zero FLOPs
and bytes can be placed; the others are counted in the note the plot returns. Kernels with fewer
than TRIVIAL FLOPs (scalar bookkeeping: a step counter, a loss scale) are left out too: they say
nothing about the math and would add a roof of their own (a 1-FLOP fp64 scalar) or stretch the
axes by decades (int64 scalar ops). A kernel above a roof (columns.over_roof: cache hits, or work
shared with other kernels) is drawn hollow. Labels are placed by our own search (no adjustText:
it needs scipy) and never dropped: each goes to the free spot nearest its point. Points are kept
in memory (a few numbers and a name per kernel): a plot of millions of kernels is unreadable
anyway, so no streaming reduction is attempted.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from types import ModuleType
from typing import Iterable, NamedTuple

from ...errors import EXIT_TOOL, PyprofError, cannot_write, one_line
from ...parse.output import open_output
from ...text import count
from ..pricing.analysis import Facts
from ..columns import over_roof, pct_of_peak
from ..groups import input_shapes
from ..pricing.peaks import FP16_TC, FP32, FP64, FP64_TC, INT8_TC, TF32_TC, Peaks

FLAG = "--plot"
ORDER = 2
JSON = False
NEEDS = "--plot needs matplotlib: pip install matplotlib (or pip install 'pyprof-nvtx[plot]')"
MEMORY_ROOF = "#b5651d"
LABELS = 8          # ops (by total plotted time) whose longest kernel is labelled
TRIVIAL = 4096      # FLOPs below which a kernel is not plotted
PATH_NAMES = {FP16_TC: "FP16/BF16 Tensor Cores", TF32_TC: "TF32 Tensor Cores", INT8_TC: "INT8 Tensor Cores (TOPS)",
              FP64_TC: "FP64 Tensor Cores", FP32: "FP32 CUDA cores", FP64: "FP64 CUDA cores"}
COLOURS = {True: ("#2a9d3f", "Tensor Cores (tc 1)"), False: ("#d62728", "matrix kernel on CUDA cores (tc 0)"),
           None: ("#1f77b4", "other kernels (element-wise, norms, ...)")}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--plot PNG."""
    group.add_argument("--plot", metavar="PNG", help="write a roofline plot of every kernel to PNG, exactly that "
                                                     "name, in the format its extension names (.svg, .pdf, ...; "
                                                     "PNG for any other) (needs matplotlib)")


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
    over: bool = False  # above a roof
    module: str = "-"
    shapes: str = "-"   # groups.input_shapes
    flops: int = 0
    bytes: int = 0
    pct_peak: float | None = None  # of its own math path's peak


class Points:
    """Kernels to plot, fed one analysed record at a time: a scan.Sink."""

    needs_facts = True

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.skipped = 0               # kernels without known non-zero FLOPs and bytes
        self.trivial = 0               # kernels with fewer than TRIVIAL FLOPs
        self.peaks: Peaks | None = None
        self.gpu: str | None = None
        self.paths: set = set()

    def add(self, rec: dict, f: Facts) -> None:
        """Place one record (memcpy/memset records are not kernels and are ignored)."""
        if rec.get("kind", "kernel") != "kernel":
            return
        gpu = rec.get("gpu")
        if self.gpu is None and isinstance(gpu, dict) and gpu.get("name"):
            self.gpu = one_line(str(gpu["name"]))
        if self.peaks is None and f.peaks is not None:
            self.peaks = f.peaks
        dur = rec.get("kDuration")
        if not f.flops or not f.bytes or not dur or dur <= 0:
            self.skipped += 1
            return
        if f.flops < TRIVIAL:
            self.trivial += 1
            return
        if f.path:
            self.paths.add(f.path)
        # Names as stderr shows them (errors.one_line): matplotlib cannot draw a lone surrogate.
        self.points.append(Point(f.flops / f.bytes, f.flops / dur * 1e-3, dur, f.tc, one_line(str(rec.get("op") or "?")),
                                 one_line(str(rec.get("kShortName") or "?")), over_roof(rec, f), rec.get("module") or "-",
                                 input_shapes(rec), f.flops, f.bytes, pct_of_peak(rec, f)))


def compute_roofs(pts: Points) -> dict[str, float]:
    """The compute roofs (TFLOP/s) of the math paths the plotted kernels ran on, by path."""
    pk = pts.peaks
    return {p: pk.flops[p] for p in sorted(pts.paths) if p in pk.flops} if pk else {}


def report(pts: Points) -> dict:
    """The roofline as one JSON-able object: the GPU, its roofs (memory in GB/s, compute in
    TFLOP/s per math path, named as in PATH_NAMES) and every plotted kernel, with the counts of
    those left out."""
    pk = pts.peaks
    return {"gpu": pts.gpu, "peaks_of": pk.name if pk else None, "memory_gbps": pk.gbps if pk else None,
            "roofs": [{"path": p, "name": PATH_NAMES.get(p, p), "tflops": v} for p, v in compute_roofs(pts).items()],
            "points": [p._asdict() for p in pts.points], "skipped": pts.skipped, "trivial": pts.trivial}


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
    roofs = compute_roofs(pts)
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
        for over in (False, True):
            part = [p for p in sel if p.over == over]
            if part:
                ax.scatter([p.ai for p in part], [p.tflops for p in part],
                           s=[20 + 380 * p.dur / longest for p in part], zorder=3,
                           **(dict(facecolors="none", edgecolors=colour, linewidths=1.2) if over else
                              dict(c=colour, alpha=0.55, edgecolors="white", linewidths=0.5)))
        handles.append(Line2D([], [], ls="", marker="o", ms=8, color=colour, alpha=0.7,
                              label=f"{name}: {len(sel)}"))
    over = sum(p.over for p in pts.points)
    if over:
        handles.append(Line2D([], [], ls="", marker="o", ms=8, mfc="none", mec="#555",
                              label=f"hollow: above a roof (cache hits, shared work): {over}"))
    _label(fig, ax, _labelled(pts.points))

    gpu = pts.gpu or "unknown GPU"
    peaks_of = f"peaks of {pk.name}" if pk and roofs else "no roofs: GPU not in the peak table" if not pk else \
        "memory roof only"
    ax.set_title(f"Roofline on {gpu} ({peaks_of})\n{count(len(pts.points), 'kernel')} plotted, marker area ~ kernel time",
                 fontsize=11)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, algorithmic bytes)")
    ax.set_ylabel("achieved performance (TFLOP/s)")
    ax.grid(True, which="major", ls=":", lw=0.6, color="#bbb")
    ax.legend(handles=handles, loc="upper left", fontsize=9, framealpha=0.9)
    if pts.skipped:
        notes.append(f"roofline: {count(pts.skipped, 'kernel')} without known non-zero FLOPs and bytes not plotted")
    if pts.trivial:
        notes.append(f"roofline: {count(pts.trivial, 'trivial kernel')} (fewer than {TRIVIAL} FLOPs) not plotted")
    fig.tight_layout()
    try:
        # Into a file object with the format named: savefig given a name adds ".png" to one
        # without an extension (and writes DIR/.png for DIR/).
        with open_output(path, binary=True) as out:
            fig.savefig(out, format=image_format(path, fig.canvas.get_supported_filetypes()))
    except ValueError as err:
        raise cannot_write(path, err) from None
    finally:
        plt.close(fig)
    notes.append(f"roofline of {count(len(pts.points), 'kernel')} written to {path}")
    return notes


def image_format(path: str, formats: Iterable[str]) -> str:
    """The image format of `path`: its extension where it is one of `formats`, else "png"."""
    ext = os.path.splitext(path)[1][1:].lower()
    return ext if ext in formats else "png"


def _label(fig, ax, chosen: list[tuple]) -> list:
    """Label every chosen point; returns the annotations. Each label goes to the first spot, on
    its preferred side (right of the point; left in the right third of the plot) then on the
    other, moving further up and down, that overlaps no label placed before and stays inside the
    axes; when there is none, to the spot that overlaps least (a label is never dropped)."""
    from math import log10

    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    lo, hi = (log10(v) for v in ax.get_xlim())
    frame = ax.get_window_extent(renderer)
    placed: list = []
    labels = []

    def overlap(box) -> float:
        area = sum(max(0.0, min(box.x1, b.x1) - max(box.x0, b.x0)) * max(0.0, min(box.y1, b.y1) - max(box.y0, b.y0))
                   for b in placed)
        outside = box.width * box.height - max(0.0, min(box.x1, frame.x1) - max(box.x0, frame.x0)) * \
            max(0.0, min(box.y1, frame.y1) - max(box.y0, frame.y0))
        return area + outside

    for p, text in sorted(chosen, key=lambda pt: -pt[0].tflops):
        prefer_left = (log10(p.ai) - lo) / (hi - lo) > 0.66
        best = None
        for left in (prefer_left, not prefer_left):
            for step in range(41):
                dy = 12 * ((step + 1) // 2) * (1 if step % 2 else -1)
                t = ax.annotate(text, (p.ai, p.tflops), xytext=(-14 if left else 14, dy), textcoords="offset points",
                                fontsize=8, va="center", ha="right" if left else "left", color="#111", zorder=5,
                                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8),
                                arrowprops=dict(arrowstyle="-", color="#666", lw=0.6))
                t.update_positions(renderer)
                box = Text.get_window_extent(t, renderer)  # the text alone: an Annotation's adds its leader line
                cost = overlap(box)
                if best is None or cost < best[0]:
                    if best is not None:
                        best[1].remove()
                    best = (cost, t, box)
                else:
                    t.remove()
                if cost == 0:
                    break
            if best[0] == 0:
                break
        placed.append(best[2])
        labels.append(best[1])
    return labels
