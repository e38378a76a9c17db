"""What the HTML report shows, gathered in one pass over the records and returned as one
JSON-able object (docs/views.md, "--html"): the summary's header and advice, the group tables,
the module tree, the roofline, the timeline, the overlap of communication, and the diff against a
base run. Memory: O(groups) plus 24 bytes a kernel for the timeline; everything drawn is
aggregated so that a million kernels make a report of a few megabytes:

- every table and the roofline come from one group per distinct (op, kernel, input shapes,
  module, layer, direction, rank, collective, tc): a roofline point is one such kernel of a call
  signature, its FLOPs, bytes and time summed; a second set of points rolls them up into whole
  op calls (op, shapes, module, direction, rank);
- the timeline keeps at most TIMELINE_BLOCKS blocks: when there are more kernels, kernels of a
  track closer than the gap that keeps the count under it are merged into one block, so every
  gap longer than that stays visible.
"""
from __future__ import annotations

from array import array
from ..pricing.analysis import Facts
from ..comms.passes import Comms
from ..groups import Group, Groups
from ..units import kernel_label
from ..views.diff import Totals, compare
from ..views.modules import NO_MODULE, Tree
from ..views.roofline import PATH_NAMES, TRIVIAL
from ..views.summary import Profile, report as summary_report, row_values

# One group per distinct (op, kernel, shapes, module, layer, direction, rank, collective, tc): the
# tables by any of these keys are rolled up from it, the roofline's points are its groups.
FINE = "op,kernel,shape,module,layer,dir,rank,coll,tc"
# An op call's signature: every kernel of a call shares it (calls.py), so a group by it holds whole calls.
CALL = "op,shape,module,dir,rank"
TABLES = {"op": "op", "kernel": "kernel", "module": "module", "op+shape": "op,shape", "layer": "layer",
          "direction": "dir", "rank": "rank", "collective": "coll"}
DIFF_BY = ("op", "module", "kernel")
TIMELINE_BLOCKS = 10000
LARGEST_GAPS = 10
BELOW_ROOF = 5
_TC = {"1": True, "0": False}


class Collector:
    """Everything the report needs, fed one analysed record at a time: a scan.Sink."""

    needs_facts = True

    def __init__(self) -> None:
        self.profile = Profile(FINE)  # its groups are the fine ones: one count per kernel serves both
        self.comms = Comms()
        self.peaks = None
        self.paths: set = set()              # math paths the kernels ran on: their roofs are drawn
        self.starts, self.ends = array("q"), array("q")
        self.track_of, self.label_of = array("i"), array("i")
        self.tracks: dict[tuple, int] = {}   # (rank, device, stream) -> index
        self.labels: dict[tuple, int] = {}   # fine group key -> index

    def add(self, rec: dict, f: Facts) -> None:
        """Count one record (memcpy/memset records only in the header's copies)."""
        track = (rec.get("rank"), rec.get("device"), rec.get("stream"))
        hash(track)  # a list where a number belongs: TypeError before anything is counted
        key = self.profile.add(rec, f)
        if key is None:  # memcpy/memset: in the header's copies only
            return
        start, end = rec["kStart"], rec["kEnd"]  # checked by the profile
        self.comms.add(rec, f)
        if self.peaks is None and f.peaks is not None:
            self.peaks = f.peaks
        if f.path:
            self.paths.add(f.path)
        t = self.tracks.get(track)
        if t is None:
            t = self.tracks[track] = len(self.tracks)
        lab = self.labels.get(key)
        if lab is None:
            lab = self.labels[key] = len(self.labels)
        self.starts.append(start)
        self.ends.append(max(start, end))
        self.track_of.append(t)
        self.label_of.append(lab)


def _tree(by_module: Groups) -> Tree:
    """The module tree (--modules) of the groups by module."""
    tree = Tree()
    for path, g in by_module.groups.items():
        path = NO_MODULE if path == "-" else path
        tree.self_time[path] = g.time
        tree.self_count[path] = g.count
    return tree


def _label(key: tuple) -> dict:
    """A fine group's key as the timeline names it."""
    op, kernel, _shape, module, _layer, _dir, _rank, coll, _tc = key
    return {"op": op, "module": NO_MODULE if module == "-" else module, "kernel": _short(kernel),
            "coll": None if coll == "compute" else coll}


def _short(kernel: str) -> str:
    """A kernel's name without namespaces, template and parameter lists (as kShortName)."""
    return kernel_label(kernel).split("<", 1)[0]


def _roofline(c: Collector) -> dict:
    """Roofs of the GPU and two sets of points with known, non-trivial FLOPs and bytes, each with
    how far below its roof it ran (the roof: its math path's peak, or bandwidth x intensity):
    `points`, one per fine group (a kernel of a call signature), and `calls`, one per op call
    signature (op, shapes, module, direction, rank) holding every kernel of those calls: the
    honest rate of calls whose work the trace cannot split between their kernels (analysis.py's
    beyond-peak guard withholds it from the kernel, not from the call)."""
    pk = c.peaks
    bw = pk.gbps if pk and pk.gbps else None
    points = [_point(g, dict(zip(c.profile.groups.keys, key)), bw) for key, g in c.profile.groups.groups.items()]
    by_call = c.profile.groups.rolled_up(CALL)
    calls = [_point(g, dict(zip(by_call.keys, key)), bw) for key, g in by_call.groups.items()]
    roofs = [{"path": p, "name": PATH_NAMES.get(p, p), "tflops": pk.flops[p]} for p in sorted(c.paths)
             if pk and p in pk.flops]
    return {"gpu": pk.name if pk else None, "memory_gbps": bw, "roofs": roofs,
            "points": _drawn(points), "calls": _drawn(calls)}


def _drawn(points: list[dict | None]) -> list[dict]:
    """The points that can be drawn, longest first."""
    out = [p for p in points if p is not None]
    out.sort(key=lambda p: -p["time_ns"])
    return out


def _point(g: Group, key: dict, bw: float | None) -> dict | None:
    """A group as a roofline point (None without known, non-trivial FLOPs and bytes); `key`: its
    key by name (`kernel` and `tc` absent for a point of whole op calls)."""
    if not g.flops or not g.bytes or not g.flops_time or g.flops < TRIVIAL * (g.count - g.flops_na):
        return None
    ai = g.flops / g.bytes
    tflops = g.flops / g.flops_time * 1e-3
    peak = g.capacity / g.flops_time * 1e-3 if g.capacity and g.peak_flops == g.flops else None
    roofs = [x for x in (peak, ai * bw / 1e3 if bw else None) if x]
    roof = min(roofs) if roofs else None
    kernel = key.get("kernel")
    module = key["module"]
    return {"op": key["op"], "kernel": _short(kernel) if kernel else None,
            "kernel_label": kernel_label(kernel) if kernel else None, "shapes": key["shape"],
            "module": NO_MODULE if module == "-" else module, "dir": key["dir"], "rank": key["rank"],
            "tc": _TC.get(key.get("tc")),
            "count": g.count, "time_ns": g.time, "flops": g.flops, "bytes": g.bytes, "ai": ai,
            "tflops": tflops, "roof_tflops": roof, "pct_roof": tflops / roof * 100 if roof else None,
            "lost_ns": g.flops_time * max(0.0, 1 - tflops / roof) if roof else None}


def _per_track(c: Collector) -> dict[int, list[int]]:
    """Kernel indices per track, in start order."""
    per: dict[int, list[int]] = {}
    for i, t in enumerate(c.track_of):
        per.setdefault(t, []).append(i)
    starts = c.starts
    for idx in per.values():
        if any(starts[a] > starts[b] for a, b in zip(idx, idx[1:])):
            idx.sort(key=starts.__getitem__)
    return per


def _timeline(c: Collector, per: dict[int, list[int]], limit: int) -> dict:
    """Blocks per track: every kernel when there are at most `limit`, else kernels merged across
    gaps up to the smallest gap that keeps the blocks under `limit`."""
    starts, ends = c.starts, c.ends
    merge_below = 0
    if len(starts) > limit:
        gaps = []
        for idx in per.values():
            reach = ends[idx[0]]
            for i in idx[1:]:
                gaps.append(starts[i] - reach)
                reach = max(reach, ends[i])
        gaps.sort(reverse=True)
        keep = max(0, limit - len(per))
        merge_below = gaps[keep] + 1 if keep < len(gaps) else 0
    blocks = []  # [track, start, end, kernels, busy ns, label of the longest kernel]
    for t, idx in per.items():
        cur = None
        for i in idx:
            s, e = starts[i], ends[i]
            if cur is not None and s - cur[2] < merge_below:
                cur[2] = max(cur[2], e)
                cur[3] += 1
                cur[4] += e - s
                if e - s > cur[6]:
                    cur[5], cur[6] = c.label_of[i], e - s
                continue
            cur = [t, s, e, 1, e - s, c.label_of[i], e - s]
            blocks.append(cur)
    origin = min(starts) if starts else 0
    return {"origin_ns": origin, "merged_below_ns": merge_below, "kernels": len(starts),
            "tracks": [{"rank": r, "device": d, "stream": s} for (r, d, s) in c.tracks],
            "labels": [_label(key) for key in c.labels],
            "blocks": [[b[0], b[1] - origin, b[2] - origin, b[3], b[4], b[5]] for b in blocks]}


def _gaps(c: Collector, per: dict[int, list[int]], top: int) -> list[dict]:
    """The `top` longest idle stretches of a device (of a rank): no kernel on any of its streams;
    what ran before and after each."""
    devices: dict[tuple, list[int]] = {}
    for (rank, device, _), t in c.tracks.items():
        devices.setdefault((rank, device), []).extend(per.get(t, ()))
    labels = [_label(key) for key in c.labels]
    starts, ends = c.starts, c.ends
    found = []
    for (rank, device), idx in devices.items():
        idx.sort(key=starts.__getitem__)
        reach, last = None, None
        for i in idx:
            if reach is not None and starts[i] > reach:
                found.append((starts[i] - reach, rank, device, reach, last, i))
            if reach is None or ends[i] > reach:
                reach, last = ends[i], i
    found.sort(key=lambda g: -g[0])
    origin = min(starts) if starts else 0
    return [{"rank": rank, "device": device, "idle_ns": ns, "at_ns": at - origin,
             "after": _name(labels[c.label_of[before]]), "before": _name(labels[c.label_of[after]])}
            for ns, rank, device, at, before, after in found[:top]]


def _name(label: dict) -> str:
    return f"{label['op']} ({label['module']}): {label['kernel']}"


def _answers(summary: dict, modules: list[dict], roofline: dict, gaps: list[dict]) -> dict:
    """The three questions a reader comes with, answered from the rest."""
    leaves = sorted((m for m in modules if m["self_ns"]), key=lambda m: (-m["self_ns"], m["module"]))
    costly = [m for m in leaves if m["module"] != NO_MODULE] or leaves
    below = sorted((p for p in roofline["points"] if p["lost_ns"]), key=lambda p: -p["lost_ns"])
    h = summary["header"]
    return {"module": costly[0] if costly else None, "below_roof": below[:BELOW_ROOF],
            "idle": {"busy_pct": h["busy_pct"], "gaps": h["gaps"], "gap_ns": h["gap_ns"], "span_ns": h["span_ns"],
                     "largest": gaps[:3]}}


def report(c: Collector, base: dict[str, Groups] | None = None, timeline_blocks: int = TIMELINE_BLOCKS) -> dict:
    """The report as one JSON-able object. `base`: a base run's diff.Totals by op, module and
    kernel (base_sinks()), to compare this run with."""
    gpu_time = c.profile.gpu_time
    rolled = {name: c.profile.groups.rolled_up(by) for name, by in TABLES.items()}
    tables = {name: [row_values(x, gpu_time, g.keys) for x in g.sorted("time")] for name, g in rolled.items()}
    # The profile's groups are the fine ones: its summary has the rows by op, rolled up.
    summary = dict(summary_report(c.profile, top=1), by="op", rows=tables["op"], more={"groups": 0, "time_ns": 0})
    modules = _tree(rolled["module"]).rows()
    roofline = _roofline(c)
    per = _per_track(c)
    gaps = _gaps(c, per, LARGEST_GAPS)
    comms = c.comms.report()
    overlap = {k: comms[k] for k in ("ranks", "nccl_kernels", "nccl_ns", "steps", "collectives")} \
        if comms["nccl_kernels"] else None
    diff = {by: compare(base[by], rolled[by]) for by in DIFF_BY} if base else None
    return {"answers": _answers(summary, modules, roofline, gaps), "summary": summary, "tables": tables,
            "modules": modules, "roofline": roofline, "timeline": _timeline(c, per, timeline_blocks), "gaps": gaps,
            "overlap": overlap, "diff": diff}


def base_sinks() -> dict[str, Totals]:
    """The sinks that read a base run for report(base=...): its groups by op, module, kernel."""
    return {by: Totals(by) for by in DIFF_BY}
