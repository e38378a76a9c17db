"""A global average pool's backward (issue 27): PyTorch runs adaptive_avg_pool2d to 1x1 as a mean
over H and W (restrided in place, as_strided_, for a channels_last input), so its backward is the
as_strided_ node's zero fill of an N·C buffer, then the mean's dY expanded and multiplied by
1 / (H·W): each kernel its own work, on ResNet-18's H100 capture (examples/resnet.sqlite)."""
from __future__ import annotations

import os
import sys
from math import prod

import pytest

import pyprof
import pyprof.prof.pricing.ops  # noqa: F401  (fills the op table)
from pyprof.prof.pricing.registry import Call, lookup
from pyprof.prof.pricing.values import ITEMSIZE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_resnet_global_average_pool_backward_kernels_carry_their_own_work() -> None:
    """avgpool's (8, 512, 7, 7) fp16 channels_last input: the fill writes 8·512 fp16 zeros
    (FillFunctor, 4 blocks of 128 x 8); the multiply (BUnaryFunctor<MulFunctor>, 392 blocks of
    128 x 4: 200,704 elements) reads dY's 4,096 and writes dX's 200,704, one multiply each."""
    path = os.path.join(ROOT, "examples", "resnet.sqlite")
    got = [(r["kShortName"], r["grid"], row["flops"], row["bytes"])
           for r, row in zip(pyprof.records(path), pyprof.rows(path, columns="op,dir,flops,bytes"))
           if row["op"] == "adaptive_avg_pool2d" and row["dir"] == "bprop"]
    n, nc = 8 * 512 * 7 * 7, 8 * 512
    assert got == [("vectorized_elementwise_kernel", [4, 1, 1], 0, nc * 2),
                   ("elementwise_kernel", [392, 1, 1], n, (n + nc) * 2)]


def _pools() -> list:
    """global_pool_ncu.csv.xz's kernels per case of benchmarks/global_pool.py (a spin_kernel opens each)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from tc_truth import ncu_kernels

    cases: list = []
    for name, counters in ncu_kernels(os.path.join(ROOT, "tests", "data", "kernel_truth", "global_pool_ncu.csv.xz")):
        if "spin_kernel" in name:
            cases.append([])
        else:
            cases[-1].append((name, counters))
    return cases


# benchmarks/global_pool.py's CASES (it imports torch): input shape, channels_last, dtype.
POOLS = [((8, 512, 7, 7), True, "float16"), ((8, 512, 7, 7), False, "float16"), ((32, 1280, 7, 7), True, "float32"),
         ((16, 256, 14, 14), False, "float32"), ((4, 64, 4, 8, 8), True, "float16"), ((8, 64, 100), False, "float32")]


@pytest.mark.parametrize("case", range(len(POOLS)))
def test_global_average_pool_backward_against_nsight_compute(case: int) -> None:
    """Each global pool's backward as ncu counted it on an H100: the multiply wrote dX (32 x its
    write sectors are dX's bytes to the byte), and the formula's bytes are 0.85-1.0 of ncu's (its
    DRAM reads hold dY and some KB of the kernel's own); a channels_last input's zero fill (after
    the `torch.ones` of dY) wrote the N·C elements the formula's grad_fill part says."""
    shape, channels_last, dtype = POOLS[case]
    marker = {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": f"adaptive_avg_pool{len(shape) - 2}d",
              "args": [{"shape": list(shape), "dtype": dtype}, 1]}
    cost = lookup("torch.nn.functional", marker["op"])(Call(marker))
    size, n, nc = ITEMSIZE[dtype], prod(shape), shape[0] * shape[1]
    kernels = _pools()[case]
    [mul] = [c for name, c in kernels if "MulFunctor" in name]
    fills = [c for name, c in kernels if "FillFunctor" in name]
    assert (cost.bwd_flops, cost.bwd_bytes, cost.grad_fill) == (n, (n + nc) * size, nc)
    assert 32 * mul["lts__t_sectors_srcunit_tex_op_write.sum"] == n * size
    assert 0.85 <= cost.bwd_bytes / (mul["dram__bytes_read.sum"] + 32 * mul["lts__t_sectors_srcunit_tex_op_write.sum"]) <= 1.0
    assert [32 * c["lts__t_sectors_srcunit_tex_op_write.sum"] for c in fills[1:]] == ([nc * size] if channels_last else [])
