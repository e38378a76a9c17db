"""scaled_dot_product_attention, every backend (flash, memory-efficient, cuDNN, math).

Forward: Q K^T and P V, 2*L*S*E + 2*L*S*Ev per batch-head (torch.utils.flop_counter's count).
Backward: the recomputed Q K^T plus the four gradient products (dV, dP, dQ, dK), as flop_counter
counts them. is_causal halves all of it: only the lower triangle of the L x S scores is computed.
Grouped-query attention: K and V may have fewer heads; the work follows the query heads.
The math path (PyTorch's _scaled_dot_product_attention_math: not causal, no dropout, as many key
heads as query heads, no mask or a floating one added to the scores: nn.MultiheadAttention's
key padding mask under autocast, whose dtype differs from the query's, runs it) runs its products
as batched GEMMs, each its own (Cost.stages):
forward Q·Kᵀ then P·V, backward dV = Pᵀ·dO, dP = dO·Vᵀ, dK = dSᵀ·Q, dQ = dS·K, in fp32 (16-bit
inputs are cast up first; parts.py prices those casts and the softmax between): no recomputed
Q·Kᵀ, so its backward kernels add up to the formula's less that product.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from ..registry import ATTN, GEMM, Call, Cost, fmt_params, register
from ..values import FLOATING, ITEMSIZE, Tensor, acc_size, promote
from .gemm import gemm_cost


@register("torch.nn.functional.scaled_dot_product_attention")
def sdpa(c: Call) -> Cost | None:
    q, k, v, mask = c.tensor(0, "query"), c.tensor(1, "key"), c.tensor(2, "value"), c.tensor(3, "attn_mask")
    causal = bool(c.get(5, "is_causal", False))
    cost = sdpa_cost(q, k, v, mask, causal)
    # The math path as modelled: no dropout, not causal, a floating mask added to the scores or none.
    plain = (mask is None or mask.dtype in FLOATING) and not causal and not c.get(4, "dropout_p", 0.0) \
        and k.shape[:-2] == q.shape[:-2]
    return replace(cost, **math_products(q, k, v, cost.dtype)) if plain else cost


@register("torch._native_multi_head_attention")
def native_mha(c: Call) -> Cost | None:
    """nn.MultiheadAttention's fast path (inference: no grad, no autocast) over (query, key,
    value, embed_dim, num_heads, in_proj weight and bias, out_proj weight and bias, mask,
    need_weights): the query, key and value projections (one GEMM for self-attention), attention
    over num_heads heads (sdpa_cost) and the output projection, as linear and sdpa count them
    (biases read, not counted as FLOPs). PyTorch runs self-attention without weights as three
    kernels (Cost.stages, named by role and taken in turn: a GEMM, a fused attention kernel, a
    GEMM); where it runs its older path (bmm, masked softmax) the kernels after the projection
    find no stage of their role: na. With emit_nvtx's ranges each kernel is priced from its own
    (Cost.composite), the older path's too."""
    w_in, b_in, w_out, b_out = (c.tensor(i, n) for i, n in ((5, "qkv_weight"), (6, "qkv_bias"),
                                                           (7, "proj_weight"), (8, "proj_bias")))
    return mha_cost(c.tensor(0, "query"), c.tensor(1, "key"), c.tensor(2, "value"), c.get(3, "embed_dim"),
                    c.get(4, "num_head"), w_in, b_in, w_out, b_out, c.tensor(9, "mask"))


def mha_cost(q: Tensor | None, k: Tensor | None, v: Tensor | None, d: object, heads: object, w_in: Tensor | None,
             b_in: Tensor | None, w_out: Tensor | None, b_out: Tensor | None, mask: Tensor | None) -> Cost | None:
    """native_mha's Cost over (B, T, E) query and (B, S, E) key and value, `heads` heads of E /
    heads; None where the arguments do not fit."""
    if None in (q, k, v, w_in, w_out) or type(d) is not int or type(heads) is not int or heads <= 0 or d % heads \
            or len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
        return None
    (b, t, _), s = q.shape, k.shape[1]
    dtype = promote([q.dtype, w_in.dtype])
    bias_in, bias_out = (b_in.numel if b_in else 0), (b_out.numel if b_out else 0)
    if q.shape == k.shape == v.shape:
        project = gemm_cost(1, b * t, 3 * d, d, dtype, extra_elems=bias_in)
    else:
        project = gemm_cost(1, b * t + 2 * b * s, d, d, dtype, extra_elems=bias_in)
    dh = d // heads
    attend = sdpa_cost(Tensor((b, heads, t, dh), dtype), Tensor((b, heads, s, dh), dtype),
                       Tensor((b, heads, s, dh), dtype), mask, False)
    out = gemm_cost(1, b * t, d, d, dtype, extra_elems=bias_out)
    parts = ((GEMM, project), (ATTN, attend), (GEMM, out))
    if any(p.flops is None or p.bytes is None for _, p in parts):
        return None
    return Cost(sum(p.flops for _, p in parts), sum(p.bytes for _, p in parts),
                fmt_params(dtype, B=b, H=heads, L=t, S=s, E=d), dtype, ATTN, attend.elems, composite=True,
                stages=tuple((role, p.flops, p.bytes) for role, p in parts))


def math_products(q: Tensor, k: Tensor, v: Tensor, dtype: str | None) -> dict:
    """The math path's batched GEMMs (module docstring) as Cost.stages and bwd_stages: each its
    2·m·n·k FLOPs and its three matrices' bytes in fp32 (fp64 for a float64 op)."""
    bh = prod(q.shape[:-2])
    L, e = q.shape[-2:]
    s, ev = k.shape[-2], v.shape[-1]
    size = acc_size(dtype)
    nq, nk, nv, ns, no = bh * L * e, bh * s * e, bh * s * ev, bh * L * s, bh * L * ev
    qk, pv = 2 * ns * e, 2 * ns * ev
    return {"stages": ((qk, (nq + nk + ns) * size), (pv, (ns + nv + no) * size)),
            "bwd_stages": ((pv, (ns + no + nv) * size), (pv, (no + nv + ns) * size), (qk, (ns + nq + nk) * size),
                           (qk, (ns + nk + nq) * size))}


def sdpa_cost(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Cost:
    """Forward (flops, bytes) and backward (bwd_flops, bwd_bytes) of attention over (..., L, E)
    queries and (..., S, E) / (..., S, Ev) keys and values."""
    bh = prod(q.shape[:-2])
    L, e = q.shape[-2:]
    s, ev = k.shape[-2], v.shape[-1]
    fwd = 2 * bh * L * s * e + 2 * bh * L * s * ev
    bwd = bh * (6 * L * s * e + 4 * L * s * ev)
    if causal:
        fwd, bwd = fwd // 2, bwd // 2
    out = bh * L * ev
    dtype = promote([q.dtype, k.dtype, v.dtype])
    size = ITEMSIZE.get(dtype)
    m = mask.nbytes if mask else 0
    elems = q.numel + k.numel + v.numel + out
    # Backward reads Q, K, V, O and dO and writes dQ, dK, dV (the row statistics are O(L)).
    bwd_elems = 2 * (q.numel + k.numel + v.numel) + 2 * out
    if size is None or m is None:
        nbytes = bwd_bytes = None
    else:
        nbytes, bwd_bytes = elems * size + m, bwd_elems * size + m
    params = fmt_params(dtype, B=prod(q.shape[:-3]) if len(q.shape) > 3 else 1,
                        H=q.shape[-3] if len(q.shape) > 2 else 1, L=L, S=s, E=e, Ev=ev,
                        causal=int(causal), mask=int(mask is not None))
    return Cost(fwd, nbytes, params, dtype, ATTN, elems, bwd, bwd_bytes)
