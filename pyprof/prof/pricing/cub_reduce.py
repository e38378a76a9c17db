"""cub's two-pass reduction: the second pass's work, which the first pass's launch states.

cub's DeviceReduce (nonzero's count of true elements, and every other cub sum PyTorch runs) reduces
an input of more than one tile in two kernels on one stream: DeviceReduceKernel, whose blocks
each reduce their share and write one partial (its grid: that many partials), then
DeviceReduceSingleTileKernel, which reads those partials and writes the result. An op's formula
prices the first pass (the input read); what the second reads is the first pass's grid, which no
formula knows: it comes from the launch before it on its stream. An input of one tile runs the
single-tile kernel alone, over the input itself: the op's formula prices it then.
"""
from __future__ import annotations

import re

from .op_ranges import template_dtype
from .part import launch_count
from .values import ITEMSIZE, reduce_adds

_FIRST_PASS = "DeviceReduceKernel<"
# DeviceReduceSingleTileKernel<Policy, InputIteratorT, OutputIteratorT, ...>: after a first pass,
# both plain pointers (`int *, int *`), the partials' type and the result's.
_SECOND_PASS = re.compile(r"\bDeviceReduceSingleTileKernel<.*?::Policy\d+, ([\w:]+(?: [\w:]+)*) \*, "
                          r"([\w:]+(?: [\w:]+)*) \*,")


class TwoPassReduce:
    """Per stream (pid, device, stream), the grid of a first pass that was the stream's last
    kernel; `work` is told every kernel, in the order each stream ran them."""

    __slots__ = ("_first",)

    def __init__(self) -> None:
        self._first: dict = {}  # (pid, device, stream) -> the first pass's blocks

    def work(self, rec: dict, name: str | None) -> tuple | None:
        """(FLOPs, bytes) of a second pass right after its first pass on the same stream: the
        partials read (one a block of the first pass) and added, the result written; None for
        every other kernel (and for a second pass whose types its name does not state)."""
        key = (rec.get("pid"), rec.get("device"), rec.get("stream"))
        blocks = self._first.pop(key, None)
        if not name or "DeviceReduce" not in name:  # every kernel comes here: the name first
            return None
        if _FIRST_PASS in name:
            first = launch_count(rec.get("grid"))
            if first is not None:
                self._first[key] = first
            return None
        m = _SECOND_PASS.search(name) if blocks is not None else None
        if m is None:
            return None
        partial = ITEMSIZE.get(template_dtype(f"<{m.group(1)}>"))
        result = ITEMSIZE.get(template_dtype(f"<{m.group(2)}>"))
        if not partial or not result:
            return None
        return reduce_adds(blocks, 1), blocks * partial + result
