"""A zoo of ops x dtypes x layouts, run once inside the CUDA profiler range, for ground truth.

Run it under Nsight Systems (kernel names, attribution through pyprof.parse) and under Nsight
Compute (per-kernel Tensor Core and FLOP counters); `benchmarks/tc_truth.py` joins the two by
kernel order into tests/data/tc_ground_truth.csv, against which prof's Tensor Core rule and FLOP
formulas are tested. Each case runs inside `pyprof.annotate(case)`, so its kernels carry the case
name in the `layer` column. Needs a CUDA GPU; the range is `pyprof.profiled()`.
All tensors are made before the range, once, and stay on the GPU until the process ends.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

import pyprof

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
          "bf16": torch.bfloat16, "fp64": torch.float64}


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Allow TF32 Tensor Cores for matmul and cuDNN convolution only inside the block."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def cases(dev: str = "cuda") -> Iterator[tuple[str, str, Callable[[], object]]]:
    """Yield (case name, precision name, thunk); tensors are made once, outside the thunks."""
    for prec, dt in DTYPES.items():
        for m, n, k in ((1024, 1024, 1024), (1000, 1000, 999)):
            a, b = torch.randn(m, k, device=dev, dtype=dt), torch.randn(k, n, device=dev, dtype=dt)
            yield f"mm_{m}x{n}x{k}_{prec}", prec, lambda a=a, b=b: torch.mm(a, b)
        a, b = torch.randn(8, 256, 128, device=dev, dtype=dt), torch.randn(8, 128, 256, device=dev, dtype=dt)
        yield f"bmm_8x256x256x128_{prec}", prec, lambda a=a, b=b: torch.bmm(a, b)
        if prec == "fp64":
            continue
        x = torch.randn(8, 64, 56, 56, device=dev, dtype=dt)
        w = torch.randn(64, 64, 3, 3, device=dev, dtype=dt)
        yield f"conv2d_3x3_nchw_{prec}", prec, lambda x=x, w=w: F.conv2d(x, w, padding=1)
        xl, wl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        yield f"conv2d_3x3_nhwc_{prec}", prec, lambda x=xl, w=wl: F.conv2d(x, w, padding=1)
        x3 = torch.randn(8, 3, 224, 224, device=dev, dtype=dt)
        w3 = torch.randn(64, 3, 7, 7, device=dev, dtype=dt)
        yield f"conv2d_7x7_c3_s2_{prec}", prec, lambda x=x3, w=w3: F.conv2d(x, w, stride=2, padding=3)
        q = torch.randn(4, 8, 512, 64, device=dev, dtype=dt)
        yield f"sdpa_causal_{prec}", prec, lambda q=q: F.scaled_dot_product_attention(q, q, q, is_causal=True)
        xs = torch.randn(4096, 1024, device=dev, dtype=dt)
        yield f"layer_norm_{prec}", prec, lambda x=xs: F.layer_norm(x, (1024,))
        yield f"gelu_{prec}", prec, lambda x=xs: F.gelu(x)
        yield f"softmax_{prec}", prec, lambda x=xs: torch.softmax(x, dim=-1)
    for prec in ("fp16", "bf16", "fp32"):
        dt = DTYPES[prec]
        x = torch.randn(512, 1024, device=dev, dtype=dt, requires_grad=True)
        w = torch.randn(768, 1024, device=dev, dtype=dt, requires_grad=True)
        yield f"linear_fwd_bwd_{prec}", prec, lambda x=x, w=w: F.linear(x, w).sum().backward()
        xc = torch.randn(8, 64, 28, 28, device=dev, dtype=dt, requires_grad=True)
        wc = torch.randn(128, 64, 3, 3, device=dev, dtype=dt, requires_grad=True)
        yield f"conv2d_fwd_bwd_{prec}", prec, lambda x=xc, w=wc: F.conv2d(x, w, padding=1).sum().backward()
    a8 = torch.randint(-8, 8, (1024, 1024), device=dev, dtype=torch.int8)
    yield "int_mm_1024_int8", "int8", lambda a=a8: torch._int_mm(a, a)


def main() -> int:
    if not torch.cuda.is_available():
        print("tc_zoo.py: needs a CUDA GPU", file=sys.stderr)
        return 1
    pyprof.init()
    torch.backends.cudnn.benchmark = False  # the same algorithms under nsys and under ncu
    zoo = list(cases())
    for _, prec, thunk in zoo:  # warm-up: library initialisation stays out of the range
        with tf32(prec == "tf32"):
            thunk()
    with pyprof.profiled(aten=True):
        for name, prec, thunk in zoo:
            with tf32(prec == "tf32"), pyprof.annotate(name):
                thunk()
    print(f"tc_zoo.py: {len(zoo)} cases run", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
