"""The aten level: a kernel priced from PyTorch's own op ranges (`emit_nvtx(record_shapes=True)`,
the record's `torchOps`) when the pyprof marker cannot price it.

That is: kernels with no pyprof marker (traces made without `pyprof.init()`, the eval fast path of
`nn.TransformerEncoder`, GradScaler's unscale), markers prof has no formula for, the per-kernel
parts of composite ops (for-loop and foreach optimizer steps), and the gradient accumulations
the autograd engine runs between nodes. A range's `sizes` give each input's shape (`[]` for
scalars, None and 0-dim tensors; tensor lists flattened in order); they carry no dtypes and no
scalar values, so the formulas (ops/aten.py) read shapes and take the dtype from the kernel:
the name's dtype token for matrix kernels (pyprof/kernel_names.py kernel_dtype), else the first C++ element
type among its template arguments (`c10::BFloat16`, `c10::Half`, `cutlass::half_t`, `__half`,
`float`, `double`, ..., then the integer ones).

The innermost range that has a formula prices the kernel, and only that one: an outer range is
never tried when an inner formula cannot price, since the outer op's work includes its inner
ops' (only leaf ops, whose kernels do their own work, are registered).
"""
from __future__ import annotations

import re
from functools import lru_cache
from math import prod
from typing import Any, Callable

from pyprof.kernel_names import MMA, SIMT, classify, kernel_dtype

from . import ops  # noqa: F401  (fills both tables)
from .ops.double_backward import DOUBLE
from .registry import Cost, lookup_aten
from .tensor_flow import ENGINE, TensorFlow, argument_cast, node_range, producers
from .values import FLOATING, Tensor, as_2d

# The element types C++ kernels are instantiated with, as the demangled name spells them.
_CPP_TYPES = re.compile(r"(?:c10::|cutlass::|__nv_)?(BFloat16|Half|half_t|bfloat16_t|bfloat162|bfloat16|Float8_e4m3fn|"
                        r"Float8_e5m2|complex<float>|complex<double>)(?!\w)|(?<![\w:])(double|float|__half2|__half)(?![\w])")
_CPP_DTYPE = {"BFloat16": "bfloat16", "Half": "float16", "half_t": "float16", "bfloat16_t": "bfloat16",
              "bfloat16": "bfloat16", "__half": "float16", "bfloat162": "bfloat16", "__half2": "float16", "Float8_e4m3fn": "float8_e4m3fn",
              "Float8_e5m2": "float8_e5m2", "complex<float>": "complex64", "complex<double>": "complex128",
              "double": "float64", "float": "float32"}

# Evaluation errors of a formula over odd sizes (valid JSON, not PyTorch's): the kernel is na.
_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError)


# Integer element types, as template arguments (`CUDAFunctor_add<long>`), not casts (`(int)4`).
_CPP_INTS = re.compile(r"(?<![\w(:])(?<!unsigned )(long|int|bool|short|unsigned char|signed char)(?=[,>])")
# The parameter type of a functor lambda, `[lambda(bool) (instance 1)]`, `[lambda(long) ...]`: the
# elements it computes on (arange's, whose kernel's first template argument is its index type);
# not `int`, which the launchers' own index lambdas take (`gpu_kernel_impl<...>::[lambda(int)]`).
_LAMBDA_INT = re.compile(r"\[lambda\((long|bool|short|unsigned char|signed char)[,)]")
_CPP_INT_DTYPE = {"long": "int64", "int": "int32", "bool": "bool", "short": "int16", "unsigned char": "uint8",
                  "signed char": "int8"}


# The parameter list of a PyTorch kernel launcher named inside the kernel's name
# (`smooth_l1_kernel_cuda(at::TensorIteratorBase &, double)::[lambda(float, float)]`): its types
# are the launcher's scalar arguments, not the elements'.
_LAUNCHER_ARGS = re.compile(r"\((?:at::)?TensorIterator(?:Base)? &[^()]*\)")


@lru_cache(maxsize=65536)
def template_dtype(name: str | None) -> str | None:
    """The first floating-point C++ element type in a kernel's demangled name, else the integer
    one a functor lambda takes (_LAMBDA_INT), else the first among its template arguments, as a
    dtype name (not a type among the arguments of a launcher the name holds, _LAUNCHER_ARGS)."""
    if not name:
        return None
    name = _LAUNCHER_ARGS.sub("()", name)
    m = _CPP_TYPES.search(name)
    if m is not None:
        return _CPP_DTYPE[m.group(1) or m.group(2)]
    m = _LAMBDA_INT.search(name) or _CPP_INTS.search(name)
    return None if m is None else _CPP_INT_DTYPE[m.group(1)]


# Ops whose kernels convert: their names type one end of it, not what the op read.
_CONVERSIONS = frozenset(("aten::to", "aten::_to_copy", "aten::copy_", "aten::type_as"))
# Kernels typed by their index alone (vectorized_gather_kernel<16, long>: it moves rows of any
# type): their name says nothing of the elements.
_INDEX_TYPED = re.compile(r"\bvectorized_gather_kernel<")


@lru_cache(maxsize=65536)
def kernel_element_dtype(name: str | None, verdict: str | None) -> str | None:
    """The dtype a kernel computed in, as far as its name tells."""
    if name and _INDEX_TYPED.search(name):
        return None
    if verdict in (MMA, SIMT):
        return kernel_dtype(name) or template_dtype(name)
    return template_dtype(name)


# PyTorch's copy kernels into a 16-bit tensor are instantiated with the source's element type.
_SIXTEEN_BIT_DST = re.compile(r"\b(bfloat16|float16)_copy_kernel_cuda")
# Its random fills with the accumulate type: distribution_elementwise_grid_stride_kernel<float, 4,
# ... uniform_and_transform<c10::Half, float, ...>: the tensor's type is the transform's first;
# random_'s (integers drawn as unsigned long) its distribution_nullary_kernel<long, ...>'s first.
_RANDOM_FILL = re.compile(r"(?:_and_transform|\bdistribution_nullary_kernel)<([\w:]+),")
# PyTorch's binary functors state what they return, third: a comparison's AUnaryFunctor<long,
# long, bool, CompareEqFunctor<long>> reads int64 and writes bool.
_FUNCTOR_RESULT = re.compile(r"\b(?:AUnary|BUnary|Binary)Functor<[\w:]+, [\w:]+, ([\w:]+),")
# A comparison with a Python scalar (x > 0.5) runs compare_scalar_kernel<T>, typed by what it
# reads; it writes bool.
_SCALAR_COMPARISON = re.compile(r"\bcompare_scalar_kernel<")
# cuBLASLt's split-K reduction sums its Tacc partials into the GEMM's output, of its fifth
# template type: splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, ...>(params, const T4 *, ...,
# T5 *, ...) writes bfloat16.
_SPLIT_K_OUT = re.compile(r"\bsplitKreduce_kernel<\(int\)\d+, \(int\)\d+, \w+, [\w:]+, ([\w:]+),")


@lru_cache(maxsize=65536)
def _destination(name: str | None) -> str | None:
    """The dtype of what a kernel whose first element type is not its output's writes: a copy
    into a 16-bit tensor (the source's type first), a random fill and cuBLASLt's split-K
    reduction (the accumulate type first), a binary functor that returns another type (a
    comparison's bool), a comparison with a scalar."""
    sixteen = _SIXTEEN_BIT_DST.search(name) if name else None
    if sixteen:
        return sixteen.group(1)
    if name and _SCALAR_COMPARISON.search(name):
        return "bool"
    typed = (_RANDOM_FILL.search(name) or _SPLIT_K_OUT.search(name) or _FUNCTOR_RESULT.search(name)) if name else None
    return template_dtype(f"<{typed.group(1)}>") if typed else None


@lru_cache(maxsize=65536)
def cast_source(name: str | None) -> str | None:
    """The dtype a cast kernel into a 16-bit tensor read (the type it is instantiated with), or
    None for any other kernel."""
    return template_dtype(name) if name and _SIXTEEN_BIT_DST.search(name) else None


def written_dtype(name: str | None, verdict: str | None) -> str | None:
    """The dtype a kernel's output is in, as far as its name tells: its element type
    (kernel_element_dtype), but the destination's for a copy into a 16-bit tensor or a random fill."""
    return _destination(name) or kernel_element_dtype(name, verdict)


class AtenCall:
    """One PyTorch op range as a formula sees it: positional input shapes and the kernel's dtype;
    with a TensorFlow, what other ranges of the trace tell of its inputs' dtypes and its output."""

    __slots__ = ("name", "sizes", "dtype", "written", "kernel", "grid", "block", "_ranges", "_depth", "_pid", "_flow",
                 "_node")

    def __init__(self, name: str, sizes: list[Any], dtype: str | None, kernel: str | None,
                 ranges: list | None = None, depth: int = 0, pid: Any = None, flow: TensorFlow | None = None,
                 grid: Any = None, node: int | None = None, block: Any = None) -> None:
        self.name = name
        self.sizes = sizes
        self.dtype = dtype
        self.written = _destination(kernel) or dtype  # the dtype of the output the kernel writes
        self.kernel = (kernel or "").lower()
        self.grid = grid if isinstance(grid, list) else None  # the kernel's launch grid
        self.block = block if isinstance(block, list) else None  # and its blocks' threads
        self._ranges = ranges or []  # the record's torchOps, this range at `depth`
        self._depth = depth
        self._pid = pid
        self._flow = flow
        self._node = node  # the seq of the node whose backward the record ran in (its `fwd.seq`)

    def producers(self) -> list:
        """(opId, output index) of each input that names its producer, None for the others
        (tensor_flow.producers): equal pairs are the same tensor."""
        return producers(self._ranges[self._depth]) if self._depth < len(self._ranges) else []

    def read_dtype(self) -> str | None:
        """The dtype of this op's output as the first op reading it computed it: the floating
        type the kernel of reader_kernel() names. For an op whose own kernel names no element
        type and whose input no producer told: an embedding's row gather of a parameter table
        (vectorized_gather_kernel<16, long>)."""
        name = self.reader_kernel()
        got = kernel_element_dtype(name, classify(name)) if name else None
        return got if got in FLOATING else None

    def reader_kernel(self) -> str | None:
        """The kernel name of the first op reading this op's output among the records read ahead,
        where that op is its record's innermost range and no copy or cast (whose kernels name
        one end of a conversion); None where no reader came within the window."""
        if self._flow is None or self._depth >= len(self._ranges):
            return None
        op = self._ranges[self._depth].get("opId")
        for rec in self._flow.upcoming():
            ranges = rec.get("torchOps") if isinstance(rec, dict) else None
            inner = ranges[-1] if isinstance(ranges, list) and ranges else None
            if type(inner) is not dict or rec.get("pid") != self._pid or inner.get("name") in _CONVERSIONS:
                continue
            ids = inner.get("inputOpIds")
            if isinstance(ids, list) and [op, 0] in ids:
                return rec.get("kLongName") or rec.get("kShortName")
        self._flow.asked = True  # the whole trace might have told (as TensorFlow.shape_of)
        return None

    def range_kernels(self) -> list | None:
        """The kernels this range launches itself, its first (this record's) and those read ahead
        with it innermost (not those of a range opened inside it), in order, as their names read
        lower-cased; None where the records read ahead do not reach the range's end."""
        if self._flow is None or self._depth >= len(self._ranges):
            return None
        op = self._ranges[self._depth].get("opId")
        names = [self.kernel]
        for rec in self._flow.upcoming():
            ranges = rec.get("torchOps") if isinstance(rec, dict) else None
            if rec.get("pid") != self._pid or not isinstance(ranges, list):
                continue
            here = ranges[self._depth] if len(ranges) > self._depth else None
            if type(here) is not dict or here.get("opId") != op:
                return names
            if len(ranges) == self._depth + 1:  # a range opened inside it prices its own
                names.append((rec.get("kLongName") or rec.get("kShortName") or "").lower())
        self._flow.asked = True
        return None

    def autocast_source(self) -> str | None:
        """The source dtype of a cast to float32 that autocast made of its op's argument (the
        cast's source among the inputs of the op range around it, both producers named):
        autocast casts up only from its 16-bit dtype (never a double, and float32 needs no cast),
        the one its casts of this process down to 16 bits wrote (TensorFlow.autocast_dtype);
        None otherwise."""
        if self.written != "float32" or self._flow is None or self._depth >= len(self._ranges):
            return None
        op = argument_cast(self._ranges, self._depth)
        source = self.producers()[1:2]
        if op is None or not source or source[0] is None or source[0] not in producers(op):
            return None
        return self._flow.autocast_dtype(self._pid)

    def input_dtype(self, pos: int) -> str | None:
        """The dtype of input `pos` (tensor_flow.py): for the gradient an enclosing autograd node
        was called with, its forward op's output's (where floating); else what its producer's
        kernel wrote; None when not known."""
        if self._flow is None or self._depth >= len(self._ranges):
            return None
        ps = producers(self._ranges[self._depth])
        p = ps[pos] if pos < len(ps) else None
        if p is None:
            return None
        for r in self._ranges[:self._depth]:
            if isinstance(r, dict) and node_range(r) and p in producers(r):
                got = self._flow.grad_dtype(self._pid, r["seq"])
                # A gradient is floating point: an integer one is the forward's indices' (an
                # embedding's gather, typed by no kernel, took its first producer's dtype).
                if got in FLOATING:
                    return got
        return self._flow.dtype_of(self._pid, p)

    def stored(self, pos: int) -> int | None:
        """The elements input `pos` holds: where a broadcasting view made it (an index
        `dst.unsqueeze(1).expand(-1, d)`: TensorFlow.broadcast_of), the view's input's, which a
        kernel reading it reads once; else its shape's; None for no tensor."""
        shape = self.shape(pos)
        if not shape:
            return None
        ps = self.producers() if self._flow is not None else []
        base = self._flow.broadcast_of(self._pid, ps[pos]) if pos < len(ps) and ps[pos] else None
        return prod(base) if base is not None and len(base) <= len(shape) else prod(shape)

    def batch_sizes(self) -> tuple | None:
        """Where this range's first input is a packed sequence's data, its batch sizes as the
        sequence's pack told them (tensor_flow.TensorFlow.batch_sizes), the steps given by a range
        around this one that reads them (aten::lstm around aten::_cudnn_rnn: its input 1, [T]),
        that range's pack where the data's maker is none known (autocast's cast of it); None where
        not told."""
        first = self.producers()[:1]
        if self._flow is None:
            return None
        steps = reader = None
        for r in self._ranges[:self._depth]:
            sizes, ids = (r.get("sizes"), producers(r)) if isinstance(r, dict) else (None, [])
            if len(ids) > 1 and ids[1] is not None and ids[1][1] == 1 and isinstance(sizes, list) and len(sizes) > 1 \
                    and isinstance(sizes[1], list) and len(sizes[1]) == 1 and type(sizes[1][0]) is int:
                steps, reader = sizes[1][0], ids[1]
        got = self._flow.batch_sizes(self._pid, first[0], steps) if first and first[0] else None
        return got if got is not None or reader is None else self._flow.batch_sizes(self._pid, reader, steps)

    def output_shape(self, gradient: Callable[[tuple], bool] | None = None, copied: bool = False,
                     prefer: Callable[[tuple], bool] | None = None) -> tuple | None:
        """The shape of the op's output as a consumer's range gives it (tensor_flow.py): of this
        range's op, else of an enclosing one that returns it (the same op name: an overload or
        autocast dispatching again; or the same first input: a wrapper passing it through; with
        `copied`, for an op a wrapper returns the output of, also a wrapper that made that input
        itself: aten::_convolution's contiguous() of a strided input, _made_inside).
        Else, with `gradient` and inside an autograd node, the one shape among the node's forward
        op's inputs that `gradient` accepts (of several, the one `prefer` accepts): the output is
        the gradient of one of them. None when neither tells. (An enclosing range of the same
        name as the one inside it is that op dispatched again: autocast's aten::conv2d around the
        aten::conv2d of the cast input, the outer one the op its consumers name.)"""
        if self._flow is None or self._depth >= len(self._ranges):
            return None
        inner = within = self._ranges[self._depth]
        first = producers(inner)[:1]
        outermost = self._ranges[0].get("opId") if isinstance(self._ranges[0], dict) else None
        for r in reversed(self._ranges[:self._depth + 1]):
            if not isinstance(r, dict) or r is not inner and r.get("name") != within.get("name") and (
                    not first or producers(r)[:1] != first and not (copied and _made_inside(r, first[0], inner))
                    or not _same_input((r.get("sizes") or [None])[0], self.sizes[0])):
                break
            within = r
            got = self._flow.shape_of(self._pid, r.get("opId"), within=outermost)
            if got is not None:
                return got
        if gradient is None:
            return None
        seq = self._node_seq()
        if seq is None:
            return None
        fits = {tuple(s) for s in self._flow.forward_sizes(self._pid, seq)
                if isinstance(s, list) and s and all(type(d) is int for d in s) and gradient(tuple(s))}
        if len(fits) > 1 and prefer is not None:
            fits = {s for s in fits if prefer(s)}
        return fits.pop() if len(fits) == 1 else None

    def redispatched(self) -> list:
        """The sizes of the ranges directly around this one that are the same op called again
        (an overload dispatching to another: aten::mean(self, dtype) to mean.dim), innermost
        first: the same name and the same first input."""
        out = []
        for r in reversed(self._ranges[:self._depth]):
            sizes = r.get("sizes") if isinstance(r, dict) and r.get("name") == self.name else None
            if not isinstance(sizes, list) or not sizes or sizes[0] != (self.sizes or [None])[0]:
                break
            out.append(sizes)
        return out

    def _node_seq(self) -> int | None:
        """The seq of the autograd node this range runs in: of its range, else of the engine's
        range around it (tensor_flow.node_seq), else, where no kernel inside the node's own range
        told that (the engine's sum_to of a broadcast input's gradient, AddBackward0's, runs
        outside it), the record's `fwd.seq` (parse's); None outside any."""
        for r in reversed(self._ranges[:self._depth]):
            if isinstance(r, dict) and node_range(r):
                return r["seq"]
            if isinstance(r, dict) and str(r.get("name")).startswith(ENGINE):
                got = self._flow.node_seq(self._pid, r.get("opId"))
                return self._node if got is None else got
        return None

    def within(self, name: str) -> bool:
        """Whether a range around this one is `name` (an autograd node's: IndexBackward0)."""
        return any(isinstance(r, dict) and r.get("name") == name for r in self._ranges[:self._depth])

    def shape(self, pos: int) -> tuple | None:
        """The shape at input `pos`; None when absent or not a list of ints."""
        if pos >= len(self.sizes):
            return None
        s = self.sizes[pos]
        return tuple(s) if isinstance(s, list) and all(type(d) is int for d in s) else None

    def tensor(self, pos: int, dtype: str | None = None) -> Tensor | None:
        """Input `pos` as a tensor in `dtype` (default: the kernel's); None for a scalar or
        absent input (`[]`: a 0-dim tensor reads as a scalar, its one element is not counted)."""
        s = self.shape(pos)
        return Tensor(s, dtype or self.dtype) if s else None

    def tensors(self) -> list:
        """Every input that is a tensor of rank >= 1, in order."""
        return [Tensor(tuple(s), self.dtype) for s in self.sizes
                if isinstance(s, list) and s and all(type(d) is int for d in s)]


def _same_input(outer: object, inner: object) -> bool:
    """Whether an enclosing range's first input shape `outer` is the inner op's `inner`: the
    same, or a 1-D convolution's or pooling's input viewed as 2-D (values.as_2d)."""
    return outer == inner or isinstance(outer, list) and isinstance(inner, list) and len(outer) >= 3 \
        and as_2d(tuple(outer), tuple(inner)) == tuple(inner)


def _made_inside(outer: dict, first: tuple | None, inner: dict) -> bool:
    """Whether `inner`'s first input, made by `first` ((opId, output)), was made by an op opened
    inside `outer` and before `inner` (aten::_convolution's `contiguous()` of a strided input
    before aten::cudnn_convolution)."""
    lo, hi = outer.get("opId"), inner.get("opId")
    return first is not None and type(lo) is int and type(hi) is int and lo < first[0] < hi


def price(rec: dict, kernel: str | None, verdict: str | None,
          flow: TensorFlow | None = None) -> tuple[Cost, dict] | None:
    """(cost, range) of the innermost PyTorch range of `rec` with a formula, when that formula
    prices it; None otherwise (no range with a formula, no sizes, or a formula that cannot; one
    that defers, registry.deferring, leaves it to the ranges around). An autograd node's range
    that a backward op made (create_graph=True) is priced from that op's range
    (_double_backward).
    `flow`: what the trace has told of other ops' outputs (tensor_flow.py)."""
    torch_ops = rec.get("torchOps")
    if not torch_ops:
        return None
    for depth in range(len(torch_ops) - 1, -1, -1):
        r = torch_ops[depth]
        name = r.get("name") if isinstance(r, dict) else None
        formula = lookup_aten(name)
        if formula is None:
            # (the name first: this runs for every range without a formula, kernel by kernel)
            made = _double_backward(rec, r, kernel, verdict, flow) \
                if type(name) is str and _MADE_BY_A_BACKWARD in name and flow is not None and node_range(r) else None
            if made is not None:
                return made
            continue
        sizes = r.get("sizes")
        if not isinstance(sizes, list):
            return None
        try:
            call = AtenCall(name, sizes, kernel_element_dtype(kernel, verdict), kernel, torch_ops, depth,
                            rec.get("pid"), flow, rec.get("grid"), _fwd_seq(rec), rec.get("block"))
            if call.dtype is None:  # a name without types (cuDNN's `conv2d_c1_k1_nchw_shmem_tiling`)
                call.dtype = call.written = next((call.input_dtype(i) for i, s in enumerate(sizes) if s), None)
            cost = formula(call)
        except _ERRORS:
            return None
        if cost is None and getattr(formula, "defers", False):
            continue
        return None if cost is None else (cost, r)
    return None


# PyTorch names the node of a backward op's derivative (derivatives.yaml's `foo_backward`) after
# it: FooBackwardBackward0. Only such nodes ask the tensor flow for the op that made them (a lookup
# the memo's replay cannot answer: pricing/memo.py).
_MADE_BY_A_BACKWARD = "BackwardBackward"


def _double_backward(rec: dict, node: dict, kernel: str | None, verdict: str | None,
                     flow: TensorFlow) -> tuple[Cost, dict] | None:
    """(cost, the node's range) of a kernel of an autograd node that a backward op made (run
    with create_graph=True: ops/double_backward.py), from that op's range of the node's seq."""
    made = flow.forward_op(rec.get("pid"), node["seq"])
    formula = DOUBLE.get(made[0]) if made is not None else None
    if formula is None:
        return None
    name, sizes = made
    try:
        call = AtenCall(name, sizes, kernel_element_dtype(kernel, verdict), kernel, [{"name": name, "sizes": sizes}], 0,
                        rec.get("pid"), flow, rec.get("grid"), None, rec.get("block"))
        cost = formula(call)
    except _ERRORS:
        return None
    return None if cost is None else (cost, node)


def _fwd_seq(rec: dict) -> int | None:
    """The seq of the forward op whose autograd node a backward record ran in (`fwd.seq`)."""
    fwd = rec.get("fwd")
    seq = fwd.get("seq") if isinstance(fwd, dict) else None
    return seq if type(seq) is int else None


def engine_accumulation(rec: dict) -> bool:
    """True for a backward kernel the autograd engine runs between nodes to sum two gradients of
    one tensor (an `aten::add`/`add_` directly under `evaluate_function: XBackward0`, outside the
    node's own range): work of no op's backward formula, priced at the aten level."""
    torch_ops = rec.get("torchOps")
    if not torch_ops or len(torch_ops) != 2:
        return False
    outer, inner = torch_ops
    return (str(outer.get("name", "")).startswith("autograd::engine::evaluate_function")
            and inner.get("name") in ("aten::add", "aten::add_"))
