"""One record in, its derived facts out: the op's cost, this kernel's share of it, Tensor Core
use, dtype, math path and peaks. The attribution rules are documented in docs/prof.md.
"""
from __future__ import annotations

from typing import Callable

from pyprof.kernel_names import MMA, NONE, SIMT, classify, kernel_dtype, triton_gemm

from . import op_ranges as aten_level
from . import beyond_peak
from . import ops  # noqa: F401  (fills the op table)
from .ops.gemm import aten_gemm
from .call_sizes import CallSizes
from . import peaks as peaks_mod
from .calls import CallNumbers, identity as call_identity
from ..comms.collectives import of_record, size_warning
from .fx_nodes import LEVEL as COMPILED, CompiledPricer
from .matrix_chain import MatrixChain
from .tensor_flow import FURTHER, TensorFlow
from .attention_parts import SEED_UNPACK, flash_helpers, math_attention_gemm
from .conv_parts import FFT_PATH, conv_outputs, range_conv_tensors, range_outputs, range_parts
from .cub_reduce import TwoPassReduce
from .encoder_parts import vector_role
from .gemm_parts import SPLIT_K, output_parts, split_partials, split_pass
from .multitensor import tensor_lists
from .part import ADD, CONTIGUOUS, COPY, FILL, Part
from .parts import LAUNCH, CallParts, backward_parts, family, forward_parts, launch_stated, stage_work
from .marker_costs import MarkerCosts
from .rnn_kernels import RnnCall
from .registry import ATTN, CONV, GEMM, GEMM_STAGE, MMA_KINDS, RNN, Call, Cost
from ..warnings_tally import Tally
from .values import ITEMSIZE, Tensor, is_shape

_GRAD_TOKENS = ("dgrad", "wgrad")
_UNKNOWN = (None, None)
# Triton template GEMMs use MMA for these (tl.dot lowers to MMA for them from Ampere on).
_TRITON_MMA_DTYPES = frozenset(("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8"))
# Marker dtypes a matrix kernel's name may replace: fp32 (autocast ran the kernel in 16 bits) or
# unknown. A 16-bit marker dtype stays: cuDNN's SDPA kernels say `f16` for bf16 inputs too.
_OVERRIDABLE = frozenset((None, "float32"))
# Which level priced a kernel (the `level` column): its pyprof op marker, PyTorch's op ranges, or
# the FX nodes of the compiled graph that launched it.
MARKER, ATEN = "marker", "aten"
LEVELS = (MARKER, ATEN, COMPILED)


class Facts:
    """What prof derived for one record; None fields print `na`. `tc`: True when the kernel ran
    on Tensor Cores, False for a matrix kernel that did not, None where the question does not
    apply (the tc column prints 1, 0 and -)."""

    __slots__ = ("cost", "flops", "bytes", "tc", "dtype", "path", "peaks", "level", "call", "call_work")

    def __init__(self) -> None:
        self.cost: Cost | None = None
        self.level: str | None = None  # MARKER, ATEN or COMPILED: where `cost` came from
        self.flops: int | None = None
        self.bytes: int | None = None
        self.tc: bool | None = None
        self.dtype: str | None = None
        self.path: str | None = None
        self.peaks: peaks_mod.Peaks | None = None
        self.call: int | None = None  # the op call's number (calls.py); None for memcpy/memset
        # (FLOPs, bytes) the kernel adds to a sum over whole op calls where that differs from its
        # own `flops` and `bytes` (None: it does not): a share beyond_peak withheld, the rest of
        # its call's total that no kernel of it was given (Analyzer._rest).
        self.call_work: tuple | None = None

    def whole_work(self) -> tuple:
        """(FLOPs, bytes) this kernel adds to a sum that keeps its op call whole."""
        return (self.flops, self.bytes) if self.call_work is None else self.call_work

    @property
    def peak_tflops(self) -> float | None:
        """The dense peak (TFLOP/s) of the kernel's math path on its GPU; None when unknown."""
        if self.peaks is None or self.path is None:
            return None
        return self.peaks.flops.get(self.path)


def _sizes_gemm(rec: dict) -> tuple | None:
    """(batch, m, n, k, extra elems) of the innermost PyTorch GEMM range, when it carries sizes:
    the exact work of the kernel inside it (backward GEMMs, the math SDPA path, folded matmuls)."""
    torch_ops = rec.get("torchOps")
    if not torch_ops:
        return None
    inner = torch_ops[-1]
    sizes = inner.get("sizes")
    if not sizes:
        return None
    return aten_gemm(inner.get("name"), sizes)


def _backward_of(rec: dict) -> bool:
    """True for a kernel of a forward op's autograd node: it is priced by that op's backward.
    A bprop kernel with no forward op was launched by the backward call itself (the seed
    gradient of `loss.backward()`): its own marker, the call, prices it."""
    return rec.get("dir") == "bprop" and isinstance(rec.get("fwd"), dict)


def _private_call(rec: dict) -> bool:
    """True when the outermost PyTorch range is a private op (`aten::_amp_update_scale_`): a
    call PyTorch's own Python code made outside any user-visible call (GradScaler's unscale and
    update). pyprof.init() annotates public names only, so such a kernel has no marker by design
    and is not warned about; a public op without a marker (no init(), or a name bound before
    it) is."""
    torch_ops = rec.get("torchOps")
    name = torch_ops[0].get("name") if torch_ops and isinstance(torch_ops[0], dict) else None
    return isinstance(name, str) and name.startswith("aten::_")


def _no_marker(rec: dict) -> tuple[str, str] | None:
    """The warning for a record without an op marker: an NCCL kernel's work is communication, so
    it is one only when its collective's size is unknown (collectives.size_warning)."""
    coll = of_record(rec)
    if coll is not None:
        why = size_warning(rec, coll)
        return None if why is None else (why, coll.kind or "nccl")
    return None if _private_call(rec) else ("no op marker", f"{rec.get('mod')}.{rec.get('op')}")


class Analyzer:
    """Derives Facts per record. Keeps one entry per (pid, tid): the call its last kernel
    belonged to, so that an op's work goes to its first (main) kernel only."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self._calls: dict = {}
        self._parts: dict = {}  # (pid, tid) -> (the call state of _calls, its CallParts)
        self._costs = MarkerCosts()
        self._compiled = CompiledPricer(self)
        self._chain = MatrixChain(self)  # what a matrix kernel leaves for the kernels after it
        self._numbers = CallNumbers()
        self._ident: tuple | None = None  # calls.identity of the record facts() is deriving
        self._call_work: tuple | None = None  # Facts.call_work of the record facts() is deriving
        self.flow = TensorFlow()  # the dtypes kernels wrote, the shapes consumers read (read ahead: scan.py)
        self._sizes = CallSizes(self.flow.upcoming)  # a dynamic-shape graph call's sizes
        self._passes = TwoPassReduce()
        # (FLOPs, bytes) of the kernel being derived where its launch states them (launch_stated,
        # TwoPassReduce), else None: set for every kernel before either level prices it.
        self.launch_work: tuple | None = None

    def cost(self, rec: dict) -> Cost | None:
        """The op cost of the marker behind a record (the forward op's, for a bprop kernel)."""
        cost, warning = self._marker_cost(rec)
        if warning:
            self.tally.warn(*warning)
        return cost

    def _marker_cost(self, rec: dict) -> tuple:
        """(cost, None) or (None, (warning kind, op name)) for the marker behind a record."""
        marker = rec["fwd"].get("marker") if _backward_of(rec) else rec.get("marker")
        if not isinstance(marker, dict) or marker.get("kind") != "op":
            return None, _no_marker(rec)
        return self._costs.of(marker)

    def _priced(self, rec: dict, name: str | None, verdict: str | None) -> tuple:
        """(cost, level, the PyTorch range that priced it or None) of a record, warning when
        neither level can price it. The marker prices unless it cannot (no marker, no formula,
        no backward formula for a backward kernel), its op is a composite (each kernel priced
        from its own range), or the kernel is the engine's gradient accumulation; then the
        innermost PyTorch range with a formula does (op_ranges.py)."""
        cost, warning = self._marker_cost(rec)
        bprop = _backward_of(rec)
        # A backward kernel of an op with no backward formula is priced from its own range.
        no_backward = bprop and cost is not None and cost.kind not in MMA_KINDS and cost.bwd_flops is None \
            and cost.bwd_bytes is None
        accumulation = bprop and aten_level.engine_accumulation(rec)
        if rec.get("torchOps") and (cost is None or cost.composite or no_backward or accumulation):
            priced = aten_level.price(rec, name, verdict, self.flow)
            if priced is not None:
                return priced[0], ATEN, priced[1]
            if cost is not None and cost.composite:  # its whole on one kernel would double count
                inner = rec["torchOps"][-1]
                self.tally.warn("PyTorch op without a formula inside a composite op",
                                str(inner.get("name") if isinstance(inner, dict) else inner))
                return None, None, None
        if warning:
            self.tally.warn(*warning)
        return cost, (MARKER if cost is not None else None), None

    def facts(self, rec: dict) -> Facts:
        """All derived values for one record: unguarded(), then held to its GPU's peak
        (beyond_peak.py)."""
        f = self.unguarded(rec)
        if f.call is not None:  # a kernel
            beyond_peak.guard(rec, f, self.tally)
        return f

    def unguarded(self, rec: dict) -> Facts:
        """One record priced and numbered by op call (calls.py), before beyond_peak's guard: what
        memo.py keeps per record content (the guard needs the kernel's own duration)."""
        kernel = rec.get("kind", "kernel") == "kernel"
        # The kernel's op call, named once: _first_of_call and the call numbers both read it.
        self._ident = call_identity(rec) if kernel else None
        self._call_work = None
        f = self._facts(rec)
        f.call_work = self._call_work
        if kernel:
            f.call = self._numbers.number(rec, self._ident)
        return f

    def _facts(self, rec: dict) -> Facts:
        f = Facts()
        if rec.get("kind", "kernel") != "kernel":  # memcpy / memset: bytes moved, no math
            f.flops, f.bytes = 0, rec.get("bytes")
            f.peaks = peaks_mod.lookup(rec.get("gpu"))
            return f
        name = rec.get("kLongName") or rec.get("kShortName")
        # Told every kernel, compiled ones too: the second pass of a cub reduction is priced by
        # the launch before it on its stream.
        self.launch_work = launch_stated(rec, name) or self._passes.work(rec, name)
        if isinstance(rec.get("compiled"), dict):  # a kernel of a compiled graph: priced from its nodes
            return self._compiled.facts(self._sizes.resized(rec), f)
        verdict = classify(name)
        self.flow.record += 1
        if "consumers" in rec:
            self.flow.consumed(rec)
        cost, f.level, aten_range = self._priced(rec, name, verdict)
        if rec.get("torchOps"):  # the flow is between PyTorch's ranges: nothing to learn without them
            self.flow.wrote(rec, aten_level.written_dtype(name, verdict), aten_level.cast_source(name))
        f.cost = cost
        kind = cost.kind if cost else None
        dtype = cost.dtype if cost else None
        if verdict is None and kind in MMA_KINDS and triton_gemm(name) and dtype in _TRITON_MMA_DTYPES:
            verdict = MMA
        if verdict == MMA:
            f.tc = True
        elif verdict == SIMT:
            f.tc = False
        elif verdict is None and kind in MMA_KINDS:
            self.tally.warn("kernel not recognised (tc -, work na)", rec.get("kShortName") or "?")
        if verdict in (MMA, SIMT) and dtype in _OVERRIDABLE and (kind in MMA_KINDS or cost is None):
            dtype = kernel_dtype(name) or dtype
        f.dtype = dtype
        if verdict in (MMA, SIMT):
            self._chain.launched(rec, name)
        if self.launch_work is not None:
            f.flops, f.bytes = self.launch_work
        elif aten_range is not None:
            f.flops, f.bytes = self._aten_work(rec, cost, verdict, aten_range, name)
        else:
            f.flops, f.bytes = self._work(rec, cost, verdict, dtype, name)
        if f.flops and cost is not None and cost.upper_bound:
            self.tally.warn(cost.upper_bound, beyond_peak.op_name(rec))
        f.peaks = peaks_mod.lookup(rec.get("gpu"))
        f.path = peaks_mod.math_path(f.tc is True, dtype)
        return f

    def holds_call(self, rec: dict) -> bool:
        """Whether the op-call state of the record's thread is set (_first_of_call ran on it)."""
        return ("call", rec.get("pid"), rec.get("tid")) in self._calls

    def current_call(self, rec: dict) -> list | None:
        """The state of the op call the record's thread is in (_first_of_call made it), compared
        by identity: a new call makes a new one."""
        return self._calls.get(("call", rec.get("pid"), rec.get("tid")))

    def whole_call(self, work: tuple) -> None:
        """Give the kernel being derived `work` (FLOPs, bytes) for sums over whole op calls
        (Facts.call_work), where that differs from its own."""
        self._call_work = work

    def _first_of_call(self, rec: dict, counts: bool) -> bool:
        """True for the first kernel of an op call that `counts` (is a main-kernel candidate).

        A new call starts when the op marker or the outermost PyTorch range (with its op id)
        differs from the previous kernel's on the same thread, or, without PyTorch ranges, at
        sub-sequence 0 (the marker is then the innermost range). For bprop the call is the
        forward op's call (`fwd.call`): every autograd node one call created (cross_entropy's
        NllLoss, ToCopy and LogSoftmax nodes) does that op's backward once, as one pyprof `bwd`
        range does, and so does a launch of the engine between them outside every range (a
        gradient accumulated after the node: sub-sequence 0 of no range, not a new call); else the
        forward op's seq. (calls.identity: the same calls make the `call` key's groups.)"""
        ident, starts = self._ident or call_identity(rec)
        return self._first(("call", rec.get("pid"), rec.get("tid")), ident, counts, starts)

    def _first_in_range(self, rec: dict) -> bool:
        """True for the first matrix kernel inside the innermost PyTorch range (cuBLAS may
        follow a GEMM with a second, small GEMM-named kernel in the same aten::mm)."""
        return self._first(("range", rec.get("pid"), rec.get("tid")), rec["torchOps"][-1], True,
                           rec.get("subSeqId") == 0)

    def gradient_slot(self, rec: dict, name: str | None, node: tuple | None = None) -> str | None:
        """The gradient ("dgrad" or "wgrad") this matrix kernel of a convolution's backward node
        computes, each one forward's work, where it is the first to in the node; None otherwise.

        A kernel named `dgrad` or `wgrad` fills that slot; any other (a GEMM-lowered 1x1
        convolution, cuDNN's direct, Winograd or depthwise kernels, the `fprop` kernel computing
        a transposed convolution's data gradient) fills the first free one in launch order. A
        second kernel for a filled slot (a gradient split in two) carries 0. cuDNN's FFT path's
        kernels (conv_parts.FFT_PATH) fill none: their gradient's FLOPs stay in the call's sums.

        The node is the op call _first_of_call (run first for every kernel of the op) last
        started on this thread, compared by identity: a call whose first kernel is not a matrix
        kernel (cuDNN's padding kernel) starts its slots anew all the same; for a kernel priced
        at the aten level, `node`: its range's (name, opId)."""
        if FFT_PATH.search(name or ""):
            return None
        if node is None:
            call = self.current_call(rec)
            key = ("slots", rec.get("pid"), rec.get("tid"))
            state = self._calls.get(key)
            new = state is None or state[0] is not call
        else:
            call, key = node, ("aten slots", rec.get("pid"), rec.get("tid"))
            state = self._calls.get(key)
            new = state is None or state[0] != node
        if new:
            state = self._calls[key] = [call, set()]
        low = (name or "").lower()
        slot = next((t for t in _GRAD_TOKENS if t in low), None)
        if slot is None:
            slot = next((t for t in _GRAD_TOKENS if t not in state[1]), None)
        if slot is None or slot in state[1]:
            return None
        state[1].add(slot)
        return slot

    def _call_parts(self, rec: dict, cost: Cost, bprop: bool) -> CallParts:
        """The helper parts (parts.py) of the current op call: made from its marker when its
        first kernel comes (_first_of_call ran for this kernel)."""
        key = (rec.get("pid"), rec.get("tid"))
        call = self.current_call(rec)
        held = self._parts.get(key)
        if held is None or held[0] is not call:
            marker = rec["fwd"].get("marker") if bprop else rec.get("marker")
            ok = isinstance(marker, dict)
            parts = (backward_parts if bprop else forward_parts)(marker, cost) if ok else []
            held = self._parts[key] = (call, CallParts(parts, tensor_lists(marker, cost) if ok and not bprop else None,
                                                       cost.bwd_stages if bprop else cost.stages,
                                                       cost.stages_in_order))
        return held[1]

    def _launch_work(self, rec: dict, cost: Cost, bprop: bool, name: str | None) -> tuple | None:
        """(flops, bytes) of a multi-tensor launch of the current call (CallParts.launch), told
        its place among the launches under its innermost PyTorch range, when it has one."""
        torch_ops = rec.get("torchOps")
        inner = torch_ops[-1] if torch_ops and isinstance(torch_ops[-1], dict) else None
        work = self._call_parts(rec, cost, bprop).launch(name, rec.get("grid"), inner and inner.get("sizes"),
                                                         self._launch_index(rec, inner) if inner else 0)
        if work is None:
            return None
        return self._rest(rec, cost.bwd_flops if bprop else cost.flops, work)

    def _launch_index(self, rec: dict, r: dict) -> int:
        """The place of this multi-tensor launch among those under PyTorch range `r` so far."""
        key = ("launch", rec.get("pid"), rec.get("tid"))
        state = self._calls.get(key)
        ident = (r.get("name"), r.get("opId"))
        if state is None or state[0] != ident:
            state = self._calls[key] = [ident, -1]
        state[1] += 1
        return state[1]

    def _part(self, rec: dict, cost: Cost, bprop: bool, name: str | None) -> Part | None:
        """The helper part this kernel of the current op call does, if any; each part is taken
        by one kernel."""
        return self._call_parts(rec, cost, bprop).take(name, rec.get("grid"), rec.get("block"))

    def _claim(self, rec: dict) -> bool:
        """True when the current op call of this thread has no main kernel yet: this one is."""
        state = self.current_call(rec)
        if state is None or state[1]:
            return False
        state[1] = True
        return True

    @staticmethod
    def _ran_in(nbytes: int | None, cost: Cost, rec: dict, name: str | None, staged: bool = False) -> int | None:
        """An op's forward bytes, or one stage's (Cost.stages), in the dtype its kernel ran in:
        autocast runs some ops in float32 (norms, softmax, losses) on 16-bit arguments, which it
        casts up first; the kernel's name says `float` where the marker's tensors said bfloat16 or
        float16. (A whole backward node mixes dtypes, and the kernel carrying it may be a helper:
        left as the formula says.)"""
        marker = rec["fwd"].get("marker") if staged and _backward_of(rec) else None if _backward_of(rec) \
            else rec.get("marker")
        if nbytes is None or not isinstance(marker, dict) or marker.get("autocast") is None \
                or ITEMSIZE.get(cost.dtype) != 2 or aten_level.written_dtype(name, None) != "float32":
            return nbytes
        return nbytes * 2

    def _first(self, key: tuple, ident, counts: bool, starts: bool) -> bool:
        """Per-thread state `key`: a new instance when `ident` changes or `starts`; True once per
        instance, for the first kernel that `counts`."""
        state = self._calls.get(key)
        if state is None or state[0] != ident or starts:
            state = self._calls[key] = [ident, False]
        if counts and not state[1]:
            state[1] = True
            return True
        return False

    def _aten_work(self, rec: dict, cost: Cost, verdict: str | None, r: dict, name: str | None) -> tuple:
        """(flops, bytes) of a kernel priced by PyTorch range `r`: the first kernel of the range
        carries the op's work (for GEMM and attention ops the first matrix kernel; helpers 0; a
        convolution's backward: each gradient's matrix kernel one gradient, as with markers).
        One state per nesting depth, so that a range opened inside `r` between two of its kernels
        (cuDNN's RNN backward zeroes a buffer through aten::zeros) does not start `r` anew."""
        if cost.launches is not None and len(cost.launches) > 1 and family(name) == LAUNCH:
            # A foreach op's launches, each its elements' share of the op (multitensor.py).
            index, total = self._launch_index(rec, r), sum(cost.launches)
            if index >= len(cost.launches) or not total:
                return _UNKNOWN
            share = cost.launches[index]
            return (None if cost.flops is None else cost.flops * share // total,
                    None if cost.bytes is None else cost.bytes * share // total)
        if cost.stages is not None or self._stages_of(rec, r) is not None:
            return self._aten_stage(rec, r, cost, name)
        if cost.kind == RNN and cost.rnn is not None:  # each kernel its own work, as with markers
            bprop = rec.get("dir") == "bprop"
            self._first_of_call(rec, True)  # the call whose formula _rest hands out to whole-call sums
            work = self._rnn_call(rec, cost, bprop).work(
                name, rec.get("grid"), verdict in (MMA, SIMT), lambda: self.upcoming(rec), rec.get("block"))
            return self._rest(rec, cost.bwd_flops if bprop else cost.flops, _UNKNOWN if work is None else work)
        mma = cost.kind in MMA_KINDS
        counts = verdict in (MMA, SIMT) if mma else True
        torch_ops = rec["torchOps"]
        depth = next(i for i, o in enumerate(torch_ops) if o is r)
        first = self._first(("aten", rec.get("pid"), rec.get("tid"), depth), (r.get("name"), r.get("opId")), counts,
                            depth == len(torch_ops) - 1 and rec.get("subSeqId") == 0)
        sizes = r.get("sizes") if isinstance(r.get("sizes"), list) else []
        bprop = rec.get("dir") == "bprop"
        if mma and verdict == NONE and cost.kind == GEMM and split_pass(name):
            return self._chain.split_pass(rec, name, self._gemm_outputs(rec, cost, bprop), ITEMSIZE.get(cost.dtype))
        if mma and verdict == NONE and family(name) == SPLIT_K:
            if cost.kind == CONV:  # forward (input, weight, ...), backward (dY, input, weight, ...)
                return self._chain.split_k(rec, name, range_outputs(sizes, cost, bprop), cost.dtype)
            gemm = aten_gemm(r.get("name"), sizes)
            return self._chain.split_k(rec, name, [] if gemm is None else [(gemm[0] * gemm[1], gemm[2])], cost.dtype)
        weight = range_conv_tensors(sizes, True)[1] if cost.kind == CONV and bprop else None  # the wgrad's weight
        if mma and verdict == NONE and cost.kind == CONV and bprop and split_pass(name):
            return self._chain.wgrad_split(rec, weight, ITEMSIZE.get(cost.dtype))
        depthwise = self._chain.depthwise_reduce(rec, name, weight, ITEMSIZE.get(cost.dtype)) \
            if mma and verdict == NONE and cost.kind == CONV and bprop else None
        if depthwise is not None:
            return depthwise
        node = (r.get("name"), r.get("opId"))
        if cost.kind == CONV:
            x, w = range_conv_tensors(sizes, bprop)
            shapes = lambda: (x, w, sizes[0] if bprop and sizes else cost.out_shape)  # noqa: E731
            path = self._chain.fft(rec, cost, name, shapes, node) or \
                self._chain.winograd(rec, cost, name, verdict, shapes, node)
            if path is not None:
                return path
        if mma and verdict == NONE:
            # A helper of the range's call (a GEMM's output helpers, attention's flash helpers, a
            # convolution's layout conversions and weight gradients' sum), as with markers.
            part = self._aten_parts(rec, r, cost, name).take(name, rec.get("grid"), rec.get("block"))
            return self.unclaimed() if part is None else (part.flops, part.bytes)
        if mma and not counts:  # not recognised: facts() counted it
            return _UNKNOWN
        if cost.kind == CONV:
            whole = lambda: self._aten_conv_work(rec, cost, name, first, node, x, weight)  # noqa: E731
            group = self._chain.one_group(rec, cost, name, shapes, node) if bprop else None
            return group or self._chain.group_launch(rec, name, cost.groups, whole, node) or whole()
        if not first:
            return self.unclaimed()
        gemm = aten_gemm(r.get("name"), sizes) if cost.kind == GEMM else None  # a split-K GEMM's partials
        return cost.flops, cost.bytes if gemm is None else split_partials(
            (name, rec.get("grid")), [(gemm[0] * gemm[1], gemm[2])], cost.bytes, ITEMSIZE.get(cost.dtype),
            gemm[0] == 1)

    def _aten_parts(self, rec: dict, r: dict, cost: Cost, name: str | None) -> CallParts:
        """The helper parts (parts.py) of a matrix op's PyTorch range `r` not yet taken, made from
        the range when its first helper (kernel `name`) comes, as a marker's are: a GEMM's forward
        output (output_parts), an attention backward's flash helpers (its query, key and value are
        inputs 1 to 3 of every backend's backward op), cuDNN attention's dropout seed unpacking
        (a range has no dropout_p: offered to every forward, taken only where it runs), a convolution's layout conversions,
        channel padding (by the kernels read ahead: the one it pads for, the gradient kernels) and weight gradients' sum
        (range_parts)."""
        ident = (r.get("name"), r.get("opId"))
        held = self._held_aten_parts(rec, ident)
        if held is None:
            bprop = rec.get("dir") == "bprop"
            if cost.kind == ATTN:
                sizes = (r.get("sizes") or []) + [None] * 4
                q, k, v = (Tensor(tuple(s), cost.dtype) if is_shape(s) else None for s in sizes[1:4])
                parts = flash_helpers(q, k, v, ITEMSIZE.get(cost.dtype)) if bprop else [SEED_UNPACK]
            elif cost.kind == CONV:
                parts = range_parts(r.get("sizes") if isinstance(r.get("sizes"), list) else [], cost, name, bprop,
                                    lambda: self.upcoming(rec)[0])
            else:
                parts = [] if bprop else output_parts(cost)
            held = CallParts(parts)
            self._calls[("aten parts", rec.get("pid"), rec.get("tid"))] = [ident, held]
        return held

    def _held_aten_parts(self, rec: dict, ident: tuple) -> CallParts | None:
        """The helper parts of the PyTorch range `ident` ((name, opId)) on the record's thread, if
        its first helper made them (_aten_parts)."""
        state = self._calls.get(("aten parts", rec.get("pid"), rec.get("tid")))
        return state[1] if state is not None and state[0] == ident else None

    def _stages_of(self, rec: dict, r: dict) -> CallParts | None:
        """The stages left of PyTorch range `r`, taken from its first kernel's cost, while its
        kernels run."""
        state = self._calls.get(("stage", rec.get("pid"), rec.get("tid")))
        return state[1] if state is not None and state[0] == (r.get("name"), r.get("opId")) else None

    def _aten_stage(self, rec: dict, r: dict, cost: Cost, name: str | None) -> tuple:
        """(flops, bytes) of the stage (Cost.stages) this kernel runs of an op run as a sequence
        of kernels, priced from its PyTorch range `r`: the stages of the range's first kernel's
        cost (a later kernel's formula may know less: group norm's groups are its first kernel's
        grid), taken as with markers (CallParts.stage: in turn, or by name); na past the last or
        for a kernel no named stage is."""
        staged = self._stages_of(rec, r)
        if staged is None:
            staged = CallParts([], stages=cost.stages)
            self._calls[("stage", rec.get("pid"), rec.get("tid"))] = [(r.get("name"), r.get("opId")), staged]
        work = stage_work(staged, name)
        return self.unclaimed() if work is None else work

    def _aten_conv_work(self, rec: dict, cost: Cost, name: str | None, first: bool, node: tuple, x: object,
                        weight: object) -> tuple:
        """(flops, bytes) of a convolution's main kernel priced from its PyTorch range `node`:
        forward the op's work on the range's first; backward each gradient's kernel one gradient
        (its slot), or xmma's segment-K partials."""
        if rec.get("dir") != "bprop":
            return (cost.flops, cost.bytes) if first else self.unclaimed()
        slot = self.gradient_slot(rec, name, node)
        # The range's helper parts once its first helper made them (range_parts reads that
        # helper's name): a dgrad engine's conversions before this kernel.
        held = self._held_aten_parts(rec, node)
        if held is not None:
            held.engine_ran()
        if not slot:
            return self.unclaimed()
        segmented = self._chain.segmented(rec, cost, name, ITEMSIZE.get(cost.dtype), weight,
                                          x[0] if is_shape(x) else None) if is_shape(weight) else None
        return segmented or (cost.flops, cost.bytes)

    def _conv_work(self, rec: dict, cost: Cost, name: str | None, first: bool, size: int | None,
                   tensors: list) -> tuple:
        """(flops, bytes) of a convolution's main kernel priced from its marker: forward the op's
        work on the call's first; backward each gradient's kernel one gradient (its slot), or
        xmma's segment-K partials."""
        if not _backward_of(rec):
            if not first:
                return self.unclaimed()
            return cost.flops, None if size is None or cost.elems is None else \
                (cost.elems - cost.unread + cost.bias_elems) * size
        grad = (cost.flops, None if size is None or cost.elems is None else cost.elems * size)
        slot = self.gradient_slot(rec, name)
        self._call_parts(rec, cost, True).engine_ran()
        if not slot:
            return self.unclaimed()
        x, w = self._marker_conv(rec, tensors)
        # The weight's gradient reads what the forward read: its slot, or the one gradient
        # where the input takes none.
        if cost.unread and grad[1] is not None and (slot == "wgrad" or tensors[0].grad is False):
            grad = grad[0], grad[1] - cost.unread * size
        return self._chain.segmented(rec, cost, name, size, w, x[0] if x else None) or grad

    @staticmethod
    def _marker_conv(rec: dict, tensors: list | None = None) -> tuple:
        """(input's shape, weight's shape) in the forward marker of a convolution's backward
        kernel (or of its `tensors`, the marker's first two, decoded already), each None where
        the marker has none."""
        if tensors is None:
            tensors = Call(rec["fwd"].get("marker") or {}).tensors()[:2]
        shapes = [t.shape or None for t in tensors]
        return tuple(shapes + [None] * (2 - len(shapes)))

    @staticmethod
    def _gemm_outputs(rec: dict, cost: Cost, bprop: bool) -> list:
        """(rows, cols) the output of a GEMM call's kernel may be: its PyTorch range's, when it has
        sizes; else forward the op's output, backward each tensor argument's gradient (a matrix
        of its last dimension's columns)."""
        sizes = _sizes_gemm(rec)
        if sizes is not None:
            b, m, n, _, _ = sizes
            return [(b * m, n)]
        if cost.kind == CONV:
            shapes = [t.shape for t in Call((rec["fwd"] if bprop else rec).get("marker") or {}).tensors()[:2]]
            return conv_outputs(*(shapes + [None, None])[:2], cost.out_shape, bprop, ITEMSIZE.get(cost.dtype))
        if cost.kind != GEMM:
            return []
        if not bprop:
            shape = cost.out_shape
            return [(cost.out_elems // shape[-1], shape[-1])] if shape and shape[-1] else []
        marker = rec["fwd"].get("marker") or {}
        return [(t.numel // t.shape[-1], t.shape[-1]) for t in Call(marker).tensors() if t.shape and t.shape[-1]]

    def _rnn_work(self, rec: dict, cost: Cost, verdict: str | None, bprop: bool, name: str | None) -> tuple:
        """(flops, bytes) of a kernel of a cuDNN RNN call: a helper (autocast's casts, the flat
        weight buffer's fill) its part, a GEMM or cell kernel its own work (rnn_kernels.py); any
        other kernel na: the call's work is never put on one kernel."""
        self._first_of_call(rec, True)  # the call whose parts the helpers take
        part = self._part(rec, cost, bprop, name) if family(name) is not None else None
        work = (part.flops, part.bytes) if part is not None else self._rnn_call(rec, cost, bprop).work(
            name, rec.get("grid"), verdict in (MMA, SIMT), lambda: self.upcoming(rec), rec.get("block"))
        return self._rest(rec, cost.bwd_flops if bprop else cost.flops, _UNKNOWN if work is None else work)

    def _rnn_call(self, rec: dict, cost: Cost, bprop: bool) -> RnnCall:
        """The cuDNN RNN call this kernel belongs to (its kernels so far), by the call's identity."""
        ident, starts = self._ident or call_identity(rec)
        key = ("rnn", rec.get("pid"), rec.get("tid"))
        state = self._calls.get(key)
        if state is None or state[0] != ident or starts:
            state = self._calls[key] = [ident, RnnCall(cost, bprop)]
        return state[1]

    def group_launch(self, rec: dict, name: str | None, groups: int, whole: Callable[[], tuple],
                     call: tuple) -> tuple | None:
        """matrix_chain.group_launch for a kernel priced elsewhere (a compiled graph's node), its
        library `call` named by value."""
        return self._chain.group_launch(rec, name, groups, whole, call)

    def upcoming(self, rec: dict) -> tuple[list, bool]:
        """The kernel names of `rec`'s op call read ahead of it (tensor_flow's window, read on up to
        FURTHER records: a layer's steps may run past the window), and whether the call ended
        there; a reading that does not reach the call's end is one the whole trace might have
        answered otherwise (the memo's replay reads none ahead: TensorFlow.asked)."""
        ident = (self._ident or call_identity(rec))[0]
        thread = (rec.get("pid"), rec.get("tid"))
        names = []
        for later in self.flow.upcoming(FURTHER):
            if not isinstance(later, dict) or later.get("kind", "kernel") != "kernel" \
                    or (later.get("pid"), later.get("tid")) != thread:
                continue
            other, starts = call_identity(later)
            if starts or other != ident:
                return names, True
            names.append(later.get("kLongName") or later.get("kShortName"))
        if self.flow.read_out:  # the trace's last call: it ends with the trace
            return names, True
        self.flow.asked = True
        return names, False

    def unclaimed(self) -> tuple:
        """(na, na) for a kernel of an op call that carries none of its formula's work and no part
        of it that is known (a second kernel of a split gradient, a library's helper): it did work,
        but how much is not known, so never 0. For sums over whole calls it adds 0 FLOPs (the
        formula's are on the call's main kernel) and unknown bytes (Facts.call_work)."""
        self.whole_call((0, None))
        return _UNKNOWN

    def _rest(self, rec: dict, total: int | None, work: tuple) -> tuple:
        """`work`, this kernel's own (flops, bytes) in the current op call whose FLOPs are `total`
        (None: not known), returned as is. Where its FLOPs are na, the first such kernel of the call
        carries for whole-call sums the rest of `total` not given to the kernels before it, and
        every later kernel 0 (Facts.call_work): the call's sum is its total however its kernels
        split it. FLOPs only: each is done by one kernel, but kernels re-read what an op's formula
        counts once (a cuDNN RNN's weights every step, an SGD step's parameters in each of its
        passes), so the formula's bytes are less than its kernels' and a rest of them would be wrong."""
        key = ("rest", rec.get("pid"), rec.get("tid"))
        call = self.current_call(rec)
        state = self._calls.get(key)
        if state is None or state[0] is not call:
            state = self._calls[key] = [call, total]  # the FLOPs not yet given; None once a kernel took them
        flops, nbytes = work
        if state[1] is None:
            if total is not None:  # an earlier kernel carries the rest
                self.whole_call((0, nbytes))
        elif flops is None:
            self.whole_call((max(state[1], 0), nbytes))
            state[1] = None
        else:
            state[1] -= flops
        return work

    def _work(self, rec: dict, cost: Cost | None, verdict: str | None, dtype: str | None,
              name: str | None) -> tuple:
        """(flops, bytes) of this kernel: its share of the op's work."""
        if cost is None:
            return _UNKNOWN
        bprop = _backward_of(rec)
        kind = cost.kind
        if kind == RNN and cost.rnn is not None:
            return self._rnn_work(rec, cost, verdict, bprop, name)
        if kind not in MMA_KINDS:
            torch_ops = rec.get("torchOps")
            launch = family(name) == LAUNCH
            if cost.main_op is not None and torch_ops:
                if launch:  # an optimizer step's launch carries its own lists (multitensor.py)
                    self._first_of_call(rec, True)  # the call whose parts it reads
                    work = self._launch_work(rec, cost, bprop, name)
                    if work is not None:
                        return work
                inner = torch_ops[-1]
                if inner.get("name") not in cost.main_op or not self._first(
                        ("main", rec.get("pid"), rec.get("tid")), inner, True, rec.get("subSeqId") == 0):
                    return self.unclaimed()
            else:
                # A copy or fill kernel of the call is a part (autocast's cast of an argument, a
                # gradient's zero fill, a norm's strided input made contiguous; backward, an add: the
                # engine's accumulation of a gradient, and a view's strided gradient made
                # contiguous) when one fits (parts.py); one that
                # does not may be the op's own kernel (`x.float()`, `torch.zeros`).
                helper = family(name) in ((COPY, CONTIGUOUS, FILL, ADD) if bprop else (COPY, CONTIGUOUS, FILL))
                first = self._first_of_call(rec, not helper)
                work = self._launch_work(rec, cost, bprop, name) if launch else None
                if work is not None:
                    return work
                if helper:
                    part = self._part(rec, cost, bprop, name)
                    if part is not None:
                        return part.flops, part.bytes
                    first = self._claim(rec)
                # An op run as stages (Cost.stages): each kernel that is not a part runs the next.
                staged = self._call_parts(rec, cost, bprop).stage(
                    GEMM_STAGE + (name or "") if verdict in (MMA, SIMT) else name)
                if staged is not None:  # its integer tensors' bytes (staged[2:]) in no float dtype
                    nbytes = self._ran_in(staged[1], cost, rec, name, True)
                    return self._rest(rec, cost.bwd_flops if bprop else cost.flops,
                                      (staged[0], None if nbytes is None else nbytes + sum(staged[2:])))
                if not first:
                    return self.unclaimed()
            flops, nbytes = (cost.bwd_flops, cost.bwd_bytes) if bprop else (cost.flops, cost.bytes)
            return flops, self._ran_in(nbytes, cost, rec, name)
        return self._matrix_work(rec, cost, verdict, dtype, name, bprop)

    def _matrix_work(self, rec: dict, cost: Cost, verdict: str | None, dtype: str | None, name: str | None,
                     bprop: bool) -> tuple:
        """(flops, bytes) of a kernel of a matrix op (GEMM, CONV, ATTN) priced from its marker: its
        main kernel the op's work (each gradient's, backward), a helper its part, a kernel the
        matrix chain knows (split-K, Winograd, grouped and segment-K weight gradients) its own."""
        kind = cost.kind
        math = verdict in (MMA, SIMT)
        first = self._first_of_call(rec, math)  # helper kernels never become the main kernel
        if verdict == NONE and kind == GEMM and split_pass(name):
            return self._chain.split_pass(rec, name, self._gemm_outputs(rec, cost, bprop), ITEMSIZE.get(dtype))
        if verdict == NONE and kind == CONV and bprop and split_pass(name):
            return self._chain.wgrad_split(rec, self._marker_conv(rec)[1], ITEMSIZE.get(dtype))
        depthwise = self._chain.depthwise_reduce(rec, name, self._marker_conv(rec)[1], ITEMSIZE.get(dtype)) \
            if verdict == NONE and kind == CONV and bprop else None
        if depthwise is not None:
            return depthwise
        if verdict == NONE and family(name) == SPLIT_K:
            return self._chain.split_k(rec, name, self._gemm_outputs(rec, cost, bprop), dtype)
        if kind == CONV:
            marker = (rec["fwd"] if bprop else rec).get("marker") or {}
            shapes = lambda: tuple(t.shape for t in Call(marker).tensors()[:2]) + (cost.out_shape,)  # noqa: E731
            path = self._chain.fft(rec, cost, name, shapes) or self._chain.winograd(rec, cost, name, verdict, shapes)
            if path is not None:
                return path
        # A fused attention call's stages are named by role (nn.MultiheadAttention's and
        # nn.TransformerEncoderLayer's fast paths): its GEMMs, its attention kernel and the encoder
        # layer's residual adds and norms (encoder_parts.py) each take the next stage when it is of
        # their role.
        fused = kind == ATTN and bool(cost.stages) and isinstance(cost.stages[0][0], str)
        if verdict == NONE:
            role = vector_role(name) if fused else None
            staged = self._call_parts(rec, cost, bprop).stage(role, True) if role else None
            if staged is not None and staged[0] is not None:
                return staged
            part = self._part(rec, cost, bprop, name)
            return self.unclaimed() if part is None else (part.flops, part.bytes)
        if not math:
            return _UNKNOWN
        size = ITEMSIZE.get(dtype)
        # The math attention path's GEMMs run in fp32 (ops/attention.py), each its product.
        role = GEMM if math_attention_gemm(name) else ATTN
        math_path = kind == ATTN and cost.stages is not None and (fused or role == GEMM)
        if kind in (GEMM, ATTN):
            sizes = _sizes_gemm(rec)
            if sizes is not None:
                if not self._first_in_range(rec):
                    return self.unclaimed()
                b, m, n, k, extra = sizes
                elems = b * (m * k + k * n + m * n) + extra
                if math_path and not fused and size is not None:
                    size = max(size, 4)
                return 2 * b * m * n * k, None if size is None else split_partials(
                    (name, rec.get("grid")), [(m, n)], elems * size, size, b == 1)
        if math_path:
            staged = self._call_parts(rec, cost, bprop).stage(role, fused)
            return self.unclaimed() if staged[0] is None else staged
        if kind == CONV:
            # The forward marker's input and weight: the backward's slots read them.
            tensors = Call(rec["fwd"].get("marker") or {}).tensors()[:2] if bprop else []
            whole = lambda: self._conv_work(rec, cost, name, first, size, tensors)  # noqa: E731
            group = self._chain.one_group(rec, cost, name, lambda: tuple(t.shape for t in tensors) + (cost.out_shape,)) \
                if bprop else None
            return group or self._chain.group_launch(rec, name, cost.groups, whole) or whole()
        if not bprop:
            if not first:
                return self.unclaimed()
            nbytes = None if size is None or cost.elems is None else (cost.elems - cost.unread + cost.bias_elems) * size
            if kind == GEMM:  # a split-K GEMM's partials
                nbytes = split_partials((name, rec.get("grid")), self._gemm_outputs(rec, cost, False), nbytes, size,
                                        cost.products == 1)
            return cost.flops, nbytes
        grad = (cost.flops, None if size is None or cost.elems is None else cost.elems * size)
        if kind == GEMM:  # data- and weight-gradient GEMMs each do one forward's work
            matrices = [t for t in Call(rec["fwd"].get("marker") or {}).tensors() if t.shape and len(t.shape) > 1]
            return grad[0], split_partials((name, rec.get("grid")), [(t.numel // t.shape[-1], t.shape[-1])
                                                                      for t in matrices], grad[1], size,
                                           cost.products == 1)
        if not first:  # ATTN backward: the whole node's work on its main kernel
            return self.unclaimed()
        if cost.bwd_bytes is None or size is None or cost.dtype is None:
            return cost.bwd_flops, cost.bwd_bytes
        return cost.bwd_flops, cost.bwd_bytes * size // ITEMSIZE[cost.dtype]

