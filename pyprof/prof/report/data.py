"""What the HTML report shows, gathered in one pass over the records and returned as one
JSON-able object (docs/views.md, "--html"): the summary's header and advice, the group tables,
the module tree, the roofline, the timeline, the overlap of communication, and the diff against a
base run. Memory: O(groups) plus 24 bytes a kernel for the timeline; everything drawn is
aggregated so that a million kernels make a report of a few megabytes:

- roofline points are per (op, kernel, input shapes, module): one point per distinct call,
  its FLOPs, bytes and time summed;
- the timeline keeps at most TIMELINE_BLOCKS blocks: when there are more kernels, kernels of a
  track closer than the gap that keeps the count under it are merged into one block, so every
  gap longer than that stays visible.
"""
from __future__ import annotations

from array import array
from ..analysis import Facts
from ..collectives import of_record
from ..comms import Comms
from ..groups import Groups, input_shapes
from ..scan import time_field
from ..views.diff import Totals, compare
from ..views.modules import NO_MODULE, Tree
from ..views.roofline import PATH_NAMES, TRIVIAL
from ..views.summary import Profile, report as summary_report, row_values

TABLES = {"op": "op", "kernel": "kernel", "module": "module", "op+shape": "op,shape", "layer": "layer",
          "direction": "dir", "rank": "rank", "collective": "coll", "stream": "stream"}
DIFF_BY = ("op", "module", "kernel")
TIMELINE_BLOCKS = 20000
LARGEST_GAPS = 10
BELOW_ROOF = 5


class Collector:
    """Everything the report needs, fed one analysed record at a time: a scan.Sink."""

    needs_facts = True

    def __init__(self) -> None:
        self.profile = Profile("op")
        self.groups = {name: Groups(by) for name, by in TABLES.items() if by != "op"}
        self.tree = Tree()
        self.comms = Comms()
        self.roof: dict[tuple, list] = {}   # (op, kernel, shapes, module, tc, path) -> [n, ns, flops, bytes, peak]
        self.peaks = None
        self.starts, self.ends = array("q"), array("q")
        self.track_of, self.label_of = array("i"), array("i")
        self.tracks: dict[tuple, int] = {}   # (rank, device, stream) -> index
        self.labels: dict[tuple, int] = {}   # (op, module, kernel, collective) -> index

    def add(self, rec: dict, f: Facts) -> None:
        """Count one record (memcpy/memset records only in the header's copies)."""
        self.profile.add(rec, f)
        if rec.get("kind", "kernel") != "kernel":
            return
        start, end, dur = time_field(rec, "kStart"), time_field(rec, "kEnd"), time_field(rec, "kDuration")
        for g in self.groups.values():
            g.add(rec, f, dur)
        self.tree.add(rec, f)
        self.comms.add(rec, f)
        if self.peaks is None and f.peaks is not None:
            self.peaks = f.peaks
        op, module, kernel = str(rec.get("op") or "-"), str(rec.get("module") or NO_MODULE), \
            str(rec.get("kShortName") or "-")
        if f.flops and f.bytes and f.flops >= TRIVIAL and dur > 0:
            key = (op, kernel, input_shapes(rec), module, f.tc, f.path)
            p = self.roof.get(key)
            if p is None:
                p = self.roof[key] = [0, 0, 0, 0, f.peak_tflops]
            p[0] += 1
            p[1] += dur
            p[2] += f.flops
            p[3] += f.bytes
        track = (rec.get("rank"), rec.get("device"), rec.get("stream"))
        t = self.tracks.get(track)
        if t is None:
            t = self.tracks[track] = len(self.tracks)
        coll = of_record(rec)
        label = (op, module, kernel, None if coll is None else coll.kind or "NCCL")
        lab = self.labels.get(label)
        if lab is None:
            lab = self.labels[label] = len(self.labels)
        self.starts.append(start)
        self.ends.append(max(start, end))
        self.track_of.append(t)
        self.label_of.append(lab)


def _roofline(c: Collector) -> dict:
    """Roofs of the GPU and one point per distinct call, with how far below its roof it ran."""
    pk = c.peaks
    bw = pk.gbps if pk and pk.gbps else None
    points = []
    paths = set()
    for (op, kernel, shapes, module, tc, path), (n, ns, flops, nbytes, peak) in c.roof.items():
        ai = flops / nbytes
        tflops = flops / ns * 1e-3
        roof = min(x for x in (peak, ai * bw / 1e3 if bw else None) if x is not None) if peak or bw else None
        if path and peak:
            paths.add(path)
        points.append({"op": op, "kernel": kernel, "shapes": shapes, "module": module, "tc": tc, "count": n,
                       "time_ns": ns, "flops": flops, "bytes": nbytes, "ai": ai, "tflops": tflops,
                       "roof_tflops": roof, "pct_roof": tflops / roof * 100 if roof else None,
                       "lost_ns": ns * max(0.0, 1 - tflops / roof) if roof else None})
    points.sort(key=lambda p: -p["time_ns"])
    roofs = [{"path": p, "name": PATH_NAMES.get(p, p), "tflops": pk.flops[p]} for p in sorted(paths)
             if pk and p in pk.flops]
    return {"gpu": pk.name if pk else None, "memory_gbps": bw, "roofs": roofs, "points": points}


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
            "labels": [{"op": op, "module": m, "kernel": k, "coll": coll} for (op, m, k, coll) in c.labels],
            "blocks": [[b[0], b[1] - origin, b[2] - origin, b[3], b[4], b[5]] for b in blocks]}


def _gaps(c: Collector, per: dict[int, list[int]], top: int) -> list[dict]:
    """The `top` longest idle stretches of a device (of a rank): no kernel on any of its streams;
    what ran before and after each."""
    devices: dict[tuple, list[int]] = {}
    for (rank, device, _), t in c.tracks.items():
        devices.setdefault((rank, device), []).extend(per.get(t, ()))
    labels = list(c.labels)
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


def _name(label: tuple) -> str:
    op, module, kernel, _ = label
    return f"{op} ({module}): {kernel}"


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
    summary = summary_report(c.profile)
    gpu_time = c.profile.gpu_time
    tables = {"op": summary["rows"]}
    for name, g in c.groups.items():
        tables[name] = [row_values(x, gpu_time, g.keys) for x in g.sorted("time")]
    modules = c.tree.rows()
    roofline = _roofline(c)
    per = _per_track(c)
    gaps = _gaps(c, per, LARGEST_GAPS)
    comms = c.comms.report()
    overlap = {k: comms[k] for k in ("ranks", "nccl_kernels", "nccl_ns", "steps", "collectives")} \
        if comms["nccl_kernels"] else None
    new = {"op": c.profile.groups, "module": c.groups["module"], "kernel": c.groups["kernel"]}
    diff = {by: compare(base[by], new[by]) for by in DIFF_BY} if base else None
    return {"answers": _answers(summary, modules, roofline, gaps), "summary": summary, "tables": tables,
            "modules": modules, "roofline": roofline, "timeline": _timeline(c, per, timeline_blocks), "gaps": gaps,
            "overlap": overlap, "diff": diff}


def base_sinks() -> dict[str, Totals]:
    """The sinks that read a base run for report(base=...): its groups by op, module, kernel."""
    return {by: Totals(by) for by in DIFF_BY}
