"""A dynamic-shape graph's library call, its sizes taken from the call itself.

Inductor's table holds each node's sizes as the graph was compiled for them: where a size is
symbolic (dynamic shapes), the hint, the size of the example it was compiled with
(pyprof/nvtx/inductor.py, `"hinted": true`). One graph serves calls of other sizes then (a MoE
expert's rows differ from call to call), and a kernel priced at the hint is priced wrong. pyprof
turns shapes on in such graphs' op ranges (pyprof/nvtx/graph_calls.py), so the library call's
own range (`aten::addmm` with `sizes`) holds what this call ran: its tensors' shapes replace the
hinted ones before the node is priced as usual (fx_nodes.py).
"""
from __future__ import annotations

from typing import Any


def resized(rec: dict) -> dict:
    """`rec` with its compiled entry's hinted nodes given the shapes of the op range of their own
    op around the kernel (positional tensor arguments in order, then an `out=` tensor where the
    range has more entries than the node has arguments: keyword scalars between); `rec` itself
    where nothing changes."""
    entry = rec["compiled"]
    nodes = entry.get("nodes")
    if not isinstance(nodes, list) or not any(isinstance(n, dict) and n.get("hinted") is True for n in nodes):
        return rec
    ranges = {op.get("name"): op.get("sizes") for op in rec.get("torchOps") or ()
              if isinstance(op, dict) and isinstance(op.get("sizes"), list)}
    if not ranges:
        return rec
    new = [_with_sizes(n, ranges) if isinstance(n, dict) and n.get("hinted") is True else n for n in nodes]
    if all(a is b for a, b in zip(new, nodes)):
        return rec
    return {**rec, "compiled": {**entry, "nodes": new}}


def _with_sizes(node: dict, ranges: dict) -> dict:
    """One hinted node with its tensors' shapes from the range of its op (`aten.addmm.default`'s
    is `aten::addmm`), where the ranks agree; the node itself where no range is its op's."""
    op = node.get("op")
    parts = op.split(".") if isinstance(op, str) else []
    sizes = ranges.get(f"{parts[0]}::{parts[1]}") if len(parts) >= 2 else None
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


def _shaped(value: Any, size: Any) -> Any:
    """A tensor's description with shape `size`, where both are of one rank and differ (its
    hinted strides dropped: they were the hint's)."""
    shape = value.get("shape") if isinstance(value, dict) else None
    if not isinstance(shape, list) or not isinstance(size, list) or len(size) != len(shape) or size == shape \
            or not all(type(d) is int and d >= 0 for d in size):
        return value
    return {k: v for k, v in value.items() if k != "strides"} | {"shape": size}
