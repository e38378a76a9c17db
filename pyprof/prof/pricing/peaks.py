"""Published dense peak rates per GPU and the math path a kernel ran on, for %-of-peak and the
roofline ridge point. The figures are NVIDIA's datasheet numbers for each product (nvidia.com/
en-us/data-center/: v100, a100, h100, h200, l4, products/a10-gpu, tesla-t4, dgx-b200 per GPU),
dense: the sparsity figures the datasheets also print are twice these and are not used.

A GPU is matched on `gpu.name` from the record (TARGET_INFO_GPU). Names that could mean two
table rows with different figures (an A100 without its memory size or form factor, an H100
without SXM/HBM3 or PCIe) match nothing: na is better than a wrong figure. Memory bandwidth
falls back to the record's own `gpu.memoryBandwidth` when the GPU is not in the table.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

# Math paths: the peak column a kernel is held against.
FP16_TC, TF32_TC, FP32, FP64, FP64_TC, INT8_TC = "fp16_tc", "tf32_tc", "fp32", "fp64", "fp64_tc", "int8_tc"


class Peaks(NamedTuple):
    """Dense peaks: TFLOP/s (TOPS for INT8) per math path, memory bandwidth in GB/s."""

    name: str
    flops: dict
    gbps: float | None


def _row(name, fp16_tc, tf32_tc, fp32, fp64, fp64_tc, int8_tc, gbps) -> Peaks:
    rates = {FP16_TC: fp16_tc, TF32_TC: tf32_tc, FP32: fp32, FP64: fp64, FP64_TC: fp64_tc, INT8_TC: int8_tc}
    return Peaks(name, {k: v for k, v in rates.items() if v is not None}, gbps)


# (pattern on the lower-cased TARGET_INFO_GPU name, row). First match wins.
TABLE = [
    (r"v100.*sxm2", _row("V100 SXM2", 125, None, 15.7, 7.8, None, None, 900)),
    (r"a100.*sxm4.*40gb|a100.*40gb.*sxm", _row("A100 40GB SXM", 312, 156, 19.5, 9.7, 19.5, 624, 1555)),
    (r"a100.*sxm4.*80gb|a100.*80gb.*sxm", _row("A100 80GB SXM", 312, 156, 19.5, 9.7, 19.5, 624, 2039)),
    (r"a100.*80gb.*pcie|a100.*pcie.*80gb", _row("A100 80GB PCIe", 312, 156, 19.5, 9.7, 19.5, 624, 1935)),
    (r"h100.*pcie", _row("H100 PCIe", 756, 378, 51, 26, 51, 1513, 2000)),
    (r"h100.*(?:sxm|hbm3)", _row("H100 SXM", 989, 494.5, 67, 34, 67, 1979, 3350)),
    (r"(?<!g)h200(?!.*nvl)", _row("H200", 989, 494.5, 67, 34, 67, 1979, 4800)),
    (r"(?<![a-z0-9])l4(?![0-9a-z])", _row("L4", 121, 60, 30.3, 0.49, None, 242, 300)),
    (r"(?<![a-z0-9])a10(?![0-9a-z])", _row("A10", 125, 62.5, 31.2, 0.98, None, 250, 600)),
    (r"(?<![a-z0-9])t4(?![0-9a-z])", _row("T4", 65, None, 8.1, 0.25, None, 130, 320)),
    (r"(?<![a-z0-9])b200(?![0-9a-z])", _row("B200", 2250, 1100, 80, 40, 40, 4500, 8000)),
]
_COMPILED = [(re.compile(p), row) for p, row in TABLE]


def _match(name: str) -> Peaks | None:
    low = name.lower()
    for pattern, row in _COMPILED:
        if pattern.search(low):
            return row
    return None


def lookup(gpu: dict | None) -> Peaks | None:
    """Peaks for a record's `gpu` object; bandwidth from the record when the table has no row."""
    if not gpu or not gpu.get("name"):
        return None
    return _peaks(gpu["name"], gpu.get("memoryBandwidth"))


@lru_cache(maxsize=256)
def _peaks(name: str, bandwidth: int | None) -> Peaks | None:
    row = _match(name)
    if row is not None:
        return row
    return Peaks(name, {}, bandwidth / 1e9) if bandwidth else None


def math_path(tensor_cores: bool, dtype: str | None) -> str | None:
    """The peak column for a kernel: Tensor Core dtype path, or CUDA-core precision; None if none fits
    (fp8 and 16-bit CUDA-core math have no column in the table)."""
    if dtype is None:
        return None
    if tensor_cores:
        if dtype in ("float16", "bfloat16"):
            return FP16_TC
        if dtype in ("float32", "complex64"):
            return TF32_TC
        if dtype in ("int8", "uint8"):
            return INT8_TC
        if dtype in ("float64", "complex128"):
            return FP64_TC
        return None
    if dtype in ("float32", "complex64"):
        return FP32
    if dtype in ("float64", "complex128"):
        return FP64
    return None
