"""Communication across ranks in one pass (docs/prof.md, "Overlap" and "Stragglers"): a scan
sink that feeds every kernel record to overlap.Overlap and every collective kernel to
stragglers.Instances, and the report the --overlap and --stragglers views write."""
from __future__ import annotations

from typing import Any

from collections import Counter

from .collectives import of_record, size_warning
from .shares import Overlap, rank_key
from ..scan import time_field
from .arrivals import Instances


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
        self.unsized: Counter = Counter()   # why a collective kernel's size is unknown -> kernels

    def add(self, rec: dict, facts: Any = None) -> None:
        """Take one record (facts unused)."""
        if rec.get("kind", "kernel") != "kernel":
            return
        dur = time_field(rec, "kDuration")
        time_field(rec, "kStart")
        time_field(rec, "kEnd")
        coll = of_record(rec)
        self.ranks.add(rec.get("rank"))
        tag = None
        if coll is not None:
            self.nccl += 1
            self.nccl_ns += dur
            if coll.kind is not None:
                self.identified_ns += dur
            why = size_warning(rec, coll)
            if why is not None:
                self.unsized[why] += 1
            tag = self.instances.add(rec, coll)
        self.overlap.add(rec, coll, tag)

    def report(self) -> dict:
        """Everything --overlap and --stragglers show, as one JSON-able object."""
        self.overlap.finish()
        steps = self.overlap.rows()
        per_kind: dict[tuple, list[int]] = {}
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
