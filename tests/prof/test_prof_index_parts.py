"""Each kernel of an op call its own FLOPs and bytes (issue 27) for `[]` indexing's backward, cat's,
a broadcast multiply's of two dtypes and a matrix product's copies of its operands, on real
records of an H100 capture of torchvision models, one training step each
(tests/data/cov_index_{default,plain}.jsonl.xz: whole op calls cut from the capture's records,
unchanged; default: pyprof.init()'s markers, plain: emit_nvtx ranges alone). These kernels were
na before."""
from __future__ import annotations

import lzma
import os
from functools import lru_cache

from pyprof.prof.io.reader import records
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

DATA = os.path.join(os.path.dirname(__file__), "..", "data")


@lru_cache(maxsize=None)
def _rows(mode: str) -> tuple:
    with lzma.open(os.path.join(DATA, f"cov_index_{mode}.jsonl.xz"), "rb") as s:
        return tuple((rec["dir"], rec["op"], rec["kShortName"], f.flops, f.bytes, f.cost, rec.get("seqId"))
                     for rec, f, _ in analysed(records(s, Tally()), Tally()))


def rows(mode: str, direction: str, op: str) -> list:
    return [r for r in _rows(mode) if r[0] == direction and r[1] == op]


def test_broadcast_multiply_of_two_dtypes_stages_each_gradient_and_the_engines_work():
    """convnext_tiny's layer scale, fp32 [768, 1, 1] times bf16 [8, 768, 4, 4] under autocast
    (the product fp32): dOther = dY·scale (dY and the scale read, n fp32 written), dScale's
    full-size dY·other (dY fp32 and other bf16 read, n fp32 written), its sum to 768 (n − 768
    adds), and dOther cast to bf16 (autocast's cast back: n fp32 read, n bf16 written). The
    kernels' FLOPs add up to the node's; the first carried all of them and the others were na."""
    n, m = 8 * 768 * 16, 768
    got = [(r[2], r[3], r[4]) for r in rows("default", "bprop", "__mul__")]
    assert got == [("elementwise_kernel", n, 8 * n + 4 * m), ("elementwise_kernel", n, 10 * n),
                   ("reduce_kernel", n - m, 4 * (n + m)), ("vectorized_elementwise_kernel", 0, 6 * n)]
    assert sum(g[1] for g in got) == rows("default", "bprop", "__mul__")[0][5].bwd_flops == 3 * n - m


def test_advanced_index_backward_kernels_carry_the_index_put_stages():
    """swin_t's relative position bias, an fp32 [169, 24] table indexed by 2,401 int64 positions:
    IndexBackward0's index_put with accumulate, kernel by kernel: dX's zero fill, the linear
    index's remainder, product and quotient (2,401 int64 read and written each, one operation an
    element), dY [2401, 24] made contiguous (read, written), arange of the positions, cub's
    radix sort of the 8 key bits of 168 (a histogram: keys read, 256 eight-byte counters written;
    their exclusive sum; one onesweep pass: keys and values read and written, its counters read)
    and indexing_backward_kernel (dY's 57,624 adds; both index arrays and dY read, the 169 rows
    read and written). The FLOPs add up to the node's. The same kernels' work at the aten level
    (emit_nvtx alone), from aten::_index_put_impl_'s range and the arithmetic's own ranges."""
    n, rows_, s = 2401, 169, 24
    want = [("vectorized_elementwise_kernel", 0, rows_ * s * 4)] + [("vectorized_elementwise_kernel", n, 16 * n)] * 2 + [
        ("elementwise_kernel", 0, 2 * n * s * 4), ("vectorized_elementwise_kernel", n, 16 * n),
        ("elementwise_kernel_with_index", 0, 8 * n), ("DeviceRadixSortHistogramKernel", 0, 8 * n + 256 * 8),
        ("DeviceRadixSortExclusiveSumKernel", 0, 2 * 256 * 8), ("DeviceRadixSortOnesweepKernel", 0, 32 * n + 256 * 8),
        ("indexing_backward_kernel_small_stride", n * s, (n + 2 * rows_) * s * 4 + 16 * n)]
    got = [r for r in rows("default", "bprop", "__getitem__") if r[6] == 41849]
    assert [r[2:5] for r in got] == want
    assert got[0][5].bwd_flops == sum(w[1] for w in want) == n * s + 3 * n
    assert [r[2:5] for r in rows("plain", "bprop", "index")] == want


def test_basic_index_backward_fills_and_copies_each_its_own_size():
    """swin_t's patch merging x[..., 1::2, 1::2, :] on bf16 [2, 14, 14, 384]: two SliceBackward0
    nodes, the second slice's first: its input [2, 7, 14, 384] zero-filled and dY copied into its
    region, then x's fill and that gradient copied into it (each fill written, each copy read and
    written). And the attention's q, k, v = qkv[0], qkv[1], qkv[2]: each SelectBackward0 fills a
    bf16 [3, 2, 24, 49, 32] gradient; only k's dY, transposed, is copied by a kernel (the others
    by a memcpy); the engine adds the three."""
    half, quarter = 2 * 7 * 14 * 384, 2 * 7 * 7 * 384
    got = [r[2:5] for r in rows("default", "bprop", "__getitem__") if r[6] in (41760, 41761)]
    assert got == [("vectorized_elementwise_kernel", 0, 2 * half), ("elementwise_kernel", 0, 4 * quarter),
                   ("vectorized_elementwise_kernel", 0, 4 * half), ("elementwise_kernel", 0, 4 * half)]
    whole, one = 3 * 2 * 24 * 49 * 32, 2 * 24 * 49 * 32
    got = [r[2:5] for r in rows("default", "bprop", "__getitem__") if r[6] in (41867, 41868, 41869, None)]
    fill, add = ("vectorized_elementwise_kernel", 0, 2 * whole), ("vectorized_elementwise_kernel", whole, 6 * whole)
    assert got == [fill, fill, ("elementwise_kernel", 0, 4 * one), add, fill, add]


def test_matrix_product_copies_its_strided_operands_and_output_gradient():
    """swin_t's q @ k.transpose(-2, -1) on views of the permuted qkv (bf16 [128, 3, 49, 32] and
    [128, 3, 32, 49], strided): both copied contiguous before the batched GEMM (read and written);
    its backward's dY for attention @ v arrives transposed: UnsafeViewBackward0 copies the
    [2, 24, 49, 32] output gradient. maxvit_t's einsum likewise: two strided operands copied
    before the GEMM, and its output gradient [1, 4, 8, 49, 32] copied in the backward."""
    n = 128 * 3 * 49 * 32
    assert [r[2:5] for r in rows("default", "fprop", "matmul")] == [
        ("elementwise_kernel", 0, 4 * n), ("elementwise_kernel", 0, 4 * n), ("Kernel2", 2 * 384 * 49 * 49 * 32, 4252416)]
    assert [r[2:5] for r in rows("default", "bprop", "matmul")][0] == ("elementwise_kernel", 0, 4 * 2 * 24 * 49 * 32)
    e = 64 * 2 * 49 * 32
    assert [r[2:5] for r in rows("default", "fprop", "einsum")][:2] == [("elementwise_kernel", 0, 4 * e)] * 2
    assert [r[2:5] for r in rows("default", "bprop", "einsum")] == [("elementwise_kernel", 0, 4 * 4 * 8 * 49 * 32)]


def test_cat_of_more_than_16_tensors_prices_the_known_gradients_accumulations():
    """densenet121's dense block cat of 24 fp16 tensors (the marker keeps 16 and says 8 more):
    the backward's engine adds of the 16 known tensors' gradients each their own (one add an
    element, two read and one written); the 8 whose shapes the marker left out stay na."""
    got = [r[2:5] for r in rows("default", "bprop", "cat")]
    big, small = 4 * 256 * 8 * 8, 4 * 32 * 8 * 8
    assert got == [("elementwise_kernel", big, 6 * big)] + [("elementwise_kernel", small, 6 * small)] * 15 + [
        ("elementwise_kernel", None, None)] * 8
    assert rows("default", "bprop", "cat")[0][5].flops == 0 and rows("default", "bprop", "cat")[0][5].bytes is None


def test_index_backward_over_two_index_tensors_kernel_by_kernel():
    """A top-2 MoE router's weights[rows, slot] (fp32 [512, 2], 127 positions of two int64 index
    tensors; H200, pricing_coverage's `moe`, tests/data/moe_index_backward.jsonl.xz: one
    IndexBackward0's records as parse wrote them): dX's zero fill, then per index its remainder by
    its dim and its product with its stride, their sum, the quotient by the row size (127 int64
    read and written each, the sum two read; one operation an element), arange, cub's single-tile
    sort of keys and values (read and written), indexing_backward (127 adds; both index arrays
    and dY read, the rows read and written). Each kernel its own; they add up to the node's."""
    with lzma.open(os.path.join(DATA, "moe_index_backward.jsonl.xz"), "rb") as s:
        got = [(rec["kShortName"], f.flops, f.bytes, f.cost) for rec, f, _ in analysed(records(s, Tally()), Tally())]
    n, op = 127, ("vectorized_elementwise_kernel", 127, 16 * 127)
    assert [g[:3] for g in got] == [
        ("vectorized_elementwise_kernel", 0, 512 * 2 * 4), op, op, ("unrolled_elementwise_kernel", n, 16 * n), op,
        ("vectorized_elementwise_kernel", n, 24 * n), op, ("elementwise_kernel_with_index", 0, 8 * n),
        ("DeviceRadixSortSingleTileKernel", 0, 32 * n), ("indexing_backward_kernel_stride_1", n, (n + 2 * n) * 4 + 16 * n)]
    assert got[0][3].bwd_flops == sum(g[1] for g in got) == 7 * n
