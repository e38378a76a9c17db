"""GPU busy time: the union of kernel intervals per device, in one streaming pass.

Records come in launch order, which is not GPU start order across streams: a kernel launched
later on another stream may start first, or a stream may wait on an event for a while. So a
device keeps a small sorted list of *merged* busy intervals that any new interval may land
in, overlap or bridge (insert by bisection, merge with its neighbours). Only when that list
grows past `window` merged intervals is the oldest one final: its busy time and the idle gap
before it are added to the totals and it is dropped. Memory is O(window) per device whatever
the trace length, and the result is exact unless a kernel starts before the end of an interval
already finalised, i.e. more than `window` idle gaps behind the newest work on its device. Such
a kernel is counted (`late`) and only its part after the finalised frontier is added (it may
have overlapped finalised work, so adding all of it could overstate busy time).
"""
from __future__ import annotations

from bisect import bisect_left

WINDOW = 1024  # merged intervals kept open per device (see the module docstring)


class Timeline:
    """Busy intervals of one device: the union of [start, end) intervals added in any order
    (within the window), with idle-gap statistics between consecutive merged intervals."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = max(1, window)
        self._starts: list[int] = []  # open merged intervals, sorted, disjoint, not touching
        self._ends: list[int] = []
        self.busy = 0                 # finalised busy ns
        self.frontier: int | None = None  # end of the last finalised interval
        self.gaps = 0
        self.gap_total = 0
        self.gap_max = 0
        self.late = 0
        self.first: int | None = None
        self.last: int | None = None

    def add(self, start: int, end: int) -> None:
        """Add the interval [start, end) (ns). Empty or inverted intervals add nothing."""
        if end <= start:
            return
        if self.first is None or start < self.first:
            self.first = start
        if self.last is None or end > self.last:
            self.last = end
        if self.frontier is not None and start < self.frontier:
            self.late += 1
            if end <= self.frontier:
                return
            start = self.frontier
        starts, ends = self._starts, self._ends
        # First open interval that could touch [start, end): the one before the insertion
        # point when it reaches start, else the insertion point itself.
        i = bisect_left(starts, start)
        if i > 0 and ends[i - 1] >= start:
            i -= 1
        j = i
        while j < len(starts) and starts[j] <= end:
            j += 1
        if j > i:  # merge [i, j) with the new interval
            start = min(start, starts[i])
            end = max(end, ends[j - 1])
            del starts[i:j], ends[i:j]
        starts.insert(i, start)
        ends.insert(i, end)
        if len(starts) > self.window:
            self._finalise_first()

    def _finalise_first(self) -> None:
        s, e = self._starts.pop(0), self._ends.pop(0)
        if self.frontier is not None:
            gap = s - self.frontier
            self.gaps += 1
            self.gap_total += gap
            self.gap_max = max(self.gap_max, gap)
        self.busy += e - s
        self.frontier = e

    def finish(self) -> "Timeline":
        """Finalise every open interval; returns self. Adding afterwards counts as late."""
        while self._starts:
            self._finalise_first()
        return self


class Timelines:
    """One Timeline per device plus the capture span over all of them."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.devices: dict[object, Timeline] = {}

    def add(self, device: object, start: int, end: int) -> None:
        """Add a kernel interval on `device`."""
        tl = self.devices.get(device)
        if tl is None:
            tl = self.devices[device] = Timeline(self.window)
        tl.add(start, end)

    def finish(self) -> "Timelines":
        """Finalise every device; returns self."""
        for tl in self.devices.values():
            tl.finish()
        return self

    @property
    def first(self) -> int | None:
        """Earliest kernel start over all devices."""
        vals = [t.first for t in self.devices.values() if t.first is not None]
        return min(vals) if vals else None

    @property
    def last(self) -> int | None:
        """Latest kernel end over all devices."""
        vals = [t.last for t in self.devices.values() if t.last is not None]
        return max(vals) if vals else None

    @property
    def span(self) -> int | None:
        """Capture span: first kernel start to last kernel end (ns), None without kernels."""
        first, last = self.first, self.last
        return None if first is None else last - first
