"""The vector kernels nn.TransformerEncoderLayer's inference fast path runs between its matrix
kernels (ops/transformer.py): the residual `x.add_(src)` and PyTorch's layer norm, each a role
its stages (Cost.stages) are named by beside GEMM and ATTN, so that each kernel takes the next
stage only when it is of its role (analysis.py).

Only the layer norm kernel seen in the fast path's captures (vectorized_layer_norm_kernel, one
kernel a norm) has a role: PyTorch's other layer norm path runs two kernels (the row moments,
then the normalization), whose split of the norm's work is not decomposed.
"""
from __future__ import annotations

import re

ADD_ROLE, NORM_ROLE = "add", "norm"
_ROLES = ((NORM_ROLE, re.compile(r"\bvectorized_layer_norm_kernel<")),
          (ADD_ROLE, re.compile(r"\bCUDAFunctor_add<")))


def vector_role(kernel: str | None) -> str | None:
    """The role of a fast-path vector kernel (ADD_ROLE, NORM_ROLE), None for any other kernel."""
    return next((role for role, pattern in _ROLES if pattern.search(kernel or "")), None)
