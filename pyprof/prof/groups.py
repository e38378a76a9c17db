"""Kernel time and work per group (op, kernel, layer, ..., or a combination: `op,shape`), one pass.

A group's FLOPs and bytes are the sums over its kernels whose value is known; `flops_na` and
`bytes_na` count the kernels whose value is not, so a sum over a partly unknown group is shown
as a lower bound, never as if complete. Rates divide by the time of the kernels that have the
value, so unknown kernels neither inflate nor deflate them.

A kernel's own share of its op call's work may be unknown while the call's total is not: FLOPs
above its peak (beyond_peak.py) are withheld, and kernels of a call whose split is not known
(a cuDNN RNN's weight gradients) are na, the first of them carrying the rest of the call's total
for whole-call sums (Facts.call_work). A grouping that keeps every op call whole (its keys all in
WHOLE_CALL: op, module, call, ...) counts each kernel's whole-call work, so that its sums are the
ops' totals and its rates the calls' honest ones; one that splits calls (by kernel, tc, ...)
counts each kernel's own. Each group keeps both counts of such kernels apart (`both`), so that
rolling a fine grouping up into a whole-call one (Groups.rolled_up) swaps one for the other.

Kernel durations per group are nsys stats' (cuda_gpu_kern_sum): total, count, average, median,
minimum, maximum and sample standard deviation. The median needs every duration: each group
keeps them in an array of 8-byte integers (8 MB for a million kernels), the rest is O(groups).
"""
from __future__ import annotations

import math
from array import array
from typing import Callable

from .pricing.analysis import Facts
from .comms.collectives import of_record
from .columns import kernel_name, tc_text


def _layer(rec: dict, f: Facts) -> str:
    return ":".join(map(str, rec.get("layer") or [])) or "-"


GROUP_WIDTH = 24  # the group name's starting width in text tables (elastic: it takes what -w leaves)


def _shapes(value: object, out: list[str]) -> None:
    """The shapes of the tensors in a marker value (nested lists included), in order."""
    if isinstance(value, dict):
        shape = value.get("shape")
        if isinstance(shape, list):
            out.append("[" + ",".join(map(str, shape)) + "]")
    elif isinstance(value, list):
        for v in value:
            _shapes(v, out)


def input_shapes(rec: dict, f: Facts | None = None) -> str:
    """The op's input shapes, torch.profiler's "Input Shapes": the tensors of the op marker (for a
    backward kernel, the forward op's), else the sizes of the innermost PyTorch range; `-` when
    neither is there."""
    fwd = rec.get("fwd")
    marker = fwd.get("marker") if rec.get("dir") == "bprop" and isinstance(fwd, dict) else rec.get("marker")
    out: list[str] = []
    if isinstance(marker, dict):
        _shapes(marker.get("args"), out)
        kwargs = marker.get("kwargs")
        if isinstance(kwargs, dict):
            _shapes(list(kwargs.values()), out)
        return ",".join(out) or "-"
    torch_ops = rec.get("torchOps")
    sizes = torch_ops[-1].get("sizes") if torch_ops and isinstance(torch_ops[-1], dict) else None
    if isinstance(sizes, list):
        out = ["[" + ",".join(map(str, s)) + "]" for s in sizes if isinstance(s, list)]
    return ",".join(out) or "-"


def _call(rec: dict, f: Facts) -> str:
    return "-" if f.call is None else str(f.call)


def _coll(rec: dict, f: Facts) -> str:
    coll = of_record(rec)
    return "compute" if coll is None else coll.kind or "nccl"


# --by KEY: the group a kernel record belongs to. `kernel` is the full demangled name, as nsys
# stats shows it (template instantiations of one kernel stay apart): the `name` column's value.
KEYS: dict[str, Callable[[dict, Facts], str]] = {
    "op": lambda rec, f: rec.get("op") or "-",
    "kernel": lambda rec, f: kernel_name(rec),
    "shape": input_shapes,
    "layer": _layer,
    "module": lambda rec, f: rec.get("module") or "-",
    "dir": lambda rec, f: rec.get("dir") or "-",
    "tc": lambda rec, f: tc_text(f.tc),
    "level": lambda rec, f: f.level or "na",
    "stream": lambda rec, f: f"{rec.get('device')}:{rec.get('stream')}",
    "rank": lambda rec, f: "-" if rec.get("rank") is None else str(rec.get("rank")),
    "coll": _coll,
    "call": _call,
}
# The keys whose groups never split an op call: every kernel of a call has the same value.
WHOLE_CALL = frozenset(("call", "op", "shape", "layer", "module", "dir", "rank"))
# `--by call` names the call's direction, op, module and input shapes too: one row per op call.
CALL_WITH = ("call", "dir", "op", "module", "shape")


class Group:
    """Totals of one group. Times in ns; `capacity` is what the kernels with known FLOPs and
    peak could have done at their math path's peak in their time (FLOP). `whole`: the grouping
    keeps op calls whole, so each kernel counts its whole-call work (Facts.whole_work); `both`:
    the kernels whose whole-call work differs from their own, counted each way (own, whole-call;
    None: no such kernel)."""

    __slots__ = ("name", "keys", "whole", "both", "time", "count", "durations", "flops", "flops_na", "flops_time",
                 "peak_flops", "capacity", "bytes", "bytes_na", "bytes_time", "tc_time")

    def __init__(self, name: str, keys: tuple[str, ...] = (), whole: bool = False) -> None:
        self.name = name
        self.keys = keys or (name,)  # one value per --by key
        self.whole = whole
        self.both: tuple[Group, Group] | None = None
        self.time = self.count = 0
        self.durations = array("q")
        self.flops = self.flops_na = self.flops_time = 0
        self.peak_flops = 0
        self.capacity = 0.0
        self.bytes = self.bytes_na = self.bytes_time = 0
        self.tc_time = 0

    def add(self, dur: int, f: Facts) -> None:
        """Count one kernel of `dur` ns with facts `f`."""
        self.time += dur
        self.count += 1
        self.durations.append(dur)
        peak = f.peak_tflops
        if f.call_work is None:
            self._work(dur, f.flops, f.bytes, peak)
        else:
            if self.both is None:
                self.both = (Group(self.name, self.keys), Group(self.name, self.keys, True))
            own, whole = self.both
            own.count += 1
            own._work(dur, f.flops, f.bytes, peak)
            whole.count += 1
            whole._work(dur, *f.call_work, peak)
            self._work(dur, *(f.call_work if self.whole else (f.flops, f.bytes)), peak)
        if f.tc:
            self.tc_time += dur

    def _work(self, dur: int, flops: int | None, nbytes: int | None, peak: float | None) -> None:
        if flops is None:
            self.flops_na += 1
        else:
            self.flops += flops
            self.flops_time += dur
            if peak:
                self.peak_flops += flops
                self.capacity += dur * peak * 1e3  # TFLOP/s = 1e3 FLOP/ns
        if nbytes is None:
            self.bytes_na += 1
        else:
            self.bytes += nbytes
            self.bytes_time += dur

    _WORK = ("flops", "flops_na", "flops_time", "peak_flops", "capacity", "bytes", "bytes_na", "bytes_time")

    def _shift(self, other: "Group", sign: int) -> None:
        """Add (sign 1) or take away (-1) the work totals of `other`."""
        for name in self._WORK:
            setattr(self, name, getattr(self, name) + sign * getattr(other, name))

    def merge(self, other: "Group") -> None:
        """Add the kernels of `other` to this group."""
        self.time += other.time
        self.count += other.count
        self.durations.extend(other.durations)
        self._shift(other, 1)
        self.tc_time += other.tc_time
        if other.both is None:
            return
        if self.both is None:
            self.both = (Group(self.name, self.keys), Group(self.name, self.keys, True))
        for mine, theirs in zip(self.both, other.both):
            mine.merge(theirs)
        if self.whole and not other.whole:  # `other` counted those kernels' own work: count their whole-call work
            self._shift(other.both[0], -1)
            self._shift(other.both[1], 1)

    def stats(self) -> dict:
        """nsys stats' duration statistics (ns): avg, med, min, max, stddev (sample; 0 for one
        kernel)."""
        d = self.durations
        n = len(d)
        if not n:
            return {"avg_ns": None, "med_ns": None, "min_ns": None, "max_ns": None, "stddev_ns": None}
        mean = self.time / n
        low, high, middle = _order_stats(d)
        med = middle[-1] if n % 2 else (middle[0] + middle[1]) / 2
        # fsum: exactly rounded, so every Python and any order give the same digits (3.12's sum() compensates).
        var = math.fsum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
        return {"avg_ns": mean, "med_ns": med, "min_ns": low, "max_ns": high, "stddev_ns": math.sqrt(var)}

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


def _order_stats(d: array) -> tuple[int, int, list[int]]:
    """The least and greatest of the durations `d` (not empty), and the middle one or two in
    order. With numpy, from a partition of one int64 copy (8 bytes a duration: a sorted list
    costs some 40, a Python int each); without it (prof needs none), from the sorted list."""
    n = len(d)
    at = sorted({(n - 1) // 2, n // 2})
    try:
        import numpy as np
    except ImportError:
        ordered = sorted(d)
        return ordered[0], ordered[-1], [ordered[i] for i in at]
    part = np.partition(np.frombuffer(d, np.int64), [0, *at, n - 1])
    return int(part[0]), int(part[-1]), [int(part[i]) for i in at]


# --sort KEY: descending except name; unknown values sort last.
SORTS: dict[str, Callable[[Group], object]] = {
    "time": lambda g: g.time,
    "count": lambda g: g.count,
    "avg": lambda g: g.time / g.count if g.count else None,
    "med": lambda g: g.stats()["med_ns"],
    "max": lambda g: max(g.durations, default=None),
    "flops": lambda g: g.known_flops(),
    "tflops": lambda g: g.tflops,
    "peak": lambda g: g.pct_peak,
    "bytes": lambda g: g.known_bytes(),
    "gbps": lambda g: g.gbps,
    "tc": lambda g: g.tc_share,
    "name": lambda g: g.name,
}


def by_keys(spec: str) -> list[str]:
    """The KEYS named in a --by value (`op`, `op,shape`), `call` followed by the CALL_WITH keys
    not named; ValueError naming the choices."""
    keys = [k.strip() for k in spec.split(",")]
    bad = [k for k in keys if k not in KEYS]
    if bad or len(set(keys)) != len(keys):
        raise ValueError(f"invalid --by {spec!r}: one of {', '.join(KEYS)}, or several joined by commas "
                         "(op,shape), each once")
    if "call" in keys:
        at = keys.index("call") + 1
        keys[at:at] = [k for k in CALL_WITH[1:] if k not in keys]
    return keys


class Groups:
    """Groups of kernels by one of KEYS, or by several (`op,shape`: one group per combination,
    named by their values joined with a space)."""

    def __init__(self, by: str = "op") -> None:
        self.keys = by_keys(by)
        self.by = ",".join(self.keys)
        self.whole = WHOLE_CALL.issuperset(self.keys)
        funcs = [KEYS[k] for k in self.keys]
        self.key = funcs[0] if len(funcs) == 1 else (lambda rec, f: tuple([fn(rec, f) for fn in funcs]))
        self.groups: dict = {}

    def add(self, rec: dict, f: Facts, dur: int) -> str | tuple:
        """Count one kernel record; returns its group's key."""
        key = self.key_of(rec, f)
        self.group(key).add(dur, f)
        return key

    def key_of(self, rec: dict, f: Facts) -> str | tuple:
        """The key of the group of a kernel record."""
        key = self.key(rec, f)
        if type(key) is not str:  # a name of another JSON type (a number, a list) still names a group
            key = tuple(map(str, key)) if type(key) is tuple else str(key)
        return key

    def group(self, key: str | tuple) -> Group:
        """The group of `key` (key_of), made empty when new."""
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = Group(key, (), self.whole) if isinstance(key, str) else \
                Group(" ".join(key), key, self.whole)
        return g

    def rolled_up(self, by: str) -> "Groups":
        """These groups merged into groups by `by`, whose keys must be among this one's (a table by
        op from one by op and shape): one pass over the records gives every coarser table."""
        out = Groups(by)
        where = [self.keys.index(k) for k in out.keys]
        for key, g in self.groups.items():
            sub = tuple(key[i] for i in where) if len(self.keys) > 1 else (key,)
            out.group(sub[0] if len(sub) == 1 else sub).merge(g)
        return out

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
