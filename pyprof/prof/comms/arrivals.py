"""Stragglers (docs/prof.md, "Stragglers"): each collective instance across the ranks that ran it,
with every rank's arrival (its kernel's start) and wait (the last arrival minus its own), the
slowest rank and the skew (last arrival minus first).

An NCCL communicator runs its collectives in the same order on every rank, so the k-th
collective of a kind in a process group on one rank is the k-th on the others: an instance is
keyed by (group, kind, k). The group is the process group's name from pyprof's marker, or `-`
for collectives launched inside PyTorch (DDP, FSDP), which run in the job's default order. A
send and its receive are one instance, `Send S->D` (source and destination ranks from their
markers): the k-th send from S to D is the k-th receive at D from S.

Ranks on one host share the clock nsys stamps kernels with; across hosts the skew also holds the
hosts' clock offset.
"""
from __future__ import annotations

from typing import Any

from .collectives import RECV, SEND, Collective, p2p_route
from .shares import rank_key

Key = tuple[str, str, int]


class Instances:
    """Collective kernels of all ranks, matched into instances (memory: one entry per collective
    kernel, a small share of any trace)."""

    def __init__(self) -> None:
        self._count: dict[tuple[Any, str, str], int] = {}
        self.arrivals: dict[Key, dict[Any, tuple[int, int]]] = {}   # key -> rank -> (start, end)
        self.meta: dict[Key, Collective] = {}

    def add(self, rec: dict, coll: Collective) -> Key:
        """Record one collective kernel; returns its instance key."""
        rank = rec.get("rank")
        group, kind = coll.group or "-", coll.kind or "?"
        route = p2p_route(rec.get("marker")) if kind in (SEND, RECV) else None
        if route is not None:
            kind = f"{SEND} {route[0]}->{route[1]}"
        k = self._count.get((rank, group, kind), 0)
        self._count[(rank, group, kind)] = k + 1
        key = (group, kind, k)
        self.arrivals.setdefault(key, {})[rank] = (rec["kStart"], rec["kEnd"])
        known = self.meta.get(key)
        if known is None or (known.size is None and known.part is None and (coll.size, coll.part) != (None, None)):
            self.meta[key] = coll
        return key

    def rows(self) -> list[dict]:
        """One row per instance, in order of first arrival: arrivals and waits per rank, the
        slowest rank, the skew; the transfer (from the last arrival to the first end after it) and
        the bus bandwidth over it, the collective's own speed once everyone is there."""
        out = []
        for key, by_rank in self.arrivals.items():
            ranks = sorted(by_rank, key=rank_key)
            starts = {r: by_rank[r][0] for r in ranks}
            first, last = min(starts.values()), max(starts.values())
            # No one is slowest when all arrived at once (a queued collective starts when the one
            # before it ends, on every rank alike).
            slowest = max(ranks, key=lambda r: (starts[r], rank_key(r))) if last > first else None
            # A rank that needs no one's data can end before the last one arrives (a broadcast's
            # root, a reduce's other ranks: NCCL buffers what they send): the transfer is the
            # time of the ranks still moving data then.
            end = min((e for _, e in by_rank.values() if e > last), default=None)
            coll = self.meta[key].with_ranks(len(ranks))
            transfer = None if end is None else end - last
            out.append({"group": key[0], "kind": key[1], "index": key[2], "dtype": coll.dtype, "size": coll.size,
                        "ranks": len(ranks), "first_ns": first, "last_ns": last, "skew_ns": last - first,
                        "slowest": slowest, "arrival_ns": {str(r): starts[r] - first for r in ranks},
                        "wait_ns": {str(r): last - starts[r] for r in ranks}, "transfer_ns": transfer,
                        "busbw": coll.busbw(transfer)})
        out.sort(key=lambda r: (r["first_ns"], r["group"], r["kind"], r["index"]))
        return out

    def by_rank(self, rows: list[dict] | None = None) -> list[dict]:
        """Per rank: instances it ran, how often it was the slowest, its total and largest wait."""
        rows = self.rows() if rows is None else rows
        acc: dict[str, list[int]] = {}
        for row in rows:
            for r, wait in row["wait_ns"].items():
                a = acc.setdefault(r, [0, 0, 0, 0])
                a[0] += 1
                a[1] += row["slowest"] is not None and str(row["slowest"]) == r
                a[2] += wait
                a[3] = max(a[3], wait)
        return [{"rank": r, "instances": a[0], "slowest": a[1], "wait_ns": a[2], "max_wait_ns": a[3]}
                for r, a in sorted(acc.items(), key=lambda kv: (not kv[0].lstrip("-").isdigit(),
                                                                int(kv[0]) if kv[0].lstrip("-").isdigit() else 0))]
