"""The kernels of one cuDNN RNN call, each its own work (issue 27): which GEMM of the call a
matrix kernel is, from the call's shape (ops/rnn.py RnnShape), the kernel's tiles and grid, and
the order cuDNN launches its kernels in.

What cuDNN runs (CUDNN_RNN_ALGO_STANDARD, as torch.lstm/gru/rnn_* call it; H100 captures of
tests/data/kernel_truth/ (3-layer GRU, fp16, nvjet GEMMs), tests/data/truth_gru and truth_lstm
(fp32, 1-layer GRU and 2-layer bidirectional LSTM, xmma and CUTLASS GEMMs), every GEMM's FLOPs
checked against Nsight Compute's executed matrix ops or FP32 instructions of the same kernel):

- forward, per layer and direction: the input projection x·W_ihᵀ (rows x G·H, K = the layer's
  input size: the input's features for layer 0, D·R above) as one GEMM or as chunks of whole
  steps, each chunk launched before its steps; per step the recurrent GEMM h·W_hhᵀ (N x G·H,
  K = R) and the cell kernel. With several layers the chunks run as a wavefront: chunk c of layer
  l in wave c + l, a wave's chunks from the lowest layer up, a layer's chunk only once the layer
  below has run the steps it reads (bidirectional: all of them); both directions of a layer
  launch their chunks back to back;
- backward, layers from the top (the chunks in the same wavefront, from the top layer down): per
  step the cell kernel (`_bp1`), then the recurrent GEMM dgates·W_hh (N x R, K = G·H); after a
  run of steps, the input-gradient chunk dgates·W_ih over those steps (rows x I_l, K = G·H; one
  per direction, back to back, then the directions' sum); then the flat weight gradient's fill,
  the bias gradients, and per layer and direction the weight gradients dgatesᵀ·[h0; y] in three
  GEMMs: the first step's against h0 (G·H x R, K = N), the other steps' against the layer's
  output (K = (T - 1)·N), and dW_ih (G·H x I_l, K = T·N);
- with a projection (LSTM proj_size P; fixture_lstm's Nsight Compute rows and the coverage
  capture's 2-layer bidirectional LSTM): forward, right after each cell kernel the step's
  projection h·W_hrᵀ (N x P, K = H); backward, first in each step the sum of the step's output
  gradient and the recurrent one (LSTM_dgrad_combine_dh_di, N x P adds), then the projection's
  gradient (N x H, K = P), the cell kernel and the recurrent GEMM; after dW_ih each layer and
  direction's dW_hr (P x H, K = T·N). Dropout between layers (cuDNN's generate and apply mask
  kernels) runs between a layer's steps and the next layer's chunks.

Which GEMM a kernel is follows from the order: forward, a GEMM is a chunk when the last chunk
run's steps have all run (the call starts with one), else a step's recurrent GEMM; backward, the
GEMM right after a cell kernel is the step's, one after cell kernels since the last chunk a chunk,
one after every step a weight gradient; with a projection, the GEMM right after a cell (forward)
or the gradients' sum (backward) is the projection's. A GEMM's output rows are those its tiles
cover (_rows_tiled), which must fit what the order says; cuBLAS's small-N gemmSN kernels state no
tile, and the order alone places them. A split-K reduction after a GEMM sums the partials of the
output that GEMM was told to write (RnnCall._split_k). A forward chunk whose tiles fit more than one row count (or
state none) takes its steps from the records read ahead (tensor_flow's window, read on up to
FURTHER records): the cell kernels that follow it up to the next chunk or the call's end; where
the reading ends first (or a memo replay reads none), na, and from there the tiles alone tell a
recurrent GEMM. The GEMM's bytes: both operands read and the output written once (within 3% of
Nsight Compute's).

A packed sequence's step runs as many rows as its sequences still running, b_t (its batch sizes,
which a marker of torch.lstm/gru/rnn_* carries: docs/markers.md; rnn_packed of the coverage
capture, one layer and direction, tf32): the forward runs the steps from the first, the backward
from the last (the cell kernels' grids follow b_t: elemWiseRNNcell and RNN_elementWise_bp1 launch
one 256-thread block per 256 of the step's b_t x H elements), so each step's recurrent GEMM and
cell kernel is priced on b_t rows, a chunk on its steps' rows (the candidates its tiles fit
among the steps' row offsets), and dW_hh runs as one GEMM against h0 (K = b_0 = N), then one per
run of steps whose step before ran as many rows (a step's gradients and the outputs it pairs with
lie that many rows apart in the packed layout; padded input is one run): _recurrent_ks. With two
directions (gru_packed of the coverage capture: 2 layers, bidirectional) a layer's steps run in turn,
each step's GEMMs (the first direction's on step i, the second's on step T-1-i) then their cells,
the layers one after another; backward each direction's cell and GEMM in turn, the first from the
last step; the second direction's dW_hh starts each sequence at its own last step, from h0. Several
one-directional layers run as the wavefront above (gru3_packed: forward chunks of 10 steps,
backward of 8): a run's steps are its chunk's layer's, from where that layer's chunks before it
ended (the run cursor, RnnCall._start_run; backward, where the chunk comes after its steps, the
layer the next chunk will be of); dropout between its layers applies to a chunk's rows. Where the
batch sizes are not known (the aten ranges carry none; markers of
pyprof before them), only what does not depend on them is priced, in one layer and direction
without a projection: forward the input projection where it is the call's one chunk (the records
read ahead: its cells run to the call's end: all rows), the first step's recurrent GEMM and cell
(N rows); backward the input gradient where it is the call's one chunk (no cell kernel after it),
dW_hh against h0 and dW_ih (the first and last weight-gradient GEMMs); the rest na.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from itertools import accumulate, groupby
from typing import Callable

from pyprof.kernel_names import MMA, SIMT, classify

from .gemm_parts import BETA, SPLIT_K, gemm_tile, gemm_tiles, grid_z, nvjet_rows, split_k, split_pass
from .op_ranges import written_dtype
from .part import launch_count
from .parts import family
from .registry import Cost
from .values import ITEMSIZE, reduce_adds

# cuDNN's RNN kernels: per time step, layer and direction a recurrent GEMM and a cell kernel
# (forward `elemWiseRNNcell` or `<MODE>_elementWise_fp`, backward `<MODE>_elementWise_bp1`).
_RNN_CELL = re.compile(r"\belemWiseRNNcell\b|_elementWise_(?:fp|bp1)\b")
# After its steps, cuDNN's GRU backward sums each layer's gate gradients into its bias gradients.
_GRU_BIAS_GRAD = re.compile(r"\bGRU_elementWise_bp2\b")
# LSTM's and the plain RNN's: one per layer and direction.
_BIAS_GRAD = re.compile(r"\bGENERIC_elementWise_bp2\b")
# A bidirectional backward's sum of the two directions' input gradients, after a layer's chunks.
_DIRECTIONS_SUM = re.compile(r"\bRNN_bidirectional_accum_bp1")
# With a projection (LSTM proj_size), backward, first in each step: the step's output gradient and
# the recurrent one from the step after it summed, before the projection's GEMM.
_COMBINE = re.compile(r"\bLSTM_dgrad_combine_dh_di\b")
# Dropout between layers (cuDNN's own: a mask drawn and applied; backward applied again): kernels
# of the call between a layer's steps and the next layer's chunks, neither GEMMs nor cells.
_DROPOUT = re.compile(r"\bdropout_(generate|apply)_mask\b")
# What each thread of cuDNN's dropout_generate_mask loads of its curandStateXORWOW and stores back
# (d, v[5], the Box-Muller flags and spares: 44 of its 48 bytes; Nsight Compute on an H100, the
# coverage capture's LSTM and three others: 44 bytes a thread each way, exactly).
_STATE_BYTES = 44
_MASK_BITS = 32  # the mask: one bit an element, in 32-bit words
# Where torch (re)makes the dropout states (get_dropout_state, aten/src/ATen/native/cudnn/RNN.cpp)
# it first draws their seed on the device: a 0-dim int64 tensor's random_().
_DROPOUT_SEED = re.compile(r"\brandom_kernel<")

# CUTLASS's GEMMs (cuBLAS's and cuDNN's `Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>`)
# launch their tiles through a threadblock swizzle of S columns of tiles (_rows_tiled).
_CUTLASS_GEMM = re.compile(r"\bcutlass_\d+_\w*?gemm_")
_SWIZZLES = (2, 4, 8)

# What the records read ahead say of the call's next kernels: their names, and whether the call
# ended among them (else the window ended first).
Ahead = Callable[[], "tuple[list, bool]"]


def _rows_tiled(kernel: str | None, grid: object, cols: int) -> list[tuple]:
    """The ranges (low, high) of row counts whose rows x `cols` output a GEMM launch's tiles cover
    exactly: its grid's x * y blocks (z splits K or batches) are ceil(rows / tile M) *
    ceil(cols / tile N), the tile M x N read from the name, either way round; or, for a CUTLASS
    GEMM, its threadblock swizzle's grid: x the row tiles times S, y the column tiles over S
    (GemmIdentityThreadblockSwizzle, S = 2, 4 or 8: gru_packed's input projections, 400 x 384 in
    64 x 64 tiles, launch 7·8 x 1 blocks); for nvjet, its clusters' rounding (gemm_parts.nvjet_rows)."""
    nvjet = nvjet_rows(kernel, grid, cols)
    if nvjet is not None:
        return [nvjet]
    tiles = gemm_tiles(kernel, grid)
    if tiles is None:
        return []
    tile_m, tile_n, blocks = tiles
    found = []
    for a, b in ((tile_m, tile_n), (tile_n, tile_m)):
        col_tiles = -(-cols // b)
        q, left = divmod(blocks, col_tiles)
        if not left and q:
            found.append(((q - 1) * a + 1, q * a))  # ceil(rows / a) == q
        for s in _SWIZZLES if _CUTLASS_GEMM.search(kernel) else ():
            q, left = divmod(grid[0], s)
            if not left and q and grid[1] == -(-col_tiles // s):
                found.append(((q - 1) * a + 1, q * a))
    return sorted(set(found))


def _steps_tiled(kernel: str | None, grid: object, cols: int, ends: list, start: int) -> list[int]:
    """The step counts k whose chunk from step `start` on, ends[start + k] - ends[start] rows, a
    GEMM launch's tiles cover exactly (`ends`: the steps' row offsets, increasing)."""
    found = set()
    for low, high in _rows_tiled(kernel, grid, cols):
        first = bisect_left(ends, ends[start] + low, start + 1)
        found.update(range(first - start, bisect_right(ends, ends[start] + high, first) - start))
    return sorted(found)


def _fits(kernel: str | None, grid: object, rows: int, cols: int) -> bool:
    """Whether the launch's tiles cover a rows x cols output exactly."""
    return rows > 0 and any(low <= rows <= high for low, high in _rows_tiled(kernel, grid, cols))


def _untiled(kernel: str | None) -> bool:
    """A GEMM whose name states no tile (cuBLAS's small-N `gemmSN_*` kernels, which cuDNN runs
    for a step's GEMMs of few rows): which GEMM of the call it is, the order alone tells."""
    return gemm_tile(kernel) is None


def _may_write(kernel: str | None, grid: object, rows: int, cols: int) -> bool:
    """Whether a GEMM the order places may be it: its tiles cover rows x cols exactly, or its
    name states none."""
    return _untiled(kernel) or _fits(kernel, grid, rows, cols)


def _gemm(m: int, n: int, k: int, size: int) -> tuple:
    """(FLOPs, bytes) of an m x n output over K = k: both operands read, the output written once."""
    return 2 * m * n * k, (m * k + k * n + m * n) * size


def _steps_ahead(names: list, ended: bool, dirs: int, proj: bool) -> tuple | None:
    """From the names of the call's kernels after a forward GEMM: (the GEMMs from it to the next
    cell kernel, itself included; the cell kernels from there to the next chunk run (more GEMMs
    between two cells than directions) or the call's end; whether the call's end came first).
    With a projection the GEMM right after a cell is the step's projection, not counted. None
    where the reading ends first or a kernel that is neither comes (cuBLAS's output scaling and
    split-K reductions, and dropout between layers, aside)."""
    group, cells, gemms, after_cell = 1, 0, 0, False
    for name in names:
        if _RNN_CELL.search(name or ""):
            cells, gemms, after_cell = cells + 1, 0, True
        elif classify(name) in (MMA, SIMT) and not split_pass(name):
            projection, after_cell = proj and after_cell, False
            if projection:
                continue
            if not cells:
                group += 1
                continue
            gemms += 1
            if gemms > dirs:
                return group, cells, False
        elif family(name) not in (SPLIT_K, BETA) and not _DROPOUT.search(name or ""):
            return None
    return (group, cells, True) if ended else None


def _gemms_ahead(names: list, ended: bool) -> int | None:
    """From the names of the call's kernels after a backward GEMM: how many GEMMs follow it to the
    call's end (split-K passes aside); None where the reading ends first or a cell kernel comes."""
    if not ended or any(_RNN_CELL.search(name or "") for name in names):
        return None
    return sum(classify(name) in (MMA, SIMT) and not split_pass(name) for name in names)


class RnnCall:
    """One cuDNN RNN call (forward or backward) as its kernels come: each kernel's own work
    (`work`), from what the call's kernels before it ran."""

    __slots__ = ("shape", "size", "bprop", "steps", "ends", "cells", "after_cell", "after_combine", "pending", "run",
                 "covered", "chunks", "lost", "wgrad", "layer", "left", "product", "stepped", "cursor",
                 "chunk_rows")

    def __init__(self, cost: Cost, bprop: bool) -> None:
        shape = self.shape = cost.rnn
        self.size = ITEMSIZE.get(cost.dtype)
        self.bprop = bprop
        n = shape.batch
        units = shape.layers * shape.dirs
        # Each step's rows, in time order: N padded; a packed sequence's batch sizes where known.
        sizes = shape.batch_sizes if shape.packed else \
            (n,) * (shape.rows // n) if n and shape.rows % n == 0 else None
        self.steps = len(sizes) if sizes else None  # T, per layer and direction
        self.ends = list(accumulate(sizes, initial=0)) if sizes else None  # the steps' row offsets
        self.cells = 0  # cell kernels so far
        self.stepped = 0  # forward: the steps' recurrent GEMMs since the last cell kernel
        # The run of steps under way: (its first layer and direction, the step it starts at in
        # that unit's order of time, the cell kernels before it); None where not known.
        self.cursor: tuple | None = None
        self.chunk_rows: int | None = None  # the rows of the last chunk
        self.after_cell = False  # the call's last cell or GEMM kernel was a cell
        self.after_combine = False  # backward, projection: the last was the step's gradients' sum
        self.pending = 0  # backward: cell kernels since the last input-gradient chunk
        self.run: list | None = None  # [steps, chunks left] of a run of chunks, one per direction
        self.covered = [0] * units  # steps each layer and direction's chunks covered
        self.chunks = [0] * units  # chunks each layer and direction ran
        self.lost = False  # a chunk's steps or layer was not known, so no later chunk's layer is
        self.wgrad: list | None = None  # backward: the weight gradients to come, (K, output columns)
        self.layer: int | None = None  # the layer of the last chunk
        # forward: cell kernels still to run on the last chunk run's rows (a new run comes at 0;
        # the call starts with one); None once a GEMM was not told
        self.left: int | None = 0
        # the last GEMM's launch (name, grid), and once told its output's (rows, cols) and whether
        # it adds to it (_product)
        self.product: tuple | None = None

    def work(self, kernel: str | None, grid: object, matrix: bool, ahead: Ahead, block: object = None) -> tuple | None:
        """(FLOPs, bytes) of the call's next kernel, or None where the trace cannot say it.
        `matrix`: a GEMM by its name; `ahead`: the call's kernels read ahead of this one; `block`:
        its launch's block (the dropout kernels' work is told by their launch)."""
        shape, size = self.shape, self.size
        if shape is None or size is None:
            return None
        if matrix:
            self.product = (kernel, grid)
            after, self.after_cell = self.after_cell, False
            combined, self.after_combine = self.after_combine, False
            if self.steps is None:
                return self._unstepped(kernel, grid, after, ahead)
            if shape.proj and (combined if self.bprop else after):
                return self._projection(kernel, grid)
            return self._backward_gemm(kernel, grid, after) if self.bprop else self._forward_gemm(kernel, grid, ahead)
        if family(kernel) == SPLIT_K:
            return self._split_k(kernel, grid)
        if self.bprop and shape.proj and _COMBINE.search(kernel or ""):
            self._backward_run()
            self.after_combine = True
            rows = self._step_rows(self.cells)
            return None if rows is None else _combine(shape, rows, size)
        dropout = _DROPOUT.search(kernel or "")
        if dropout:
            return self._dropout(dropout.group(1) == "generate", grid, block)
        if not self.bprop and _DROPOUT_SEED.search(kernel or ""):  # one element written, 0 FLOPs
            seed = ITEMSIZE.get(written_dtype(kernel, None))
            return None if seed is None else (0, seed)
        if self.bprop and _GRU_BIAS_GRAD.search(kernel or ""):
            return _gru_bias_grad(shape, size)
        if self.bprop and _BIAS_GRAD.search(kernel or ""):
            return _bias_grad(shape, size)
        if self.bprop and _DIRECTIONS_SUM.search(kernel or ""):
            return self._directions_sum()
        if not _RNN_CELL.search(kernel or ""):
            return None
        self._backward_run()
        rows = self._step_rows(self.cells)
        self.cells += 1
        self.stepped = 0
        self.after_cell = True
        self.pending += self.bprop
        if self.bprop:
            self.run = None  # a run of chunks is launched back to back
        elif self.left:
            self.run[1] = 0
            self.left -= 1
        if self.steps is None and shape.packed and (self.bprop or self.cells > 1 or shape.dirs != 1):
            return None  # a packed step's rows not told: only the first step's, N, are known
        return None if rows is None else _cell(shape, rows, size, self.bprop)

    def _unstepped(self, kernel: str | None, grid: object, after_cell: bool, ahead: Ahead) -> tuple | None:
        """A GEMM of a packed call whose batch sizes are not known (aten ranges carry them as no
        values): those whose rows do not depend on them, in one layer and direction without a
        projection. Forward the input projection where it is the call's one chunk (the records
        read ahead: its cell kernels run to the call's end), all rows x G·H (K = I), then the
        first step's recurrent GEMM, N rows (a packed sequence's first batch size is its batch);
        backward the input gradient where it is the call's one chunk (no cell kernel after it),
        then of the weight gradients the first, against h0 (K = N), and the last, dW_ih
        (K = all rows). The other GEMMs are na: their steps' rows are not known."""
        s = self.shape
        gh = s.gates * s.hidden
        if not s.packed or s.proj or s.layers * s.dirs != 1 or self.lost:
            return None
        if self.bprop:
            if self.wgrad is not None:
                return self._weight_gradient(kernel, grid)
            if after_cell or not self.cells or self.chunks[0]:
                return None
            self.chunks[0] = 1
            later = _gemms_ahead(*ahead())
            if (later or 0) < 2 or not _may_write(kernel, grid, s.rows, s.in_size):
                self.lost = True
                return None
            self.wgrad = [(gh, s.in_size, s.rows)] + [None] * (later - 2) + [(gh, s.rec, s.batch)]
            return self._product(s.rows, s.in_size, gh)
        if self.cells or self.chunks[0] > 1:
            return None
        self.chunks[0] += 1
        if self.chunks[0] == 2:  # right after the one chunk, before the first cell: the first step's
            return self._product(s.batch, gh, s.rec)
        seen = _steps_ahead(*ahead(), s.dirs, False)
        if seen is None or seen[0] != 2 or not seen[2] or not _may_write(kernel, grid, s.rows, gh):
            self.lost = True
            return None
        return self._product(s.rows, gh, s.in_size)

    def _placed(self, kernel: str | None, grid: object, rows: int, cols: int) -> bool:
        """Whether a GEMM the order places may be the rows x cols one expected (_may_write); for a
        packed call, whose chunks are told by their steps, also where its grid's tiles cover at
        least those rows, or no row count's (sm90 xmma launches more blocks than tiles for a
        small output: 4 for lstm_proj_packed's 16 x 32 projections): the order places it."""
        if _may_write(kernel, grid, rows, cols):
            return True
        tiled = _rows_tiled(kernel, grid, cols) if self.shape.packed else None
        return tiled is not None and (not tiled or rows <= max(high for _, high in tiled))

    def _backward_run(self) -> None:
        """Backward, at a run's first step (its chunk comes after its steps): the run is of the
        layer and direction the next chunk will be (_unit)."""
        if self.bprop and not self.pending and self.shape.packed:
            self._start_run(None if self.lost or self.steps is None else self._unit(1))

    def _start_run(self, unit: int | None) -> None:
        """A run of steps of layer and direction `unit` (and the next, with two directions)
        begins: forward after its chunk, backward at its first cell kernel (its chunk after it)."""
        self.cursor = None if unit is None else (unit, self.covered[unit], self.cells)

    def _step_rows(self, done: int) -> int | None:
        """The rows of the step that runs after `done` steps (cell kernels) of the call: N, a
        packed sequence's batch size of that step. The steps of a run (_start_run) go in turn per
        direction (step i of each before step i + 1), the first direction forward in time from
        the first step, the second from the last; backward the other way round."""
        s = self.shape
        if not s.packed or self.steps is None:
            return s.batch
        if self.cursor is None:
            return None
        unit, start, first = self.cursor
        i, d = divmod(done - first, s.dirs)
        i += start
        if i >= self.steps:
            return None
        t = self.steps - 1 - i if (d == 1) != self.bprop else i
        return self.ends[t + 1] - self.ends[t]

    def _chunk_rows(self, steps: int, unit: int | None) -> int | None:
        """The rows of a chunk of `steps` steps of layer and direction `unit` after those its
        chunks before covered (_step_rows' order of time)."""
        if not self.shape.packed:
            return steps * self.shape.batch
        if unit is None:
            return None
        done, t = self.covered[unit], self.steps
        # (two directions: only a chunk of all steps, the one order seen)
        if done + steps > t or self.shape.dirs == 2 and steps != t:
            return None
        backwards = (unit % self.shape.dirs == 1) != self.bprop
        return self.ends[t - done] - self.ends[t - done - steps] if backwards else self.ends[done + steps] - self.ends[done]

    def _product(self, rows: int, cols: int, k: int, accumulates: bool = False) -> tuple:
        """(FLOPs, bytes) of the GEMM just launched (_gemm), its rows x cols output kept for a
        split-K reduction after it (_split_k), with whether it adds to what the output held."""
        self.product = self.product[:2] + ((rows, cols), accumulates)
        return _gemm(rows, cols, k, self.size)

    def _split_k(self, kernel: str | None, grid: object) -> tuple | None:
        """A split-K reduction after the call's last GEMM (gemm_parts.split_k): its grid's z
        partials of the output that GEMM was told to write summed and written (Nsight Compute on
        truth_lstm's 64 backward steps, CUTLASS's SIMT GEMM split 5 ways: 5 partials of 64 x 256
        read, 335,872 DRAM bytes; the coverage LSTM's input-gradient chunks, 800 x 128 split 5
        ways: 5 partials loaded, to the byte). GRU's backward step adds its product to the dh the
        cell kernel left, and the weight gradients are added into the flat gradient buffer the
        call zeroed (beta 1): the reduction also reads that output and adds it (truth_gru's 16
        steps: one FFMA an element, 401,408 DRAM bytes read; the coverage LSTM's four split
        weight gradients of 1024 x 64: one FFMA an element, 6 x 1024 x 64 x 4 bytes loaded, to
        the byte). None where that GEMM was not told."""
        if self.product is None or len(self.product) < 4:
            return None
        gemm, (rows, cols), accumulates = self.product[:2], self.product[2], self.product[3]
        work = split_k(kernel or "", grid, grid_z(gemm[1]), [(rows, cols)], self.size, gemm)
        if work is None or not accumulates:
            return work
        return work[0] + rows * cols, work[1] + rows * cols * self.size

    def _dropout(self, generate: bool, grid: object, block: object) -> tuple | None:
        """(FLOPs, bytes) of cuDNN's dropout between layers, on the T·N x D·R input of a layer above
        the first, a mask of its own for each direction that reads it. dropout_generate_mask draws
        the whole mask: each thread of its launch loads its curandStateXORWOW and stores it back
        (_STATE_BYTES each way), one bit an element written; 0 FLOPs (a random draw, as random fills
        count). dropout_apply_mask, one thread an element of the rows it covers (forward before
        each input-projection chunk, backward on each input-gradient chunk and again on the
        layer's input for its weight gradient): the rows read, the mask's bits read, the rows
        written (x·mask/(1 - p): 1 FLOP an element); the rows are the whole steps its launch
        fits, where one count does (Nsight Compute on an H100: its stores to the byte, its loads
        the kept elements' and the mask's, 0.95 of these); a packed sequence's, _packed_rows. None
        where no one row count fits the launch (a grid-stride launch)."""
        s = self.shape
        g, b = launch_count(grid), launch_count(block)
        row = s.dirs * s.rec
        if g is None or b is None or s.layers < 2:
            return None
        if generate:
            n = s.rows * row
            return 0, 2 * g * b * _STATE_BYTES + -(-n // _MASK_BITS) * 4
        if self.steps is None:
            return None
        counts = self._packed_rows() if s.packed else {k * s.batch for k in range(1, self.steps + 1)}
        fits = {r * row for r in counts if -(-r * row // b) == g}
        if len(fits) != 1:
            return None
        n = fits.pop()
        return n, 2 * n * self.size + -(-n // _MASK_BITS) * 4

    def _packed_rows(self) -> set:
        """The row counts a packed call's dropout apply may cover (lstm2_packed's, whose launches
        fit them exactly): forward the next chunk of a layer above the first (any layer and
        step count that may come next), backward the chunk just run, or the layer's whole input
        (again, for its weight gradient)."""
        s = self.shape
        if self.bprop:
            return {s.rows} | ({self.chunk_rows} if self.chunk_rows else set())
        return {rows for u in range(s.dirs, s.layers * s.dirs) for k in range(1, self.steps - self.covered[u] + 1)
                for rows in [self._chunk_rows(k, u)] if rows}

    def _projection(self, kernel: str | None, grid: object) -> tuple | None:
        """A step's projection GEMM (LSTM proj_size): forward right after its cell kernel,
        h·W_hrᵀ (rows x P, K = H); backward right after the gradients' sum, its gradient ·W_hr
        (rows x H, K = P)."""
        s = self.shape
        rows = self._step_rows(self.cells if self.bprop else self.cells - 1)
        if rows is None:
            return None
        cols, k = (s.hidden, s.proj) if self.bprop else (s.proj, s.hidden)
        return self._product(rows, cols, k) if self._placed(kernel, grid, rows, cols) else None

    def _inputs(self) -> list[int]:
        """Each layer's input size: the input's features, D·R above."""
        s = self.shape
        return [s.in_size] + [s.dirs * s.rec] * (s.layers - 1)

    def _forward_gemm(self, kernel: str | None, grid: object, ahead: Ahead) -> tuple | None:
        """While the last chunk run's steps run, a step's recurrent GEMM (its tiles must fit the
        step's rows, where its name states any and a chunk may still come) or, right after a run's
        first chunk, the next direction's; else the first chunk of a new run, its steps those its
        tiles say, else the records read ahead. Once a GEMM was not told (`left` None), the tiles
        alone: N rows a recurrent GEMM, one other row count a chunk (padded input only)."""
        s = self.shape
        gh = s.gates * s.hidden
        untiled = _untiled(kernel)
        new_run = False
        if self.left is None:
            if s.packed:
                return None
            tiled = _steps_tiled(kernel, grid, gh, self.ends, 0)
            if tiled == [1]:
                return self._product(s.batch, gh, s.rec)
            steps = tiled[0] if len(tiled) == 1 else None
        elif self.left and self.run[1] > 0:  # the next direction's chunk of the run
            rows = self._chunk_rows(self.run[0], None if self.lost else self._unit(self.run[0]))
            steps = self.run[0] if rows is not None and self._placed(kernel, grid, rows, gh) or untiled else None
            self.run[1] -= 1
        elif self.left:
            # Once the chunks covered every step only steps' GEMMs come: the order alone places
            # them (sm90 xmma launches more blocks than its tiles for a small output: 4 for
            # rnn_packed's 16 x 96, regnet's 8 x 52; a packed call's, _placed, 8 for
            # gru3_packed's 16 x 384 while later chunks are still to come).
            rows = self._step_rows(self.cells + self.stepped)  # each direction's GEMM before the cells
            self.stepped += 1
            if rows is None or not (all(c == self.steps for c in self.covered) or self._placed(kernel, grid, rows, gh)):
                return self._lose()
            return self._product(rows, gh, s.rec)
        else:
            unit = None if self.lost or not s.packed or self.steps is None else self._unit(1)
            tiled = _steps_tiled(kernel, grid, gh, self.ends, 0 if unit is None else self.covered[unit])
            if len(tiled) == 1:
                steps = tiled[0]
            else:
                seen = _steps_ahead(*ahead(), s.dirs, bool(s.proj))
                steps = seen[1] // s.dirs if seen is not None and seen[0] > s.dirs and seen[1] % s.dirs == 0 else 0
                # (a packed call's chunk whose grid no row count's tiles make, sm90 xmma's 16 blocks
                # for gru3_packed's 80 x 384 in 64 x 64 tiles: the order alone)
                steps = steps if untiled or steps in tiled or s.packed and not tiled else None
            if steps:
                self.run, self.left, new_run = [steps, s.dirs - 1], steps * s.dirs, True
        if not steps:
            return self._lose()
        rows, k = self._chunk(steps, starts_run=new_run)
        return None if k is None or rows is None else self._product(rows, gh, k)

    def _lose(self) -> None:
        """A forward GEMM not told: from here which GEMM is a chunk is told by its tiles alone,
        and no later chunk's layer (where layers read different feature counts)."""
        self.lost, self.left, self.run = True, None, None
        return None

    def _unit(self, steps: int) -> int | None:
        """The layer and direction (l·D + d) a chunk of `steps` steps belongs to: of those with
        that many steps left whose layer before it (forward the one below, backward the one
        above) has covered the steps it reads (all of them with two directions), the one of the
        lowest wave (chunks run + the layer's place in that order), then place, then direction."""
        s = self.shape
        best = None
        for u in range(s.layers * s.dirs):
            layer, d = divmod(u, s.dirs)
            place = s.layers - 1 - layer if self.bprop else layer
            if self.covered[u] + steps > self.steps:
                continue
            need = self.steps if s.dirs == 2 else self.covered[u] + steps
            before = layer + 1 if self.bprop else layer - 1
            if place and any(self.covered[before * s.dirs + e] < need for e in range(s.dirs)):
                continue
            key = (self.chunks[u] + place, place, d)
            if best is None or key < best[0]:
                best = (key, u)
        return None if best is None else best[1]

    def _chunk(self, steps: int, expected: int | None = None, starts_run: bool = False) -> tuple:
        """(rows, the layer's input size) of the chunk of `steps` steps just launched, counted
        for its layer and direction (_unit; backward, a packed call's chunk must be of the unit
        its steps' run was taken for, `expected`; forward, `starts_run`: its steps come next,
        _start_run); where that is not known, rows as padded input has them and the input size
        all layers share, else None each."""
        inputs = self._inputs()
        unit = None if self.lost else self._unit(steps)
        if self.bprop and self.shape.packed and unit != expected:
            unit = None
        if starts_run:
            self._start_run(unit)
        rows = self._chunk_rows(steps, unit)
        if unit is None:
            self.lost = True
            return rows, inputs[0] if len(set(inputs)) == 1 else None
        self.covered[unit] += steps
        self.chunks[unit] += 1
        self.layer = unit // self.shape.dirs
        self.chunk_rows = rows
        return rows, inputs[self.layer]

    def _directions_sum(self) -> tuple | None:
        """(FLOPs, bytes) of RNN_bidirectional_accum_bp1_*: after a layer's input-gradient chunks
        both directions' T·N x I_l gradients added (one add an element; both read, the sum
        written): truth_lstm's 1024 x 512 and 1024 x 256, Nsight Compute's FP32 adds exactly, its
        DRAM reads both operands. Known where the layer's chunks covered all its steps."""
        s = self.shape
        if self.layer is None or self.lost or any(self.covered[self.layer * s.dirs + d] != self.steps
                                                  for d in range(s.dirs)):
            return None
        n = s.rows * self._inputs()[self.layer]
        return n, 3 * n * self.size

    def _backward_gemm(self, kernel: str | None, grid: object, after_cell: bool) -> tuple | None:
        s = self.shape
        gh, r = s.gates * s.hidden, s.rec
        if after_cell:  # a step's recurrent GEMM follows its cell kernel
            n = self._step_rows(self.cells - 1)
            return self._product(n, r, gh, s.gates == 3) if n is not None and self._placed(kernel, grid, n, r) else None
        if self.pending:  # an input-gradient chunk after its steps, one per direction
            steps, odd = divmod(self.pending, s.dirs)
            self.pending, self.run = 0, (None if odd else [steps, s.dirs - 1])
        elif self.run is not None and self.run[1] > 0:
            self.run[1] -= 1
        elif self.cells == s.layers * s.dirs * self.steps:
            return self._weight_gradient(kernel, grid)
        else:
            return None
        if self.run is None:
            self.lost = True
            return None
        expected = None if self.cursor is None else self.cursor[0] + s.dirs - 1 - self.run[1]
        rows, k = self._chunk(self.run[0], expected)
        return self._product(rows, k, gh) if None not in (k, rows) and self._placed(kernel, grid, rows, k) else None

    def _weight_gradient(self, kernel: str | None, grid: object) -> tuple | None:
        """The next weight-gradient GEMM in cuDNN's order, per layer and direction: G·H x R
        against h0 (K = N) and the other steps' outputs (_recurrent_ks), G·H x I_l (K = T·N), and
        with a projection P x H (K = T·N); one whose tiles do not fit the output expected ends
        the reading (all later ones na)."""
        s = self.shape
        if self.wgrad is None:
            gh, rows = s.gates * s.hidden, self.ends[-1]
            extra = ((s.proj, s.hidden, rows),) if s.proj else ()
            recurrent = [[None if k is None else (gh, s.rec, k) for k in self._recurrent_ks(d)] for d in range(s.dirs)]
            self.wgrad = [out for i in self._inputs() for d in range(s.dirs)
                          for out in recurrent[d] + [(gh, i, rows), *extra] if out is None or out[2]]
            self.wgrad.reverse()
        if not self.wgrad:
            return None
        out = self.wgrad.pop()
        if out is None:
            return None
        rows, cols, k = out
        if not self._placed(kernel, grid, rows, cols):
            self.wgrad = []
            return None
        return self._product(rows, cols, k, True)  # added into the zeroed flat buffer (_split_k)

    def _recurrent_ks(self, direction: int) -> list:
        """K of each GEMM of direction `direction`'s dW_hh = Σ_t dgates_tᵀ·h_prev, in cuDNN's
        order. The first direction: the first step's against h0 (its N rows), then the other
        steps' against the layer's output, one GEMM per run of steps whose step before ran as
        many rows (so that a step's gradients and the outputs they pair with lie that many rows
        apart in the packed layout: padded input one run, K = (T - 1)·N; rnn_packed's batch sizes
        16 x 10, 15, 15, ..., 1, 1 sixteen runs, the last, K 1, a SIMT kernel of its own, as the
        capture's 17th GEMM). The second, running from the last step, starts each sequence from
        h0 at its own last step: first per run of equal batch sizes the rows whose sequences end
        there (b_run - b_next) against h0, then the same GEMMs against the output as the first
        direction's after its h0 one (Nsight Compute's DRAM reads of gru_packed's 2-layer
        bidirectional GRU: 16 GEMMs of K 1, then K 159, 29, 27, ..., 3, 1). Where those h0 rows
        differ from run to run, their order is not known (each seen was 1 sequence): None each."""
        sizes = [b - a for a, b in zip(self.ends, self.ends[1:])]
        runs = groupby(range(1, len(sizes)), key=lambda t: sizes[t - 1])
        first = [sizes[0]] + [sum(sizes[t] for t in run) for _, run in runs]
        if direction == 0:
            return first
        batches = [b for b, _ in groupby(sizes)]
        ends = [b - a for b, a in zip(batches, batches[1:] + [0])]
        return (ends if len(set(ends)) == 1 else [None] * len(ends)) + first[1:]


def _cell(shape, n: int, size: int, bprop: bool) -> tuple:
    """A cell kernel does one step's cell math (ops/rnn.py) on its `n` rows, backward twice it:
    the gates, states and biases read, the new state written (backward: the gates' and states'
    gradients)."""
    gh, h, r = shape.gates * shape.hidden, shape.hidden, shape.rec
    c = n * h if shape.gates == 4 else 0  # LSTM's cell state
    flops = n * h * shape.cell
    if bprop:
        return 2 * flops, (2 * n * gh + 3 * n * h + 3 * c) * size
    return flops, (2 * n * gh + n * r + 2 * c + 2 * gh * shape.bias + n * h) * size


def _combine(shape, rows: int, size: int) -> tuple:
    """(FLOPs, bytes) of LSTM_dgrad_combine_dh_di: a step's rows x P output gradient and recurrent
    gradient added (one add an element, a thread each: fixture_lstm's 4 x 16, Nsight Compute's
    64 FP32 adds exactly), both read, the sum written."""
    elems = rows * shape.proj
    return elems, 3 * elems * size


def _bias_grad(shape, size: int) -> tuple | None:
    """(FLOPs, bytes) of cuDNN's GENERIC_elementWise_bp2 (LSTM, RNN), one a layer and direction:
    its rows of G·H gate gradients summed once (b_ih's and b_hh's gradients are the same sum),
    read once, both gradients written (truth_lstm, 1024 rows of 1024 gates in fp32: within 0.2%
    of Nsight Compute's DRAM bytes, its FP32 instructions 1.13x these adds). None without biases."""
    if not shape.bias:
        return None
    gh = shape.gates * shape.hidden
    return reduce_adds(shape.rows * gh, gh), (shape.rows * gh + 2 * gh) * size


def _gru_bias_grad(shape, size: int) -> tuple | None:
    """(FLOPs, bytes) of cuDNN's GRU_elementWise_bp2, one a layer and direction: its G·H gate
    gradients of every input row summed twice, for b_ih and for b_hh (the hidden path's n gate has
    its own: r·dn), both read, the two bias gradients written (ncu: 2,475,136 bytes against these
    2,460,672 for 800 rows of 768 gates in fp16; gru_packed's 2-layer bidirectional GRU, four
    launches of 400 rows of 384 gates in fp32: 1,241,344 DRAM bytes read against 1,231,872). None
    without biases."""
    if not shape.bias:
        return None
    gh = shape.gates * shape.hidden
    return 2 * reduce_adds(shape.rows * gh, gh), (2 * shape.rows * gh + 2 * gh) * size
