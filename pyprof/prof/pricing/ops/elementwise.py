"""Element-wise ops: unary math and activations, binary ops with broadcasting, dropout, reductions.

Convention (the original PyProf's): FLOPs are per output element, 1 per element unless the table
below says more; a transcendental function counts as one operation, like an add. Bytes: every
tensor operand read once, the result written once (a broadcast operand at its own size).
Backward of a unary op (grad_out times f'(saved tensor)): 1 FLOP and 3 element accesses per
element. Backward of add/sub/mul/div: a gradient for every floating point or complex tensor
operand that required grad (its marker says `"grad":true`; in markers that never say so, every
one): per gradient, its formula's FLOPs per output
element (_GRADS) plus the adds that sum it back over the dims its operand was broadcast along;
bytes dY and the operands the formulas read, each once, plus every gradient written at its
operand's size and dtype. Backward of a reduction: dY expanded back to the input's shape
(_REDUCE_BWD). Other binary ops: na.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from ..registry import SIMT, Call, Cost, dims, fmt_params, names, register, stage_totals
from ..values import ITEMSIZE, Tensor, broadcast, is_floating, promote, reduce_adds

_FLOATS = ("float16", "bfloat16", "float32", "float64")

UNARY = ["abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
         "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "sigmoid", "erf",
         "erfc", "erfinv", "reciprocal", "sign", "floor", "ceil", "round", "trunc", "frac",
         "square", "relu", "nan_to_num", "logical_not", "bitwise_not", "clamp", "clip",
         "clamp_min", "clamp_max", "logit", "sgn", "angle", "positive", "digamma", "lgamma"]
ACTIVATIONS = ["relu", "relu_", "relu6", "gelu", "silu", "mish", "hardswish", "hardsigmoid",
               "hardtanh", "hardtanh_", "leaky_relu", "leaky_relu_", "elu", "elu_", "selu", "celu",
               "softplus", "softsign", "tanh", "sigmoid", "logsigmoid", "tanhshrink", "softshrink",
               "hardshrink", "threshold", "threshold_", "rrelu"]
# Ops whose result is floating point even for integer inputs (PyTorch's default dtype, float32).
_TO_FLOAT = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
             "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "sigmoid", "erf", "erfc",
             "erfinv", "reciprocal", "logit", "digamma", "lgamma", "true_divide", "div"}

BINARY = ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
          "remainder", "fmod", "pow", "atan2", "maximum", "minimum", "fmax", "fmin", "hypot",
          "copysign", "xlogy", "rsub", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
          "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"]
DUNDERS = ["add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv",
           "rfloordiv", "pow", "rpow", "mod", "and", "or", "xor", "eq", "ne", "lt", "le", "gt", "ge"]
INPLACE_DUNDERS = ["add", "sub", "mul", "truediv", "floordiv", "pow", "mod", "and", "or", "xor"]
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
            "isneginf", "isposinf"}
TERNARY = ["where", "lerp", "addcmul", "addcdiv"]
# lerp(x, end, w) = x + w·(end - x): a subtract and a multiply-add, as Inductor decomposes it
# (sub, mul, add), so an eager lerp kernel and a compiled graph's lerp nodes count alike.
# addcmul/addcdiv: one product or quotient and a multiply-add (the scalar `value` folded in);
# fma (Inductor's prims.fma, a·b + c): a multiply and an add.
FLOPS_PER_ELEMENT = {"lerp": 3, "addcmul": 2, "addcdiv": 2, "where": 1, "fma": 2}


def _base(op: str) -> str:
    """`__iadd__` -> add, `add_` -> add, `__rtruediv__` -> truediv (for the dtype rules)."""
    if op.startswith("__"):
        op = op.strip("_")
        for prefix in ("i", "r"):
            if op.startswith(prefix) and op[1:] in DUNDERS:
                op = op[1:]
        return op
    return op.rstrip("_")


def _inplace(op: str) -> bool:
    return op.startswith("__i") and op[3:-2] in INPLACE_DUNDERS or (op.endswith("_") and not op.endswith("__"))


def pointwise_cost(op: str, operands: list, out_dtype: str | None = None,
                   bwd: bool = False, grads: tuple | None = None, **fields) -> Cost:
    """Cost of an element-wise op over `operands` (Tensors and scalars), result broadcast.
    `bwd`: the unary backward; `grads`: the binary one, per operand position (flops per output
    element of its gradient, positions of the operands that gradient reads), see _GRADS."""
    tensors = [t for t in operands if isinstance(t, Tensor)]
    inplace = _inplace(op)
    shape = tensors[0].shape if inplace else broadcast(*(t.shape for t in tensors))
    base = _base(op)
    if out_dtype is None:
        if inplace:
            out_dtype = tensors[0].dtype
        elif base in _COMPARE:
            out_dtype = "bool"
        else:
            out_dtype = promote(t.dtype for t in tensors)
            if base in _TO_FLOAT and out_dtype not in _FLOATS and out_dtype and not out_dtype.startswith("complex"):
                out_dtype = "float32"
    n = prod(shape)
    out_size = ITEMSIZE.get(out_dtype)
    in_bytes = [t.nbytes for t in tensors]
    nbytes = None if out_size is None or None in in_bytes else sum(in_bytes) + n * out_size
    flops = n * FLOPS_PER_ELEMENT.get(base, 1)
    dtype = out_dtype if inplace else promote(t.dtype for t in tensors)
    bwd_flops = bwd_bytes = stages = None
    if bwd and out_size is not None:
        bwd_flops, bwd_bytes = n, 3 * n * out_size
    if grads is not None and out_size is not None:
        bwd_flops, bwd_bytes, stages = _binary_backward(operands, grads, shape, out_dtype, _GRAD_OPS.get(base))
    return Cost(flops, nbytes, fmt_params(dtype, shape=dims(shape), **fields), dtype, SIMT,
                bwd_flops=bwd_flops, bwd_bytes=bwd_bytes, bwd_stages=stages)


# Unary ops whose backward PyTorch runs as several element-wise kernels (derivatives.yaml), each
# as (tensors of n elements it reads, operations an element), in order; each writes n elements.
# abs: grad * self.sgn(); sqrt: grad / (2 * result); rsqrt: -0.5 * grad * result.pow(3); sin:
# grad * self.cos(); cos: grad * -self.sin(); reciprocal: -grad * (result * result); log1p:
# grad / (self + 1); expm1: grad * (result + 1); square: pow(self, 2)'s (2 * self, times grad).
# sign, floor, ceil, round, trunc: zeros_like(grad), one fill that reads nothing.
_UNARY_GRAD_KERNELS = {
    "abs": ((1, 1), (2, 1)), "sqrt": ((1, 1), (2, 1)), "rsqrt": ((1, 1), (1, 1), (2, 1)),
    "sin": ((1, 1), (2, 1)), "cos": ((1, 1), (1, 1), (2, 1)), "reciprocal": ((1, 1), (1, 1), (2, 1)),
    "log1p": ((1, 1), (2, 1)), "expm1": ((1, 1), (2, 1)), "square": ((1, 1), (2, 1)),
    **{op: ((0, 0),) for op in ("sign", "floor", "ceil", "round", "trunc")},
}


def unary_backward_stages(op: str, x: Tensor) -> tuple | None:
    """The kernels of a unary op's backward where PyTorch runs several (_UNARY_GRAD_KERNELS), as
    stages taken in turn, in x's dtype; None for the others (one kernel: dY and x read, dX
    written) and where x's dtype is not known."""
    steps = _UNARY_GRAD_KERNELS.get(op)
    size = x.itemsize
    if steps is None or size is None:
        return None
    n = x.numel
    return tuple(("elementwise_kernel", per * n, (reads + 1) * n * size) for reads, per in steps)


# clamp's bounds by position (clamp_min(x, min), clamp_max(x, max), clamp(x, min, max)).
_CLAMP_BOUNDS = {"clamp": ("min", "max"), "clip": ("min", "max"), "clamp_min": ("min",), "clamp_max": ("max",)}


def clamp_backward_stages(x: Tensor, bounds: int) -> tuple | None:
    """The kernels of clamp's backward with `bounds` (1 or 2) numbers for bounds, as PyTorch runs
    where(self >= min [and self <= max], grad, 0) (derivatives.yaml's clamp_min and clamp_max,
    FunctionsManual's clamp_backward): the 0-dim zero written (a fill of one element), x compared
    with each bound (x read, bools written), the two tests combined in place (both read, one
    written), the select (the bools, dY and the zero read, dX written); one operation an element
    each but the fill's."""
    size, n = x.itemsize, x.numel
    if size is None:
        return None
    compare = ("compare_scalar_kernel", n, n * (size + 1))
    both = (compare, compare, ("logical_and", n, 3 * n)) if bounds == 2 else (compare,)
    return (("FillFunctor", 0, size),) + both + (("where_kernel", n, n * (1 + 2 * size) + size),)


def _unary(op: str):
    def formula(c: Call) -> Cost:
        x = c.get(0, "input")
        extra = {"approx": c.get(None, "approximate")} if op == "gelu" and c.get(None, "approximate") else {}
        cost = pointwise_cost(op, [x], bwd=True, **extra)
        base = op.rstrip("_")
        given = [c.get(i, k) for i, k in enumerate(_CLAMP_BOUNDS.get(base, ()), 1)]
        bounds = [b for b in given if b is not None]
        if bounds and all(type(b) in (int, float) for b in bounds):
            stages = clamp_backward_stages(x, len(bounds))
            if stages is not None:
                cost = replace(cost, bwd_flops=sum(s[1] for s in stages), bwd_bytes=sum(s[2] for s in stages),
                               bwd_stages=stages)
        elif isinstance(x, Tensor) and (stages := unary_backward_stages(base, x)) is not None:
            # the call's bytes as the op's: dY and x read once (a zero fill: dX alone), dX written
            moved = x.nbytes * (1 if stages[0][1] == 0 else 3)
            cost = replace(cost, bwd_flops=sum(s[1] for s in stages), bwd_bytes=moved, bwd_stages=stages)
        return cost
    return formula


for _op in UNARY:
    register(*names([_op]))(_unary(_op))
    register(*names([f"{_op}_"]))(_unary(f"{_op}_"))
for _op in ACTIVATIONS:
    register(f"torch.nn.functional.{_op}")(_unary(_op))
for _op in ("neg", "abs", "invert", "pos"):
    register(f"Tensor.__{_op}__")(_unary(_op))


# Backward of the binary ops with a formula: per operand position (0: self/input, 1: other), the
# FLOPs per output element of that operand's gradient and the operands it reads besides dY.
# add: dX = dY, dW = dY (alpha != 1: 1, dY·alpha); sub: dW = -dY (1, or -alpha·dY); rsub
# (other - alpha·input) the mirror; mul: dX = dY·W, dW = dY·X; div: dX = dY/W (1), dW =
# -dY·((X/W)/W) (4: PyTorch's div_tensor_other_backward, a kernel each: _step_kernels); rtruediv
# (other / self) the mirror, 3.
# pow (x ** e): dX = dY·e·x^(e-1) (3: the power, two products), dE = dY·x^e·ln(x) (3: the log,
# two products, x^e recomputed with them); rpow (e ** x, the receiver is the exponent) the
# mirror. maximum/minimum/fmax/fmin: each operand's gradient is dY where it won (2: compare,
# select). where(condition, x, y): dX = where(c, dY, 0), dY likewise (1: select; the condition
# takes none). lerp(x, end, w) = x + w·(end - x): dX = dY·(1 - w) (2), dEnd = dY·w (1), dW =
# dY·(end - x) (2). addcmul(x, t1, t2, value) = x + value·t1·t2: dX = dY (0), dT1 = dY·value·t2
# (2; 1 for value 1), dT2 the mirror. addcdiv(x, t1, t2, value) = x + value·t1/t2: dT1 =
# dY·value/t2 (2), dT2 = -dY·value·t1/t2² (4).
_GRADS = {
    "add": ((0, ()), (0, ())), "sub": ((0, ()), (1, ())), "rsub": ((1, ()), (0, ())),
    "mul": ((1, (1,)), (1, (0,))), "div": ((1, (1,)), (4, (0, 1))), "rtruediv": ((3, (0, 1)), (1, (0,))),
    "pow": ((3, (0, 1)), (3, (0, 1))), "rpow": ((3, (0, 1)), (3, (0, 1))),
    "maximum": ((2, (0, 1)), (2, (0, 1))), "fmax": ((2, (0, 1)), (2, (0, 1))), "where": ((0, ()), (1, (0,)), (1, (0,))),
    "lerp": ((2, (2,)), (1, (2,)), (2, (0, 1))), "addcmul": ((0, ()), (2, (2,)), (2, (1,))),
    "addcdiv": ((0, ()), (2, (2,)), (4, (1, 2))),
}
_GRAD_OPS = {"add": "add", "radd": "add", "sub": "sub", "subtract": "sub", "rsub": "rsub",
             "mul": "mul", "multiply": "mul", "rmul": "mul", "div": "div", "divide": "div",
             "true_divide": "div", "truediv": "div", "rtruediv": "rtruediv", "pow": "pow", "rpow": "rpow",
             "maximum": "maximum", "minimum": "maximum", "fmax": "fmax", "fmin": "fmax", "where": "where",
             "lerp": "lerp", "addcmul": "addcmul", "addcdiv": "addcdiv"}
# The operands by position and by name, as the torch functions take them (default: input, other).
_OPERANDS = {"where": ("condition", "input", "other"), "lerp": ("input", "end", "weight"),
             "addcmul": ("input", "tensor1", "tensor2"), "addcdiv": ("input", "tensor1", "tensor2"),
             "pow": ("input", "exponent")}


def _grads(op: str, alpha, rounding_mode, value=1) -> tuple | None:
    """_GRADS' row for `op` (`__iadd__`, `add_`, `__rtruediv__`, ...), alpha and value applied;
    None when the op has no backward formula (division with a rounding mode: a zero gradient,
    not modelled)."""
    name = op.strip("_")
    if op.startswith("__i") and name[1:] in INPLACE_DUNDERS:
        name = name[1:]
    key = _GRAD_OPS.get(name)
    if key is None or (key in ("div", "rtruediv") and rounding_mode is not None):
        return None
    grads = _GRADS[key]
    if key == "add" and alpha != 1:  # dW = alpha·dY
        grads = (grads[0], (1, ()))
    if key == "addcmul" and value == 1:  # dT1 = dY·t2
        grads = (grads[0], (1, (2,)), (1, (1,)))
    return grads


def _operands(op: str, c: Call) -> list:
    """The operands of a binary or ternary op in _GRADS' positions, scalars included."""
    base = _base(op)
    keys = _OPERANDS.get(base, ("input", "other"))
    first = c.args[0] if c.args else None
    if base == "where" and isinstance(first, Tensor) and first.dtype != "bool":
        return [c.get(1, "condition"), first, c.get(2, "other")]  # Tensor.where(self, condition, other)
    operands = [c.get(i, k) for i, k in enumerate(keys)]
    if operands[0] is None:
        operands[0] = c.get(0, "self")
    return operands


def _binary_backward(operands: list, grads: tuple, shape: tuple, dy_dtype: str, key: str | None = None) -> tuple:
    """(flops, bytes, stages) of the backward of a binary op (_GRAD_OPS' `key`) over output `shape`
    of `dy_dtype` (module docstring); the stages: _gradient_kernels'."""
    dy_size, n = ITEMSIZE[dy_dtype], prod(shape)
    flops, sizes, reads = 0, [], set()
    for i, (per_elem, needs) in enumerate(grads):
        t = operands[i] if i < len(operands) else None
        if not isinstance(t, Tensor) or not is_floating(t.dtype) or t.grad is False:
            continue
        steps = _step_kernels(key, i, operands, n, dy_size, 0)
        flops += (sum(s[1] for s in steps) if steps else per_elem * n) + reduce_adds(n, t.numel)
        sizes.append(t.nbytes)  # the gradient, written
        reads.update(j for j in needs if j < len(operands) and isinstance(operands[j], Tensor))
    if not sizes:
        return None, None, None  # no operand takes a gradient: no backward node
    sizes += [operands[j].nbytes for j in sorted(reads)]
    return flops, None if None in sizes else n * dy_size + sum(sizes), \
        _gradient_kernels(operands, grads, shape, dy_dtype, key)


def _gradient_kernels(operands: list, grads: tuple, shape: tuple, dy_dtype: str, key: str | None = None) -> tuple | None:
    """The kernels of a binary op's backward as named stages (Cost.stages): the autograd node
    computes each gradient whose formula does math (_GRADS: FLOPs > 0) in one element-wise
    kernel over the n output elements, the last operand's first (PyTorch's generated code), dY
    and the operands the formula reads read (each in its own dtype), the gradient written in dY's
    dtype at its operand's size, or at n where the operand was broadcast (a formula of several
    kernels, each its own: _step_kernels); then the engine, in
    operand order, sums each broadcast operand's gradient down to its shape (a sum reduction in
    dY's dtype: the n read, the gradient written; autograd's sum_to also sums an operand of fewer
    dims over the leading ones, of size 1 too: a reduce kernel of no adds, maxvit's fp32 relative
    position bias added to bf16 scores of one more dim) and casts each gradient whose operand's dtype
    is not dY's to it (a copy: read in dY's dtype, written in its own; convnext's fp32 layer
    scale times bf16 activations under autocast). None where no kernel runs."""
    dy_size, n = ITEMSIZE[dy_dtype], prod(shape)
    math, engine = [], []
    for i, (per_elem, needs) in reversed(list(enumerate(grads))):
        t = operands[i] if i < len(operands) else None
        if not isinstance(t, Tensor) or not is_floating(t.dtype) or t.grad is False:
            continue
        read = [operands[j] for j in needs if j < len(operands) and isinstance(operands[j], Tensor)]
        if t.nbytes is None or any(r.nbytes is None for r in read):
            return None
        broadcast_to = t.numel < n or len(t.shape) < len(shape)
        written = (n if broadcast_to else t.numel) * dy_size
        steps = _step_kernels(key, i, operands, n, dy_size, written)
        if steps:
            math.extend(steps)
        elif per_elem:
            math.append(("elementwise_kernel", per_elem * n, n * dy_size + sum(r.nbytes for r in read) + written))
        sum_to = [("reduce_kernel", reduce_adds(n, t.numel), (n + t.numel) * dy_size)] if broadcast_to else []
        cast = [("copy_kernel_cuda", 0, t.numel * dy_size + t.nbytes)] if t.dtype != dy_dtype else []
        engine[:0] = sum_to + cast
    return tuple(math + engine) or None


def _step_kernels(key: str | None, i: int, operands: list, n: int, dy_size: int, written: int) -> list | None:
    """The kernels PyTorch's backward formula runs for operand `i`'s gradient where that is more
    than one (FunctionsManual.cpp), in the order it runs them, each one operation an element, its
    operands read and n elements written (the intermediates in dY's dtype; the last writes the
    gradient, `written` bytes): division's divisor, -grad * ((self / other) / other): X / W, that
    / W, -dY, their product; a power with a number for exponent e, grad * (e * self.pow(e - 1)):
    x.pow(e - 1) (none for e = 2: self.pow(1) is a copy, a memcpy), times e, times dY; maximum's
    and minimum's, where(self == other, grad / 2, grad).masked_fill_(self < other, 0) (the mirror
    for the other operand and for minimum): dY halved, the operands compared (bools written), the
    select (the bools and both read), the other comparison, the fill in place (the bools read).
    Bytes None where an operand's size is not known. None: one kernel (_GRADS')."""
    k = "elementwise_kernel"
    mid = n * dy_size
    if key == "maximum" and all(isinstance(t, Tensor) for t in operands[:2]):
        both = _total(operands[0].nbytes, operands[1].nbytes, n)
        return [(k, n, 2 * mid), (k, n, both), (k, n, n + 3 * mid), (k, n, both), (k, n, _total(n, mid, written))]
    if key == "div" and i == 1:
        x, w = operands[0], operands[1]
        first = _total(x.nbytes if isinstance(x, Tensor) else 0, w.nbytes, mid)
        return [(k, n, first), (k, n, _total(mid, w.nbytes, mid)), (k, n, 2 * mid), (k, n, 2 * mid + written)]
    if key == "pow" and i == 0 and len(operands) > 1 and type(operands[1]) in (int, float):
        x = operands[0]
        power = [] if operands[1] == 2 else [(k, n, _total(x.nbytes, mid))]
        return power + [(k, n, _total(mid if power else x.nbytes, mid)), (k, n, 2 * mid + written)]
    return None


def _total(*parts: int | None) -> int | None:
    """The sum of byte counts, None where one is not known."""
    return None if None in parts else sum(parts)


def _binary(op: str):
    def formula(c: Call) -> Cost:
        alpha = c.get(None, "alpha", 1)
        grads = _grads(op, alpha, c.get(None, "rounding_mode"), c.get(None, "value", 1))
        if grads is None:
            cost = pointwise_cost(op, c.tensors())
        else:  # by position, scalars included: which operand is the divisor matters
            cost = pointwise_cost(op, _operands(op, c), grads=grads)
        if alpha != 1:  # add(x, y, alpha=a) is a multiply-add per element
            cost = replace(cost, flops=2 * cost.flops)
        return cost
    return formula


for _op in BINARY + TERNARY:
    if _op != "where":  # where(condition) alone is another op: below
        register(*names([_op]))(_binary(_op))
    register(*names([f"{_op}_"]))(_binary(f"{_op}_"))


def nonzero_cost(x: Tensor, found: list[Tensor] | None = None) -> Cost:
    """The indices of x's nonzero elements (torch.nonzero, argwhere, where(condition) alone): one
    test against zero an element. What it writes depends on the data: with the call's output
    (`found`, its out mark: as many index rows as elements were nonzero), PyTorch's kernels in
    turn: cub's count of the nonzero elements (x read, the count written), cub's flagged select of
    their flat positions (x tested again, read; the positions written as int64; its tile states:
    cub_init.py), and, where x has more than one dim, write_indices turning each position into
    its coordinates in place (read, written; one division an index and dim). Without it the count
    alone is known: the select's bytes and write_indices' work are na (the call's total too, where
    x has more than one dim). A count over more than one tile runs a second reduction kernel (its
    partial counts), which its launch prices (cub_reduce.py)."""
    n, size, d = x.numel, x.itemsize, len(x.shape)
    rows = found[0].shape[0] if found and found[0].shape else None
    if rows is None or size is None:
        count = ("DeviceReduce", n, None) if size is None else ("DeviceReduce", n, 0, n * size + 4)
        stages = (count, ("DeviceSelectSweepKernel", n, None))
        if d > 1:
            stages += (("write_indices", None, None),)
        return Cost(None if d > 1 else 2 * n, None, fmt_params(x.dtype, shape=dims(x.shape)), x.dtype, SIMT,
                    stages=stages)
    stages = (("DeviceReduce", n, 0, n * size + 4), ("DeviceSelectSweepKernel", n, 0, n * size + 8 * rows + 4))
    if d > 1 and rows:
        stages += (("write_indices", rows * d, 0, 8 * rows * (1 + d)),)
    return Cost(sum(s[1] for s in stages), sum(s[3] for s in stages), fmt_params(x.dtype, shape=dims(x.shape), found=rows),
                x.dtype, SIMT, stages=stages)


_where = _binary("where")


@register(*names(["where"]))
def where(c: Call) -> Cost | None:
    """where(condition, input, other), an element-wise select; where(condition) alone is
    nonzero(condition, as_tuple=True)."""
    if len(c.args) == 1 and not {"input", "other", "self"} & set(c.kwargs) and isinstance(c.args[0], Tensor):
        return nonzero_cost(c.args[0], c.outputs())
    return _where(c)


@register(*names(["nonzero", "argwhere"]))
def nonzero(c: Call) -> Cost | None:
    x = c.get(0, "input")
    return nonzero_cost(x, c.outputs()) if isinstance(x, Tensor) else None
for _op in DUNDERS:
    if _op != "rtruediv":
        register(f"Tensor.__{_op}__")(_binary(f"__{_op}__"))
_rtruediv = _binary("__rtruediv__")


@register("Tensor.__rtruediv__")
def rtruediv(c: Call) -> Cost | None:
    """`other / x`: torch.Tensor's __rtruediv__ is `x.reciprocal() * other`, two kernels (Cost.
    stages: the reciprocal, 1 an element, read and written; the product, as torch.mul prices it);
    its backward the binary table's."""
    cost, x = _rtruediv(c), c.get(0, "input")
    if cost is None or cost.flops is None or not isinstance(x, Tensor):
        return cost
    recip = pointwise_cost("reciprocal", [x])
    product = pointwise_cost("mul", [Tensor(x.shape, recip.dtype), c.get(1, "other")])
    if recip.bytes is None or product.bytes is None or product.flops is None:
        return cost
    return replace(cost, flops=recip.flops + product.flops, stages=((recip.flops, recip.bytes),
                                                                    (product.flops, product.bytes)))
for _op in INPLACE_DUNDERS:
    register(f"Tensor.__i{_op}__")(_binary(f"__i{_op}__"))


def _masked_fill(op: str):
    def formula(c: Call) -> Cost | None:
        """x.masked_fill(mask, value): one kernel (PyTorch's masked_fill_kernel, in place or into
        the result) selects value or x per element: 1 FLOP an element (where's), x and the bool
        mask read, the result written (x's shape in place, else the broadcast one). Backward, dX =
        dY.masked_fill(mask, 0): the same kernel over dY. A tensor value's gradient (the masked dY
        summed) and a broadcast x's (dX summed down) are not modelled: na."""
        x, mask, value = c.get(0, "input"), c.tensor(1, "mask"), c.get(2, "value")
        if not isinstance(x, Tensor) or mask is None:
            return None
        cost = pointwise_cost(op, [x, mask])
        if isinstance(value, Tensor) or cost.bytes is None or cost.flops != x.numel:  # x broadcast: dX summed too
            return cost
        return replace(cost, bwd_flops=cost.flops, bwd_bytes=cost.bytes)
    return formula


register(*names(["masked_fill"]))(_masked_fill("masked_fill"))
register("Tensor.masked_fill_")(_masked_fill("masked_fill_"))


@register("torch.nn.functional.dropout", "torch.dropout", "Tensor.dropout",
          "torch.nn.functional.dropout1d", "torch.nn.functional.dropout2d", "torch.nn.functional.dropout3d")
def dropout(c: Call) -> Cost | None:
    """Training: the output and a bool keep-mask are written (PyTorch's fused kernel). Backward:
    grad times mask. In place (F.dropout's `inplace`), PyTorch runs three kernels instead
    (Cost.stages): the noise drawn, a tensor of the input's dtype written (bernoulli_), scaled by
    1 / (1 - p) (a multiply an element, read and written) and the input multiplied by it in place
    (a multiply an element, both read, the input written). Channel dropout (dropout1d/2d/3d)
    draws one value per sample and channel (N·C, the input's dtype, written), scales it (1 each,
    read and written) and multiplies the input by it broadcast (1 an element: the input and the
    N·C read, the output written); backward dY times the same (_channel_dropout)."""
    x, p = c.get(0, "input"), c.get(1, "p", 0.5)
    training = c.get(2, "training", True)
    size = x.itemsize
    if not training or p == 0 or size is None:
        # Identity: no kernel normally runs; if one does it is a copy.
        return pointwise_cost("dropout", [x], p=p)
    n = x.numel
    params = fmt_params(x.dtype, shape=dims(x.shape), p=p)
    if c.get(3, "inplace", False) is True and p != 1:
        stages = ((0, n * size), (n, 2 * n * size), (n, 3 * n * size))
        return Cost(2 * n, 6 * n * size, params, x.dtype, SIMT, bwd_flops=n, bwd_bytes=2 * n * size + n, stages=stages)
    if str(c.marker.get("op")) in _CHANNEL_DROPOUT and p != 1:
        return _channel_dropout(x, params, _CHANNEL_DROPOUT[str(c.marker.get("op"))])
    return Cost(n, 2 * n * size + n, params, x.dtype, SIMT, bwd_flops=n, bwd_bytes=2 * n * size + n)


# Channel dropout's ops and the dims of one channel's values (an unbatched input has one fewer).
_CHANNEL_DROPOUT = {"dropout1d": 1, "dropout2d": 2, "dropout3d": 3}


def _channel_dropout(x: Tensor, params: str, spatial: int) -> Cost | None:
    """dropout's docstring: the noise over the input's leading dims (N, C or C alone)."""
    lead = x.shape[:len(x.shape) - spatial]
    if not lead:
        return None
    n, planes, size = x.numel, prod(lead), x.itemsize
    stages = ((0, planes * size), (planes, 2 * planes * size), (n, (2 * n + planes) * size))
    return Cost(planes + n, (2 * n + planes) * size, params, x.dtype, SIMT, bwd_flops=n,
                bwd_bytes=(2 * n + planes) * size, stages=stages)


REDUCTIONS = ["sum", "mean", "nansum", "nanmean", "prod", "amax", "amin", "max", "min", "std", "var",
              "norm", "logsumexp", "argmax", "argmin", "all", "any", "count_nonzero"]
# FLOPs per input element of the reductions whose element-wise work dominates their combining
# (count_nonzero: its compares, as nonzero's count, nonzero_cost); a mean's E - O adds and O
# divides are one an input element whatever O.
_REDUCE_FLOPS = {"std": 3, "var": 3, "norm": 2, "logsumexp": 3, "count_nonzero": 1, "mean": 1, "nanmean": 1}
_REDUCE_INT_OUT = {"argmax": "int64", "argmin": "int64", "count_nonzero": "int64", "all": "bool", "any": "bool"}
# Backward: dY expanded to the input's shape: (FLOPs per input element, FLOPs per output element,
# what it reads besides dY: "x" the input, "y" the result, "idx" the int64 indices of max/min
# with dim). sum: a broadcast; mean: one scale; prod: dY·Y/X; amax/amin and max/min without dim:
# ties share the gradient, (dY / count(X == Y))·mask: compare, count, multiply, one divide per
# output; max/min with dim: dY scattered through the indices; var: (X - mean(X))·dY·2/(N - c), the
# mean recomputed; std: var's with dY / (2·Y) per output first; norm (p=2): X·(dY / Y); logsumexp:
# dY·exp(X - Y). argmax/argmin/all/any/count_nonzero have no gradient; nansum/nanmean: na.
_REDUCE_BWD = {"sum": (0, 0, ()), "mean": (1, 0, ()), "prod": (2, 0, ("x", "y")),
               "amax": (3, 1, ("x", "y")), "amin": (3, 1, ("x", "y")),
               "max": (3, 1, ("x", "y")), "min": (3, 1, ("x", "y")),
               "var": (4, 0, ("x",)), "std": (4, 2, ("x", "y")), "norm": (1, 1, ("x", "y")),
               "logsumexp": (3, 0, ("x", "y"))}


def _norm_backward(p) -> tuple | None:
    """_REDUCE_BWD's row for a p-norm: p=2 (and "fro") X·(dY / Y); p=1 dY·sign(X) (2 per input);
    p=inf like amax (the ties share the gradient); other p dY·X·|X|^(p-2) / Y^(p-1) (abs, power,
    two products, one divide per input; the power of Y once per output). p=0 has no gradient."""
    if p in (2, 2.0, "fro"):
        return _REDUCE_BWD["norm"]
    if p in (1, 1.0):
        return 2, 0, ("x",)
    if isinstance(p, float) and p in (float("inf"), float("-inf")):
        return _REDUCE_BWD["amax"]
    if isinstance(p, (int, float)) and not isinstance(p, bool) and p != 0:
        return 5, 1, ("x", "y")
    return None


def _reduce_backward(op: str, x: Tensor, out_n: int, out_size: int, indices: bool,
                     p=None) -> tuple:
    """(flops, bytes) of a reduction's backward (_REDUCE_BWD); (None, None) when not modelled."""
    row = _norm_backward(p) if op == "norm" else _REDUCE_BWD.get(op)
    if row is None:
        return None, None
    per_in, per_out, reads = (0, 0, ("idx",)) if indices else row
    parts = {"x": x.nbytes, "y": out_n * out_size, "idx": 8 * out_n}
    nbytes = out_n * out_size + x.nbytes + sum(parts[r] for r in reads)  # dY read, dX written
    return per_in * x.numel + per_out * out_n, nbytes


def reduction_flops(op: str, n_in: int, n_out: int | None) -> int | None:
    """FLOPs of reduction `op` of n_in elements into n_out results (None: not known): the binary
    combines of values.reduce_adds (adds, maxima, ...: as a bias gradient's, a loss's closing sum's
    and a broadcast gradient's sum count theirs); mean, std, var, norm, logsumexp and
    count_nonzero per element (_REDUCE_FLOPS)."""
    if op in _REDUCE_FLOPS:
        return n_in * _REDUCE_FLOPS[op]
    return None if n_out is None else reduce_adds(n_in, n_out)


def reduce_cost(op: str, x: Tensor, out_n: int | None, out_dtype: str | None, dim: str, by_dim: bool,
                p=None) -> Cost:
    """Reduction `op` of `x` to `out_n` elements (None: not known, bytes na) of `out_dtype` (None:
    the op's own, x's but for the index and bool ones), over `dim` (as params show it); `by_dim`:
    max/min then write their int64 indices too."""
    out_dtype = out_dtype or _REDUCE_INT_OUT.get(op, x.dtype)
    extra = 8 * out_n if op in ("max", "min") and by_dim and out_n is not None else 0
    out_size = ITEMSIZE.get(out_dtype)
    nbytes, bwd = None, (None, None)
    if x.nbytes is not None and out_size is not None and out_n is not None:
        nbytes = x.nbytes + out_n * out_size + extra
        bwd = _reduce_backward(op, x, out_n, out_size, bool(extra), p)
    stages = norm_backward_stages(x, out_n, out_size) if op == "norm" and p in (2, 2.0, "fro") else None
    if stages is not None:
        bwd = stage_totals(stages)
    return Cost(reduction_flops(op, x.numel, out_n), nbytes, fmt_params(x.dtype, shape=dims(x.shape), dim=dim),
                x.dtype, SIMT, bwd_flops=bwd[0], bwd_bytes=bwd[1], bwd_stages=stages)


def norm_backward_stages(x: Tensor, out_n: int | None, out_size: int | None) -> tuple | None:
    """The kernels of a 2-norm's backward as PyTorch runs dY·(X / Y).masked_fill_(Y == 0, 0)
    (FunctionsManual's norm_backward, which linalg.vector_norm's runs too), Y the norm of out_n
    elements broadcast over X: X divided by Y (X and Y read, the quotient written), Y compared
    with zero (Y read, bools written), the quotient's zero-norm rows filled in place (it and the
    bools read, it written; a select, no FLOPs), the product with dY (dY and the quotient read,
    dX written); one operation an element each."""
    size, n = x.itemsize, x.numel
    if size is None or out_n is None or out_size is None:
        return None
    return (("DivFunctor", n, 2 * n * size + out_n * out_size), ("CompareEqFunctor", out_n, out_n * (out_size + 1)),
            ("masked_fill_kernel", 0, 2 * n * size + out_n), ("MulFunctor", n, 2 * n * size + out_n * out_size))


def reduce_formula(op: str):
    def formula(c: Call) -> Cost:
        """reduction_flops of the input into its result at reduced size."""
        x = c.get(0, "input")
        dim = c.get(1, "dim")
        if op == "norm":
            dim = c.get(2, "dim")
        if isinstance(dim, int):
            dim = [dim]
        keep = [d for i, d in enumerate(x.shape)
                if dim is not None and i not in {d % max(len(x.shape), 1) for d in dim}]
        return reduce_cost(op, x, prod(keep), c.get(None, "dtype"), dims(dim) if dim else "all", dim is not None,
                           c.get(1, "p", "fro"))
    return formula


for _op in REDUCTIONS:
    register(*names([_op]))(reduce_formula(_op))
# (x, ord, dim, ...): torch.norm's positions (ord where norm has p; gradient clipping's total norm).
register("torch.linalg.vector_norm")(reduce_formula("norm"))
# torch.distributions' argument checks (`torch._is_all_true(constraint.check(value))`).
register("torch._is_all_true")(reduce_formula("all"))
register("torch._is_any_true")(reduce_formula("any"))
