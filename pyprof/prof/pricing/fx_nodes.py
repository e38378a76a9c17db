"""A kernel of a torch.compile'd graph, priced from the FX nodes it computes.

parse joins such a kernel to its call site in the compile-time table (the record's `compiled`,
docs/records.md). Its FLOPs are the sum of its nodes' FLOPs, each node priced by the op table's
formula for its ATen op (ops/fx.py, else the torch function of the same name); nodes whose
work another kernel of the graph carries (`again`) count 0, so a graph's kernels sum to its
nodes' work once. Its bytes are Inductor's own estimate of what the fused kernel reads and
writes (buffers produced and consumed inside it are not counted); a library call (cuBLAS,
cuDNN, flash attention) has none, and its nodes' formula bytes are used. A node the table does
not know makes the kernel's FLOPs `na`. GEMM, convolution and attention nodes make the kernel a
matrix kernel: Tensor Cores from its name, as for eager kernels. A library call's helper kernels
carry the parts (parts.py) its matrix node would have as an eager op call (flash attention's
backward helpers, a split-K reduction of the matrix kernel's partials, cuDNN's layout
conversions, ...), from the same definitions; a helper no part fits, and a kernel of a gradient
already carried, are na (never a guessed 0), adding 0 FLOPs to sums over whole calls.
"""
from __future__ import annotations

from typing import Any

from pyprof.kernel_names import MMA, NONE, SIMT, classify

from . import peaks as peaks_mod
from .ops import lookup
from .attention_parts import SDPA
from .ops.foreach import PREFIX as _FOREACH
from .ops.foreach import foreach
from .ops.fx import backward_forward_conv, sdpa_arguments
from .conv_parts import (WINOGRAD_GEMM_Z, conv_groups, conv_outputs, depthwise_reduce, fft_frequencies, fft_operand, fft_stage,
                         fft_work, one_group_wgrad, ungrouped_wgrad, wgrad_segments, winograd_gemm, winograd_stage,
                         winograd_transform)
from .gemm_parts import SPLIT_K, grid_z, split_k, split_pass, split_pass_work, split_sum
from .parts import CallParts, backward_parts, family, forward_parts, grad_fill, stage_work
from .registry import CONV, FORMULA_ERRORS, GEMM, MMA_KINDS, Call, Cost, Formula, Unknowable, kept
from .values import ITEMSIZE

# The `level` column's word for a kernel priced from its graph's FX nodes (analysis.LEVELS).
LEVEL = "compiled"

_CACHE = 4096
# Where a node's ATen op may be registered, in order: under its own name, else as the torch
# function (or method, or functional) of the same name and positional schema.
_HOMES = ("torch", "Tensor", "torch.nn.functional")
_TRITON_MMA_DTYPES = frozenset(("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8"))


def node_formula(op: str) -> Formula | None:
    """The formula of a node's op, `aten.mm.default` / `prims.convert_element_type.default`."""
    parts = op.split(".")
    if len(parts) < 2:
        return None
    ns, name = parts[0], parts[1]
    formula = lookup(ns, name)
    if formula is None and ns == "aten":
        if name.startswith(_FOREACH):
            inner = node_formula(f"aten.{name[len(_FOREACH):]}")
            return None if inner is None else foreach(inner)
        for home in _HOMES:
            formula = lookup(home, name)
            if formula is not None:
                break
    return formula


def node_cost(node: dict) -> tuple:
    """(Cost, None) or (None, (warning kind, op)) for one node of a compiled kernel."""
    op = node.get("op")
    if not isinstance(op, str):
        return None, ("op arguments not understood", str(op))
    formula = node_formula(op)
    if formula is None:
        return None, ("unknown op", op)
    try:
        cost = formula(Call(node))
    except Unknowable as why:
        return None, (str(why), op)
    except FORMULA_ERRORS:
        cost = None
    return cost, None if cost is not None else ("op arguments not understood", op)


class KernelWork:
    """The priced nodes of one call site: totals, the matrix node (if any) and the warnings."""

    __slots__ = ("flops", "bytes", "main", "node", "last", "warnings", "parts")

    def __init__(self, entry: dict) -> None:
        nodes = entry.get("nodes")
        nodes = [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []
        own = [n for n in nodes if not n.get("again")]
        self.main: Cost | None = None
        self.node: dict | None = None  # the node of `main`
        # Matrix kernels the work is spread over: a convolution backward launches one per
        # gradient (dgrad, wgrad), each doing one forward's work (docs/prof.md).
        self.parts = 1
        self.last: Cost | None = None
        self.warnings: list = []
        flops: int | None = 0
        nbytes: int | None = 0
        for node in own:
            cost, warning = node_cost(node)
            if cost is None:
                self.warnings.append(warning)
                flops = nbytes = None
                continue
            if cost.kind in MMA_KINDS and self.main is None:
                self.main, self.node = cost, node
                if str(node.get("op")).startswith("aten.convolution_backward."):
                    mask = (node.get("args") or [None] * 11)[10]
                    self.parts = max(1, sum(1 for m in mask[:2] if m)) if isinstance(mask, list) else 1
            self.last = cost
            flops = None if flops is None or cost.flops is None else flops + cost.flops
            nbytes = None if nbytes is None or cost.bytes is None else nbytes + cost.bytes
        recorded = entry.get("bytes")
        self.flops = flops
        self.bytes = recorded if type(recorded) is int else nbytes


def _share(total: int | None, parts: int, part: int) -> int | None:
    """Matrix kernel `part`'s share of a node's `total` split evenly over its `parts` matrix
    kernels (a convolution backward's gradients), the remainder on the first."""
    return None if total is None else total // parts + (total % parts if part == 0 else 0)


def _conv_tensors(node: dict) -> tuple:
    """(input, weight) argument dicts of a convolution node (forward or backward: after
    grad_output), (None, None) for any other node."""
    op, args = str(node.get("op")), node.get("args")
    at = 1 if op.startswith("aten.convolution_backward.") else 0 if op.startswith("aten.convolution.") else None
    if at is None or not isinstance(args, list) or len(args) < at + 2:
        return None, None
    return tuple(a if isinstance(a, dict) else None for a in args[at:at + 2])


def _conv_shapes(w: KernelWork) -> tuple:
    """(input, weight, output or dY shapes, backward?) of a convolution node's kernel work."""
    node = w.node or {}
    x, wt = (t.get("shape") if t else None for t in _conv_tensors(node))
    args = node.get("args") if isinstance(node.get("args"), list) else []
    bwd = str(node.get("op")).startswith("aten.convolution_backward.")
    y = (args[0].get("shape") if args and isinstance(args[0], dict) else None) if bwd else w.main.out_shape
    return x, wt, y, bwd


def _outputs(node: dict, main: Cost, bwd: bool, size: int | None) -> list:
    """(rows, cols) the matrix node's kernels may write (gemm_parts.split_k): a GEMM's 2-D output, a
    convolution's (conv_parts.conv_outputs)."""
    if main.kind == CONV:
        x, w = _conv_tensors(node)
        return conv_outputs(x and x.get("shape"), w and w.get("shape"), main.out_shape, bwd, size)
    shape = main.out_shape if main.kind == GEMM else None
    return [shape] if shape and len(shape) == 2 else []


def _masked(node: dict) -> list:
    """A `*_backward` node's arguments after grad_output, as an eager marker's: for
    convolution_backward, its output_mask (args[10]) saying which of input and weight need a
    gradient (`grad`, conv_parts.channel_pads reads it)."""
    args = node.get("args") if isinstance(node.get("args"), list) else []
    conv = _conv_tensors(node)[0] is not None
    mask = args[10] if conv and len(args) > 10 and isinstance(args[10], list) else None
    rest = args[1:]
    if mask is None or len(mask) < 2 or not any(mask[:2]):
        return rest
    return [dict(a, grad=True) if i < 2 and mask[i] is True and isinstance(a, dict) else a for i, a in enumerate(rest)]


class _CallState:
    """What a thread's current library call (one run of its graph) has launched so far."""

    __slots__ = ("ident", "matrix", "splits", "last", "parts", "groups", "winograd", "fft", "fft_results")

    def __init__(self, ident: tuple) -> None:
        self.ident = ident  # (run, call)
        self.matrix = 0  # matrix kernels so far
        self.splits: int | None = None  # the last one's split-K count (grid z, segments)
        self.last: tuple | None = None  # the last one's (name, grid)
        self.parts: CallParts | None = None  # the call's helper parts (or stages) not yet taken
        self.groups = 0  # CUTLASS group kernels of a grouped weight gradient so far
        self.winograd: int | None = None  # a weight gradient's Winograd tiles' item size, its GEMM to come
        self.fft: int | None = None  # the frequencies of the FFT path's last transform
        self.fft_results: set = set()  # the results (conv_parts.fft_operand) whose work a kernel carries


class CompiledPricer:
    """Facts for records joined to a compile-time table; one per Analyzer (its warnings and
    per-thread call state)."""

    def __init__(self, analyzer: Any) -> None:
        self.analyzer = analyzer
        self._work: dict = {}
        self._seen: dict = {}  # (pid, tid) -> _CallState of its last library call

    def work(self, entry: dict) -> KernelWork:
        """The call site's priced nodes (cached: every step repeats them)."""
        key = repr(entry.get("nodes")) + repr(entry.get("bytes"))
        w = self._work.get(key)
        if w is None:
            w = kept(self._work, key, KernelWork(entry), _CACHE)
        return w

    def _state(self, rec: dict, entry: dict) -> _CallState:
        """The thread's state for this library call (this run of its graph): _seen's entry."""
        key = (rec.get("pid"), rec.get("tid"))
        ident = (entry.get("run"), entry.get("call"))
        state = self._seen.get(key)
        if state is None or state.ident != ident:
            state = self._seen[key] = _CallState(ident)
        return state

    def _part(self, rec: dict, entry: dict, counts: bool) -> int:
        """How many matrix kernels of this library call came before this one on its thread;
        counts this one (and keeps its grid's z) when `counts`."""
        state = self._state(rec, entry)
        n = state.matrix
        if counts:
            state.matrix = n + 1
            # A segment-K weight gradient's segments (conv_parts.wgrad_segments), else a split-K grid's z.
            weight = _conv_tensors(self.work(entry).node or {})[1]
            name = rec.get("kLongName") or rec.get("kShortName")
            state.splits = wgrad_segments(name, rec.get("grid"), weight and weight.get("shape")) or grid_z(rec.get("grid"))
            state.last = (name, rec.get("grid"))  # an nvjet split-K GEMM's splits follow from its output
        return n

    def _helper(self, rec: dict, entry: dict, w: KernelWork, name: str | None) -> tuple:
        """(FLOPs, bytes) of a library call's helper kernel: a split-K reduction of its last
        matrix kernel's partials, or the helper part (parts.py) its launch fits among those the
        call's matrix node has, as an eager call of the op has them: a `*_backward` node's
        arguments are the forward's after grad_output (ATen's convention). Else na."""
        state = self._state(rec, entry)
        main, node = w.main, w.node or {}
        args = node.get("args") if isinstance(node.get("args"), list) else []
        op = str(node.get("op")).split(".")
        bwd = len(op) > 1 and op[1].endswith("_backward")
        size = ITEMSIZE.get(main.dtype)
        if family(name) == SPLIT_K:
            work = split_k(name or "", rec.get("grid"), state.splits, _outputs(node, main, bwd, size), size, state.last)
            return work if work is not None else self.analyzer.unclaimed()
        if main.kind == GEMM and split_pass(name):
            # cuBLAS's split-K pass after the GEMM: its grid z's partials of the output summed.
            work = split_pass_work(name, rec.get("grid"), state.splits, _outputs(node, main, bwd, size), size)
            return work if work is not None else self.analyzer.unclaimed()
        weight = _conv_tensors(node)[1]
        if main.kind == CONV and bwd and weight and isinstance(weight.get("shape"), list):
            # cuDNN's depthwise weight gradient's reduction of its partials, after its last matrix kernel.
            work = depthwise_reduce(name, rec.get("grid"), state.last, weight["shape"], size)
            if work is not None:
                return work
        if main.kind == CONV and bwd and split_pass(name) and weight and isinstance(weight.get("shape"), list):
            # A segment-K weight gradient's split-K pass: the weight's gradient from its segments.
            work = split_sum(state.splits, Call({"args": [weight]}).tensors()[0].numel, size)
            return work if work is not None else self.analyzer.unclaimed()
        if state.parts is None:
            sdpa = None if bwd else sdpa_arguments(str(node.get("op")), args)
            marker = {"op": SDPA, "args": sdpa} if sdpa is not None else {"args": _masked(node) if bwd else args}
            state.parts = CallParts((backward_parts if bwd else forward_parts)(marker, main))
        part = state.parts.take(name, rec.get("grid"), rec.get("block"))
        return (part.flops, part.bytes) if part is not None else self.analyzer.unclaimed()

    def _one_group(self, rec: dict, entry: dict, w: KernelWork, name: str | None) -> tuple | None:
        """(FLOPs, bytes) of a CUTLASS weight-gradient kernel cuDNN launches once per group of a
        grouped convolution's backward (conv_parts.one_group_wgrad), as for an eager call
        (matrix_chain.one_group): the first takes the weight gradient's matrix-kernel slot, it and
        the next groups - 1 a group's share each, any more na. None for any other kernel."""
        node = w.node or {}
        args = node.get("args")
        if not ungrouped_wgrad(name) or not str(node.get("op")).startswith("aten.convolution_backward.") \
                or not isinstance(args, list) or len(args) < 10:
            return None
        dy, x, wt = (a.get("shape") if isinstance(a, dict) else None for a in args[:3])
        fwd = backward_forward_conv(Call(node))
        work = one_group_wgrad(name, rec.get("grid"), x, wt, dy, fwd and fwd.flops, ITEMSIZE.get(w.main.dtype))
        if work is None:
            return None
        state = self._state(rec, entry)
        if not state.groups:
            self._part(rec, entry, True)
        state.splits, state.last = grid_z(rec.get("grid")), (name, rec.get("grid"))  # its split-K reduction's
        state.groups += 1
        return work if state.groups <= x[1] // wt[1] else self.analyzer.unclaimed()

    def _group_launch(self, rec: dict, entry: dict, w: KernelWork, name: str | None) -> tuple | None:
        """(FLOPs, bytes) of one launch of a matrix kernel cuDNN runs once a group of a grouped
        convolution, as for an eager call (matrix_chain.group_launch): a group's share of one
        gradient's (the forward's) work; the launches count as one matrix kernel of the node."""
        x, wt, y, _ = _conv_shapes(w)

        def whole() -> tuple:
            part = self._part(rec, entry, True)
            if part >= w.parts:
                return self.analyzer.unclaimed()
            return _share(w.flops, w.parts, part), _share(w.bytes, w.parts, part)
        return self.analyzer.group_launch(rec, name, conv_groups(x, wt, y), whole,
                                          ("compiled", entry.get("graph"), entry.get("run"), entry.get("call")))

    def _winograd(self, rec: dict, entry: dict, w: KernelWork, name: str | None, verdict: str | None) -> tuple | None:
        """(FLOPs, bytes) of a kernel of cuDNN's Winograd path of a convolution node, as for an
        eager call (matrix_chain.winograd): a transform its own (conv_parts.winograd_transform; na
        where the shapes do not say it); the GEMM (grid z 36) after a weight gradient's transforms
        what it executes (conv_parts.winograd_gemm), taking the gradient's matrix-kernel slot and
        keeping the gradient's FLOPs for sums over whole calls. None for any other kernel."""
        stage = winograd_stage(name)
        state = self._state(rec, entry)
        if stage is None and (state.winograd is None or verdict not in (MMA, SIMT)
                              or grid_z(rec.get("grid")) != WINOGRAD_GEMM_Z):
            return None
        x, wt, y, bwd = _conv_shapes(w)
        if stage is not None:
            if stage[:2] in (("Wgrad", "Data"), ("Wgrad", "Delta")):  # the GEMM's inputs: it comes next
                state.winograd = stage[2]
            work = winograd_transform(name, x, wt, y, bwd)
            return work if work is not None else self.analyzer.unclaimed()
        tile, state.winograd = state.winograd, None
        part = self._part(rec, entry, True)
        work = winograd_gemm(x, wt, y, tile)
        if work is None or part >= w.parts:
            return self.analyzer.unclaimed()
        self.analyzer.whole_call((_share(w.flops, w.parts, part), work[1]))
        return work

    def _fft(self, rec: dict, entry: dict, w: KernelWork, name: str | None) -> tuple | None:
        """(FLOPs, bytes) of a kernel of cuDNN's FFT path of a convolution node, as for an eager
        call (matrix_chain.fft): each its own (conv_parts.fft_work; na where the shapes do not
        say it); for whole-call sums the node's share for each result the path writes (the
        output, dX or dW: a matrix-kernel part) on the first inverse transform writing it. None
        for any other kernel."""
        stage = fft_stage(name)
        if stage is None:
            return None
        state = self._state(rec, entry)
        if len(stage) == 2:
            state.fft = fft_frequencies(stage)
        x, wt, y, bwd = _conv_shapes(w)
        work = fft_work(stage, rec.get("grid"), rec.get("block"), x, wt, y, state.fft)
        if work is None:
            return self.analyzer.unclaimed()
        result = fft_operand(stage, rec.get("grid"), rec.get("block"), (x, wt, y)) if stage[0] == "c2r" else None
        share = 0
        if result is not None and (result in (0, 1) if bwd else result == 2) and result not in state.fft_results:
            state.fft_results.add(result)
            part = self._part(rec, entry, True)
            share = _share(w.flops, w.parts, part) if part < w.parts else 0
        self.analyzer.whole_call((share, work[1]))
        return work

    def _staged(self, rec: dict, entry: dict, cost: Cost, name: str | None) -> tuple:
        """(FLOPs, bytes) of a kernel of a library call PyTorch runs as a sequence of kernels
        (Cost.stages: embedding_bag's backward), as at the aten level: its gradient's zero fill
        (Cost.grad_fill) a part, each other kernel the stage it runs (parts.stage_work); na for
        one that is neither."""
        state = self._state(rec, entry)
        if state.parts is None:
            state.parts = CallParts(grad_fill(cost), stages=cost.stages, in_order=cost.stages_in_order)
        part = state.parts.take(name, rec.get("grid"), rec.get("block"))
        work = (part.flops, part.bytes) if part is not None else stage_work(state.parts, name)
        return work if work is not None else self.analyzer.unclaimed()

    def facts(self, rec: dict, facts: Any) -> Any:
        """Fill `facts` (an analysis.Facts) for a record with `compiled`."""
        entry = rec["compiled"]
        w = self.work(entry)
        tally = self.analyzer.tally
        for warning in w.warnings:
            tally.warn(*warning)
        name = rec.get("kLongName") or rec.get("kShortName")
        main = w.main
        if main is not None and not entry.get("extern"):
            # A generated kernel computing a matrix node is a Triton template (max-autotune); its
            # name lists the fused epilogue ops (`..._native_layer_norm_...`), which the name rules
            # would take for a helper. tl.dot uses Tensor Cores for these dtypes from Ampere on.
            verdict = MMA if main.dtype in _TRITON_MMA_DTYPES else None
        else:
            verdict = classify(name)
        facts.tc = True if verdict == MMA else False if verdict == SIMT else None
        facts.cost = main or w.last
        facts.dtype = (main or w.last).dtype if (main or w.last) is not None else None
        own = None
        if main is not None and main.kind == CONV:
            own = self._fft(rec, entry, w, name) \
                or (self._one_group(rec, entry, w, name) if verdict in (MMA, SIMT) else None) \
                or self._winograd(rec, entry, w, name, verdict) \
                or (self._group_launch(rec, entry, w, name) if verdict in (MMA, SIMT) else None)
        if own is not None:
            facts.flops, facts.bytes = own
        elif main is not None:
            part = self._part(rec, entry, verdict in (MMA, SIMT))
            if verdict == NONE:
                facts.flops, facts.bytes = self._helper(rec, entry, w, name)
            elif verdict in (MMA, SIMT) and part >= w.parts:  # a gradient's second kernel
                facts.flops, facts.bytes = self.analyzer.unclaimed()
            elif w.parts > 1 and verdict in (MMA, SIMT):
                facts.flops, facts.bytes = _share(w.flops, w.parts, part), _share(w.bytes, w.parts, part)
            elif verdict not in (MMA, SIMT) and entry.get("extern"):
                tally.warn("kernel not recognised (tc -, work na)", rec.get("kShortName") or "?")
                facts.flops = facts.bytes = None
            else:
                facts.flops, facts.bytes = w.flops, w.bytes
        elif entry.get("extern") and self.analyzer.launch_work is not None:
            facts.flops, facts.bytes = self.analyzer.launch_work
        elif entry.get("extern") and w.last is not None and w.last.stages and not w.warnings:
            facts.flops, facts.bytes = self._staged(rec, entry, w.last, name)
        elif entry.get("sub"):  # a later kernel of one library call: the first carries its work
            facts.flops, facts.bytes = self.analyzer.unclaimed()
        else:
            facts.flops, facts.bytes = w.flops, w.bytes
        if facts.flops is not None:
            facts.level = LEVEL
        facts.peaks = peaks_mod.lookup(rec.get("gpu"))
        facts.path = peaks_mod.math_path(facts.tc is True, facts.dtype)
        return facts
