"""A dynamic-shape graph's kernels, sized from the call they ran in.

Inductor's table holds each node's sizes as the graph was compiled for them: where a size is
symbolic (dynamic shapes), the hint, the size of the example it was compiled with
(pyprof/nvtx/inductor.py, `"hinted": true`). One graph serves calls of other sizes then (a MoE
expert's rows differ from call to call), and a kernel priced at the hint is priced wrong. pyprof
turns shapes on in such graphs' op ranges (pyprof/nvtx/graph_calls.py), so a library call's own
range (`aten::addmm` with `sizes`) holds what this call ran: its tensors' shapes replace the
hinted ones before the node is priced as usual (fx_nodes.py).

Generated (Triton) kernels have no range of their own. Their nodes name each symbolic dim's
expression (`"dims"`: `s0`, `2*s0`), and so do the library calls': a library call's range binds
each dim that is a bare symbol to the size it ran with, and within the same graph call (its run)
every node whose dims those symbols decide is sized from them, whether its kernel ran before the
library call (read ahead, as the tensor flow reads: tensor_flow.py) or after it. A node whose
dims stay unresolved keeps the hint. The expressions are read, never run: +, -, *, // and
FloorDiv, CeilDiv, Max and Min of integers and bound symbols (_evaluate).
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any, Callable, Iterable

_SYMBOL = re.compile(r"^[A-Za-z_]\w*$")


class CallSizes:
    """The sizes each graph call's symbols ran with, learned from its library calls' ranges; one
    call's at a time per thread (a thread runs its graph calls one after another)."""

    def __init__(self, upcoming: Callable[[], Iterable[Any]]) -> None:
        self._upcoming = upcoming  # the records read ahead of the one analysed (TensorFlow.upcoming)
        self._runs: dict = {}  # (pid, tid) -> [(graph, run), {symbol: size}, read ahead]

    def resized(self, rec: dict) -> dict:
        """`rec` with its compiled entry's hinted nodes given the sizes of this call: a library
        call's from the op range of its own op around the kernel (positional tensor arguments in
        order, then an `out=` tensor where the range has more entries than the node has
        arguments: keyword scalars between), the others' symbolic dims from what the call's
        library ranges bound; `rec` itself where nothing changes."""
        entry = rec["compiled"]
        nodes = entry.get("nodes")
        if not isinstance(nodes, list) or not any(_hinted(n) for n in nodes):
            return rec
        ranges = _ranges(rec)
        run = self._run_of(rec)
        bound = run[1]
        new = [_with_sizes(n, ranges) if _hinted(n) else n for n in nodes]
        if not run[2] and any(_hinted(n) and m is n for n, m in zip(nodes, new)) \
                and not self._complete(rec, bound, nodes):
            run[2] = True  # once a call: the window is read again only for what it did not hold
            self._learn_ahead(rec, bound)
        new = [_symbolic(n, bound) if _hinted(n) and m is n else m for n, m in zip(nodes, new)]
        if all(a is b for a, b in zip(new, nodes)):
            return rec
        return {**rec, "compiled": {**entry, "nodes": new}}

    def _run_of(self, rec: dict) -> list:
        """[the graph call, its symbols bound so far, whether the records ahead were read for
        it], the record's own library ranges learned."""
        key, run = (rec.get("pid"), rec.get("tid")), _run(rec)
        held = self._runs.get(key)
        if held is None or held[0] != run:
            held = self._runs[key] = [run, {}, False]
        _learn(rec, held[1])
        return held

    @staticmethod
    def _complete(rec: dict, bound: dict, nodes: list) -> bool:
        """Whether every symbol the record's unresolved nodes name is bound."""
        return all(s in bound for n in nodes if _hinted(n) for s in _symbols(n.get("dims")))

    def _learn_ahead(self, rec: dict, bound: dict) -> None:
        """Bind what the library calls of the same graph call among the records read ahead tell."""
        run, thread = _run(rec), (rec.get("pid"), rec.get("tid"))
        for later in self._upcoming():
            if isinstance(later, dict) and isinstance(later.get("compiled"), dict) \
                    and (later.get("pid"), later.get("tid")) == thread and _run(later) == run:
                _learn(later, bound)


def _run(rec: dict) -> tuple:
    entry = rec["compiled"]
    return entry.get("graph"), entry.get("run")


def _hinted(node: Any) -> bool:
    return isinstance(node, dict) and node.get("hinted") is True


def _ranges(rec: dict) -> dict:
    """Op range name -> its sizes, of the ranges around the record's kernel."""
    return {op.get("name"): op.get("sizes") for op in rec.get("torchOps") or ()
            if isinstance(op, dict) and isinstance(op.get("sizes"), list)}


def _range_of(node: dict, ranges: dict) -> list | None:
    """The sizes of the range of the node's op (`aten.addmm.default`'s is `aten::addmm`)."""
    op = node.get("op")
    parts = op.split(".") if isinstance(op, str) else []
    return ranges.get(f"{parts[0]}::{parts[1]}") if len(parts) >= 2 else None


def _learn(rec: dict, bound: dict) -> None:
    """Bind each bare symbol among a library call's dims to the size its range gives that dim."""
    nodes = rec["compiled"].get("nodes")
    ranges = _ranges(rec)
    if not ranges or not isinstance(nodes, list):
        return
    for node in nodes:
        sizes = _range_of(node, ranges) if _hinted(node) else None
        dims = node.get("dims") if sizes is not None else None
        if not isinstance(dims, dict):
            continue
        args = dims.get("args") if isinstance(dims.get("args"), list) else []
        pairs = list(zip(args, sizes))
        if len(sizes) > len(node.get("args") or ()):  # an `out=` tensor last
            pairs.append((dims.get("out"), sizes[-1]))
        for exprs, size in pairs:
            if isinstance(exprs, list) and isinstance(size, list) and len(exprs) == len(size):
                for e, v in zip(exprs, size):
                    if isinstance(e, str) and _SYMBOL.match(e) and type(v) is int and v >= 0:
                        bound[e] = v


# How deep a node's lists of tensors nest (a foreach op's list of lists): what a record's `dims`
# may hold deeper is no table's.
_DEPTH = 4


def _symbols(dims: Any, depth: int = 0) -> Iterable[str]:
    """The symbols a node's dims name."""
    if depth > _DEPTH:
        return
    if isinstance(dims, dict):
        for v in dims.values():
            yield from _symbols(v, depth + 1)
    elif isinstance(dims, list):
        for v in dims:
            yield from _symbols(v, depth + 1)
    elif isinstance(dims, str):
        yield from (m for m in re.findall(r"[A-Za-z_]\w*", dims) if m not in _FUNCTIONS)


def _with_sizes(node: dict, ranges: dict) -> dict:
    """One hinted node with its tensors' shapes from the range of its op, where the ranks agree;
    the node itself where no range is its op's."""
    sizes = _range_of(node, ranges)
    args = node.get("args")
    if sizes is None or not isinstance(args, list):
        return node
    new_args = [_shaped(a, sizes[i]) if i < len(sizes) else a for i, a in enumerate(args)]
    out = node.get("out")
    if len(sizes) > len(args):  # an `out=` tensor last: a library call into a graph buffer
        out = _shaped(out, sizes[-1])
    if all(a is b for a, b in zip(new_args, args)) and out is node.get("out"):
        return node
    return {**node, "args": new_args, "out": out}


def _symbolic(node: dict, bound: dict) -> dict:
    """One hinted node with each tensor whose dims all resolve under `bound` given those sizes."""
    dims = node.get("dims")
    if not isinstance(dims, dict) or not bound:
        return node
    args = node.get("args")
    arg_dims = dims.get("args")
    new_args = [_resolved(a, arg_dims[i], bound) if isinstance(arg_dims, list) and i < len(arg_dims) else a
                for i, a in enumerate(args)] if isinstance(args, list) else args
    out = _resolved(node.get("out"), dims.get("out"), bound)
    if (not isinstance(args, list) or all(a is b for a, b in zip(new_args, args))) and out is node.get("out"):
        return node
    return {**node, "args": new_args, "out": out}


def _resolved(value: Any, dims: Any, bound: dict, depth: int = 0) -> Any:
    """A tensor's description (or a list of them, as the node holds its outputs) with its
    symbolic dims evaluated; as it is where one does not resolve."""
    if isinstance(value, list) and isinstance(dims, list) and len(value) == len(dims) and depth < _DEPTH:
        new = [_resolved(v, d, bound, depth + 1) for v, d in zip(value, dims)]
        return value if all(a is b for a, b in zip(new, value)) else new
    shape = value.get("shape") if isinstance(value, dict) else None
    if not isinstance(shape, list) or not isinstance(dims, list) or len(dims) != len(shape):
        return value
    size = [d if e is None else _evaluate(e, bound) for d, e in zip(shape, dims)]
    if any(s is None for s in size):
        return value
    return _shaped(value, size)


def _shaped(value: Any, size: Any) -> Any:
    """A tensor's description with shape `size`, where both are of one rank and differ (its
    hinted strides dropped: they were the hint's)."""
    shape = value.get("shape") if isinstance(value, dict) else None
    if not isinstance(shape, list) or not isinstance(size, list) or len(size) != len(shape) or size == shape \
            or not all(type(d) is int and d >= 0 for d in size):
        return value
    return {k: v for k, v in value.items() if k != "strides"} | {"shape": size}


def _floor_div(a: int, b: int) -> int | None:
    return a // b if b else None


def _ceil_div(a: int, b: int) -> int | None:
    return -(-a // b) if b else None


_FUNCTIONS: dict = {"FloorDiv": _floor_div, "CeilDiv": _ceil_div, "Max": max, "Min": min}
_BINARY: dict = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
                 ast.FloorDiv: _floor_div}


def _evaluate(expr: str, bound: dict) -> int | None:
    """The integer value of a symbolic size under `bound`, read from its syntax tree (nothing
    from the trace runs); None where a symbol is not bound or the expression is none of those
    this module reads (or no expression at all: the record's `dims` are data)."""
    tree = _tree(expr) if isinstance(expr, str) else None
    return None if tree is None else _value(tree, bound, 0)


@lru_cache(maxsize=4096)
def _tree(expr: str) -> ast.AST | None:
    """The syntax tree of a dim's expression, parsed once: every kernel of every call of a graph
    names the same few."""
    try:
        return ast.parse(expr, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _value(node: ast.AST, bound: dict, depth: int) -> int | None:
    if depth > 32:
        return None
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _value(node.operand, bound, depth + 1)
        return None if v is None else -v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a, b = _value(node.left, bound, depth + 1), _value(node.right, bound, depth + 1)
        return None if a is None or b is None else _BINARY[type(node.op)](a, b)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and not node.keywords and node.args:
        values = [_value(a, bound, depth + 1) for a in node.args]
        return None if any(v is None for v in values) else _FUNCTIONS[node.func.id](*values)
    return None
