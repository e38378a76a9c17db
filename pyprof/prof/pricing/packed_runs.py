"""A packed sequence's batch sizes from PyTorch's op ranges (traces without pyprof.init()): what
its pack's own kernels tell.

A range carries no values, so `aten::_cudnn_rnn` over a PackedSequence says how many rows the
data has but not how many of them each time step runs (its batch sizes: docs/prof.md), and each
step's kernels would be na. The pack that made the sequence says it in shapes
(aten/src/ATen/native/PackedSequence.cpp, ops/packed_sequence.py): `_pack_padded_sequence` cuts
the time-first input into runs of steps with one batch size b, each `[k, b, *F]` made contiguous
(`aten::contiguous` around a copy kernel, none where the block already is contiguous), then
`aten::cat` of the runs flattened to `[k·b, *F]`. So each run's rows come from the cat's sizes,
and its steps and batch size from its copy's range; a run without a copy is solved from its rows:
the (k, b) that make its block contiguous in the input's layout (batch-first or not, which the
lengths' count against the input's first two dimensions tells), with b below the run before it
and above the run after it, the first run's b the batch, and all steps T where the RNN's range
gives T. Unsolved where more than one (k, b) fits: then the sizes stay unknown.

Ops reading a pack's batch sizes (its output 1: aten::lstm, aten::gru, ...) make outputs packed
alike, and so do the ops inside them (autocast's cast of the data), so a second RNN layer's data,
or the backward's saved input, leads back to the pack.
"""
from __future__ import annotations

from bisect import bisect_right
from itertools import islice, product
from math import isqrt, prod
from typing import Any

from .ops.packed_sequence import contiguous
from .values import is_shape

PACK = "aten::_pack_padded_sequence"
_COPY = "aten::contiguous"
_CAT = "aten::cat"
_CHOICES = 64  # the most combinations of (k, b) of copy-less runs tried; more: unsolved
_ROWS = 1 << 32  # the most rows of a copy-less run whose (k, b) are enumerated (its divisors)
_STEPS = 1 << 20  # the most time steps a pack is solved for


class _Pack:
    """What the kernels of one `_pack_padded_sequence` call told: the input's shape, the batch
    (the lengths' count), each copied run's (k, b) by its `aten::contiguous` opId, and the cat's
    runs, (rows, opId of the op that made the run)."""

    __slots__ = ("shape", "batch", "copies", "cat", "solved")

    def __init__(self, shape: tuple, batch: int) -> None:
        self.shape = shape
        self.batch = batch
        self.copies: dict = {}
        self.cat: list | None = None
        self.solved: dict = {}  # steps (None: not given) -> the batch sizes or None


def _ints(s: Any) -> tuple | None:
    """A range's sizes entry as a shape of positive dimensions; None for anything else."""
    return tuple(s) if is_shape(s) and min(s) > 0 else None


def _pairs(rows: int) -> list[tuple[int, int]]:
    """Every (k, b) with k·b = rows."""
    out = []
    for k in range(1, isqrt(rows) + 1):
        if rows % k == 0:
            out += [(k, rows // k)] + ([(rows // k, k)] if k * k != rows else [])
    return out


class PackedRuns:
    """Per process, the packs seen (by opId) and the ops whose outputs are packed with a pack's
    batch sizes (by opId)."""

    def __init__(self) -> None:
        self._packs: dict = {}     # (pid, opId of the pack) -> _Pack
        self._packed_by: dict = {}  # (pid, opId of an op reading a pack's batch sizes) -> the pack's key

    def saw(self, pid: Any, ranges: list) -> None:
        """Take what a kernel record's ranges tell: a run's copy or the cat inside a pack's range
        (outermost: pack_padded_sequence is called from Python), or an op reading a pack's
        batch sizes. Costs a record one look at its outermost range."""
        outer = ranges[0]
        if type(outer) is not dict:
            return
        if outer.get("name") == PACK:
            self._inside_pack(pid, outer, ranges[1] if len(ranges) > 1 else None)
        elif self._packs:  # the readers are called from Python too (torch._VF.lstm): outermost
            ids = outer.get("inputOpIds")
            second = ids[1] if isinstance(ids, list) and len(ids) > 1 else None
            inner = ranges[-1]
            if isinstance(second, list) and len(second) == 2 and second[1] == 1 and (pid, second[0]) in self._packs \
                    and not (type(inner) is dict and (pid, inner.get("opId")) in self._packed_by):
                # and the ops inside it (autocast's cast of the data, the _cudnn_rnn it calls); a
                # reader's kernels after its first under the same ranges add nothing
                for r in ranges:
                    if type(r) is dict:
                        self._packed_by[(pid, r.get("opId"))] = (pid, second[0])

    def _inside_pack(self, pid: Any, outer: dict, inner: Any) -> None:
        key = (pid, outer.get("opId"))
        pack = self._packs.get(key)
        if pack is None:
            sizes = outer.get("sizes")
            shape = _ints(sizes[0]) if isinstance(sizes, list) and len(sizes) > 1 else None
            lengths = _ints(sizes[1]) if shape else None
            if shape is None or lengths is None or len(shape) < 2 or len(lengths) != 1:
                return
            pack = self._packs[key] = _Pack(shape, lengths[0])
        name = inner.get("name") if type(inner) is dict else None
        sizes = inner.get("sizes") if name else None
        if name == _COPY and isinstance(sizes, list) and sizes:
            block = _ints(sizes[0])
            if block and len(block) == len(pack.shape) and type(inner.get("opId")) is int:
                pack.copies[inner["opId"]] = block[:2]
        elif name == _CAT and isinstance(sizes, list) and pack.cat is None:
            ids = inner.get("inputOpIds")
            runs = [(s[0], p[0]) for s, p in zip(sizes, ids if isinstance(ids, list) else [])
                    if _ints(s) and isinstance(p, list) and len(p) == 2 and type(p[0]) is int]
            pack.cat = runs if runs and len(runs) == len(sizes) - 1 else []

    def pack_of(self, pid: Any, producer: tuple | None) -> tuple | None:
        """The key of the pack `producer` ((opId, output index)) is an output of (its data or its
        batch sizes), or whose batch sizes the op that made it read (or an op inside that one)."""
        if producer is None:
            return None
        key = (pid, producer[0])
        return key if key in self._packs else self._packed_by.get(key)

    def batch_sizes(self, key: tuple | None, steps: int | None = None) -> tuple | None:
        """The batch sizes of pack `key` (PackedRuns.pack_of) as its kernels tell them, given the
        steps T where known; None where they do not tell one answer."""
        pack = self._packs.get(key) if key is not None else None
        if pack is None or not pack.cat:
            return None
        if steps not in pack.solved:
            solved = pack.solved.get(None) if steps is not None else None
            pack.solved[steps] = solved if solved is not None and len(solved) == steps else _solve(pack, steps)
        return pack.solved[steps]

    def trim(self, held: int) -> None:
        """Down to the `held` newest packs and readers."""
        for table in (self._packs, self._packed_by):
            for key in list(islice(table, max(len(table) - held, 0))):
                del table[key]


def _layouts(pack: _Pack) -> list[tuple[int, tuple[int, int]]]:
    """(padded steps, the time-first view's (step, sequence) strides) per layout the shapes
    allow: batch-first where the lengths' count is the input's first dimension, time-first where
    its second."""
    feat = prod(pack.shape[2:])
    out = []
    if pack.shape[0] == pack.batch:
        out.append((pack.shape[1], (feat, pack.shape[1] * feat)))
    if pack.shape[1] == pack.batch:
        out.append((pack.shape[0], (pack.batch * feat, feat)))
    return out


def _solve(pack: _Pack, steps: int | None) -> tuple | None:
    """The batch sizes the cat's runs and the copies' blocks allow, where exactly one answer fits."""
    found: set = set()
    copied = sorted(pack.copies)
    for padded, strides in _layouts(pack):
        runs = _runs(pack, copied, strides)
        if runs is None:
            continue
        choices = 1
        for options in runs:
            choices *= len(options)
        if choices > _CHOICES:
            return None
        for pick in product(*runs):
            total = sum(k for k, _ in pick)
            if pick[0][1] == pack.batch and total <= min(padded, _STEPS) and (steps is None or total == steps) \
                    and all(b > after for (_, b), (_, after) in zip(pick, pick[1:])):
                found.add(tuple(b for k, b in pick for _ in range(k)))
    return found.pop() if len(found) == 1 else None


def _runs(pack: _Pack, copied: list, strides: tuple[int, int]) -> list | None:
    """Per run of the cat, the (k, b) it can be: its copy's block where a copy ran between the
    op that made the run before and the one that made it (`copied`: the copies' opIds, sorted;
    a block that is contiguous would not have been copied: None, not this layout), else every
    (k, b) of its rows whose block is contiguous."""
    feat = prod(pack.shape[2:])
    runs, low, choices = [], 0, 1
    for rows, made in pack.cat:
        high = bisect_right(copied, made)
        if high - low > 1 or high == low and (rows > _ROWS or choices > _CHOICES):
            return None
        if high > low:
            k, b = pack.copies[copied[low]]
            if k * b != rows or contiguous((k, b, feat), (*strides, 1)):
                return None
            runs.append([(k, b)])
        else:
            runs.append([(k, b) for k, b in _pairs(rows) if contiguous((k, b, feat), (*strides, 1))])
            choices *= len(runs[-1])
        low = high
    return runs
