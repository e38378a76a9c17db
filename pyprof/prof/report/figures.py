"""The report's charts as plotly figure specifications (plain dicts: {"data", "layout"}), built
from report data (data.py). Every string from a trace that plotly shows goes through `esc`:
plotly renders a subset of HTML in labels and hover text, so a kernel named `<b>` or
`<script>` must arrive as text, and template names (`kernel<float>`) must not vanish."""
from __future__ import annotations

import html
import math

from ..units import duration, pct, rate, si
from .data import TIMELINE_BLOCKS

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
           "#aec7e8", "#ffbb78", "#98df8a"]
NCCL_COLOUR = "#d62728"
OTHER_COLOUR = "#c7c7c7"
COLOURED = 10  # modules or ops with a colour of their own in the timeline; the rest are "other"
TC_TRACES = {True: ("Tensor Cores (tc 1)", "#2a9d3f"), False: ("matrix kernel on CUDA cores (tc 0)", "#d62728"),
             None: ("other kernels", "#1f77b4")}
MEMORY_ROOF = "#b5651d"
CALL_POINTS = "#3b3b98"  # op-call points: apart from the kernels' TC colours and the roofs
# Beyond this many points plotly's SVG slows down and WebGL takes over (10,000 timeline blocks:
# 10 s in SVG, 2 s in WebGL in headless Chromium on a loaded 2-core machine); below it the charts
# need no WebGL, which some browsers lack.
WEBGL_FROM = 5000


def _scatter(points: int) -> str:
    return "scattergl" if points > WEBGL_FROM else "scatter"


def esc(value: object) -> str:
    """A value from the trace as text plotly shows literally."""
    return html.escape(str(value), quote=False)


def _layout(title: str, **more) -> dict:
    return {"title": {"text": title, "x": 0.01, "font": {"size": 15}}, "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
            "hoverlabel": {"align": "left", "font": {"family": "monospace", "size": 11}}, **more}


def modules(rows: list[dict], gpu_time: int) -> dict:
    """The module tree as an icicle: width = total GPU time, hover self and total; click zooms."""
    ids, labels, parents, values, text = ["(all)"], ["all GPU time"], [""], [gpu_time], [
        f"all kernels<br>GPU time {duration(gpu_time)}"]
    above = ["(all)"]  # the path of the last node at each depth: rows come parents first
    for r in rows:
        path = r["module"]
        del above[r["depth"] + 1:]
        parent = above[r["depth"]]
        above.append(esc(path))
        ids.append(esc(path))
        labels.append(esc(path.rsplit(".", 1)[-1]))
        parents.append(parent)
        values.append(r["total_ns"])
        text.append(f"{esc(path)}<br>total {duration(r['total_ns'])} ({pct(r['pct_total'])}%), {r['count']} kernels"
                    f"<br>self {duration(r['self_ns'])}, {r['self_count']} kernels")
    return {"data": [{"type": "icicle", "ids": ids, "labels": labels, "parents": parents, "values": values,
                      "branchvalues": "total", "text": text, "hovertemplate": "%{text}<extra></extra>",
                      "textinfo": "label+percent root", "maxdepth": 4, "tiling": {"orientation": "v"}}],
            "layout": _layout("Module tree: width is total GPU time (click a module to zoom, the top bar to go back)",
                              height=460)}


def roofline(roof: dict) -> dict:
    """Every kernel of a distinct call signature (op, kernel, shapes, module) a point at (FLOP/B,
    TFLOP/s), area ~ time, and every op call signature an open diamond holding all its kernels
    (the rate of the whole call); the GPU's memory roof and a compute roof per math path."""
    points = roof["points"]
    data = []
    longest = max((p["time_ns"] for p in points), default=1)
    for tc in (None, False, True):
        sel = [p for p in points if p["tc"] is tc]
        if not sel:
            continue
        name, colour = TC_TRACES[tc]
        data.append({"type": _scatter(len(points)), "mode": "markers", "name": f"{name}: {len(sel)}",
                     "x": [p["ai"] for p in sel], "y": [p["tflops"] for p in sel],
                     "marker": {"color": colour, "opacity": 0.6, "line": {"color": "white", "width": 0.5},
                                "size": [5 + 25 * math.sqrt(p["time_ns"] / longest) for p in sel]},
                     "text": [_point_text(p) for p in sel], "hovertemplate": "%{text}<extra></extra>"})
    calls = roof.get("calls") or []
    if calls:
        longest_call = max(p["time_ns"] for p in calls)
        data.append({"type": _scatter(len(calls)), "mode": "markers", "name": f"op calls, all their kernels: {len(calls)}",
                     "x": [p["ai"] for p in calls], "y": [p["tflops"] for p in calls],
                     "marker": {"symbol": "diamond-open", "color": CALL_POINTS, "line": {"width": 1.5},
                                "size": [5 + 25 * math.sqrt(p["time_ns"] / longest_call) for p in calls]},
                     "text": [_point_text(p) for p in calls], "hovertemplate": "%{text}<extra></extra>"})
    xs = [p["ai"] for p in points + calls] or [1.0]
    lo, hi = min(xs) / 4, max(xs) * 4
    bw = roof["memory_gbps"]
    if bw:
        top = max((r["tflops"] for r in roof["roofs"]), default=max(p["tflops"] for p in points) if points else 1)
        ridge = top * 1e3 / bw
        hi = max(hi, ridge * 4)
        data.append({"type": "scatter", "mode": "lines", "name": f"memory roof {bw:,.0f} GB/s",
                     "x": [lo, ridge], "y": [bw * lo / 1e3, top], "line": {"color": MEMORY_ROOF, "width": 2},
                     "hoverinfo": "name"})
        for i, r in enumerate(sorted(roof["roofs"], key=lambda r: -r["tflops"])):
            data.append({"type": "scatter", "mode": "lines", "name": f"{r['name']} roof {r['tflops']:g} TFLOP/s",
                         "x": [r["tflops"] * 1e3 / bw, hi], "y": [r["tflops"]] * 2, "hoverinfo": "name",
                         "line": {"color": "#444", "width": 1.6, "dash": ["solid", "dash", "dashdot", "dot"][i % 4]}})
    gpu = esc(roof["gpu"]) if roof["gpu"] else "unknown GPU (no roofs: not in the peak table)"
    return {"data": data, "layout": _layout(
        f"Roofline on {gpu}: a dot per kernel of a call signature, a diamond per op call signature (all its kernels), area ~ GPU time",
        height=520, xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte, algorithmic bytes)"}},
        yaxis={"type": "log", "title": {"text": "achieved TFLOP/s"}},
        legend={"x": 0.99, "xanchor": "right", "y": 0.01, "yanchor": "bottom", "bgcolor": "rgba(255,255,255,0.85)"})}


def _point_text(p: dict) -> str:
    return (f"<b>{esc(p['op'])}</b> ({esc(p['dir'])}) x{p['count']}<br>module {esc(p['module'])}<br>shapes {esc(p['shapes'])}"
            f"<br>kernel {esc(p['kernel_label']) if p['kernel_label'] else 'every kernel of the calls'}<br>time {duration(p['time_ns'])}<br>FLOPs {si(p['flops'])}, "
            f"bytes {si(p['bytes'], 'B')}<br>{rate(p['tflops'], 3)} TFLOP/s, {p['ai']:.3g} FLOP/B"
            f"<br>tc {'-' if p['tc'] is None else int(p['tc'])}, {pct(p['pct_roof'])}% of its roof")


def _track_name(t: dict) -> str:
    """`rank 0 GPU 1 stream 7`; `... GPU 1 idle` for the gaps' row (stream None)."""
    rank = "" if t["rank"] is None else f"rank {esc(t['rank'])} "
    return f"{rank}GPU {esc(t['device'])} " + ("idle" if t["stream"] is None else f"stream {esc(t['stream'])}")


def timeline(tl: dict, gaps: list[dict]) -> dict:
    """Kernels (or merged blocks of them) per rank, device and stream, in ms from the first
    kernel; coloured by module or by op (a menu switches), NCCL kernels in red; the longest idle
    gaps of each device as dotted red lines on a row of their own."""
    order = sorted(range(len(tl["tracks"])), key=lambda i: tuple(map(_sort_key, tl["tracks"][i].values())))
    row_of = {t: row for row, t in enumerate(order)}
    tracks = [_track_name(tl["tracks"][t]) for t in order]
    labels = tl["labels"]
    busy: dict[str, dict[str, int]] = {"module": {}, "op": {}}
    for b in tl["blocks"]:
        lab = labels[b[5]]
        for key in busy:
            busy[key][lab[key]] = busy[key].get(lab[key], 0) + b[4]
    data, visible = [], {"module": [], "op": []}
    kind = _scatter(len(tl["blocks"]))
    for key in ("module", "op"):
        top = sorted(busy[key], key=lambda k: -busy[key][k])[:COLOURED]
        colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(top)}
        series: dict[str, dict] = {}
        for b in tl["blocks"]:
            lab = labels[b[5]]
            name = "NCCL" if lab["coll"] else lab[key] if lab[key] in colour else "other"
            s = series.get(name)
            if s is None:
                hue = NCCL_COLOUR if name == "NCCL" else colour.get(name, OTHER_COLOUR)
                # A tick at each end: a kernel of microseconds is no wider than a pixel in a long capture.
                s = series[name] = {"type": kind, "mode": "lines+markers", "name": esc(name), "x": [], "y": [],
                                    "text": [], "hoverinfo": "text", "connectgaps": False,
                                    "line": {"width": 10, "color": hue},
                                    "marker": {"symbol": "line-ns", "size": 16, "line": {"width": 2, "color": hue}}}
            s["x"] += [b[1] / 1e6, b[2] / 1e6, None]
            s["y"] += [row_of[b[0]], row_of[b[0]], None]
            s["text"] += [_block_text(b, lab), "", ""]  # hover at the start: the report stays small
        # Drawn bottom to top: "other" first, so that it hides none of the named; NCCL last. The
        # legend lists them by busy time.
        legend = sorted(series, key=lambda n: (n in ("other", "NCCL"), -busy[key].get(n, 0)))
        for name in sorted(series, key=lambda n: (n != "other", n == "NCCL", -busy[key].get(n, 0))):
            series[name]["visible"] = key == "module"
            series[name]["legendrank"] = 1000 + legend.index(name)
            data.append(series[name])
            for k in visible:
                visible[k].append(k == key)
    idle_rows = sorted({_track_name(dict(g, stream=None)) for g in gaps})
    gx, gy, gt = [], [], []
    for g in gaps:
        row = len(tracks) + idle_rows.index(_track_name(dict(g, stream=None)))
        text = (f"idle {duration(g['idle_ns'])}<br>after {esc(g['after'])}<br>before {esc(g['before'])}")
        gx += [g["at_ns"] / 1e6, (g["at_ns"] + g["idle_ns"]) / 1e6, None]
        gy += [row, row, None]
        gt += [text, text, None]
    if gx:
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{len(gaps)} longest idle gaps", "legendrank": 5000,
                     "x": gx, "y": gy, "text": gt, "hovertemplate": "%{text}<extra></extra>",
                     "line": {"width": 3, "color": NCCL_COLOUR, "dash": "dot"}, "marker": {"size": 7}})
        for k in visible:
            visible[k].append(True)
    merged = (f"; kernels closer than {duration(tl['merged_below_ns'])} merged into blocks (at most "
              f"{TIMELINE_BLOCKS:,})" if tl["merged_below_ns"] else "")
    rows = tracks + idle_rows
    return {"data": data, "layout": _layout(
        f"Timeline: {tl['kernels']:,} kernels{merged} (drag to zoom, double-click to reset)",
        height=max(300, 110 + 34 * len(rows)), xaxis={"title": {"text": "ms from the first kernel"}, "zeroline": False},
        yaxis={"tickvals": list(range(len(rows))), "ticktext": rows, "automargin": True,
               "range": [len(rows) - 0.5, -0.5], "zeroline": False, "showgrid": False},
        margin={"l": 60, "r": 20, "t": 80, "b": 50},
        updatemenus=[{"type": "buttons", "direction": "right", "x": 1, "xanchor": "right", "y": 1.02,
                      "yanchor": "bottom", "pad": {"b": 4},
                      "buttons": [{"label": f"colour by {k}", "method": "restyle", "args": [{"visible": visible[k]}]}
                                  for k in ("module", "op")]}])}


def _sort_key(value: object) -> tuple:
    """Numbers in order, then anything else by its text (ranks, devices, streams may be null)."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def _block_text(b: list, lab: dict) -> str:
    what = f"<b>{esc(lab['op'])}</b> ({esc(lab['module'])})<br>{esc(lab['kernel'])}"
    if lab["coll"]:
        what += f"<br>collective {esc(lab['coll'])}"
    if b[3] == 1:
        return f"{what}<br>{duration(b[2] - b[1])}"
    return (f"{b[3]} kernels, busy {duration(b[4])} of {duration(b[2] - b[1])}<br>longest: {what}")


def overlap(ov: dict) -> dict:
    """Per rank and step: compute alone, compute and communication together, exposed communication."""
    steps = ov["steps"]
    x = [f"rank {esc(s['rank'])} step {s['step']}" for s in steps]
    parts = [("compute only", "#1f77b4", lambda s: s["compute_ns"] - s["both_ns"]),
             ("overlapped (compute + comm)", "#2ca02c", lambda s: s["both_ns"]),
             ("exposed communication", NCCL_COLOUR, lambda s: s["exposed_ns"])]
    data = [{"type": "bar", "name": name, "x": x, "y": [f(s) / 1e6 for s in steps], "marker": {"color": colour},
             "hovertemplate": "%{x}: %{y:.3f} ms<extra>" + name + "</extra>"} for name, colour, f in parts]
    return {"data": data, "layout": _layout("Communication and compute per rank and step", barmode="stack",
                                            height=380, yaxis={"title": {"text": "ms"}})}


def diff(d: dict, top: int = 20) -> dict:
    """The `top` groups that changed most, slower in red, faster in green."""
    rows = d["rows"][:top][::-1]
    return {"data": [{"type": "bar", "orientation": "h", "y": [esc(r["group"]) for r in rows],
                      "x": [r["delta_ns"] / 1e3 for r in rows],
                      "marker": {"color": [NCCL_COLOUR if r["delta_ns"] > 0 else "#2ca02c" for r in rows]},
                      "text": [f"{esc(r['group'])}<br>base {duration(r['base_ns'] or 0)}, new {duration(r['new_ns'] or 0)}"
                               for r in rows], "textposition": "none", "hovertemplate": "%{text}<extra></extra>"}],
            "layout": _layout(f"What changed most (by {esc(d['by'])}): slower in red, faster in green",
                              height=max(300, 40 + 22 * len(rows)), xaxis={"title": {"text": "change in GPU time (us)"}},
                              yaxis={"automargin": True})}
