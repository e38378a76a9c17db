"""Communication across ranks in one pass (docs/prof.md, "Overlap" and "Stragglers"): a scan
sink that feeds every kernel record to overlap.Overlap and every collective kernel to
stragglers.Instances, and the reports and text tables built from them."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, TextIO

from .collectives import of_record
from .output import columnated_writer
from .overlap import Overlap, rank_key
from .stragglers import Instances
from .units import duration, pct, rate, si


class Comms:
    """Overlap and collective instances of all ranks of a record file: a scan sink."""

    needs_facts = False

    def __init__(self) -> None:
        self.overlap = Overlap()
        self.instances = Instances()
        self.ranks: set = set()
        self.nccl = 0
        self.nccl_ns = 0
        self.identified_ns = 0   # NCCL kernel time whose collective kind is known

    def add(self, rec: dict, facts: Any = None) -> None:
        """Take one record (facts unused)."""
        if rec.get("kind", "kernel") != "kernel":
            return
        dur = rec.get("kDuration")
        if type(dur) is not int or type(rec.get("kStart")) is not int or type(rec.get("kEnd")) is not int:
            raise TypeError("kDuration/kStart/kEnd are not integers")
        coll = of_record(rec)
        self.ranks.add(rec.get("rank"))
        tag = None
        if coll is not None:
            self.nccl += 1
            self.nccl_ns += dur
            if coll.kind is not None:
                self.identified_ns += dur
            tag = self.instances.add(rec, coll)
        self.overlap.add(rec, coll, tag)

    def report(self) -> dict:
        """Everything --overlap and --stragglers show, as one JSON-able object."""
        self.overlap.finish()
        steps = self.overlap.rows()
        per_kind: Dict[tuple, List[int]] = {}
        for (rank, _, kind), (n, ns, exposed) in self.overlap.collectives.items():
            acc = per_kind.setdefault((rank, kind), [0, 0, 0])
            acc[0] += n
            acc[1] += ns
            acc[2] += exposed
        collectives = [{"rank": rank, "kind": kind, "count": n, "time_ns": ns, "exposed_ns": exposed,
                        "exposed_pct": exposed / ns * 100 if ns else None}
                       for (rank, kind), (n, ns, exposed) in sorted(per_kind.items(),
                                                                   key=lambda kv: (rank_key(kv[0][0]), kv[0][1]))]
        instances = self.instances.rows()
        return {"ranks": sorted(self.ranks, key=rank_key), "nccl_kernels": self.nccl, "nccl_ns": self.nccl_ns,
                "identified_pct": self.identified_ns / self.nccl_ns * 100 if self.nccl_ns else None,
                "steps": steps, "collectives": collectives, "instances": instances,
                "by_rank": self.instances.by_rank(instances)}


def _rank(r: Any) -> str:
    return "-" if r is None else str(r)


def write_overlap(rep: dict, out: TextIO, width: int = 120) -> None:
    """Per rank and step: compute, communication, both, exposed communication; then per rank and
    collective kind: count, time, exposed time."""
    out.write(f"NCCL kernels   {rep['nccl_kernels']}, {duration(rep['nccl_ns'])}; "
              f"{pct(rep['identified_pct'])}% of that time attributed to a collective\n\n")
    w = columnated_writer(out, ["Rank", "Step", "Span", "Compute", "Comm", "Both", "Exposed", "%Hidden"],
                          [6, 5, 10, 10, 10, 10, 10, 8], width)
    for s in rep["steps"]:
        w([_rank(s["rank"]), str(s["step"]), duration(s["span_ns"]), duration(s["compute_ns"]),
           duration(s["comm_ns"]), duration(s["both_ns"]), duration(s["exposed_ns"]), pct(s["hidden_pct"])])
    out.write("\n")
    w = columnated_writer(out, ["Rank", "Collective", "Count", "Time", "Exposed", "%Exposed"],
                          [6, 0, 6, 10, 10, 9], width)
    for c in rep["collectives"]:
        w([_rank(c["rank"]), c["kind"], str(c["count"]), duration(c["time_ns"]), duration(c["exposed_ns"]),
           pct(c["exposed_pct"])])


def write_stragglers(rep: dict, out: TextIO, width: int = 120, top: Optional[int] = None) -> None:
    """Per collective instance (by skew, largest first; `top` of them): ranks, skew, slowest
    rank, transfer time and bus bandwidth; then per rank: waits and times slowest."""
    rows = sorted(rep["instances"], key=lambda r: (-r["skew_ns"], r["first_ns"]))
    shown = rows[:top] if top else rows
    w = columnated_writer(out, ["Group", "Collective", "#", "Size", "Ranks", "Skew", "Slowest", "Transfer", "BusBW"],
                          [6, 0, 6, 10, 6, 10, 8, 10, 9], width)
    for r in shown:
        w([r["group"], r["kind"], str(r["index"]), si(r["size"], "B"), str(r["ranks"]), duration(r["skew_ns"]),
           _rank(r["slowest"]), duration(r["transfer_ns"]), rate(r["busbw"], 2)])
    if len(rows) > len(shown):
        out.write(f"... {len(rows) - len(shown)} more instances\n")
    out.write("\n")
    w = columnated_writer(out, ["Rank", "Instances", "Slowest", "Wait", "MaxWait"], [6, 10, 8, 10, 10], width)
    for r in rep["by_rank"]:
        w([r["rank"], str(r["instances"]), str(r["slowest"]), duration(r["wait_ns"]), duration(r["max_wait_ns"])])
