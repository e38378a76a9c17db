"""Kernel time and work per group (op, kernel, layer, ...): O(groups) memory, one pass.

A group's FLOPs and bytes are the sums over its kernels whose value is known; `flops_na` and
`bytes_na` count the kernels whose value is not, so a sum over a partly unknown group is shown
as a lower bound, never as if complete. Rates divide by the time of the kernels that have the
value, so unknown kernels neither inflate nor deflate them.
"""
from __future__ import annotations

from typing import Callable

from .analysis import Facts
from .collectives import of_record
from .columns import tc_text


def _layer(rec: dict, f: Facts) -> str:
    return ":".join(map(str, rec.get("layer") or [])) or "-"


def _coll(rec: dict, f: Facts) -> str:
    coll = of_record(rec)
    return "compute" if coll is None else coll.kind or "nccl"


# --by KEY: the group a kernel record belongs to.
KEYS: dict[str, Callable[[dict, Facts], str]] = {
    "op": lambda rec, f: rec.get("op") or "-",
    "kernel": lambda rec, f: rec.get("kShortName") or "-",
    "layer": _layer,
    "module": lambda rec, f: rec.get("module") or "-",
    "dir": lambda rec, f: rec.get("dir") or "-",
    "tc": lambda rec, f: tc_text(f.tc),
    "level": lambda rec, f: f.level or "na",
    "stream": lambda rec, f: f"{rec.get('device')}:{rec.get('stream')}",
    "rank": lambda rec, f: "-" if rec.get("rank") is None else str(rec.get("rank")),
    "coll": _coll,
}


class Group:
    """Totals of one group. Times in ns; `capacity` is what the kernels with known FLOPs and
    peak could have done at their math path's peak in their time (FLOP)."""

    __slots__ = ("name", "time", "count", "flops", "flops_na", "flops_time", "peak_flops", "capacity",
                 "bytes", "bytes_na", "bytes_time", "tc_time")

    def __init__(self, name: str) -> None:
        self.name = name
        self.time = self.count = 0
        self.flops = self.flops_na = self.flops_time = 0
        self.peak_flops = 0
        self.capacity = 0.0
        self.bytes = self.bytes_na = self.bytes_time = 0
        self.tc_time = 0

    def add(self, dur: int, f: Facts) -> None:
        """Count one kernel of `dur` ns with facts `f`."""
        self.time += dur
        self.count += 1
        if f.flops is None:
            self.flops_na += 1
        else:
            self.flops += f.flops
            self.flops_time += dur
            peak = f.peak_tflops
            if peak:
                self.peak_flops += f.flops
                self.capacity += dur * peak * 1e3  # TFLOP/s = 1e3 FLOP/ns
        if f.bytes is None:
            self.bytes_na += 1
        else:
            self.bytes += f.bytes
            self.bytes_time += dur
        if f.tc:
            self.tc_time += dur

    # Derived values; None where unknown.
    @property
    def tflops(self) -> float | None:
        """FLOP rate over the kernels with known FLOPs (TFLOP/s)."""
        return self.flops / self.flops_time * 1e-3 if self.flops_time and self.count > self.flops_na else None

    @property
    def pct_peak(self) -> float | None:
        """FLOPs as % of what the kernels with a known peak could have done in their time."""
        return self.peak_flops / self.capacity * 100 if self.capacity else None

    @property
    def gbps(self) -> float | None:
        """Memory rate over the kernels with known bytes (GB/s)."""
        return self.bytes / self.bytes_time if self.bytes_time and self.count > self.bytes_na else None

    @property
    def tc_share(self) -> float | None:
        """% of the group's time on Tensor Core kernels."""
        return self.tc_time / self.time * 100 if self.time else None

    def known_flops(self) -> int | None:
        """The FLOP sum, None when no kernel of the group has known FLOPs."""
        return None if self.flops_na == self.count else self.flops

    def known_bytes(self) -> int | None:
        """The byte sum, None when no kernel of the group has known bytes."""
        return None if self.bytes_na == self.count else self.bytes


# --sort KEY: descending except name; unknown values sort last.
SORTS: dict[str, Callable[[Group], object]] = {
    "time": lambda g: g.time,
    "count": lambda g: g.count,
    "flops": lambda g: g.known_flops(),
    "tflops": lambda g: g.tflops,
    "peak": lambda g: g.pct_peak,
    "bytes": lambda g: g.known_bytes(),
    "gbps": lambda g: g.gbps,
    "tc": lambda g: g.tc_share,
    "name": lambda g: g.name,
}


class Groups:
    """Groups of kernels by one of KEYS."""

    def __init__(self, by: str = "op") -> None:
        self.by = by
        self.key = KEYS[by]
        self.groups: dict[str, Group] = {}

    def add(self, rec: dict, f: Facts, dur: int) -> None:
        """Count one kernel record."""
        name = self.key(rec, f)
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = Group(name)
        g.add(dur, f)

    def sorted(self, sort: str = "time") -> list[Group]:
        """All groups, largest first by `sort` (name: alphabetical); ties by time, then name."""
        if sort == "name":
            return sorted(self.groups.values(), key=lambda g: g.name)
        value = SORTS[sort]
        known = [g for g in self.groups.values() if value(g) is not None]
        unknown = [g for g in self.groups.values() if value(g) is None]
        known.sort(key=lambda g: (-value(g), -g.time, g.name))
        unknown.sort(key=lambda g: (-g.time, g.name))
        return known + unknown
