"""The helper kernels of a matrix product's call (a GEMM, and a convolution's implicit GEMM): what
cuBLAS, cuBLASLt and PyTorch do to its output besides computing it (beta's zeroing, the bias added
apart, by an add kernel or cuBLASLt's epilogue, or broadcast before the GEMM), its strided
operands made contiguous before it, the split-K
reductions and passes that sum its partial products, and the tile (M x N) its kernel's name
states, which tells which output a launch's grid covers.

The families and kernel patterns here are read by parts.family(); the parts are put together with
the other kinds' in parts.forward_parts and taken by parts.CallParts.
"""
from __future__ import annotations

import math
import re

from .op_ranges import template_dtype
from .part import ADD, CONJ, CONTIGUOUS, Part, launch_count
from .registry import GEMM, MMA_KINDS, Cost
from .values import FLOATING, ITEMSIZE

SPLIT_K, BETA, EPILOGUE, BROADCAST = "split-k", "beta", "epilogue", "broadcast"
# cuBLASLt's reduction of a split-K GEMM's partial products: splitKreduce_kernel<rows x cols
# tile: (int)32, (int)16, int, partials' type, output's type, ...>, one block per 32 output columns
# and 16 rows (ncu: a <..., float, __half, ...> one stored 2 bytes an output element).
SPLIT_K_KERNEL = re.compile(r"\bsplitKreduce_kernel<\(int\)(\d+), \(int\)(\d+)(?:, \w+, [\w:]+, ([\w:]+)[,>])?")
# CUTLASS's (cuDNN's cutlass kernels') reduction of a split-K convolution's partial products:
# ReduceSplitK<MatrixShape<rows, cols>, ..., ReduceAdd<partials' type, ...>>, one block per rows x
# cols tile of the output, the grid's x over its rows and y over its columns.
CUTLASS_SPLIT_K = re.compile(r"\bReduceSplitK<[\w:]*MatrixShape<\(int\)(\d+), \(int\)(\d+)>.*?\bReduceAdd<([\w:]+),")
# cuBLASLt's nvjet GEMM: nvjet_sm90_<types>_<tile M>x<tile N>_<tile K>x<stages>_<cluster M>x<cluster
# N>_<h|v>_..., its last type letter the output's (s: fp32). One that leaves split-K partials for a
# splitKreduce_kernel after it says `_splitK_` further on; its grid's z is 1, its blocks the
# output's tiles (padded to whole clusters) times the splits.
_NVJET = re.compile(r"\bnvjet_sm\d+_[a-z]*?([a-z])_(\d+)x(\d+)_\d+x\d+_(\d+)x(\d+)_[hv]_")
# cuBLAS's scaling of a GEMM's output by beta (scal_kernel) before a split-K kernel accumulates
# into it (sgemm_largek's grid z); PyTorch passes beta 0: the output zeroed, written once.
BETA_KERNEL = re.compile(r"\bscal_kernel<")
# cuBLASLt's epilogue run as a kernel of its own after a GEMM kernel that cannot fuse it: the bias
# PyTorch's addmm hands it (CUBLASLT_EPILOGUE_BIAS) added to every output element.
EPILOGUE_KERNEL = re.compile(r"\bcublasLt::epilogue::impl::globalKernel<")
# A GEMM kernel's tile (M x N) as cuBLAS, cuBLASLt, CUTLASS and xmma names spell it: nvjet_sm90_hsh_64x8_...,
# ..._tilesize64x64x8_..., cutlass_80_simt_sgemm_64x64_8x5_...
_GEMM_TILE = re.compile(r"(?:tilesize|_)(\d+)x(\d+)(?:x\d+)?_")


def output_parts(cost: Cost | None) -> list[Part]:
    """What a matrix op's forward call may do to its output besides computing it, in the dtype the
    op ran in: a bias added apart (output and bias read, output written: one add per output
    element), by PyTorch (an add kernel) or by cuBLASLt's epilogue kernel; for a GEMM, also the
    bias broadcast into the output before a GEMM with beta 1 (PyTorch's addmm off cuBLASLt's bias
    epilogue: the bias read, the output written; a copy in one dtype, taken by
    `direct_copy_kernel_cuda` only, not by autocast's casts) and cuBLAS's zeroing of the output before a
    split-K kernel accumulates into it (written once). From the op's Cost alone: a marker's or
    an aten range's (aten::addmm)."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind not in MMA_KINDS or not cost.out_elems or not size:
        return []
    out, bias = cost.out_elems, cost.bias_elems
    parts = [Part(BETA, out, 0, out * size)] if cost.kind == GEMM else []
    if not bias:
        return parts
    added = [Part(fam, out, out, (2 * out + bias) * size) for fam in ((ADD, EPILOGUE) if cost.kind == GEMM else (ADD,))]
    return added + parts + ([Part(BROADCAST, out, 0, (out + bias) * size)] if cost.kind == GEMM else [])


def strided_operands(marker: dict, cost: Cost | None) -> list[Part]:
    """A GEMM's operands made contiguous before it: torch.matmul, einsum and linear fold an
    operand's batch dimensions into one with reshape, which copies one whose strides cannot be
    viewed so (swin's q @ k.transpose(-2, -1) on the permuted qkv: both copied), and cuBLAS takes
    a matrix only with a unit stride in one of its last two dimensions. For each tensor argument
    the marker says is laid out otherwise than contiguous (`strides`, `format`), a copy of its
    elements (read and written; `direct_copy_kernel_cuda`, one dtype) in the dtype the GEMM runs
    in (autocast's cast keeps a permuted layout). Whether it is copied depends on the strides:
    a part no kernel takes costs nothing. einsum permutes each operand to its batch, kept and
    summed indices first, which a contiguous operand may not be either (the FNO's
    `bixy,ioxy->boxy`: its weights' [x, y, i, o] order copied): every operand of einsum."""
    if cost is None or cost.kind != GEMM:
        return []
    low = marker.get("autocast")
    permutes = marker.get("op") == "einsum"
    parts = []
    for arg in _tensor_args(marker.get("args") or []) + _tensor_args(list((marker.get("kwargs") or {}).values())):
        if not permutes and "strides" not in arg and "format" not in arg or not isinstance(arg.get("shape"), list):
            continue
        dtype = low if low in ITEMSIZE and arg.get("dtype") in FLOATING else arg.get("dtype")
        size, numel = ITEMSIZE.get(dtype), math.prod(arg["shape"])
        if size and numel:
            parts.append(Part(CONTIGUOUS, numel, 0, 2 * numel * size))
    return parts


def einsum_grad_copies(marker: dict, cost: Cost | None) -> list[Part]:
    """What einsum's backward copies besides dY once (contiguous_grad): dY again for its second
    product, and for each operand its gradient, permuted back from the products' index order, made
    contiguous and, of a complex operand, its conjugate materialised (the other product reads
    it: 1 FLOP an element, the imaginary part negated), each read and written in the op's dtype.
    Which run depends on the equation and the strides: a part no kernel takes costs nothing."""
    size = ITEMSIZE.get(cost.dtype) if cost is not None else None
    if cost is None or cost.kind != GEMM or marker.get("op") != "einsum" or not size:
        return []
    parts = [Part(CONTIGUOUS, cost.out_elems, 0, 2 * cost.out_elems * size)] if cost.out_elems else []
    for arg in _tensor_args(marker.get("args") or []):
        numel = math.prod(arg["shape"]) if isinstance(arg.get("shape"), list) else 0
        if numel:
            parts.append(Part(CONTIGUOUS, numel, 0, 2 * numel * size))
            if str(arg.get("dtype")).startswith("complex"):
                parts.append(Part(CONJ, numel, numel, 2 * numel * size))
    return parts


def _tensor_args(values: list) -> list[dict]:
    """The tensors (their encoded dicts) among a marker's argument values, those in a list too."""
    out = []
    for v in values:
        out += [t for t in v if isinstance(t, dict) and "shape" in t] if isinstance(v, list) else \
            [v] if isinstance(v, dict) and "shape" in v else []
    return out


def split_pass(kernel: str | None) -> bool:
    """Whether a kernel with a GEMM's name is cuBLAS's split-K pass after the GEMM (xmma's
    `..._cute_split_k_kernel__5x_cublas`, `..._execute_split_k_kernel`): it sums the partial
    products the GEMM's grid z left, it computes no product."""
    return "split_k_kernel" in (kernel or "")


def nvjet_splits(gemm: tuple | None, rows: int, cols: int) -> int | None:
    """The split count of an nvjet split-K GEMM launch `gemm` (kernel name, grid) that wrote the
    partials of a rows x cols output (_NVJET, `_splitK_`): its grid's blocks over the output's tiles,
    tile M over the columns (cuBLAS's column-major M: the reduction's x) and tile N over the rows,
    each count rounded up to a whole number of clusters (a grid is whole clusters). Nsight Compute
    on 49 such launches (conv_ncu_workspace.csv.xz): their fp32 partial writes are splits x
    output x 4 bytes, the splits so counted (32x64 tiles, 1x2 clusters, 128 x 32 output: 2 tiles,
    grid 2 x 63, 63 splits; 64x32 tiles, 1x4 clusters, 96 x 32: 3 tiles in 4, grid 4 x 17, 17).
    None for any other kernel, or where the blocks are no whole number (2 or more) of splits."""
    m = _NVJET.search(gemm[0]) if gemm and "_splitK_" in (gemm[0] or "") else None
    splits = _tile_multiple(gemm[1], rows, cols, *(int(g) for g in m.groups()[1:])) if m else None
    return splits if splits is not None and splits >= 2 else None


def nvjet_per_image(gemm: tuple | None, rows: int, cols: int, images: int | None) -> bool:
    """Whether an nvjet GEMM launch `gemm` (name, grid), not a split-K one, ran one product per
    image of a convolution of `images` images, each writing a rows x cols fp32 output: its grid's
    blocks are the output's tiles (as nvjet_splits counts them) times the images, exactly, and its
    name's output type is fp32. cuDNN's weight gradient of an NCHW 1x1 convolution does so, one
    gradient an image, which reduce_wgrad_nchw_helper then sums (Nsight Compute on unet's two 384 x
    128 ones over 8 images, 64x48 tiles in 1x2 clusters, grid 2 x 64: 8 x 384 x 128 x 4 bytes of L2
    writes, to the byte)."""
    m = _NVJET.search(gemm[0] or "") if gemm and "_splitK_" not in (gemm[0] or "") else None
    if m is None or m.group(1) != "s" or not images or images < 2:
        return False
    return _tile_multiple(gemm[1], rows, cols, *(int(g) for g in m.groups()[1:])) == images


def _tile_multiple(grid: object, rows: int, cols: int, tile_m: int, tile_n: int, cluster_m: int,
                   cluster_n: int) -> int | None:
    """An nvjet launch's blocks over a rows x cols output's tiles, tile M over the columns and N
    over the rows, each count rounded up to whole clusters; None where not whole or not known."""
    blocks = launch_count(grid)
    if blocks is None or min(tile_m, tile_n, cluster_m, cluster_n, rows, cols) <= 0:
        return None
    tiles = _whole_clusters(cols, tile_m, cluster_m) * _whole_clusters(rows, tile_n, cluster_n)
    multiple, left = divmod(blocks, tiles)
    return None if left else multiple


def nvjet_rows(kernel: str | None, grid: object, cols: int) -> tuple | None:
    """(low, high): the row counts of a rows x `cols` output whose tiles make an nvjet launch's
    grid, not a split-K one (its blocks, as _tile_multiple counts them, once: tile M over the
    columns, N over the rows, each rounded up to whole clusters; gru_packed_bf16's input
    projection, 400 x 384 in 64x24 tiles, 2x4 clusters: 6 x 20 = 8 x 15 blocks); None for any
    other kernel or a grid no row count makes."""
    m = _NVJET.search(kernel or "") if kernel and "_splitK_" not in kernel else None
    blocks = launch_count(grid)
    if m is None or blocks is None or cols <= 0:
        return None
    tile_m, tile_n, cluster_m, cluster_n = (int(g) for g in m.groups()[1:])
    q, left = divmod(blocks, _whole_clusters(cols, tile_m, cluster_m))
    if left or q <= 0 or q % cluster_n:
        return None
    return (q - cluster_n) * tile_n + 1, q * tile_n


def _whole_clusters(extent: int, tile: int, cluster: int) -> int:
    """Tiles covering `extent`, rounded up to whole clusters of `cluster` tiles."""
    tiles = -(-extent // tile)
    return -(-tiles // cluster) * cluster


def split_partials(gemm: tuple, outputs: list, nbytes: int | None, size: int | None,
                   unbatched: bool = False) -> int | None:
    """The bytes of a GEMM launch `gemm` (name, grid) priced at `nbytes` with its output written
    once in `size`-byte elements, where it split K: it writes its splits' fp32 partials in place of
    the output, the output the one of `outputs` (rows, cols) its splits are of. An nvjet split-K
    GEMM's splits are its grid's blocks over that output's tiles (nvjet_splits; Nsight Compute:
    splits x output x 4 bytes of L2 writes, to the byte). Any other launch of a GEMM of one
    product (`unbatched`: its grid's z is no batch) splits K in its grid's z, 2 or more: the
    partials a split-K reduction after it sums (split_k, split_sum), or, where none follows
    (cuBLAS's sgemm_largek), adds into the output one after another (Nsight Compute on the
    recommender's cuBLAS and CUTLASS GEMMs of 4 splits: their L2 writes, to the byte); of the
    output whose tiles make its grid (tiled_outputs), else of any (a CUTLASS grid swizzled past
    its tiles: 4 x 5 tiles in 16 x 2 blocks). `nbytes` unchanged for any other kernel, or where
    not one output fits."""
    if nbytes is None or size is None:
        return nbytes
    fits = {(r * c, s) for r, c in outputs for s in [nvjet_splits(gemm, r, c)] if s}
    z = grid_z(gemm[1]) if unbatched else None
    if z is not None and z >= 2:
        fits |= {(r * c, z) for r, c in tiled_outputs(gemm[0], gemm[1], outputs) or outputs}
    if len(fits) != 1:
        return nbytes
    out, splits = fits.pop()
    return nbytes - out * size + splits * out * 4


def split_k(kernel: str, grid: object, splits: int | None, outputs: list, size: int | None,
            gemm: tuple | None = None) -> tuple | None:
    """(FLOPs, bytes) of a split-K reduction: `splits` partial products of the GEMM output (read
    in the type its name states: cuBLASLt's partials' third type argument, CUTLASS's ReduceAdd's
    first), summed (splits - 1 adds an element) and written once in the type cuBLASLt's name
    states after the partials' (SPLIT_K_KERNEL), else in `size`-byte elements.
    `outputs`: the (rows, cols) the output may be (a backward's gradients); the one whose tiles
    make the grid is taken: cuBLASLt's splitKreduce_kernel<cols, rows> one block per 32 columns
    (x) and 16 rows (y), else the one whose rows need at least its y blocks (a long output strides
    over a capped grid: 1000 rows in 21 blocks); CUTLASS's ReduceSplitK<MatrixShape<rows, cols>>
    its rows in x and its columns in y. `gemm`: the matrix kernel's launch (name, grid) before
    it; an nvjet split-K GEMM's splits follow from it and that output (nvjet_splits), `splits`
    (its grid's z, 1) aside. None when the splits, the output or the types are not known, or
    two outputs fit."""
    cublas, cutlass = SPLIT_K_KERNEL.search(kernel), CUTLASS_SPLIT_K.search(kernel)
    partial = ITEMSIZE.get(template_dtype(kernel) if cutlass is None else template_dtype(cutlass.group(3)))
    if cublas is not None and cublas.group(3):
        size = ITEMSIZE.get(template_dtype(cublas.group(3)))
    if cublas is None and cutlass is None or partial is None or size is None \
            or not isinstance(grid, list) or len(grid) < 2 or not all(type(d) is int and d > 0 for d in grid):
        return None
    if cublas is not None:
        cols, rows = int(cublas.group(1)), int(cublas.group(2))
        wide = [(r, c) for r, c in outputs if -(-c // cols) == grid[0]]
        fits = {(r, c) for r, c in wide if grid[1] == -(-r // rows)} or \
            {(r, c) for r, c in wide if grid[1] < -(-r // rows)}
    else:
        rows, cols = int(cutlass.group(1)), int(cutlass.group(2))
        fits = {(r, c) for r, c in outputs if (-(-r // rows), -(-c // cols)) == (grid[0], grid[1])}
    works = {split_sum(nvjet_splits(gemm, r, c) or splits, r * c, size, partial) for r, c in fits}
    return works.pop() if len(works) == 1 else None


def split_sum(splits: int | None, out: int, size: int | None, partial: int = 4) -> tuple | None:
    """(FLOPs, bytes) of a pass summing `splits` partials of an `out`-element output, in
    `partial`-byte elements (fp32 for xmma's split-K pass after a GEMM or a segment-K weight
    gradient): splits - 1 adds an element, the partials read, the output written once in
    `size`-byte elements (bytes None where `size` is); None where nothing was split."""
    if not splits or splits < 2:
        return None
    return (splits - 1) * out, None if size is None else splits * out * partial + out * size


def split_pass_work(kernel: str | None, grid: object, splits: int | None, outputs: list,
                    size: int | None) -> tuple | None:
    """(FLOPs, bytes) of cuBLAS's split-K pass (split_pass) after a GEMM launch whose grid z split
    K `splits` ways: split_sum over the output, the one of `outputs` (rows, cols) the pass's tiles
    cover (tiled_outputs); None where nothing was split or no one output is covered."""
    tiled = tiled_outputs(kernel, grid, outputs)
    return split_sum(splits, tiled[0][0] * tiled[0][1], size) if len(tiled) == 1 else None


def gemm_tile(kernel: str | None) -> tuple | None:
    """(M, N) of the tile a GEMM kernel's name states (_GEMM_TILE), None where it states none."""
    m = _GEMM_TILE.search(kernel or "")
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def gemm_tiles(kernel: str | None, grid: object) -> tuple | None:
    """(tile M, tile N, the grid's x * y blocks) of a GEMM launch whose name states its tile
    (_GEMM_TILE; z splits K or batches); None where the name states none or the grid is not
    positive ints."""
    tile = gemm_tile(kernel)
    if tile is None or launch_count(grid) is None or len(grid) < 2:
        return None
    return tile[0], tile[1], grid[0] * grid[1]


def tiled_outputs(kernel: str | None, grid: object, outputs: list) -> list:
    """The distinct (rows, cols) among `outputs` (the matrices a GEMM call may write) whose tiles,
    M x N as the kernel's name states them (either way round), make its grid's x * y blocks (z
    splits K): a backward's input and weight gradients of one shape are one output, its bias
    gradient not a tiled one. All of them, distinct, where the name states no tile or the grid is
    not 3 ints."""
    distinct = list(dict.fromkeys(outputs))
    tiles = gemm_tiles(kernel, grid)
    if tiles is None:
        return distinct
    a, b, blocks = tiles
    return [(r, c) for r, c in distinct
            if blocks in (-(-r // a) * -(-c // b), -(-r // b) * -(-c // a))]


def grid_z(grid: object) -> int | None:
    """A launch grid's z (a split-K GEMM's split count), None where the record's grid is not 3 ints."""
    return grid[2] if isinstance(grid, list) and len(grid) == 3 and type(grid[2]) is int else None
