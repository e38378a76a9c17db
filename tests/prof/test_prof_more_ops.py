"""Formulas added for the models people train (issue 9): losses, instance norm, glu, softmin,
prelu, area interpolation, pad, roll/flip/tril/triu, scans and orderings, and the backward of embedding_bag,
gather and index_select. Bytes checked against the real call (tensor arguments plus results),
FLOPs and backward numbers derived by hand."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="bytes checked against the real torch call: needs torch")

import torch.nn.functional as F

from test_prof_ops import FN, cost_of, io_bytes, t

BF16, I64 = torch.bfloat16, torch.int64
X, T = t(4, 5), torch.rand(4, 5)  # 20 elements, 80 B each

BYTES = [
    (FN, "binary_cross_entropy", F.binary_cross_entropy, (torch.rand(4, 5), T), {}),
    (FN, "binary_cross_entropy", F.binary_cross_entropy, (torch.rand(4, 5), T), {"reduction": "none"}),
    (FN, "binary_cross_entropy", F.binary_cross_entropy, (torch.rand(4, 5), T, t(4, 5)), {}),
    (FN, "binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits, (X, T), {"pos_weight": t(5)}),
    ("torch", "binary_cross_entropy_with_logits", torch.binary_cross_entropy_with_logits, (X, T, None, None, 0), {}),
    (FN, "smooth_l1_loss", F.smooth_l1_loss, (X, T), {"beta": 0.5}),
    (FN, "huber_loss", F.huber_loss, (X, T), {"reduction": "sum"}),
    (FN, "kl_div", F.kl_div, (X, T), {"reduction": "batchmean"}),
    (FN, "instance_norm", F.instance_norm, (t(2, 3, 4, 4),), {"weight": t(3), "bias": t(3)}),
    ("torch", "instance_norm", torch.instance_norm, (t(2, 3, 4, 4), t(3), t(3), None, None, True, 0.1, 1e-5, False),
     {}),
    (FN, "glu", F.glu, (t(4, 6),), {}),
    (FN, "softmin", F.softmin, (t(4, 6),), {"dim": 1}),
    (FN, "prelu", F.prelu, (t(2, 3, 4), t(3)), {}),
    (FN, "interpolate", F.interpolate, (t(1, 2, 10, 7),), {"size": (3, 4), "mode": "area"}),
    (FN, "pad", F.pad, (t(2, 3, 4, 5), (1, 2, 3, 0)), {}),
    (FN, "pad", F.pad, (t(2, 3, 4, 5), (1, 1, 2, 2)), {"mode": "reflect"}),
    (FN, "pad", F.pad, (t(3, 4, 5, dtype=BF16), (2, 2)), {"mode": "replicate"}),
    ("torch", "roll", torch.roll, (t(4, 5), 2), {"dims": 1}),
    ("torch", "flip", torch.flip, (t(4, 5), (0,)), {}),
    ("torch", "tril", torch.tril, (t(6, 6),), {}),
    ("Tensor", "triu", torch.Tensor.triu, (t(2, 5, 5),), {"diagonal": 1}),
    ("torch", "cumsum", torch.cumsum, (t(4, 5),), {"dim": 1}),
    ("torch", "cumsum", torch.cumsum, (t(4, 5, dtype=BF16),), {"dim": 0, "dtype": torch.float32}),
    ("torch", "topk", torch.topk, (t(4, 8), 3), {"sorted": False}),
]


@pytest.mark.parametrize("mod,op,fn,args,kwargs", BYTES)
def test_bytes_match_the_real_call(mod, op, fn, args, kwargs):
    assert cost_of(mod, op, *args, **kwargs).bytes == io_bytes(fn, *args, **kwargs)


FLOPS = [
    # BCE 8 per element + 1 for the mean; with a weight 9 + 1. Backward 5 per element.
    ((FN, "binary_cross_entropy", torch.rand(4, 5), T), {}, (180, 100)),
    ((FN, "binary_cross_entropy", torch.rand(4, 5), T, t(4, 5)), {"reduction": "none"}, (180, 100)),
    # with logits: 7 + pos_weight 2 + mean 1 = 10 per element; backward 3, and the mean's divide 1.
    ((FN, "binary_cross_entropy_with_logits", X, T), {"pos_weight": t(5)}, (200, 80)),
    (("torch", "binary_cross_entropy_with_logits", X, T, None, None, 1), {}, (160, 80)),
    ((FN, "smooth_l1_loss", X, T), {}, (120, 60)),
    ((FN, "kl_div", X, T), {"reduction": "none"}, (60, 40)),
    # instance norm over [2,3,4,4] (96 elements): 6 + weight + bias per element; backward twice.
    ((FN, "instance_norm", t(2, 3, 4, 4)), {"weight": t(3), "bias": t(3)}, (768, 1536)),
    # glu [4,6] -> 12 outputs: 2 each; backward 5 each.
    ((FN, "glu", t(4, 6)), {}, (24, 60)),
    # softmin: softmax's 5 and the negation per element; backward 4.
    ((FN, "softmin", t(4, 6)), {"dim": 1}, (144, 96)),
    # prelu [2,3,4]: 2 per element; backward 4.
    ((FN, "prelu", t(2, 3, 4), t(3)), {}, (48, 96)),
    # area 10x7 -> 3x4 = adaptive average pooling: 12·10 taps + 12 divides per plane, 2 planes.
    ((FN, "interpolate", t(1, 2, 10, 7)), {"size": (3, 4), "mode": "area"}, (2 * (120 + 12), 2 * (120 + 12))),
    # reflect padding [2,3,4,5] by 1,1 and 2,2 -> [2,3,8,7] (336): backward adds every dY element.
    ((FN, "pad", t(2, 3, 4, 5), (1, 1, 2, 2)), {"mode": "reflect"}, (0, 336)),
    ((FN, "pad", t(2, 3, 4, 5), (1, 1, 2, 2)), {}, (0, 0)),
    # cumsum [4,5]: 1 per element, backward 1 per element; cumprod's backward (no zero in the
    # input): the product, the zero test, its any() (19 adds), the scan, the division: 99.
    (("torch", "cumsum", t(4, 5)), {"dim": 1}, (20, 20)),
    (("torch", "cumprod", t(4, 5)), {"dim": 1}, (20, 99)),
    # sort 4 rows of 5: 20·ceil(log2 5) = 60 comparisons; topk 3 of 8 in 4 rows: 32·2 = 64 to
    # find them, and sorted (the default) 12·2 = 24 more.
    (("torch", "sort", t(4, 5)), {"dim": 1}, (60, 0)),
    (("torch", "topk", t(4, 8), 3), {"sorted": False}, (64, 0)),
    (("torch", "topk", t(4, 8), 3), {}, (88, 0)),
    (("torch", "argsort", t(4, 6)), {"dim": 0}, (24 * 2, None)),
]


@pytest.mark.parametrize("args,kwargs,expected", FLOPS)
def test_flops_forward_and_backward(args, kwargs, expected):
    c = cost_of(*args, **kwargs)
    assert (c.flops, c.bwd_flops) == expected


def test_backward_bytes():
    """Hand-derived backward bytes (fp32 4 B, int64 8 B)."""
    # BCE mean: input, target 80 each and dLoss 4 read, dInput 80 written.
    assert cost_of(FN, "binary_cross_entropy", torch.rand(4, 5), T).bwd_bytes == 80 + 80 + 4 + 80
    # reflect pad [2,3,4,5] -> [2,3,8,7]: dY 336·4 read, dX 120·4 written; constant: dY's inner
    # region read and dX written, 2·480.
    assert cost_of(FN, "pad", t(2, 3, 4, 5), (1, 1, 2, 2), mode="reflect").bwd_bytes == 336 * 4 + 480
    assert cost_of(FN, "pad", t(2, 3, 4, 5), (1, 1, 2, 2)).bwd_bytes == 2 * 480
    # sort [4,5] along dim 1: dY 80 and the indices 160 read, dX 80 written.
    assert cost_of("torch", "sort", t(4, 5), dim=1).bwd_bytes == 80 + 160 + 80
    # topk 3 of [4,8]: dY 12·4 and indices 12·8 read, dX (zero-filled) 128 written.
    assert cost_of("torch", "topk", t(4, 8), 3).bwd_bytes == 48 + 96 + 128


def test_a_sort_runs_in_place_kernel_by_kernel():
    """sort of 4 rows of 5 (fp32) as PyTorch runs rows of up to 4,096: the values copied into the
    output by a memcpy (no kernel), the indices by arange of one row (40 B) copied into every row
    (the row read, 160 B written: fillSliceWithIndex; an MAE's argsort of 16 rows of 64 on an H200
    wrote 512 and 8,192 B in ncu's count), then each row's values and indices sorted in place
    (read and written: 2·20·(4 + 8) B; 20·ceil(log2 5) comparisons). The kernels' bytes add up to
    the call's; argsort sorts values it does not return, the same way. One row: its copy is a
    memcpy. Rows longer than 4,096 run cub's segmented sort: the call's total, unsplit."""
    for op in ("sort", "argsort"):
        c = cost_of("torch", op, t(4, 5), dim=1)
        assert c.stages == (("arange_cuda_out", 0, 0, 40), ("copy_kernel_cuda", 0, 0, 40 + 160),
                            ("SortKVInPlace", 60, 0, 480))
        assert (c.flops, c.bytes) == (60, 720)
    assert cost_of("torch", "sort", t(5)).stages == (("arange_cuda_out", 0, 0, 40), ("SortKVInPlace", 15, 0, 120))
    long = cost_of("torch", "sort", t(2, 5000), dim=1)
    assert long.stages is None and long.bytes == 40000 + 40000 + 80000


def test_one_long_row_is_sorted_by_cubs_radix_passes():
    """sort of one fp32 row of 5,000 (longer than a block sorts in place): its indices written by
    fill_reverse_indices_kernel (40,000 B), then cub's radix sort of the values with them on all
    32 key bits (cub_sort.py: a histogram, its exclusive sums and 4 onesweep passes, each reading
    and writing keys and values), the convention's 5,000 x 13 comparisons shared among the
    passes. The call's total is the multi-pass path's."""
    c = cost_of("torch", "sort", t(5000))
    moved, counters = 2 * 5000 * (4 + 8), 4 * 256 * 8
    assert c.stages == (("fill_reverse_indices_kernel", 0, 0, 40000), ("DeviceRadixSortSingleTileKernel", 0, 0, moved),
                        ("DeviceRadixSortHistogramKernel", 0, 0, 5000 * 4 + counters),
                        ("DeviceRadixSortExclusiveSumKernel", 0, 0, 2 * counters)) + (
                            ("DeviceRadixSortOnesweepKernel", 65000 // 4, 0, moved + 256 * 8),) * 4
    assert (c.flops, c.bytes) == (65000, 40000 + 5000 * 4 + counters + 2 * counters + 4 * (moved + 256 * 8))


def test_index_backward_adds_through_the_index():
    """gather [4,5] by a [4,2] index: dY's 8 elements added into a zero-filled dX: 8 adds; index
    64 and dY 32 read, dX 80 written. index_select of 3 rows of [6,5]: 15 adds; index 24, dY 60
    read, dX 120 written."""
    g = cost_of("torch", "gather", t(4, 5), 1, torch.zeros(4, 2, dtype=I64))
    assert (g.bwd_flops, g.bwd_bytes) == (8, 64 + 32 + 80)
    s = cost_of("torch", "index_select", t(6, 5), 0, torch.tensor([0, 2, 4]))
    assert (s.bwd_flops, s.bwd_bytes) == (15, 24 + 60 + 120)


def test_reduction_the_call_does_not_pass_is_na():
    from pyprof.prof.pricing.registry import Unknowable
    with pytest.raises(Unknowable, match="reduction not in the marker"):
        cost_of("torch", "binary_cross_entropy_with_logits", X, T)


def test_embedding_bag_backward():
    """12 indices into a [50,4] table, 3 bags: 48 gathered elements. sum: one add each; mean and
    per-sample weights: a scale too; max: one per output (12). Bytes: indices 96 and offsets 24
    read, dOut 3·4·4 = 48 read, the rows added into read and written (48 elements, max 12); the
    whole dWeight's zero fill (200 elements) is a kernel of its own (`grad_fill`)."""
    idx, off, w = torch.randint(0, 50, (12,)), torch.tensor([0, 4, 8]), t(50, 4)
    for mode, flops, rows in (("sum", 48, 48), ("mean", 96, 48), ("max", 12, 12)):
        c = cost_of(FN, "embedding_bag", idx, w, off, mode=mode)
        assert (c.bwd_flops, c.bwd_bytes, c.grad_fill) == (flops, 96 + 24 + 48 + 2 * rows * 4, 200), mode


def test_topk_stages_find_then_sort():
    """topk 3 of 8 in 4 fp32 rows, sorted: gatherTopK (the input read, 12 values and int64
    indices written), then the sort of the 12 in place (read and written); unsorted or k = 1,
    gatherTopK alone."""
    c = cost_of("torch", "topk", t(4, 8), 3)
    assert c.stages == (("gatherTopK", 64, 0, 128 + 12 * 12), ("SortKVInPlace", 24, 0, 2 * 12 * 12))
    assert cost_of("torch", "topk", t(4, 8), 1).stages == (("gatherTopK", 0, 0, 128 + 4 * 12),)
