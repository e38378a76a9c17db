"""Which rank of a distributed job an export belongs to (docs/parse.md, "Ranks side by side").

In order: the trace's own word, a pyprof marker of a torch.distributed call, which carries the
caller's global rank (docs/markers.md, `dist`); else the file name's last number
(`nsys profile -o trace_%q{RANK}` writes `trace_3.sqlite`); else the export's position among the
inputs, sorted by name.
"""
from __future__ import annotations

import json
import os
import re
from typing import Iterable, NamedTuple

from pyprof.formats import DIST_MOD, op_marker_head
from pyprof.parse.export import STRINGS, Export

_LAST_NUMBER = re.compile(r"(\d+)\D*\Z")
_SUFFIXES = (".sqlite", ".nsys-rep", ".sqlite3", ".db")
# Our markers of torch.distributed calls, as registered strings (the nvtx package registers every
# message), as a LIKE pattern: the head every one of them starts with.
_DIST_MARKER = op_marker_head(DIST_MOD) + "%"


class Rank(NamedTuple):
    """An export's rank and where it came from: `trace`, `name` or `order`."""

    rank: int
    source: str


def stem(path: str) -> str:
    """The file name without directory and export suffix."""
    name = os.path.basename(path)
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def from_name(path: str) -> int | None:
    """The last number in the file name (`trace_12.sqlite`, `rank3-node0` -> 0), or None."""
    m = _LAST_NUMBER.search(stem(path))
    return int(m[1]) if m else None


def from_trace(exp: Export) -> int | None:
    """The global rank in the export's first pyprof torch.distributed marker that has one."""
    if not exp.has(STRINGS, "value"):
        return None
    with exp.errors():
        rows = exp.rows(f"SELECT value FROM {STRINGS} WHERE value LIKE ? LIMIT 64", (_DIST_MARKER,)).fetchall()
    for (text,) in rows:
        try:
            dist = json.loads(text).get("dist")
        except (ValueError, AttributeError, RecursionError):
            continue
        rank = dist.get("rank") if isinstance(dist, dict) else None
        if type(rank) is int and rank >= 0:
            return rank
    return None


def by_name(paths: Iterable[str]) -> list[str]:
    """Exports in rank order as far as names tell: by their last number, then by name."""
    def key(p: str) -> tuple:
        n = from_name(p)
        return (n is None, n if n is not None else 0, p)
    return sorted(paths, key=key)


def resolve(trace: int | None, path: str, position: int) -> Rank:
    """The rank of the export at `path`, `position`-th of the inputs (by_name order)."""
    if trace is not None:
        return Rank(trace, "trace")
    named = from_name(path)
    if named is not None:
        return Rank(named, "name")
    return Rank(position, "order")
