"""Which op call a kernel belongs to: the kernels among which one op call's work is shared.

An op's cost is priced per call (analysis.py): its main kernel, its helper kernels (parts.py) and
any kernel it launches between them share it, and only the call as a whole is sure to have done
all of it. Kernels of one thread run one call at a time, so a call is a run of consecutive
kernels of a (pid, tid) with the same identity (`identity`):

- a forward kernel: its op marker and the outermost PyTorch range (the range carries its op id,
  so two calls with equal markers are still two); without PyTorch ranges the marker range's
  first kernel (sub-sequence 0) starts a new call;
- a backward kernel of a pyprof-marked op: the forward call it comes from (`fwd.call`, the start
  of that call's marker range): every autograd node the call created, and the engine's launches
  between them, are that op's backward, one call per direction;
- a backward kernel without it: the forward op's sequence number and the outermost range;
- a kernel of a compiled graph: its call site in its run of the graph.

`CallNumbers` numbers the calls 1, 2, ... in the order their first kernels were launched, with
O(threads) memory: the `call` key of `--summary --by call`.
"""
from __future__ import annotations


def identity(rec: dict) -> tuple:
    """(what names the kernel's op call, whether this kernel starts a new call regardless)."""
    compiled = rec.get("compiled")
    if isinstance(compiled, dict):
        return ("compiled", compiled.get("graph"), compiled.get("run"), compiled.get("call")), False
    torch_ops = rec.get("torchOps")
    outer = torch_ops[0] if torch_ops else None
    starts = outer is None and rec.get("subSeqId") == 0
    if rec.get("dir") == "bprop":
        fwd = rec.get("fwd") or {}
        call = fwd.get("call")
        if call is not None:
            return ("call", call), False
        return (fwd.get("seq"), outer), starts
    return (rec.get("marker"), outer), starts


class CallNumbers:
    """Numbers kernel records by op call, in launch order (one instance per pass)."""

    __slots__ = ("_open", "_last")

    def __init__(self) -> None:
        self._open: dict = {}  # (pid, tid) -> [identity, number] of the thread's current call
        self._last = 0

    def number(self, rec: dict, ident: tuple | None = None) -> int:
        """The number of the op call `rec` (a kernel record, given in launch order) belongs to;
        `ident`: its identity() when the caller has it already."""
        ident, starts = ident or identity(rec)
        key = (rec.get("pid"), rec.get("tid"))
        current = self._open.get(key)
        if current is None or starts or current[0] != ident:
            self._last += 1
            current = self._open[key] = [ident, self._last]
        return current[1]
