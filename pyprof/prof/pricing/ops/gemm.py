"""Matrix products: mm, bmm, addmm, baddbmm, addbmm, linear, matmul (all ranks), einsum.

FLOPs are 2*M*N*K per product (FMA = 2; bias and beta/alpha scaling are not counted, as in
torch.utils.flop_counter); bytes are the operands read once and the result written once.
"""
from __future__ import annotations

from math import prod

from ..registry import GEMM, SIMT, Call, Cost, fmt_params, names, register
from ..values import ITEMSIZE, Tensor, broadcast, mac_flops, promote, short


def gemm_cost(batch: int, m: int, n: int, k: int, dtype: str | None, extra_elems: int = 0,
              kind: str = GEMM) -> Cost:
    """Cost of `batch` products (m x k) @ (k x n), plus `extra_elems` more elements read (bias)."""
    elems = batch * (m * k + k * n + m * n)
    size = ITEMSIZE.get(dtype)
    fields = {"B": batch} if batch != 1 else {}
    return Cost(flops=mac_flops(dtype) * batch * m * n * k, bytes=None if size is None else (elems + extra_elems) * size,
                params=fmt_params(dtype, **fields, M=m, N=n, K=k), dtype=dtype, kind=kind, elems=elems,
                bias_elems=extra_elems, out_elems=batch * m * n, out_shape=(batch * m, n), products=batch)


# The GEMMs among emit_nvtx's aten ranges, whose input sizes give a kernel's exact work:
# (rank of the operands, argument position of the added input or None, of A, of B). The in-place
# forms (a library's C++ accumulating into a buffer: torchvision's deform_conv2d) read the added
# matrix and write it, as the others read their input and write the output.
ATEN_GEMMS = {"aten::mm": (2, None, 0, 1), "aten::addmm": (2, 0, 1, 2), "aten::addmm_": (2, 0, 1, 2),
              "aten::_addmm_activation": (2, 0, 1, 2), "aten::bmm": (3, None, 0, 1), "aten::baddbmm": (3, 0, 1, 2),
              "aten::baddbmm_": (3, 0, 1, 2)}


def aten_gemm(name: str | None, sizes: list) -> tuple | None:
    """(batch, m, n, k, added input elems) of the aten range `name` from its input `sizes`;
    None when it is not one of ATEN_GEMMS or the sizes do not fit it."""
    spec = ATEN_GEMMS.get(name)
    if spec is None:
        return None
    rank, added, a, b = spec
    try:
        if rank == 2:
            batch = 1
            (m, k), (_, n) = sizes[a], sizes[b]
        else:
            (batch, m, k), (_, _, n) = sizes[a], sizes[b]
        return batch, m, n, k, 0 if added is None else prod(sizes[added])
    except (TypeError, ValueError):
        return None


@register(*names(["mm"]))
def mm(c: Call) -> Cost:
    a, b = c.tensor(0, "input"), c.tensor(1, "mat2")
    (m, k), (_, n) = a.shape, b.shape
    return gemm_cost(1, m, n, k, promote([a.dtype, b.dtype]))


@register(*names(["addmm", "addmm_"]))
def addmm(c: Call) -> Cost:
    bias, a, b = c.tensor(0, "input"), c.tensor(1, "mat1"), c.tensor(2, "mat2")
    (m, k), (_, n) = a.shape, b.shape
    return gemm_cost(1, m, n, k, promote([a.dtype, b.dtype]), extra_elems=bias.numel)


@register(*names(["bmm"]))
def bmm(c: Call) -> Cost:
    a, b = c.tensor(0, "input"), c.tensor(1, "mat2")
    (bt, m, k), (_, _, n) = a.shape, b.shape
    return gemm_cost(bt, m, n, k, promote([a.dtype, b.dtype]))


@register(*names(["baddbmm", "baddbmm_"]))
def baddbmm(c: Call) -> Cost:
    bias, a, b = c.tensor(0, "input"), c.tensor(1, "batch1"), c.tensor(2, "batch2")
    (bt, m, k), (_, _, n) = a.shape, b.shape
    return gemm_cost(bt, m, n, k, promote([a.dtype, b.dtype]), extra_elems=bias.numel)


@register(*names(["addbmm", "addbmm_"]))
def addbmm(c: Call) -> Cost:
    """Batched products summed into one m x n result: the output is written once, not per batch."""
    bias, a, b = c.tensor(0, "input"), c.tensor(1, "batch1"), c.tensor(2, "batch2")
    (bt, m, k), (_, _, n) = a.shape, b.shape
    dtype = promote([a.dtype, b.dtype])
    elems = bt * (m * k + k * n) + m * n
    size = ITEMSIZE.get(dtype)
    return Cost(flops=mac_flops(dtype) * bt * m * n * k, bytes=None if size is None else (elems + bias.numel) * size,
                params=fmt_params(dtype, B=bt, M=m, N=n, K=k), dtype=dtype, kind=GEMM, elems=elems,
                bias_elems=bias.numel, out_elems=m * n, out_shape=(m, n), products=bt)


@register("torch.nn.functional.linear")
def linear(c: Call) -> Cost:
    x, w, bias = c.tensor(0, "input"), c.tensor(1, "weight"), c.tensor(2, "bias")
    k = x.shape[-1]
    m = prod(x.shape[:-1])
    n = w.shape[0] if len(w.shape) == 2 else 1
    return gemm_cost(1, m, n, k, promote([x.dtype, w.dtype]), extra_elems=bias.numel if bias else 0)


def matmul_cost(a: Tensor, b: Tensor) -> Cost:
    """torch.matmul's rank rules: 1-D operands gain and lose a unit dimension, batch dims broadcast."""
    dtype = promote([a.dtype, b.dtype])
    if len(a.shape) == 1 and len(b.shape) == 1:
        return gemm_cost(1, 1, 1, a.shape[0], dtype)
    m, k = (1, a.shape[0]) if len(a.shape) == 1 else a.shape[-2:]
    n = 1 if len(b.shape) == 1 else b.shape[-1]
    batch = prod(broadcast(a.shape[:-2], b.shape[:-2] if len(b.shape) > 1 else ()))
    cost = gemm_cost(batch, m, n, k, dtype)
    # A broadcast operand is still read once: count the real operand sizes, not the expanded ones.
    elems = a.numel + b.numel + batch * m * n
    size = ITEMSIZE.get(dtype)
    # A batch of matrices times one matrix runs as one product of the batch folded into its rows.
    folded = len(b.shape) <= 2
    return Cost(cost.flops, None if size is None else elems * size, cost.params, dtype, GEMM, elems,
                out_elems=cost.out_elems, out_shape=cost.out_shape, products=1 if folded else batch)


@register(*names(["matmul", "__matmul__"]))
def matmul(c: Call) -> Cost:
    return matmul_cost(c.tensor(0, "input"), c.tensor(1, "other"))


@register("Tensor.__rmatmul__")
def rmatmul(c: Call) -> Cost:
    """`x.__rmatmul__(y)` is `y @ x`: the receiver is the right operand."""
    return matmul_cost(c.tensor(1, "other"), c.tensor(0, "input"))


@register(*names(["mv"]))
def mv(c: Call) -> Cost:
    a, v = c.tensor(0, "input"), c.tensor(1, "vec")
    m, k = a.shape
    return gemm_cost(1, m, 1, k, promote([a.dtype, v.dtype]))


@register(*names(["dot", "vdot", "inner"]))
def dot(c: Call) -> Cost | None:
    a, b = c.tensor(0, "input"), c.tensor(1, "other") or c.tensor(1, "tensor")
    if len(a.shape) != 1 or len(b.shape) != 1:
        return None
    return gemm_cost(1, 1, 1, a.shape[0], promote([a.dtype, b.dtype]))


def _einsum_letters(spec: str, ndim: int) -> list:
    """Index letters of one operand, with `...` expanded to per-position names (upper-case free)."""
    if "..." not in spec:
        return list(spec)
    head, tail = spec.split("...")
    n_ell = ndim - len(head) - len(tail)
    return list(head) + [f".{i}" for i in range(-n_ell, 0)] + list(tail)


@register("torch.einsum")
def einsum(c: Call) -> Cost | None:
    """One or two operands. Two operands contract as PyTorch does: indices in one operand only
    and not in the output are summed out first (a reduction, no FLOPs counted), the rest is one
    batched GEMM of 2 * prod(sizes of the remaining indices). Three or more operands: the
    contraction order depends on opt_einsum being installed, so it is not known: na."""
    eq = c.get(0, "equation").replace(" ", "")
    ops = c.args[1:]
    if len(ops) == 1 and isinstance(ops[0], list):
        ops = ops[0]
    if not ops or not all(isinstance(t, Tensor) for t in ops) or len(ops) > 2:
        return None
    lhs, _, rhs = eq.partition("->")
    specs = lhs.split(",")
    size: dict = {}
    letters = []
    for spec, t in zip(specs, ops):
        ls = _einsum_letters(spec, len(t.shape))
        letters.append(ls)
        for ch, d in zip(ls, t.shape):
            size[ch] = max(size.get(ch, 1), d)
    ell = sorted({ch for ls in letters for ch in ls if ch[0] == "."}, key=lambda s: int(s[1:]))
    if "->" in eq:
        head, has_ell, tail = rhs.partition("...")
        out = list(head) + (ell if has_ell else []) + list(tail)
    else:  # implicit output: the ellipsis, then letters seen once, in alphabetical order
        flat = [ch for ls in letters for ch in ls if ch[0] != "."]
        out = ell + sorted(ch for ch in set(flat) if flat.count(ch) == 1)
    out_numel = prod(size[ch] for ch in out)
    dtype = promote([t.dtype for t in ops])
    itemsize = ITEMSIZE.get(dtype)
    elems = sum(t.numel for t in ops) + out_numel
    nbytes = None if itemsize is None else elems * itemsize
    params = f"eq={eq},type={short(dtype)}"
    if len(ops) == 1:
        summed = [ch for ch in set(letters[0]) if ch not in out]
        flops = prod(size[ch] for ch in letters[0]) if summed else 0
        return Cost(flops, nbytes, params, dtype, SIMT)
    a, b = (set(ls) for ls in letters)
    kept = [ch for ch in size if ch in out or (ch in a and ch in b)]
    contracted = [ch for ch in kept if ch not in out]
    work = prod(size[ch] for ch in kept)
    if not contracted:  # an outer or element-wise product: PyTorch multiplies, no GEMM
        return Cost(work, nbytes, params, dtype, SIMT)
    # The indices of both operands and the output are the bmm's batch (PyTorch's sumproduct_pair).
    batch = prod(size[ch] for ch in out if ch in a and ch in b)
    return Cost(mac_flops(dtype) * work, nbytes, params, dtype, GEMM, elems, out_elems=out_numel, products=batch)
