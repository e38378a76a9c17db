"""Tensor flow between PyTorch's op ranges: what the trace tells about an op's outputs, for the
aten level's formulas (op_ranges.py), whose own range carries input shapes only.

Every range of `emit_nvtx(record_shapes=True)` (and of `nsys --pytorch=autograd-shapes-nvtx`)
names, per input, the op that produced it: `inputOpIds` holds (producer's opId, output index),
(0, -1) for a tensor no recorded op made (a parameter, an input) or a scalar. PyTorch records the
producer when an op returns, so an op nested in another one that returns its output unchanged
(aten::linear around aten::addmm) is overwritten by the outer one: consumers name the outermost.
Three facts flow from that:

- an output's dtype, backward (`TensorFlow.dtype_of`): each kernel's record tells the dtype its
  kernel wrote (op_ranges.kernel_element_dtype: a cast kernel's store type, a GEMM's dtype token,
  the first element type of an element-wise kernel's template), kept for every range around it,
  the last kernel of a range winning (an op's last kernel writes its result). A formula reads an
  input's dtype from its producer (a cast's source dtype). Kept for the last HELD to 2 x HELD ops,
  the oldest dropped first, so memory stays flat however long the trace.
- an output's shape, forward (`TensorFlow.shape_of`): the sizes a consumer's range gives for it.
  The records are read AHEAD records ahead of the one analysed (`TensorFlow.ahead`), and a
  consumer among them gives the shape of an output of an op still waiting in the window (an
  upsample's output size, a reduction's over dims the range does not carry; the rest of a cuDNN
  RNN chunk's steps, rnn_kernels.py). A consumer is a range around a record's kernel, or one in
  its `consumers`: a range that launched nothing and read a data-sized op's output (nonzero's,
  unique's: parse/consumers.py). An op whose first consumer is further away than the window
  stays unknown. 128 records: 95% of the shipped H100 captures' consumers come within 32, and a
  2-layer bidirectional LSTM's chunk of 16 steps needs 64; the window costs a record's place in
  a deque, its scans are made only when a formula asks. A reading that needs more (a chunk of
  50 steps: `upcoming(further)`) reads on from the input, up to FURTHER records, which then wait
  in the window: memory is bounded by what such a reading asks.
- a packed sequence's batch sizes (`TensorFlow.batch_sizes`), forward: what its pack's kernels'
  ranges told (packed_runs.py), found through the op that made the data: the pack, or an op that
  read its batch sizes (an RNN layer before, autocast's cast inside one).

All are asked for by a formula only; `asked` says whether one asked for what this flow could not
answer, so that an analysis replaying part of a trace (the memo, pricing/memo.py) knows that the
whole trace might have answered otherwise.
"""
from __future__ import annotations

from collections import deque
from itertools import chain, islice
from typing import Any, Iterable, Iterator

from ...formats import BROADCAST_VIEWS
from .packed_runs import PackedRuns

ENGINE = "autograd::engine::evaluate_function"  # the engine's range around a node's work
HELD = 1 << 16  # ops whose output dtype is kept (a training step of a large model has ~10^4)
AHEAD = 128     # records read ahead (the docstring says why so many)
# The most records a reading that asks for more (upcoming's `further`) looks ahead: a cuDNN RNN
# call's chunk runs its steps' kernels before the next chunk (rnn_kernels.py), 6 a step and
# direction with a projection, so a 2-layer bidirectional LSTM's 50 steps need 600.
FURTHER = 4096
_END = object()


def _listed(v: Any) -> list:
    """A record's list member (torchOps, consumers), [] where it is absent or no list."""
    return v if isinstance(v, list) else []


def _int_list(v: Any) -> bool:
    return isinstance(v, list) and all(type(d) is int for d in v)


def _process(rec: dict) -> Any:
    """The record's pid as a dict key; _NO_KEY where it can be none (valid JSON, never parse's: a list)."""
    pid = rec.get("pid")
    return pid if pid is None or type(pid) in (int, str) else _NO_KEY


_NO_KEY = object()


def node_range(r: dict) -> bool:
    """True for an autograd node's range (`MulBackward0`, `torch::autograd::CopyBackwards`; its
    seq is its forward op's): no dispatcher op (`aten::`, `mylib::`), no engine range."""
    name = r.get("name")
    return type(r.get("seq")) is int and isinstance(name, str) and ("::" not in name
                                                                   or name.startswith("torch::autograd::"))


def producers(r: dict) -> list:
    """(opId, output index) of each input of range `r`, None where the range does not name one."""
    ids = r.get("inputOpIds")
    if not isinstance(ids, list):
        return []
    return [(p[0], p[1]) if isinstance(p, list) and len(p) == 2 and type(p[0]) is int and type(p[1]) is int
            and p[0] > 0 and p[1] >= 0 else None for p in ids]


# The ranges of a cast (x.to(dtype)): aten::to around aten::_to_copy around aten::copy_.
_CAST_RANGES = frozenset(("aten::to", "aten::_to_copy"))
_SIXTEEN_BIT = frozenset(("float16", "bfloat16"))


def argument_cast(ranges: list, depth: int) -> dict | None:
    """The op range the cast whose aten::copy_ is `ranges[depth]` was made inside: the range right
    around its aten::to / aten::_to_copy, where that is a dispatcher op (autocast casts an op's
    arguments inside the op's range); None for a cast with no op around it (one the user called)
    or inside an autograd node, or for a copy that is no cast's."""
    if depth < 1 or type(ranges[depth - 1]) is not dict or ranges[depth - 1].get("name") not in _CAST_RANGES:
        return None
    for r in reversed(ranges[:depth]):
        name = r.get("name") if type(r) is dict else None
        if name in _CAST_RANGES:
            continue
        if type(name) is str and "::" in name and not name.startswith(ENGINE) and not node_range(r):
            return r
        return None
    return None


class TensorFlow:
    """Output dtypes by producer (written in launch order) and output shapes by consumer (read
    AHEAD records ahead), per process; and per process the 16-bit dtype autocast casts to."""

    def __init__(self, held: int = HELD) -> None:
        self._held = held
        self._dtypes: dict = {}  # (pid, opId) -> the dtype its last kernel wrote
        # (pid, seq) of a forward op -> (its output's dtype, its inputs' sizes, its name)
        self._forward: dict = {}
        # (pid, opId) of the engine's `evaluate_function` range -> the seq of the node it runs
        self._nodes: dict = {}
        # pid -> the 16-bit dtype the last cast made inside an op wrote (autocast_dtype)
        self._autocast: dict = {}
        # The records read ahead of the one analysed (ahead), in order: shape_of looks there.
        self._window: deque = deque()
        self._source: Iterator | None = None  # the input ahead reads, where upcoming may read on
        self._read_out = False  # upcoming reached the input's end
        self._packs = PackedRuns()  # what packed sequences' packs told of their batch sizes
        # (pid, opId) of a broadcasting view (formats.BROADCAST_VIEWS) -> (its input's shape, the
        # number of the record that carried its range)
        self._broadcasts: dict = {}
        self.record = 0  # the number of the kernel record being priced (the caller counts them)
        self.asked = False  # a formula asked for something this flow did not hold
        # A replay of part of the trace (memo.py): what it lacks may be in the records before it.
        self.partial = False

    def wrote(self, rec: dict, dtype: str | None, source: str | None = None) -> None:
        """Record that the kernel of `rec` wrote `dtype`, for every range around it (by opId,
        and by seq for a forward op's). A kernel whose name tells no dtype (cuDNN's
        `wgrad2d_shmem_tiling`) leaves a range it is the first of with the dtype of the range's
        first input whose producer is known: an op's output is in its inputs' dtype unless a
        kernel (a cast) says otherwise. `source`: what a cast's kernel read (op_ranges.cast_source),
        the dtype of the cast's input, which no kernel of its producer may have told (a view's
        output, an MoE's x.reshape(-1, d): its rows gathered later need it). Every kernel record
        with ranges comes here: kept lean."""
        ranges = rec.get("torchOps")
        if not ranges:
            return
        pid = rec.get("pid")  # _process's rule, inline: every kernel record with ranges comes here
        if pid is not None and type(pid) is not int and type(pid) is not str:
            return
        self._packs.saw(pid, ranges)
        dtypes, forward = self._dtypes, self._forward
        inner = None  # the range inside the one at hand
        for r in reversed(ranges):
            if type(r) is not dict:
                inner = None
                continue
            op = r.get("opId")
            if type(op) is int:
                key = (pid, op)
                known = dtypes.get(key)  # "": looked for in its inputs already, none found
                got = dtype or known
                if got is None:  # no kernel of the op told one: its first input's whose producer did
                    got = next((d for d in (dtypes.get((pid, p[0])) for p in producers(r) if p) if d), "")
                if got != known:  # an op's later kernels mostly repeat it
                    dtypes[key] = got
                    seq = r.get("seq")
                    if got and type(seq) is int and not node_range(r):
                        forward[(pid, seq)] = (got, r.get("sizes"), r.get("name"))
                if inner is not None:
                    name = r.get("name")
                    if type(name) is str and name.startswith(ENGINE) and node_range(inner):
                        self._nodes[key] = inner["seq"]
            inner = r
        if dtype in _SIXTEEN_BIT and type(ranges[-1]) is dict and ranges[-1].get("name") == "aten::copy_" \
                and argument_cast(ranges, len(ranges) - 1) is not None:
            self._autocast[pid] = dtype
        if source is not None and len(ranges) > 1 and type(ranges[-2]) is dict and ranges[-2].get("name") in _CAST_RANGES:
            cast = producers(ranges[-2])[:1]
            if cast and cast[0] and not dtypes.get((pid, cast[0][0])):
                dtypes[(pid, cast[0][0])] = source
        if len(dtypes) > 2 * self._held:
            self._trim()

    def consumed(self, rec: dict) -> None:
        """The ranges in `rec`'s `consumers` (what read a data-sized op's output first, mostly
        views that launch nothing: parse/consumers.py) take their first input's dtype, so that
        an op reading them (x.t().float()'s cast of a nonzero's indices) finds it; one that
        launches a kernel has its dtype rewritten by that kernel. Asked before `rec` is priced:
        its own kernel may be such a reader."""
        pid = _process(rec)
        dtypes = self._dtypes
        for r in _listed(rec.get("consumers")):
            op = r.get("opId") if type(r) is dict else None
            first = producers(r)[:1] if type(op) is int else None
            got = dtypes.get((pid, first[0][0])) if first and first[0] else None
            if got:
                dtypes.setdefault((pid, op), got)
            sizes = r.get("sizes") if type(op) is int and r.get("name") in BROADCAST_VIEWS else None
            if isinstance(sizes, list) and sizes and _int_list(sizes[0]):
                self._broadcasts[(pid, op)] = (tuple(sizes[0]), self.record)

    def broadcast_of(self, pid: Any, producer: tuple | None) -> tuple | None:
        """Where op `producer` ((opId, output index)) is a broadcasting view (a record's
        `consumers` held its range: parse/consumers.py), the shape it broadcast: the elements an
        op reading it reads once; None otherwise. A view's range comes before its readers, so
        what the records so far do not hold no later one does: a whole trace's flow knows; a
        replay of part of it (`partial`) asks where the producer launched no kernel it saw. One
        held by an earlier record than the one being priced is asked for too (a replay from
        another call's records may lack it)."""
        got = self._broadcasts.get((pid, producer[0])) if producer else None
        if got is None:
            if self.partial and producer and (pid, producer[0]) not in self._dtypes:
                self.asked = True
            return None
        if got[1] != self.record:
            self.asked = True
        return got[0]

    def _trim(self) -> None:
        """Each table down to its HELD newest entries (in the order first written): memory stays
        flat however long the trace, and trimming in bulk costs nothing per record."""
        for table in (self._dtypes, self._forward, self._nodes, self._broadcasts):
            if len(table) > self._held:
                for key in list(islice(table, len(table) - self._held)):
                    del table[key]
        self._packs.trim(self._held)

    def dtype_of(self, pid: Any, producer: tuple | None) -> str | None:
        """The dtype the last kernel of op `producer` ((opId, output index)) wrote; None when no
        kernel of it was seen (a view launches none) or it was dropped."""
        if producer is None:
            return None
        got = self._dtypes.get((pid, producer[0]))
        if not got:
            self.asked = True
            return None
        return got

    def batch_sizes(self, pid: Any, producer: tuple | None, steps: int | None = None) -> tuple | None:
        """The batch sizes of the packed sequence whose data op `producer` ((opId, output index))
        made, as its pack's kernels told them (packed_runs.py), given its steps where known; None
        where they did not tell one answer."""
        got = self._packs.batch_sizes(self._packs.pack_of(pid, producer), steps)
        if got is None:
            self.asked = True
        return got

    def autocast_dtype(self, pid: Any) -> str | None:
        """The 16-bit dtype autocast casts to in process `pid`: what the last cast made inside an
        op's range (autocast's of the op's fp32 arguments: a linear's or a convolution's weight)
        wrote down to 16 bits; None before one."""
        got = self._autocast.get(pid)
        if got is None:
            self.asked = True
        return got

    def grad_dtype(self, pid: Any, seq: int) -> str | None:
        """The dtype of the gradient an autograd node of sequence number `seq` is called with:
        its forward op's output's (the last forward range of that seq a kernel ran in)."""
        got = self._forward.get((pid, seq))
        if got is None:
            self.asked = True
        return None if got is None else got[0]

    def node_seq(self, pid: Any, engine: Any) -> int | None:
        """The seq of the node the engine's range of opId `engine` runs, as a kernel inside the
        node's own range told (a node's kernel may run outside it: AddmmBackward0's bias sum)."""
        got = self._nodes.get((pid, engine))
        if got is None:
            self.asked = True
        return got

    def forward_sizes(self, pid: Any, seq: int) -> list:
        """The input sizes of the forward op of sequence number `seq`: the shapes of the gradients
        its autograd node computes; [] when not known."""
        got = self.forward_op(pid, seq)
        return got[1] if got is not None else []

    def forward_op(self, pid: Any, seq: int) -> tuple | None:
        """(name, input sizes) of the op of sequence number `seq` (the last range of that seq a
        kernel ran in: a backward op run with create_graph=True made the node of that seq), or
        None."""
        got = self._forward.get((pid, seq))
        if got is None:
            self.asked = True
        return None if got is None or not isinstance(got[1], list) else (got[2], got[1])

    def shape_of(self, pid: Any, op: Any, index: int = 0, within: Any = None) -> tuple | None:
        """Output `index` of op `op` (an opId) as its first consumer among the records read ahead
        gives it (`[]`: a 0-dim tensor, a producer naming a tensor, never a scalar); None when none
        came within the window (or the records are not read ahead). `within`: the opId of the
        outermost op `op` ran inside, if another: a consumer's range is then one inside that op
        too. PyTorch names a tensor's producer by the tensor's address, and the outer op's return
        names it again, so a later range naming the inner op reads another tensor at a reused
        address (max_pool1d's inner max_pool2d_with_indices, named by a zero fill in the backward).
        Looked for only when a formula asks (few do: an upsample, a reduction over dims), so
        reading ahead costs the other records nothing but their place in the window."""
        for _, rec in self._window:
            if not isinstance(rec, dict) or _process(rec) != pid:
                continue
            ranges = _listed(rec.get("torchOps"))
            if within is not None and within != op and not any(
                    type(r) is dict and r.get("opId") == within for r in ranges):
                ranges = []
            for r in chain(ranges, _listed(rec.get("consumers"))):
                ids, sizes = (r.get("inputOpIds"), r.get("sizes")) if type(r) is dict else (None, None)
                if not isinstance(ids, list) or not isinstance(sizes, list):
                    continue
                for p, s in zip(ids, sizes):
                    if type(p) is list and len(p) == 2 and p[0] == op and p[1] == index and _int_list(s):
                        return tuple(s)
        self.asked = True
        return None

    def upcoming(self, further: int = 0) -> Iterator[Any]:
        """The records read ahead of the one analysed, in order (none where they are not read ahead);
        where the window holds fewer than `further` (at most FURTHER), more are read from the input
        as the caller asks for them: they stay in the window, so every record is still analysed once
        and in order."""
        window = self._window
        yield from (rec for _, rec in window)
        further = min(further, FURTHER)
        while self._source is not None and len(window) < further:
            item = next(self._source, _END)
            if item is _END:
                self._source = None
                self._read_out = True
                return
            window.append(item)
            yield item[1]

    @property
    def read_out(self) -> bool:
        """Whether upcoming has read the input to its end: nothing comes after the window (never
        where nothing is read ahead, as in the memo's replay)."""
        return self._read_out

    def ahead(self, numbered: Iterable[tuple[int, Any]], window: int = AHEAD) -> Iterator[tuple[int, Any]]:
        """`numbered` ((line, record) pairs) again, in order, each yielded once the `window`
        records after it have been read (more where upcoming read further): those shape_of looks
        among while it is analysed."""
        source = self._source = iter(numbered)
        pending = self._window = deque()
        for item in source:
            pending.append(item)
            while len(pending) > window:
                yield pending.popleft()
        self._source = None
        self._read_out = True
        while pending:
            yield pending.popleft()
