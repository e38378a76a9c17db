"""The first consumers of data-sized outputs: what PyTorch's op ranges alone tell of how many
elements nonzero, masked_select, unique, boolean indexing, ... returned.

An op range carries its inputs' shapes only (`sizes`), so a call whose output size its input's
values decide (PyTorch tags those ops dynamic_output_shape: DATA_SIZED) says nothing of what it
returned; the ranges of the ops that read its output do, naming it in their `input_op_ids`. prof
finds an output's shape among the records it reads ahead (pricing/tensor_flow.py), but those hold
the ranges around kernels only, and what reads a data-sized output first is mostly a view, which
launches nothing (where's unbind of nonzero's indices, x[mask].view(...)): its range is in no
record.

So, per thread, once an activity is launched inside the range of a data-sized op, the sweep
listens: a PyTorch range that starts on that thread before its next launch and names as a
producer one of the ranges around that activity (the op, or one that may return its output:
argwhere around nonzero) is kept, unless it lies inside the range kept last (select's
as_strided names the same producer and tells nothing more). A substring test (`(opId,`; PyTorch
writes `(38,0)`) tells a consumer, so the other ranges cost no decoding. The thread's next launch
carries what was kept, as torchOps entries, in its record's `consumers` (docs/records.md); a
thread that launches nothing again keeps at most HEARD. A parallel parse window carries each
thread's state across its start (window.Seed.consumers; a speculative window that began while one
listened, or held what it heard, is parsed again, seeded: window.stale).

A view that broadcasts (formats.BROADCAST_VIEWS: expand, expand_as, broadcast_to) launches
nothing either, and its range is the one place the trace says that a tensor an op reads is a
broadcast, stride 0: its first input's shape is what the op reads once (a scatter's index
expanded over the features). So each such range is kept too, whoever listens, unless inside the
range kept last (expand_as's own expand), and the thread's next launch carries it the same way.
A substring test finds them.
"""
from __future__ import annotations

from pyprof.formats import BROADCAST_VIEWS
from pyprof.parse.ranges import classify

# ATen ops PyTorch tags dynamic_output_shape (torch.Tag; torch 2.11-2.13), as their ranges name
# them; tests/parse/test_parse_consumers.py holds the list against torch's tags where torch is installed.
DATA_SIZED = frozenset(f"aten::{op}" for op in (
    "_unique", "_unique2", "bincount", "index", "masked_select", "nonzero", "one_hot", "repeat_interleave",
    "unique_consecutive", "unique_dim"))
# Consumer ranges kept per thread between two launches: the first few readers of an output give
# its shape; more would only lengthen the next record.
HEARD = 8


# A thread's listening state, as a window carries it (window.Seed, Report): the `(opId,` needles
# of the producers listened for, the consumers heard (torchOps entries' JSON), the end of the
# last one kept.
State = tuple


class Consumers:
    """The listening state of one sweep: per thread (globalTid), the producers listened for and
    the consumer ranges heard since its last launch; `seed` (a window's Seed.consumers): the
    state the sweep starts from. `touched`: the threads whose state this sweep changed."""

    __slots__ = ("listening", "heard", "until", "touched")

    def __init__(self, seed: dict[int, State] | None = None) -> None:
        self.listening: dict[int, tuple[str, ...]] = {}  # globalTid -> `(opId,` of each producer
        self.heard: dict[int, list[str]] = {}            # globalTid -> torchOps entries' JSON
        self.until: dict[int, int] = {}                  # globalTid -> end of the last range kept
        self.touched: set[int] = set()
        for gtid, (needles, heard, until) in (seed or {}).items():
            if needles:
                self.listening[gtid] = needles
            self.heard[gtid] = list(heard)
            self.until[gtid] = until

    def hear(self, gtid: int, text: str, start: int, end: int) -> None:
        """A range of the default domain with `text` from `start` to `end` on thread `gtid`, which
        listens (the caller checks): kept when it is PyTorch's, names a producer listened for and
        is not inside the range kept last."""
        if not any(n in text for n in self.listening[gtid]) or start <= self.until.get(gtid, start - 1):
            return
        heard = self.heard.setdefault(gtid, [])
        if len(heard) < HEARD:
            label = classify(None, text)
            if label.op_id is not None:  # PyTorch's op range, not user text that holds "(12,"
                heard.append(label.js)
                self.until[gtid] = end
                self.touched.add(gtid)

    def expanded(self, gtid: int, text: str, start: int, end: int) -> None:
        """A range of the default domain whose text names a broadcasting view, on thread `gtid`:
        kept when it is PyTorch's range of one (BROADCAST_VIEWS) and not inside the range kept
        last (the outermost is the one consumers name: expand_as runs expand)."""
        if start <= self.until.get(gtid, start - 1):
            return
        label = classify(None, text)
        if label.name in BROADCAST_VIEWS and label.op_id is not None and len(self.heard.get(gtid, ())) < HEARD:
            self.heard.setdefault(gtid, []).append(label.js)
            self.until[gtid] = end
            self.touched.add(gtid)

    def launched(self, gtid: int, producers: list[int] | None) -> str:
        """An activity launched on thread `gtid`: the `consumers` member of its record
        (',"consumers":[...]', or '' where none was heard); from now on the thread listens for
        consumers of `producers`, the opIds of the PyTorch ranges around the launch where one is a
        data-sized op's (else None)."""
        heard = self.heard.pop(gtid, None)
        self.until.pop(gtid, None)
        self.touched.add(gtid)
        if producers:
            self.listening[gtid] = tuple(f"({op}," for op in producers)
        else:
            self.listening.pop(gtid, None)
        return f',"consumers":[{",".join(heard)}]' if heard else ""

    def state(self, gtid: int) -> State | None:
        """Thread `gtid`'s listening state (None: it listens for nothing and holds nothing heard)."""
        needles, heard = self.listening.get(gtid), self.heard.get(gtid)
        if needles is None and not heard:
            return None
        return needles or (), tuple(heard or ()), self.until.get(gtid, NO_RANGE)


# `until` before any range was kept: below every start.
NO_RANGE = -(1 << 63)


def compose(seed: dict[int, State], end: dict[int, State | None]) -> dict[int, State]:
    """The listening state after a window that started with `seed` and left `end` for the threads
    it touched (None: that thread listens for nothing)."""
    out = dict(seed)
    for gtid, state in end.items():
        if state is None:
            out.pop(gtid, None)
        else:
            out[gtid] = state
    return out
