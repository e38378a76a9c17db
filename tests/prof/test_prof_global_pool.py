"""A global average pool's backward (issue 27): PyTorch runs adaptive_avg_pool2d to 1x1 as a mean
over H and W (restrided in place, as_strided_, for a channels_last input), so its backward is the
as_strided_ node's zero fill of an N·C buffer, then the mean's dY expanded and multiplied by
1 / (H·W): each kernel its own work, on ResNet-18's H100 capture (examples/resnet.sqlite)."""
from __future__ import annotations

import os

import pyprof

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
