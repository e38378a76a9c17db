"""The helper kernels of an attention call besides its matrix kernels: flash attention's backward
helpers (rowsum(dO * O), dQ's cast from its fp32 accumulator, grouped-query attention's sum of dK
and dV over the query heads), the memory-efficient backward's (dO made contiguous, rowsum(dO * O)
by PyTorch's kernels), cuDNN's unpacking of the dropout seed, and the math attention path's
element-wise and softmax kernels and casts; and which matrix kernel of the call is one of the math
path's GEMMs.

The families and kernel patterns here are read by parts.family(); the parts are put together with
the other kinds' in parts.forward_parts and parts.backward_parts.
"""
from __future__ import annotations

import math
import re

from .part import ADD, CONTIGUOUS, COPY, FILL, SUM, Part
from .registry import Call, Cost
from .values import ITEMSIZE, Tensor, acc_size

# The math attention path's element-wise and softmax kernels (math_attention).
SCALAR_MUL, MUL, SOFTMAX, NEGINF, ALL, WHERE = "scalar-mul", "mul", "softmax", "isneginf", "all", "where"
DOT_DO_O, CAST_DQ, REDUCE_HEAD, PHILOX = "dot-do-o", "cast-dq", "reduce-head", "philox"
# Flash attention's backward (PyTorch's flash_bwd_*, cuDNN's fusion::*) runs its main kernel
# between two helpers: one takes D = rowsum(dO * O) per query row, one casts dQ, accumulated in
# fp32, down to the op's dtype.
DOT_DO_O_KERNEL = re.compile(r"dot_do_o")
CAST_DQ_KERNEL = re.compile(r"convert_dq")
REDUCE_HEAD_KERNEL = re.compile(r"\bfmha_reduce_head<")
# cuDNN attention with dropout: its seed and offset unpacked for the kernel (two int64 written).
PHILOX_KERNEL = re.compile(r"\bphilox::unpack_cudnn\b")
# The op whose markers the math path's and dropout's parts are built from (F.scaled_dot_product_attention).
SDPA = "scaled_dot_product_attention"  # the op marker's `op` of F.scaled_dot_product_attention
# A fused attention kernel (flash, memory-efficient, cuDNN's): not one of the math path's GEMMs.
_FUSED_ATTENTION = re.compile(r"fmha|flash|attention|sdpa|attn|_mha", re.IGNORECASE)
# The math attention path's kernels: a tensor times a scalar, times a tensor, softmax and
# _safe_softmax's isneginf, all() and where.
MATH_KERNELS = tuple((fam, re.compile(pattern)) for fam, pattern in (
    (SCALAR_MUL, r"\b[AB]UnaryFunctor<[^<>]*\bMulFunctor<"), (MUL, r"\bBinaryFunctor<[^<>]*\bMulFunctor<"),
    (SOFTMAX, r"\bsoftmax_warp_(?:forward|backward)<|\bcunn_SoftMax(?:Forward|Backward)"),
    (NEGINF, r"\bisneginf_kernel_impl\b"), (ALL, r"\breduce_kernel<.*\band_kernel_cuda\b"),
    (WHERE, r"\bwhere_kernel_impl\b")))


def flash_helpers(q: Tensor | None, k: Tensor | None, v: Tensor | None, size: int | None) -> list[Part]:
    """Flash attention's backward helpers over R = batch x heads x L query rows: D = rowsum(dO * O)
    (2 FLOPs an element of O; dO and O read, D written in fp32), which also zeroes dQ's fp32
    accumulator (R x E written: FlashAttention-2's Clear_dQaccum; cuDNN's counted bytes, within 3%
    of ncu's on llama_block), and dQ's cast from that accumulator (read in fp32, written in the
    op's dtype); with fewer key/value heads than query heads (grouped-query attention), cuDNN's
    fmha_reduce_head sums dK's and dV's per-query-head copies into their heads (the copies read,
    the sums written in the op's dtype). From the query, key and value of a marker or of the
    backward op's range (aten::_scaled_dot_product_*_attention_backward); none when the query or
    value is not known."""
    if q is None or v is None or not q.shape or not v.shape or size is None:
        return []
    rows = math.prod(q.shape[:-1])
    out = rows * v.shape[-1]
    dq = rows * q.shape[-1]
    parts = [Part(DOT_DO_O, out, 2 * out, 2 * out * size + rows * 4 + dq * 4), Part(CAST_DQ, dq, 0, dq * (4 + size))]
    if k is None or len(q.shape) < 3 or len(k.shape) != len(q.shape) or k.shape[-3] >= q.shape[-3] or not k.numel:
        return parts
    group = q.shape[-3] // k.shape[-3]
    return parts + [Part(REDUCE_HEAD, t.numel * group, t.numel * (group - 1), t.numel * (group + 1) * size)
                    for t in (k, v)]


def efficient_helpers(q: Tensor | None, v: Tensor | None, size: int | None) -> list[Part]:
    """The memory-efficient backward's helpers (PyTorch's _efficient_attention_backward) over R =
    batch x heads x L query rows and the output's O = R x Ev elements: dO made contiguous where
    it arrives strided (read and written in the op's dtype), then, where its kernel does not
    compute delta = rowsum(dO * O) itself, dO and O cast to fp32 (16-bit ops), their product (1
    FLOP an element: two read, one written in fp32), its sum per row (O - R adds: read, R written)
    and that made contiguous in head-major order (R read and written)."""
    if q is None or v is None or not q.shape or not v.shape or size is None:
        return []
    rows = math.prod(q.shape[:-1])
    out = rows * v.shape[-1]
    casts = [Part(COPY, out, 0, out * (size + 4))] * 2 if size == 2 else []
    return [Part(CONTIGUOUS, out, 0, 2 * out * size)] + casts + [
        Part(MUL, out, out, 3 * out * 4), Part(SUM, out, out - rows, (out + rows) * 4),
        Part(CONTIGUOUS, rows, 0, 2 * rows * 4)]


# cuDNN attention's unpacking of the dropout generator's seed and offset: two int64 written.
SEED_UNPACK = Part(PHILOX, 1, 0, 16)


def cudnn_dropout(marker: dict, cost: Cost | None) -> list[Part]:
    """SEED_UNPACK, where the call has dropout."""
    if cost is None or marker.get("op") != SDPA or not Call(marker).get(4, "dropout_p", 0.0):
        return []
    return [SEED_UNPACK]


def math_attention(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """The math attention path's kernels besides its GEMMs (where the op's formula defines the
    path: ops/attention.py's stages), over Q, K, V (n each), the B·H·L x S scores (ns) and the
    output (no), in fp32 (fp64 for a float64 op): a 16-bit op's Q, K and V cast up first (read in
    its dtype, written in fp32); Q and Kᵀ each scaled by √scale (1 FLOP an element, read and
    written); a floating mask, cast to the query's dtype where it is another (read, written), added
    to the scores (1 an element: the scores read and written, the mask read once); softmax over the
    scores (5 an element, read and written), then _safe_softmax's
    isneginf of the scores (read, a bool written: 1 an element), their all() per row (the bools
    read, (ns - rows) ands, a bool per row written), a 0-d zero (a fill) and the where (1 an
    element: the row bools and the probabilities read, ns written); the probabilities and the output
    cast back to the op's dtype. Backward: dO cast up, dP·P (1 an element: two read, one
    written: softmax's backward's first kernel), the rest of softmax's backward (3 an element:
    two read, one written), dK and dQ scaled by √scale,
    and dQ, dK, dV cast back."""
    if cost is None or cost.stages is None or marker.get("op") != SDPA:
        return []
    c = Call(marker)
    q, k, v = c.tensor(0, "query"), c.tensor(1, "key"), c.tensor(2, "value")
    size = ITEMSIZE.get(cost.dtype)
    if q is None or k is None or v is None or not q.shape or size is None:
        return []
    acc = acc_size(cost.dtype)
    rows = q.numel // q.shape[-1]
    ns, no = rows * k.shape[-2], rows * v.shape[-1]
    up = size == 2  # 16-bit inputs run in fp32

    def casts(*ns_: int) -> list[Part]:
        return [Part(COPY, n, 0, n * (size + acc)) for n in ns_] if up else []
    if bprop:
        return casts(no) + [Part(MUL, ns, ns, 3 * ns * acc), Part(SOFTMAX, ns, 3 * ns, 3 * ns * acc)] + [
            Part(SCALAR_MUL, t.numel, t.numel, 2 * t.numel * acc) for t in (k, q)] + casts(q.numel, k.numel, v.numel)
    mask = c.tensor(3, "attn_mask")
    masked: list[Part] = []
    if mask is not None and mask.itemsize is not None:
        cast = [Part(COPY, mask.numel, 0, mask.numel * (mask.itemsize + size))] if mask.dtype != q.dtype else []
        masked = cast + [Part(ADD, ns, ns, 2 * ns * acc + mask.numel * size)]
    return casts(q.numel, k.numel, v.numel) + [Part(SCALAR_MUL, t.numel, t.numel, 2 * t.numel * acc) for t in (q, k)] + \
        masked + [Part(SOFTMAX, ns, 5 * ns, 2 * ns * acc), Part(NEGINF, ns, ns, ns * (acc + 1)),
        Part(ALL, ns, ns - rows, ns + rows), Part(FILL, 1, 0, acc), Part(WHERE, ns, ns, rows + 2 * ns * acc)
    ] + casts(ns, no)


def math_attention_gemm(kernel: str | None) -> bool:
    """Whether an attention call's matrix kernel is one of the math path's batched GEMMs, not a
    fused attention kernel (flash, memory-efficient, cuDNN's)."""
    return _FUSED_ATTENTION.search(kernel or "") is None
