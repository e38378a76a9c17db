"""How many outputs PyTorch's `reduce_kernel` wrote, told by its launch: for a reduction whose
range carries no dims and whose output no consumer's range names (a mean whose result only a view
reads: adaptive_avg_pool2d's before a flatten, a sum before a transpose).

`setReduceConfig` (ATen/native/cuda/Reduce.cuh) derives the block and the grid's x from the number
of outputs and of inputs per output, in one of two schemes: reducing along the fastest-moving
dimension (block.x splits the inputs; `vectorize_input` divides them by the load vector when one
dim of at least 128 is reduced), or along another (block.x splits the outputs, each thread loading
`output_vec_size` of them: the kernel's second template argument). block.y then splits the inputs
too where each thread would keep at least min(16·block.y, 256) of them, else the outputs; grid.y
(`ctas_per_output`) splits the inputs across blocks, only after block.y did and with 256 or more
left per thread. Each reduction of the input's dims (a subset of them: the output's size) is run
through that computation (launch_fits: the output sizes that give the kernel's launch); where
exactly one does, it is the reduction's, and of a few shapes the ranges offer (a bias gradient's
sum: the bias, or an input of the 1 channel the bias is not) it keeps those the launch can write.
Stride facts the trace lacks (which scheme, whether the loads were vectorized) are tried both
ways, so a size is ruled out only where no reading gives the launch.
"""
from __future__ import annotations

import re
from functools import lru_cache
from itertools import combinations
from math import prod

from .part import last_pow2

# reduce_kernel<max threads, output_vec_size, ReduceOp<..., vt0, input_vec_size>>, lower-cased.
_KERNEL = re.compile(r"\breduce_kernel<\(int\)(\d+), \(int\)(\d+), .*\(int\)(\d+), \(int\)(\d+)>+\(")
_MAX_VALUES_PER_THREAD = 256
_MIN_VALUES_PER_THREAD = 16
_WARP = 32



def _block(dim0: int, dim1: int, max_threads: int) -> tuple[int, int]:
    """ReduceConfig::set_block_dimension."""
    p0 = last_pow2(dim0) if dim0 < max_threads else max_threads
    p1 = last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(p0, _WARP)
    height = min(p1, max_threads // width)
    return min(p0, max_threads // height), height


def _launch(outputs: int, per_output: int, fastest: bool, vectorized: bool, threads: int, out_vec: int,
            in_vec: int) -> tuple[int, int, int, bool] | None:
    """(block.x, block.y, grid.x, whether grid.y may exceed 1) of setReduceConfig for one reading;
    None where the reading cannot happen (a vector that does not divide its dimension)."""
    if fastest:
        if out_vec != 1:
            return None
        dim0, dim1 = (per_output // in_vec if vectorized else per_output), outputs
        if vectorized and (per_output < 128 or per_output % in_vec):
            return None
    else:
        if vectorized or outputs % out_vec:
            return None
        dim0, dim1 = outputs // out_vec, per_output
    if dim0 < 1 or dim1 < 1:
        return None
    bx, by = _block(dim0, dim1, threads)  # threads: MAX_NUM_THREADS / output_vec_size, as the name says
    step_in, step_out = (bx, 1) if fastest else (1, bx)
    split_warps = -(-per_output // step_in) >= min(by * 16, _MAX_VALUES_PER_THREAD)
    if split_warps:
        step_in *= by
    else:
        step_out *= by
    grid_x = -(-(outputs // out_vec) // step_out)
    return bx, by, grid_x, split_warps and -(-per_output // step_in) >= _MAX_VALUES_PER_THREAD


@lru_cache(maxsize=4096)
def launch_fits(kernel: str, shape: tuple, grid: tuple, block: tuple) -> frozenset | None:
    """Every number of outputs of a reduction of `shape`'s dims that gives this launch (a
    `reduce_kernel`'s); None where the launch tells nothing (another kernel, an input of 2^31
    elements or more)."""
    m = _KERNEL.search(kernel)
    n = prod(shape)
    if m is None or len(grid) != 3 or len(block) != 3 or block[2] != 1 or grid[2] != 1 or not 1 < n < 1 << 31:
        return None
    threads, out_vec, in_vec = int(m.group(1)), int(m.group(2)), int(m.group(4))
    sizes = {prod(shape[i] for i in range(len(shape)) if i not in reduced)
             for r in range(len(shape) + 1) for reduced in combinations(range(len(shape)), r)}
    found = set()
    for outputs in sizes:
        for fastest, vectorized in ((True, False), (True, True), (False, False)):
            got = _launch(outputs, n // outputs, fastest, vectorized, threads, out_vec, in_vec)
            if got is not None and got[:3] == (block[0], block[1], grid[0]) and (grid[1] == 1 or got[3]):
                found.add(outputs)
    return frozenset(found)
