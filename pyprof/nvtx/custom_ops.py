"""Markers for the custom ops of other libraries (`torch.ops.<namespace>.<op>(...)`: torchvision's
nms and roi_align, an extension's kernels registered with torch.library).

A custom op is no torch function: its Python entry point calls `torch.ops.torchvision.nms(...)`,
an `OpOverloadPacket`, whose kernels launch in C++. pyprof.init() wraps that class's `__call__`
(patch.py), so that every call of a packet outside PyTorch's own namespaces pushes an op marker,
`mod` `torch.ops.<namespace>`, `op` the op's name, with its arguments as any marker has them; prof
prices it by the op's formula at the aten level (`<namespace>::<op>`) or one of its own
(pyprof/prof/pricing/custom_ops.py). PyTorch's own ops (its namespaces, _BUILTIN, and the
private ones, `_c10d_functional`, ...) go straight through: their torch functions carry markers
already, or they are PyTorch's machinery (`torch.ops.profiler._record_function_enter_new`). An op overload called directly
(`torch.ops.torchvision.nms.default`, what compiled code calls) is not wrapped.
"""
from __future__ import annotations

from typing import Any, Callable, Dict

from .wrappers import op_wrapper

# PyTorch's own namespaces (torch 2.11-2.13 registers these at import, besides private `_...`
# ones): their ops are PyTorch's, with torch functions of their own or internal (profiler's
# record_function enter and exit, c10d's collectives); aten, prim and prims are
# torch._library.utils.is_builtin's.
_BUILTIN = frozenset({"aten", "prim", "prims", "profiler", "c10d", "debugprims", "debug_mode_ops", "export", "inductor",
                      "inductor_prims", "mkl", "mkldnn", "mkldnn_prepacked", "onednn", "quantization", "quantized",
                      "rngprims", "sparse", "static_runtime", "symm_mem"})


def packet_call(original: Callable) -> Callable:
    """`OpOverloadPacket.__call__` pushing a marker around each call of another library's op."""
    wrapped: Dict[str, Any] = {}  # qualified op name -> its op_wrapper, or None: not wrapped

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = self._qualified_op_name
        w = wrapped.get(name, False)
        if w is False:
            w = wrapped[name] = _wrapper(self, name, original)
        return original(self, *args, **kwargs) if w is None else w(*args, **kwargs)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def _wrapper(packet: Any, name: str, original: Callable) -> Any:
    """The op_wrapper of one custom op's packet, or None for PyTorch's own."""
    namespace, _, op = name.partition("::")
    if not op or namespace in _BUILTIN or namespace.startswith("_"):
        return None

    def call(*args: Any, **kwargs: Any) -> Any:
        return original(packet, *args, **kwargs)

    call.__name__ = call.__qualname__ = op
    return op_wrapper(call, f"torch.ops.{namespace}", op, f"torch.ops.{namespace}", op)
