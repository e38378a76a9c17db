"""nn.TransformerEncoderLayer's inference fast path (no grad, no autocast): one C++ op,
torch._transformer_encoder_layer_fwd, per layer (PyTorch's transformer.cpp
transformer_encoder_layer_forward), priced as the kernels it launches, each from its piece's own
formula: self-attention as _native_multi_head_attention (ops/attention.py mha_cost: the QKV
projection GEMM with its bias, the fused attention kernel, the output projection), the residual
`x.add_(src)`, layer_norm, linear1 with its activation (`_addmm_activation`: cuBLASLt runs the
ReLU or GELU in the GEMM's epilogue; the activation is not counted, as the aten level does not),
linear2 (addmm), the residual add and layer_norm again; with norm_first each norm before its
block instead of after its add.
"""
from __future__ import annotations

from ..encoder_parts import ADD_ROLE, NORM_ROLE
from ..registry import ATTN, GEMM, Call, Cost, Unknowable, fmt_params, register
from ..values import Tensor, Unknown, promote
from .attention import mha_cost
from .elementwise import pointwise_cost
from .gemm import gemm_cost
from .nn import row_norm_cost

# Where self-attention may not run as one fused kernel: PyTorch's native_multi_head_attention
# takes its older path (the projection without its bias, _transform_bias_rescale_qkv, bmm, a masked
# softmax, bmm, the output projection) for heads whose size is not a multiple of 8, and (in some
# releases) for any mask.
OLDER_PATH = "encoder layer fast path with a mask or heads not a multiple of 8: attention's older path not decomposed"


@register("torch._transformer_encoder_layer_fwd")
def encoder_layer(c: Call) -> Cost | None:
    """(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
    norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
    ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type): the module docstring's kernels as
    Cost.stages named by role and taken in turn, so each kernel carries its own work; a kernel
    the sequence does not expect (an activation cuBLASLt did not fuse) finds no stage of its role:
    na. With emit_nvtx's ranges each kernel is priced from its own (Cost.composite). A padded
    batch (src_key_padding_mask: TransformerEncoder hands the layers a nested tensor) and
    attention's older path (OLDER_PATH) are not decomposed: na."""
    src = c.get(0, "src")
    if isinstance(src, Unknown):
        raise Unknowable("nested tensor input (padded batch): tokens per sequence not in the marker")
    d, heads = c.get(1, "embed_dim"), c.get(2, "num_heads")
    if not isinstance(src, Tensor) or len(src.shape) != 3 or type(d) is not int or type(heads) is not int \
            or heads <= 0 or d % heads:
        return None
    if c.get(18, "mask") is not None or d // heads % 8:
        raise Unknowable(OLDER_PATH)
    w = {name: c.tensor(i, name) for i, name in (
        (3, "qkv_weight"), (4, "qkv_bias"), (5, "proj_weight"), (6, "proj_bias"), (10, "norm_weight_1"),
        (11, "norm_bias_1"), (12, "norm_weight_2"), (13, "norm_bias_2"), (14, "ffn_weight_1"), (15, "ffn_bias_1"),
        (16, "ffn_weight_2"), (17, "ffn_bias_2"))}
    attention = mha_cost(src, src, src, d, heads, w["qkv_weight"], w["qkv_bias"], w["proj_weight"], w["proj_bias"],
                         None)
    w1, w2 = w["ffn_weight_1"], w["ffn_weight_2"]
    norm_first = c.get(8, "norm_first")
    if attention is None or w1 is None or w2 is None or len(w1.shape) != 2 or type(norm_first) is not bool:
        return None
    (b, t, _), hidden = src.shape, w1.shape[0]
    dtype = promote([src.dtype, w1.dtype])

    def stage(role: str, cost: Cost) -> tuple:
        return role, cost.flops, cost.bytes

    def bias(name: str) -> int:
        return w[name].numel if w[name] else 0
    add = stage(ADD_ROLE, pointwise_cost("add_", [src, src]))
    norms = [stage(NORM_ROLE, row_norm_cost(src, 6, w[f"norm_weight_{i}"], w[f"norm_bias_{i}"])) for i in (1, 2)]
    ffn = (stage(GEMM, gemm_cost(1, b * t, hidden, d, dtype, extra_elems=bias("ffn_bias_1"))),
           stage(GEMM, gemm_cost(1, b * t, d, hidden, dtype, extra_elems=bias("ffn_bias_2"))))
    stages = tuple(s for norm, block in zip(norms, (attention.stages, ffn))
                   for s in ((norm, *block, add) if norm_first else (*block, add, norm)))
    if any(s[1] is None or s[2] is None for s in stages):
        return None
    return Cost(sum(s[1] for s in stages), sum(s[2] for s in stages),
                fmt_params(dtype, B=b, L=t, E=d, H=heads, F=hidden,
                           act="gelu" if c.get(7, "use_gelu") else "relu", norm_first=int(norm_first)),
                dtype, ATTN, attention.elems, composite=True, stages=stages)
