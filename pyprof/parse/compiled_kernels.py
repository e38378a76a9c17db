"""Kernels of torch.compile'd graphs, joined to the table pyprof recorded when Inductor generated them.

`pyprof.profiled()` puts the table into the trace as NVTX marks in the pyprof domain: one `graph`
marker per compiled graph and one `kernel` marker per call site of its generated code, in code
order (docs/markers.md, pyprof/nvtx/inductor.py). Here the marks are read with one query, and
each kernel record of a compiled graph is matched to its call site:

1. Instances: the kernels of one run of a compiled graph are those of one CUDA graph launch (same
   correlation id), else those launched under one `## Call CompiledFxGraph ... ##` range
   (PyTorch's range around every compiled-graph call; its op id tells runs apart).
2. The graph: generated kernels (Triton, C++) carry their call site's name; the graph whose named
   call sites, in order, take the most of the instance's names is the one that ran (names repeat
   across graphs: every graph numbers its kernels from 0).
3. Alignment: a named kernel takes the next call site of its name. The library kernels (cuBLAS,
   cuDNN, flash attention) between two named kernels belong to the library calls between those
   call sites: one call takes them all; as many kernels, or distinct PyTorch op ranges, as
   calls take one each; in a CUDA graph's replay (no op ranges) calls of one op whose kernels
   repeat take one repetition each, and matrix calls (GEMM, convolution, attention nodes) one
   matrix kernel each, their helpers placed by what the kernels' names say (pyprof/kernel_names.py,
   the one vocabulary of kernel names prof's Tensor Core column reads too); anything else stays
   unexplained and is counted.

A joined record gets `compiled` (the call site's entry) and, from its nodes, `op`, `module`,
`trace` and `dir` (docs/records.md). Without marks in the trace records pass through untouched.
Memory: the table, plus the records of the compiled-graph runs still open (one run per thread).

A run's records depend on all of it, so when an export is parsed in time windows (window.py) a
window holds the records from its first open run on (a Tail) and the next window's join starts
from them: the joins of the windows, one after the other, are the join of the whole. A run is
named by its first kernel's correlation id, which no window boundary changes.
"""
from __future__ import annotations

import bisect
import contextlib
import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from pyprof.parse import queries
from pyprof.parse.export import Export
from pyprof.formats import DOMAIN
from pyprof.kernel_names import MMA, SIMT, classify, leading_helper, trailing_helper

CALL_RANGE = "## Call CompiledFxGraph"
# What pyprof's numbered call range adds after the run number: the id of the graph's table
# (pyprof/nvtx/graph_calls.py GRAPH), then the path of the module whose code called the graph
# (CALLER), to which the nodes' paths are relative.
_SUFFIX = re.compile(r" ## run \d+(?: graph (\d+))?(?: in (\S+))?$")
# The ATen ops of a library call that runs one matrix kernel (a GEMM, a convolution's forward, an
# attention forward or backward; not a convolution's backward: one per gradient), by their FX
# nodes' names.
_MATRIX_NODE = re.compile(r"^aten\.(?:\w*mm|convolution|_scaled_dot_product_\w+|_flash_attention_\w+|_efficient_attention_\w+)\.")
# A convolution's backward runs one matrix kernel per gradient of its output_mask (argument 10)
# among the input's and the weight's; the bias's is a reduction.
_CONV_BACKWARD = "aten.convolution_backward.default"
# A GEMM node (mm, addmm, bmm, baddbmm, ...): cuBLAS launches nothing after its GEMM but a split-K
# reduction or a separate epilogue.
_GEMM_NODE = re.compile(r"^aten\.\w*mm\.")
_PID_MASK = ~0xFFFFFF
_PID_BITS = 0xFFFFFF
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class CompiledStats:
    """What the join did, for parse's closing summary."""

    def __init__(self) -> None:
        self.graphs = 0          # compiled graphs described in the trace
        self.joined = 0          # kernel records matched to a call site
        self.instances = 0       # runs of compiled graphs seen
        self.unexplained = 0     # kernels of such runs left without a call site
        self.malformed = 0       # pyprof kernel/graph marks that are not what docs/markers.md says

    def __add__(self, other: CompiledStats) -> CompiledStats:
        """The counts of two parts of a parse (parallel.py: exports, or windows of one export,
        of which only the first counts the export's graphs)."""
        total = CompiledStats()
        for name, value in vars(self).items():
            setattr(total, name, value + getattr(other, name))
        return total

    def note(self) -> str:
        """One line for stderr."""
        return (f"{self.joined} kernels of {self.instances} compiled-graph runs joined to the compile-time table "
                f"({self.graphs} graphs); {self.unexplained} left unexplained; {self.malformed} malformed table marks")


class Graph:
    """One compiled graph of one process: its call sites in generated-code order."""

    __slots__ = ("pid", "gid", "bwd", "calls", "positions")

    def __init__(self, pid: int, gid: int, bwd: bool) -> None:
        self.pid = pid
        self.gid = gid
        self.bwd = bwd
        self.calls: list[dict | None] = []
        self.positions: dict[str, list[int]] = {}  # generated kernel name -> its call positions

    def add(self, entry: dict) -> None:
        """Put one kernel marker at its call position."""
        call = entry["call"]
        if call >= len(self.calls):
            self.calls.extend([None] * (call + 1 - len(self.calls)))
        self.calls[call] = entry

    def finish(self) -> None:
        """Index the named (generated) call sites."""
        self.positions.clear()
        for i, e in enumerate(self.calls):
            if e is not None and not e["extern"]:
                self.positions.setdefault(e["name"], []).append(i)

    def next(self, name: str, start: int) -> int | None:
        """The first call position of `name` at or after `start`."""
        pos = self.positions.get(name)
        if not pos:
            return None
        i = bisect.bisect_left(pos, start)
        return pos[i] if i < len(pos) else None

    def named_before(self, q: int) -> int:
        """The last named call position before q, or -1."""
        for i in range(q - 1, -1, -1):
            e = self.calls[i]
            if e is not None and not e["extern"]:
                return i
        return -1

    def named_after(self, q: int) -> int:
        """The first named call position after q, or the number of calls."""
        for i in range(q + 1, len(self.calls)):
            e = self.calls[i]
            if e is not None and not e["extern"]:
                return i
        return len(self.calls)

    def externs(self, lo: int, hi: int) -> list[int]:
        """Library call positions strictly between lo and hi."""
        return [i for i in range(max(lo + 1, 0), min(hi, len(self.calls)))
                if self.calls[i] is not None and self.calls[i]["extern"]]


def _valid_kernel(m: dict) -> bool:
    return (type(m.get("graph")) is int and type(m.get("call")) is int and m["call"] >= 0
            and isinstance(m.get("name"), str) and type(m.get("extern")) is bool
            and isinstance(m.get("nodes"), list) and all(isinstance(n, dict) for n in m["nodes"])
            and (m.get("bytes") is None or type(m["bytes"]) is int))


def _reject_constant(name: str) -> None:
    raise ValueError(name)


def load(exp: Export, stats: CompiledStats) -> dict[int, list[Graph]]:
    """The compiled-graph tables in the trace, by process id (empty when there are none)."""
    with exp.errors():
        names, marks = queries.domain_events(exp)
    pyprof_domains = {key for key, name in names.items() if name == DOMAIN}
    if not pyprof_domains:
        return {}
    graphs: dict[tuple[int, int], Graph] = {}
    for gtid, dom, text, _ in marks:
        if gtid is None or (gtid & _PID_MASK, dom) not in pyprof_domains or not text:
            continue
        try:
            m = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            stats.malformed += 1
            continue
        kind = m.get("kind") if isinstance(m, dict) else None
        if kind not in ("graph", "kernel"):
            continue
        pid = (gtid >> 24) & _PID_BITS
        if type(m.get("graph")) is not int or (kind == "kernel" and not _valid_kernel(m)):
            stats.malformed += 1
            continue
        g = graphs.get((pid, m["graph"]))
        if g is None:
            g = graphs[(pid, m["graph"])] = Graph(pid, m["graph"], False)
        if kind == "graph":
            g.bwd = m.get("bwd") is True
        else:
            g.add(m)  # a second profiled() region repeats the table: the last copy wins
    out: dict[int, list[Graph]] = {}
    for g in graphs.values():
        g.finish()
        out.setdefault(g.pid, []).append(g)
    stats.graphs = len(graphs)
    return out


def _short(op: str) -> str:
    """`native_layer_norm` for `aten.native_layer_norm.default`."""
    parts = op.split(".")
    return parts[1] if len(parts) == 3 else op


def _distinct(values: Any) -> list:
    seen: dict = {}
    for v in values:
        if v is not None and v not in seen:
            seen[v] = True
    return list(seen)


def describe(entry: dict) -> tuple[str, str | None, str | None]:
    """(op, module, trace) of a call site: its nodes' original aten ops joined with `+`, their
    module paths and call sites joined with `,`; nodes whose work another kernel carries only
    when the kernel carries none of its own."""
    nodes = entry["nodes"]
    own = [n for n in nodes if not n.get("again")] or nodes
    ops = _distinct(_short(str(n.get("orig") or n.get("op"))) for n in own)
    modules = _distinct(n.get("module") for n in own if isinstance(n.get("module"), str) and n.get("module"))
    sites = _distinct(n.get("site") for n in own if isinstance(n.get("site"), str))
    return ("+".join(ops) or entry["name"], ",".join(modules) or None, ",".join(sites) or None)


def _instance(rec: dict) -> tuple | None:
    """What run of a compiled graph a kernel record belongs to, if any."""
    if rec.get("graphNode") is not None and rec.get("launch") is not None:
        return ("graph", rec.get("correlationId"))
    for op in rec.get("torchOps") or ():
        name = op.get("name") if isinstance(op, dict) else None
        if isinstance(name, str) and name.startswith(CALL_RANGE):
            return ("call", rec.get("tid"), op.get("opId"), name)
    text = _call_text(rec)
    return None if text is None else ("call", rec.get("tid"), None, text)


def _call_text(rec: dict) -> str | None:
    """The text of the compiled-graph call range around a kernel's launch, as plain text (PyTorch's
    range without an op id, pyprof's numbered one), if any."""
    for text in rec.get("ranges") or ():
        if isinstance(text, str) and text.startswith(CALL_RANGE):
            return text
    return None


def _op_groups(recs: list[dict]) -> list | None:
    """Per kernel of `recs` (the unnamed kernels between two call sites), the PyTorch op range of
    the library call that launched it, when the trace has PyTorch's op ranges: its outermost op
    range that not all of them share. The shared ones enclose the graph call (a backward node's
    range) or are the call range itself; below the library call's own range its sub-ops launch
    kernels too (an efficient-attention backward's zero fills and bias-gradient sum beside its
    main kernel), so the innermost range would split one call. None where a kernel has no range
    of its own."""
    chains = [[(op.get("name"), op.get("opId")) for op in r.get("torchOps") or () if isinstance(op, dict)]
              for r in recs]
    depth = 0
    while all(len(c) > depth for c in chains) and len({c[depth] for c in chains}) == 1:
        depth += 1
    groups = [c[depth] if len(c) > depth else None for c in chains]
    return None if None in groups else groups


def _split(items: list, groups: list) -> list[list]:
    """`items` cut where consecutive `groups` values change."""
    out: list[list] = []
    prev = object()
    for item, grp in zip(items, groups):
        if not out or grp != prev:
            out.append([])
        out[-1].append(item)
        prev = grp
    return out


class _Run:
    """The records of one run of a compiled graph, waiting to be matched; `first`: its first
    kernel's correlation id (its name in the records)."""

    __slots__ = ("pid", "first", "slots", "caller", "graph")

    def __init__(self, pid: int, first: dict, instance: tuple) -> None:
        self.pid = pid
        self.first = first.get("correlationId")
        self.slots: list[list] = []  # queue slots: [text, record, done, run key]
        text = instance[3] if instance[0] == "call" else _call_text(first)
        m = _SUFFIX.search(text) if isinstance(text, str) else None
        self.caller = m.group(2) if m else None
        self.graph = int(m.group(1)) if m and m.group(1) else None


def _under(caller: str | None, module: str | None) -> str | None:
    """Node module paths (`fc,ln2`) made absolute under the calling module's path; the caller
    itself for nodes of its own."""
    if caller is None:
        return module
    return ",".join(f"{caller}.{m}" for m in module.split(",")) if module else caller


@dataclass
class Tail:
    """The join's state where a window ends: the lines not yet written, in order, each with the
    key of the open run it belongs to (None: ready), and each thread's open run."""

    lines: list[tuple[str, tuple | None]] = field(default_factory=list)
    current: dict[tuple, tuple] = field(default_factory=dict)


class Joiner:
    """Matches kernel records to call sites; see the module docstring."""

    def __init__(self, tables: dict[int, list[Graph]], stats: CompiledStats) -> None:
        self.tables = tables
        self.stats = stats
        self.names = {pid: {n for g in gs for n in g.positions} for pid, gs in tables.items()}

    def resolve(self, run: _Run) -> None:
        """Match the records of one finished run and rewrite the joined ones."""
        self.stats.instances += 1
        recs = [s[1] for s in run.slots]
        names = self.names[run.pid]
        named = [i for i, r in enumerate(recs) if r.get("kShortName") in names]
        best = None
        bwd = sum(r.get("dir") == "bprop" for r in recs) * 2 > len(recs)
        graphs = self.tables[run.pid]
        named_graph = [g for g in graphs if g.gid == run.graph]
        for g in named_graph or graphs:
            assign, anchors = self._anchors(g, recs, named)
            key = (len(anchors), g.bwd == bwd, g.gid)
            # A graph of library calls alone (no generated kernel to anchor on) is joined only
            # where the run's range names it.
            if (anchors or (named_graph and not g.positions)) and (best is None or key > best[0]):
                best = (key, g, assign, anchors)
        if best is None:
            self.stats.unexplained += len(recs)
            for s in run.slots:
                s[2] = True
            return
        _, g, assign, anchors = best
        self._library(g, recs, assign, anchors)
        subs: dict[int, int] = {}
        for slot, q in zip(run.slots, assign):
            slot[2] = True
            if q is None:
                self.stats.unexplained += 1
                continue
            entry = g.calls[q]
            sub = subs[q] = subs.get(q, -1) + 1
            rec = slot[1]
            op, module, trace = describe(entry)
            module = _under(run.caller, module)
            rec["compiled"] = {"graph": g.gid, "call": q, "name": entry["name"], "extern": entry["extern"],
                               "bytes": entry.get("bytes"), "nodes": entry["nodes"], "bwd": g.bwd,
                               "run": run.first, "sub": sub}
            rec["mod"], rec["op"], rec["dir"] = "aten", op, "bprop" if g.bwd else "fprop"
            if module is not None:
                rec["module"] = module
            if trace is not None:
                rec["trace"] = trace
            slot[0] = _encode(rec)
            self.stats.joined += 1

    @staticmethod
    def _anchors(g: Graph, recs: list[dict], named: list[int]) -> tuple[list, list]:
        assign: list[int | None] = [None] * len(recs)
        anchors = []
        p = 0
        for i in named:
            name = recs[i]["kShortName"]
            q = g.next(name, p)
            if q is None:
                q = g.next(name, 0)  # runs of one graph merged (no op ids): start over
            if q is not None:
                assign[i] = q
                anchors.append((i, q))
                p = q + 1
        return assign, anchors

    def _library(self, g: Graph, recs: list[dict], assign: list, anchors: list) -> None:
        """Give the unnamed kernels between anchors to the library calls between them (all of
        them to all the graph's calls where there is no anchor)."""
        if not anchors:
            segments = [(range(len(recs)), g.externs(-1, len(g.calls)))]
        else:
            first_i, first_q = anchors[0]
            last_i, last_q = anchors[-1]
            segments = [(range(0, first_i), g.externs(g.named_before(first_q), first_q))]
            for (ia, qa), (ib, qb) in zip(anchors, anchors[1:]):
                calls = g.externs(qa, qb) if qb > qa else g.externs(qa, len(g.calls)) + g.externs(-1, qb)
                segments.append((range(ia + 1, ib), calls))
            segments.append((range(last_i + 1, len(recs)), g.externs(last_q, g.named_after(last_q))))
        for idx, calls in segments:
            items = [i for i in idx if assign[i] is None]
            if not items or not calls:
                continue
            groups = _op_groups([recs[i] for i in items])
            parts = None if groups is None else _split(items, groups)
            if parts is not None and len(parts) == len(calls):
                pairs = [(part, q) for part, q in zip(parts, calls)]
            elif len(calls) == 1:
                pairs = [(items, calls[0])]
            elif len(items) == len(calls):
                pairs = [([i], q) for i, q in zip(items, calls)]
            else:
                pairs = _by_repetition(g, recs, items, calls) or _by_matrix_kernels(g, recs, items, calls)
                if pairs is None:
                    continue
            for part, q in pairs:
                for i in part:
                    assign[i] = q


def _node_ops(g: Graph, q: int) -> tuple:
    """The ATen ops of call `q`'s FX nodes, in order."""
    return tuple(str(n.get("op")) for n in (g.calls[q] or {}).get("nodes") or [] if isinstance(n, dict))


def _by_repetition(g: Graph, recs: list[dict], items: list[int], calls: list[int]) -> list | None:
    """The library kernels `items` of calls of one op back to back (four embedding_bag backwards in
    a CUDA graph's replay), split where the kernels' names repeat: n calls of one op that launch
    n times the same sequence of kernels launch one sequence each. None where the calls' ops differ
    or the names do not repeat."""
    if len(calls) < 2 or len(items) % len(calls) or len({_node_ops(g, q) for q in calls}) != 1:
        return None
    size = len(items) // len(calls)
    chunks = [items[k * size:(k + 1) * size] for k in range(len(calls))]
    if len({tuple(recs[i].get("kLongName") or recs[i].get("kShortName") for i in c) for c in chunks}) != 1:
        return None
    return list(zip(chunks, calls))


def _matrix_kernels(g: Graph, q: int) -> int | None:
    """How many matrix kernels call `q` runs: one a GEMM, convolution or attention node
    (_MATRIX_NODE), one per gradient a convolution's backward computes of its input and weight,
    none for other nodes; None where a convolution backward's output_mask is not in its node."""
    count = 0
    for n in (g.calls[q] or {}).get("nodes") or []:
        op = str(n.get("op")) if isinstance(n, dict) else ""
        if op == _CONV_BACKWARD:
            args = n.get("args")
            mask = args[10] if isinstance(args, list) and len(args) > 10 else None
            if not isinstance(mask, list) or len(mask) < 2 or not all(type(m) is bool for m in mask[:2]):
                return None
            count += mask[0] + mask[1]
        elif _MATRIX_NODE.match(op):
            count += 1
    return count


def _by_matrix_kernels(g: Graph, recs: list[dict], items: list[int], calls: list[int]) -> list | None:
    """The library kernels `items` of calls back to back that no op range tells apart (a CUDA
    graph's replay), where the calls hold as many matrix kernels as they run (_matrix_kernels):
    the matrix kernels go to the calls in order, and a kernel between two of one call's is that
    call's. Around them, by what a library call launches where (kernel_names): the helpers right
    after a matrix kernel that sum, finish or convert back its output (split-K reduction, separate
    epilogue) are its call's, those right before one that prepare its operands (attention
    backward's dot(dO, O), an NCHW operand made NHWC) its call's. The other helpers in a gap
    between two matrix kernels are those of the one non-matrix call there (an embedding_bag
    backward between two GEMMs); with no call there, the next call's where the previous one is a
    GEMM (which launches nothing else after its GEMM), the first call's before the first matrix
    kernel and the last's after the last; otherwise they stay unexplained. None where the matrix
    kernels are not as many as the calls run (a weight gradient split over several GEMMs)."""
    counts = [_matrix_kernels(g, q) for q in calls]
    if None in counts or not any(counts):
        return None
    names = {i: recs[i].get("kLongName") or recs[i].get("kShortName") for i in items}
    mains = [i for i in items if classify(names[i]) in (MMA, SIMT)]
    where = [k for k, n in enumerate(counts) for _ in range(n)]
    if len(mains) != len(where):
        return None
    groups: list[list[int]] = [[] for _ in calls]
    for main, k in zip(mains, where):
        groups[k].append(main)
    bounds = [-1] + mains + [len(recs)]
    ends = [-1] + where + [len(calls)]
    for j in range(len(mains) + 1):
        between = [i for i in items if bounds[j] < i < bounds[j + 1]]
        prev, nxt = ends[j], ends[j + 1]
        trail = 0
        if j > 0:
            trail = next((k for k, i in enumerate(between) if not trailing_helper(names[i])), len(between))
            groups[prev] += between[:trail]
        lead = len(between)
        if nxt < len(calls):
            while lead > trail and leading_helper(names[between[lead - 1]]):
                lead -= 1
            groups[nxt][:0] = between[lead:]
        rest = between[trail:lead]
        others = range(prev + 1, nxt)
        if not rest or len(others) > 1:
            continue
        if prev == nxt:
            owner = prev
        elif others:
            owner = others[0]
        elif prev < 0:
            owner = nxt
        elif nxt == len(calls):
            owner = prev
        elif any(_GEMM_NODE.match(op) for op in _node_ops(g, calls[prev])):
            owner = nxt
        else:
            continue
        groups[owner] += rest
    return [(group, q) for group, q in zip(groups, calls) if group]


def join(tables: dict[int, list[Graph]], stats: CompiledStats, lines: Iterator[str], start: Tail | None = None,
         held: Tail | None = None) -> Iterator[str]:
    """Yield `lines` (parse's records, in order) with compiled-graph kernels joined. `start`:
    the state an earlier window held, taken up first; `held`: filled with the state at the end
    instead of closing the runs still open (their lines and those after them are not yielded)."""
    joiner = Joiner(tables, stats)
    loads = json.loads
    queue: deque = deque()
    runs: dict[tuple, _Run] = {}      # (pid, instance) -> open run
    current: dict[tuple, tuple] = {}  # (pid, tid) -> its open run's key

    def close(key: tuple) -> None:
        run = runs.pop(key, None)
        if run is not None:
            joiner.resolve(run)

    def add(line: str, rec: dict, key: tuple) -> None:
        run = runs.get(key)
        if run is None:
            run = runs[key] = _Run(key[0], rec, key[1])
        slot = [line, rec, False, key]
        run.slots.append(slot)
        queue.append(slot)

    if start is not None:
        for line, key in start.lines:
            if key is None:
                queue.append([line, None, True, None])
            else:
                add(line, loads(line), key)
        current.update(start.current)
    for line in lines:
        rec = loads(line)
        pid = rec.get("pid")
        inst = _instance(rec) if rec.get("kind") == "kernel" and pid in tables else None
        if inst is None:
            queue.append([line, None, True, None])
        else:
            key = (pid, inst)
            thread = (pid, rec.get("tid"))
            prev = current.get(thread)
            if prev is not None and prev != key:
                close(prev)
            current[thread] = key
            add(line, rec, key)
        while queue and queue[0][2]:
            yield queue.popleft()[0]
    if held is not None:
        held.lines = [(s[0], None if s[2] else s[3]) for s in queue]
        held.current = {thread: key for thread, key in current.items() if key in runs}
        return
    for key in list(runs):
        close(key)
    while queue:
        yield queue.popleft()[0]


def joined_lines(exp: Export, stats: Any, memcpy: bool, lines: Callable[..., Iterator[str]],
                 start: Tail | None = None, held: Tail | None = None) -> Iterator[str]:
    """`lines(exp, stats, memcpy)` with compiled-graph kernels joined; `stats.compiled` gets the
    join's counts. Without a table in the trace the records pass through untouched. Where `lines`
    yields one time window (window.py: Window.tails()): the join takes up `start`, what the window
    before held, and fills `held` (None: the last window)."""
    cstats = stats.compiled = CompiledStats()
    tables = load(exp, cstats)
    # closing(): the record generator's cursors must be closed while the connection is open.
    with contextlib.closing(lines(exp, stats, memcpy)) as recs:
        if tables:
            yield from join(tables, cstats, recs, start, held)
        else:
            yield from recs
