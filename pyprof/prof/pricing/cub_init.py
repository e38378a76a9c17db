"""cub's tile-status initialisation kernels (the first kernel of its single-pass scans, unique-by-key
and select), whose launch alone states their work: priced under any op and at every level
(analysis.Analyzer), before the op's own pricing is asked.
"""
from __future__ import annotations

import re

from .op_ranges import template_dtype
from .part import launch_count
from .values import ITEMSIZE

# cub's single-pass scans (DeviceScan, unique-by-key, select) first initialise their tile-status
# array: DeviceScanInitKernel<ScanTileState<T, (bool)1>> and DeviceCompactInitKernel<ScanTileState<T,
# (bool)1>, counter type *>, which also zeroes the count of selected items.
_TILE_INIT = re.compile(r"\bDevice(Scan|Compact)InitKernel<[\w:]*ScanTileState<([^<>]+), \(bool\)1>"
                        r"(?:, ([^<>]+?) \*>)?")
_TILE_STATUS_PADDING = 32  # cub's warp of out-of-bounds descriptors before the first tile's


def tile_init(kernel: str | None, grid: object, block: object) -> tuple | None:
    """(FLOPs, bytes) of cub's tile-status initialisation, which its launch alone states: one
    thread per tile writes its descriptor (T's status word and value: 2 x sizeof(T), the one
    transaction word of a primitive T), and 32 padding descriptors before them; the compaction's
    kernel writes its selected-item counter too. cub launches ceil(tiles / block) blocks, so the
    tiles are told to within the last block: counted the fewest the grid implies,
    (grid - 1) x block + 1 (the padding dominates a one-block grid: 528 bytes for ncu's 544 with
    two tiles, exact with one). Nothing is read. None for any other kernel or a type not known."""
    m = _TILE_INIT.search(kernel) if kernel and "InitKernel<" in kernel else None
    if m is None:  # every kernel comes here: the name first, the launch only for cub's
        return None
    g, b = launch_count(grid), launch_count(block)
    if g is None or b is None:
        return None
    value = ITEMSIZE.get(template_dtype(f"<{m.group(2)}>"))  # as a template argument
    counter = ITEMSIZE.get(template_dtype(f"<{m.group(3)}>")) if m.group(1) == "Compact" else 0
    if not value or counter is None:
        return None
    return 0, ((g - 1) * b + 1 + _TILE_STATUS_PADDING) * 2 * value + counter
