"""The analysis as a memoized transition: training repeats itself, so a kernel's Facts are looked
up, not derived, once its step has been seen.

analysis.Analyzer keeps per-thread state: the op call under way (calls.py), its helper parts,
the PyTorch ranges a call's work was put on, the slots of a convolution's backward. A kernel's
unguarded Facts (Analyzer.unguarded) and the warnings its analysis counts depend on the record
and on that state. Memo keeps, per thread, the content of the current op call so far as a node of
a trie (one node per distinct call prefix); a kernel moves its thread from node to child on
(record content key, the record's volatile ids renamed in order of first appearance within the
call). A child seen before carries the Facts and warnings; a new one is derived by replaying the
call's records so far into a fresh Analyzer and analysing the kernel there.

That replay is the real analysis only when nothing the Analyzer holds from earlier calls of the
thread can matter to this one. It holds (see analysis.py):
- the `call` state, its parts and convolution slots: looked up by the call's identity, always
  refreshed by a kernel before it is read;
- PyTorch-range states (`range`, `main`, `aten` per depth, `launch`, `aten slots`, `stage`,
  `aten parts`): looked up by a range of the record's torchOps, by its opId (or the whole range,
  opId included);
- CompiledPricer's per-thread state: by a compiled graph's run and call site;
- MatrixChain's per-thread facts of the last matrix kernel (matrix_chain.py): read by the kernels
  its library launches after it in the same call (a Winograd GEMM's and a grouped weight
  gradient's by the call's identity);
- TwoPassReduce's per-stream grid of a cub reduction's first pass (cub_reduce.py): read by its
  second pass, the next kernel on the stream, of the same call;
- caches of op costs: functions of the marker alone.
So the memo requires, per thread (else NotMemoizable: the caller runs the record path instead):
- no range a range state can hold (the innermost, or one with an aten formula), by (name, opId),
  in two episodes of a thread (an episode: the records since the thread's call state was made;
  `Fresh` checks it batch by batch);
- a call's identity not that of the call whose kernels last set the thread's call state (each
  node knows whether its call has set it), unless the call starts at sub-sequence 0 without
  PyTorch ranges, a forward kernel: its kernels all set the call state or none does (one marker,
  one cost, no range), and the first resets it;
- no formula reading what the tensor flow of the whole trace might know and the call's replay
  does not (an input's dtype from an earlier call, an output's shape from a later one:
  tensor_flow.py; a cuDNN RNN chunk's steps from the kernels after it: rnn_kernels.py);
- no compiled kernels. Beyond-peak's guard
needs a kernel's duration and is applied by the caller; call numbers are counted here.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

import numpy as np

from .analysis import Analyzer, Facts
from ..scan import FIELD_ERRORS
from ..warnings_tally import Tally

ROOT = -1  # the node of a thread before its call's first kernel


def _replaying() -> Analyzer:
    """A fresh Analyzer for a replay of part of the trace: its tensor flow knows it is partial."""
    analyzer = Analyzer(Tally())
    analyzer.flow.partial = True
    return analyzer


class Fresh:
    """memo's assumption on ranges, checked batch by batch (`add`): each range a range state may
    hold, (thread, name, opId) per range of each kernel record (threads and names as numbers), is
    in one episode of its thread. Only an episode that is a thread's current one or the one holding
    its call state gets records later (Memo.open_episodes): the ranges of those are kept with their
    episode, and checked exactly. Of the others, closed for good, only the highest opId per
    (thread, name) is kept: a later range of that pair must be above it (opIds grow as PyTorch
    starts ops, and a thread's records come in the order it launched them), else the memo is not
    sure and says NotMemoizable. Memory grows with the open episodes' ranges and the pairs, not
    with records."""

    def __init__(self) -> None:
        self._pairs: dict = {}                   # (thread, name) -> its number
        self._highest = np.zeros(0, np.int64)    # per pair, the highest opId of a closed episode
        self._open = [np.zeros(0, np.int64)] * 3  # pair, opId and episode of open episodes' ranges

    def add(self, threads: np.ndarray, episodes: np.ndarray, names: np.ndarray, opids: np.ndarray,
            open_episodes: np.ndarray) -> None:
        """The ranges of one batch; `open_episodes`: those that can get records after it.
        NotMemoizable where a range is in two episodes of its thread, or may be."""
        pair = self._numbers(threads, names)
        held = len(self._open[0])
        p, o, e = (np.concatenate((a, b)) for a, b in zip(self._open, (pair, opids.astype(np.int64), episodes)))
        order = np.lexsort((e, o, p))
        p, o, e = p[order], o[order], e[order]
        same = (p[1:] == p[:-1]) & (o[1:] == o[:-1])
        if (same & (e[1:] != e[:-1])).any():
            raise NotMemoizable("a range of an op call is one of an earlier episode of its thread")
        first = np.ones(len(p), bool)
        first[1:] = ~same
        # A range of an open episode was checked when it came first; a new one, against the closed.
        new = ~np.logical_or.reduceat(order < held, np.flatnonzero(first)) if len(p) else first
        p, o, e = p[first], o[first], e[first]
        if (o[new] <= self._highest[p[new]]).any():
            raise NotMemoizable("a range whose opId is not above those of its name's closed episodes on its thread")
        still = np.isin(e, open_episodes)
        self._open = [p[still], o[still], e[still]]
        np.maximum.at(self._highest, p[~still], o[~still])

    def _numbers(self, threads: np.ndarray, names: np.ndarray) -> np.ndarray:
        """Each (thread, name)'s number (the pairs met so far get theirs)."""
        if not len(threads):
            return np.zeros(0, np.int64)
        uniq, which = np.unique(np.stack((threads, names)), axis=1, return_inverse=True)
        number = np.array([self._pairs.setdefault(pair, len(self._pairs)) for pair in zip(*uniq.tolist())], np.int64)
        if len(self._highest) < len(self._pairs):
            self._highest = np.concatenate((self._highest, np.full(len(self._pairs) - len(self._highest),
                                                                   np.iinfo(np.int64).min)))
        return number[which.reshape(-1)]


class NotMemoizable(Exception):
    """The input breaks an assumption the memo is exact under (the message says which)."""


class Node:
    """What a record content in a call prefix derives: unguarded Facts (no call number), the
    warnings its analysis counted, in order, and the first record that reached it."""

    __slots__ = ("facts", "warnings", "rec", "holds")

    def __init__(self, facts: Facts, warnings: tuple, rec: dict, holds: bool) -> None:
        self.facts = facts
        self.warnings = warnings
        self.rec = rec
        self.holds = holds  # the call has set its thread's call state (Analyzer.holds_call)


class Recorder(Tally):
    """A Tally that keeps the warnings it is told, in order (`said`)."""

    def __init__(self) -> None:
        super().__init__()
        self.said: list = []

    def warn(self, kind: str, name: str) -> None:
        self.said.append((kind, name))


class _Episode:
    """The records since a thread's call state was made: one op call, or a call continued by a
    later one of the same identity (CallNumbers numbers them apart, the analysis does not)."""

    __slots__ = ("number", "node", "names", "calls", "analyzer")

    def __init__(self, number: int) -> None:
        self.number = number
        self.node = ROOT
        self.names: Any = None     # volatile value -> its number in the episode (the first kernel's ids till a second)
        self.calls: list = []      # where its records are (for a replay)
        self.analyzer: Analyzer | None = None  # in step with `calls` after a miss, else None


class _Thread:
    __slots__ = ("ident", "number", "cur", "held", "holder", "clean")

    def __init__(self) -> None:
        self.ident: Any = None     # of the current call
        self.number = 0
        self.cur: _Episode | None = None
        self.held: _Episode | None = None  # the episode whose call last set the call state
        self.holder: Any = None    # the identity of that call
        self.clean = True          # no call since it has had PyTorch ranges


class Memo:
    """Per-thread memoized Analyzer.unguarded; `load(where)` gives the record at `where` (for a
    replay after a new content)."""

    def __init__(self, load: Callable[[Any], dict]) -> None:
        self.nodes: list[Node] = []
        self._holds: list[bool] = []  # per node, its holds (looked up per kernel)
        self._load = load
        self._edges: dict = {}
        self._copies: dict = {}
        self._threads: dict = {}
        self._calls = 0
        self._episodes = 0
        self.misses = 0

    def copy(self, key: Hashable, where: Any) -> int:
        """The node of a memcpy/memset record of content `key` (no per-thread state)."""
        node = self._copies.get(key)
        if node is None:
            node = self._copies[key] = self._derive(_replaying(), where)
        return node

    def kernel(self, thread: Hashable, ident: Hashable, starts: bool, resets: bool, ranged: bool,
               key: Hashable, volatile: Sequence, where: Any, pattern: tuple) -> tuple[int, int, int]:
        """(node, call number, episode number) of a kernel record: `ident` and `starts` as
        calls.identity gives them; `resets`: a forward kernel without PyTorch ranges that starts
        its call (see the module's docstring); `ranged`: it has PyTorch ranges; `key`: its
        content without its volatile ids, `volatile`: those ids in order, `pattern`: each numbered
        by its first appearance among them (what they are renamed to where the kernel starts its
        episode). NotMemoizable where the
        thread's earlier calls could matter (and Fresh must hold for the episodes)."""
        t = self._threads.get(thread)
        if t is None:
            t = self._threads[thread] = _Thread()
        if starts or t.cur is None or ident != t.ident:
            self._new_call(t, ident, resets)
        ep = t.cur
        names = ep.names
        if names is None:  # the episode's first kernel: numbered when a second one comes
            ep.names = volatile
            edge = (ROOT, key, pattern)
        else:
            if names.__class__ is not dict:
                first, names = names, {}
                for v in first:
                    names.setdefault(v, len(names))
                ep.names = names
            edge = (ep.node, key, tuple([names.setdefault(v, len(names)) for v in volatile]))
        node = self._edges.get(edge)
        if node is None:
            node = self._edges[edge] = self._miss(ep, where)
        else:
            ep.analyzer = None
        ep.calls.append(where)
        ep.node = node
        if self._holds[node]:
            t.held, t.holder, t.clean = ep, ident, True
        elif ranged and t.held is not ep:
            t.clean = False
        return node, t.number, ep.number

    def open_episodes(self) -> np.ndarray:
        """The numbers of the episodes that can get records later: each thread's current one and
        the one whose call last set its call state (_new_call goes on with no other)."""
        return np.array([ep.number for t in self._threads.values() for ep in (t.cur, t.held) if ep is not None],
                        np.int64)

    def _new_call(self, t: _Thread, ident: Hashable, resets: bool) -> None:
        old = t.cur
        if ident == t.holder and not resets:
            # The analysis goes on with the call state of that call: its episode goes on, when
            # nothing between has had ranges (range states then are as it left them).
            if t.held is old or not t.clean:
                raise NotMemoizable("an op call goes on with the call state of an earlier call of its thread")
            t.cur = t.held
        else:
            self._episodes += 1
            t.cur = _Episode(self._episodes)
        self._calls += 1
        t.number = self._calls
        t.ident = ident

    def _miss(self, ep: _Episode, where: Any) -> int:
        self.misses += 1
        if ep.analyzer is None:
            ep.analyzer = _replaying()
            for earlier in ep.calls:
                self._unguarded(ep.analyzer, self._load(earlier))
        return self._derive(ep.analyzer, where)

    def _derive(self, analyzer: Analyzer, where: Any) -> int:
        rec = self._load(where)
        said = analyzer.tally = Recorder()
        analyzer.flow.asked = False
        facts = self._unguarded(analyzer, rec)
        if analyzer.flow.asked:
            raise NotMemoizable("a formula read another op call's output or the kernels after its own (tensor_flow.py)")
        analyzer.tally = Tally()
        facts.call = None  # numbered by the caller
        self.nodes.append(Node(facts, tuple(said.said), rec, analyzer.holds_call(rec)))
        self._holds.append(self.nodes[-1].holds)
        return len(self.nodes) - 1

    @staticmethod
    def _unguarded(analyzer: Analyzer, rec: dict) -> Facts:
        if isinstance(rec.get("compiled"), dict):
            raise NotMemoizable("a kernel of a compiled graph (per-thread state keyed by its run)")
        try:
            return analyzer.unguarded(rec)
        except FIELD_ERRORS as err:  # the record path skips the record, its state half changed
            raise NotMemoizable(f"a record the analysis cannot read ({type(err).__name__})") from None
