"""NCCL kernels as collectives: which collective, its dtype, message size and group size, and the
bandwidths nccl-tests reports (docs/prof.md, "Collectives").

Identity comes from what the trace already says, most precise first:

1. a pyprof marker of the torch.distributed call that launched the kernel (pyprof.init() wraps
   every collective): its tensors give the dtype and size, its `dist` member the group size;
   one short formula per c10d function, below, in the op table's style;
2. the NCCL calls that launched the kernel (the record's `nccl`: parse reads them from NCCL's
   own NVTX payloads, docs/records.md): their message sizes give S wherever no marker does
   (DDP's reducer buckets, batched sends and receives, FSDP without markers);
3. the kernel's own name: NCCL names its kernels after the collective, reduction and dtype
   (`ncclDevKernel_AllReduce_Sum_bf16_RING_LL`; before 2.19 `ncclKernel_AllReduce_RING_LL_Sum_half`),
   which also covers collectives launched inside PyTorch (DDP's reducer, FSDP), and PyTorch's
   `record_param_comms` range around it, whose `sizes` (with `record_shapes`) give the tensor.

Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md): `algbw = S / t`; `busbw = algbw *
factor(n)`, where S is the size nccl-tests calls the operation's: the whole buffer of an
all-reduce, broadcast or reduce, the *gathered* buffer of an all-gather (n x the per-rank part),
the *input* of a reduce-scatter (n x the per-rank result), the whole send buffer of an
all-to-all, the message of a send or receive.
"""
from __future__ import annotations

import re
from typing import Callable, NamedTuple

from ...formats import DIST_MOD
from ..pricing.registry import Call
from ..pricing.values import ITEMSIZE, Tensor, is_truncated

ALLREDUCE, ALLGATHER, REDUCESCATTER = "AllReduce", "AllGather", "ReduceScatter"
BROADCAST, REDUCE, ALLTOALL = "Broadcast", "Reduce", "AllToAll"
GATHER, SCATTER, SENDRECV, SEND, RECV, BARRIER = "Gather", "Scatter", "SendRecv", "Send", "Recv", "Barrier"

# busbw = algbw * factor(n), nccl-tests' correction that makes the figure comparable with the
# link's peak whatever the number of ranks.
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    ALLREDUCE: lambda n: 2 * (n - 1) / n,
    REDUCESCATTER: lambda n: (n - 1) / n,
    ALLGATHER: lambda n: (n - 1) / n,
    ALLTOALL: lambda n: (n - 1) / n,
    GATHER: lambda n: (n - 1) / n,
    SCATTER: lambda n: (n - 1) / n,
    BROADCAST: lambda n: 1.0,
    REDUCE: lambda n: 1.0,
    SENDRECV: lambda n: 1.0,
    SEND: lambda n: 1.0,
    RECV: lambda n: 1.0,
}

# The kinds whose factor is 1 whatever the group size: their busbw needs no n.
_ANY_RANKS = frozenset({BROADCAST, REDUCE, SENDRECV, SEND, RECV})

# NCCL's dtype tokens in kernel names (2.19+ and older spellings) -> PyTorch dtype names.
NCCL_DTYPES = {
    "i8": "int8", "u8": "uint8", "i32": "int32", "u32": "uint32", "i64": "int64", "u64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
    "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "int8_t": "int8", "uint8_t": "uint8", "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64",
    "uint64_t": "uint64", "half": "float16", "float": "float32", "double": "float64", "__nv_bfloat16": "bfloat16",
}
# A dtype token between underscores (or at the end), longest spellings first (`int64_t` before `i64`).
_DTYPE = re.compile("_(" + "|".join(sorted(map(re.escape, NCCL_DTYPES), key=len, reverse=True)) + ")(?=_|$)")
_KINDS = {k.lower(): k for k in (ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, REDUCE, SENDRECV)}
_PREFIXES = ("ncclDevKernel_", "ncclKernel_")


class Collective(NamedTuple):
    """One NCCL kernel's collective. None fields are unknown (printed `na`).

    kind: nccl-tests' name (AllReduce, ...); dtype: PyTorch dtype name; size: S in bytes; ranks:
    the group size n; via: where the identity came from (`marker`, `nccl`, `kernel`); group: the
    process group's name when a marker said it; part: S / n where S is n times what NCCL's
    calls said (an all-gather's send buffer, ...) and n is not known yet (with_ranks)."""

    kind: str | None
    dtype: str | None
    size: int | None
    ranks: int | None
    via: str
    group: str | None = None
    part: int | None = None

    def with_ranks(self, n: int) -> "Collective":
        """The collective in a group of `n` ranks where nothing said its size."""
        if self.ranks:
            return self
        return self._replace(ranks=n, size=self.size if self.part is None else self.part * n)

    def algbw(self, ns: int | None) -> float | None:
        """S / t in GB/s (bytes per ns), for a duration of `ns`."""
        if self.size is None or not ns:
            return None
        return self.size / ns

    def busbw(self, ns: int | None) -> float | None:
        """algbw times nccl-tests' factor for the kind and group size, in GB/s."""
        alg = self.algbw(ns)
        factor = BUS_FACTOR.get(self.kind) if self.kind else None
        if alg is None or factor is None or not (self.ranks or self.kind in _ANY_RANKS):
            return None
        return alg * factor(self.ranks or 1)


def is_nccl(name: str | None) -> bool:
    """Whether a kernel (short or demangled name) is one of NCCL's."""
    return bool(name) and name.startswith(_PREFIXES)


def from_kernel_name(name: str) -> tuple[str | None, str | None]:
    """(kind, dtype) read from an NCCL kernel name; None where the name does not say (NCCL's
    `Generic` kernel runs whatever it is given)."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix):].split("(")[0]
            break
    else:
        return None, None
    kind = _KINDS.get(rest.split("_")[0].lower())
    m = _DTYPE.search(rest)
    return kind, NCCL_DTYPES[m[1]] if m else None


# ---------------------------------------------------------------------------------------------
# torch.distributed calls: one formula per c10d function, (call, group size) -> (kind, tensor
# that fixes the dtype, S in elements). Registered under the function's name.

Formula = Callable[[Call, "int | None"], "tuple | None"]  # strings: evaluated at import, on Python 3.9 too
TABLE: dict[str, Formula] = {}


def collective(*names: str) -> Callable[[Formula], Formula]:
    """Register a formula for the torch.distributed functions `names`."""

    def deco(f: Formula) -> Formula:
        for n in names:
            if n in TABLE:
                raise RuntimeError(f"two formulas for torch.distributed.{n}")
            TABLE[n] = f
        return f

    return deco


def _list(call: Call, pos: int, name: str) -> list | None:
    v = call.get(pos, name)
    if not isinstance(v, list) or is_truncated(v) or not all(isinstance(t, Tensor) for t in v):
        return None
    return v


def _times(n: int | None, t: Tensor | None) -> int | None:
    return None if n is None or t is None else n * t.numel


@collective("all_reduce")
def _all_reduce(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(0, "tensor")
    return ALLREDUCE, t, t and t.numel


@collective("all_reduce_coalesced")
def _all_reduce_coalesced(call: Call, n: int | None) -> tuple | None:
    ts = _list(call, 0, "tensors")
    return ALLREDUCE, ts[0] if ts else None, sum(t.numel for t in ts) if ts else None


@collective("broadcast")
def _broadcast(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(0, "tensor")
    return BROADCAST, t, t and t.numel


@collective("reduce")
def _reduce(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(0, "tensor")
    return REDUCE, t, t and t.numel


@collective("all_gather_into_tensor", "all_gather_single", "_all_gather_base")
def _all_gather_tensor(call: Call, n: int | None) -> tuple | None:
    out = call.tensor(0, "output_tensor")
    return ALLGATHER, out, out and out.numel


@collective("all_gather")
def _all_gather(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(1, "tensor")
    return ALLGATHER, t, _times(n, t)


@collective("reduce_scatter_tensor", "reduce_scatter_single", "_reduce_scatter_base")
def _reduce_scatter_tensor(call: Call, n: int | None) -> tuple | None:
    inp = call.tensor(1, "input")
    return REDUCESCATTER, inp, inp and inp.numel


@collective("reduce_scatter")
def _reduce_scatter(call: Call, n: int | None) -> tuple | None:
    out = call.tensor(0, "output")
    return REDUCESCATTER, out, _times(n, out)


@collective("all_to_all_single")
def _all_to_all_single(call: Call, n: int | None) -> tuple | None:
    inp = call.tensor(1, "input")
    return ALLTOALL, inp, inp and inp.numel


@collective("all_to_all")
def _all_to_all(call: Call, n: int | None) -> tuple | None:
    ts = _list(call, 1, "input_tensor_list")
    return ALLTOALL, ts[0] if ts else None, sum(t.numel for t in ts) if ts else None


@collective("gather")
def _gather(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(0, "tensor")
    return GATHER, t, _times(n, t)


@collective("scatter")
def _scatter(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(0, "tensor")
    return SCATTER, t, _times(n, t)


@collective("send", "isend")
def _send(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(0, "tensor")
    return SEND, t, t and t.numel


@collective("recv", "irecv")
def _recv(call: Call, n: int | None) -> tuple | None:
    t = call.tensor(0, "tensor")
    return RECV, t, t and t.numel


@collective("batch_isend_irecv")
def _batch_isend_irecv(call: Call, n: int | None) -> tuple | None:
    # Each op as the marker describes it, [op name, tensor, peer]: one NCCL group, one kernel
    # moving every send and receive, as NCCL's calls of the group sum them (from_nccl_calls).
    ops = call.get(0, "p2p_op_list")
    if not isinstance(ops, list) or is_truncated(ops) or not ops:
        return None
    names, tensors = set(), []
    for op in ops:
        if not (isinstance(op, list) and len(op) == 3 and isinstance(op[1], Tensor)):
            return None
        names.add(op[0])
        tensors.append(op[1])
    kind = _BATCH_KINDS.get(frozenset(names))
    one_dtype = len({t.dtype for t in tensors}) == 1
    return kind, tensors[0], sum(t.numel for t in tensors) if one_dtype else None


_BATCH_KINDS = {frozenset({"isend", "irecv"}): SENDRECV, frozenset({"isend"}): SEND, frozenset({"irecv"}): RECV}


@collective("barrier", "monitored_barrier")
def _barrier(call: Call, n: int | None) -> tuple | None:
    return BARRIER, None, None


def from_marker(marker: dict) -> Collective | None:
    """The collective of a pyprof torch.distributed marker, or None for another marker or an
    unknown function."""
    if marker.get("kind") != "op" or marker.get("mod") != DIST_MOD:
        return None
    formula = TABLE.get(marker.get("op"))
    if formula is None:
        return None
    dist = marker.get("dist")
    n = dist.get("groupSize") if isinstance(dist, dict) else None
    n = n if type(n) is int and n > 0 else None
    group = dist.get("group") if isinstance(dist, dict) else None
    try:
        kind, tensor, elems = formula(Call(marker), n)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return None
    dtype = tensor.dtype if isinstance(tensor, Tensor) else None
    size = ITEMSIZE.get(dtype)
    return Collective(kind, dtype, None if size is None or elems is None else elems * size, n, "marker",
                      group if isinstance(group, str) else None)


def p2p_route(marker: object) -> tuple[int, int] | None:
    """(source, destination) global ranks of a pyprof send/recv marker (its `dist.rank` and
    its `dst` or `src` argument); None for any other marker or one that does not say."""
    if not isinstance(marker, dict) or marker.get("mod") != DIST_MOD:
        return None
    op, dist = marker.get("op"), marker.get("dist")
    me = dist.get("rank") if isinstance(dist, dict) else None
    if op in ("send", "isend"):
        peer = Call(marker).get(1, "dst")
        route = (me, peer)
    elif op in ("recv", "irecv"):
        peer = Call(marker).get(1, "src")
        route = (peer, me)
    else:
        return None
    return route if type(me) is int and type(peer) is int and peer >= 0 else None


# NCCL's API calls (a record's `nccl` entries) -> nccl-tests' kind, and whether NCCL's message
# size is one rank's share of S (S = n x message): an all-gather's send buffer, a reduce-scatter's
# result, an all-to-all's message to one peer, a gather's send and a scatter's receive buffer.
NCCL_CALLS = {"ncclAllReduce": (ALLREDUCE, False), "ncclBroadcast": (BROADCAST, False),
              "ncclBcast": (BROADCAST, False), "ncclReduce": (REDUCE, False),
              "ncclAllGather": (ALLGATHER, True), "ncclReduceScatter": (REDUCESCATTER, True),
              "ncclAlltoAll": (ALLTOALL, True), "ncclGather": (GATHER, True), "ncclScatter": (SCATTER, True),
              "ncclSend": (SEND, False), "ncclRecv": (RECV, False)}
# What prof says of an NCCL kernel whose size nothing gave, and how to get it.
NO_SIZE = "collective size unknown"
NO_PAYLOADS = ("collective size unknown: the export has NCCL's ranges without their payloads "
               "(export the report with `nsys export --type sqlite --include-blobs=true`)")


def from_nccl_calls(calls: object, ranks: int | None) -> tuple[str, int | None, int | None, int | None] | None:
    """(kind, S in bytes, S / n, n) of the NCCL calls a kernel ran (a record's `nccl`); None
    where they do not say (not a list of calls of one known kind, or of one send/receive batch,
    on one communicator). n is `ranks`, else the communicator's size parse wrote with the calls
    (their `ranks`), else None; S is None where it scales with an unknown n."""
    if not isinstance(calls, list) or not calls:
        return None
    kinds, comms, sizes, whole, part = set(), set(), set(), 0, 0
    for c in calls:
        known = NCCL_CALLS.get(c.get("call")) if isinstance(c, dict) and isinstance(c.get("call"), str) else None
        size = c.get("bytes") if known is not None else None
        if type(size) is not int or size < 0:
            return None
        kinds.add(known[0])
        comms.add(repr(c.get("comm")))
        n = c.get("ranks")
        sizes.add(n if type(n) is int and n > 0 else None)
        if known[1]:
            part += size
        else:
            whole += size
    if len(comms) > 1:
        return None  # one kernel per communicator: which of the calls this one ran is unknown
    kind = SENDRECV if kinds == {SEND, RECV} else kinds.pop() if len(kinds) == 1 else None
    if kind is None or (part and whole):
        return None
    if ranks is None and len(sizes) == 1:
        ranks = sizes.pop()
    if not part:
        return kind, whole, None, ranks
    return kind, None if ranks is None else part * ranks, part, ranks


def _param_comms_elems(rec: dict) -> int | None:
    """Elements of the tensor in PyTorch's innermost `record_param_comms` range (its first
    input, when the range carries sizes)."""
    for op in reversed(rec.get("torchOps") or ()):
        if op.get("name") == "record_param_comms":
            sizes = op.get("sizes")
            if sizes and isinstance(sizes[0], list) and sizes[0] and all(type(d) is int for d in sizes[0]):
                elems = 1
                for d in sizes[0]:
                    elems *= d
                return elems
            return None
    return None


# S in elements from the tensor of a record_param_comms range (an input) and the group size.
_FROM_INPUT: dict[str, Callable[[int, int | None], int | None]] = {
    ALLREDUCE: lambda e, n: e, BROADCAST: lambda e, n: e, REDUCE: lambda e, n: e,
    REDUCESCATTER: lambda e, n: e, ALLTOALL: lambda e, n: e,
    ALLGATHER: lambda e, n: None if n is None else e * n,
}


def of_record(rec: dict, ranks: int | None = None) -> Collective | None:
    """The collective of a kernel record, None when the kernel is no NCCL kernel. `ranks`: the
    group size to assume when nothing in the record says (prof knows the job's world size)."""
    name = rec.get("kShortName") or rec.get("kLongName")
    if rec.get("kind", "kernel") != "kernel" or not is_nccl(name):
        return None
    marker = rec.get("marker")
    coll = from_marker(marker) if isinstance(marker, dict) else None
    kind, dtype = from_kernel_name(rec.get("kLongName") or name)
    if coll is not None:
        if coll.ranks is None and ranks:
            coll = coll._replace(ranks=ranks)
        if coll.size is not None or "nccl" not in rec:
            return coll
        ranks, kind, dtype = coll.ranks, coll.kind or kind, coll.dtype or dtype
    called = from_nccl_calls(rec["nccl"], ranks) if "nccl" in rec else None
    if called is not None:
        return Collective(called[0], dtype, called[1], called[3], "nccl", coll.group if coll else None, called[2])
    if coll is not None:
        return coll
    elems = _param_comms_elems(rec)
    size = None
    if elems is not None and kind in _FROM_INPUT and dtype in ITEMSIZE:
        s = _FROM_INPUT[kind](elems, ranks)
        size = None if s is None else s * ITEMSIZE[dtype]
    return Collective(kind, dtype, size, ranks, "kernel")


def size_warning(rec: dict, coll: Collective | None) -> str | None:
    """Why the collective `coll` of an NCCL kernel record has no size (NO_PAYLOADS when its
    export had NCCL's ranges but not their payloads); None when it has one or is None."""
    if coll is None or coll.size is not None or coll.part is not None:
        return None
    ranges = rec.get("ranges")
    if "nccl" not in rec and isinstance(ranges, list) and any(isinstance(r, str) and r.startswith("NCCL:")
                                                             for r in ranges):
        return NO_PAYLOADS
    return NO_SIZE
