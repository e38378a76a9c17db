"""Split-K reductions and partial sums after GEMMs and convolutions (issue 27): an nvjet
`..._splitK_...` kernel's grid z is 1, its blocks the output's tiles, padded to whole clusters,
times the splits (gemm_parts.nvjet_splits), and the splitKreduce_kernel after it reads that many
fp32 partials and writes the output in the type its name states; cuDNN's depthwise weight
gradient writes a partial a block row (conv_parts.depthwise_partials) that its reduction sums.
Held against Nsight Compute on 262 fp16 weight gradients (tests/data/kernel_truth/
conv_ncu_workspace.csv.xz, benchmarks/conv_workspace.py: a spin_kernel opens each case) and on
one training step of ResNeXt-50, MobileNetV3-Large, Swin-T and the LSTM of
benchmarks/pricing_coverage.py (helpers_ncu.csv.xz, benchmarks/conv_winograd_truth.sh; the same
models' H100 coverage captures' op calls holding such kernels, each with the call before it, in
splitk_cov_calls.jsonl.xz: pyprof.init()'s markers, then the plain emit_nvtx ranges)."""
from __future__ import annotations

import collections
import lzma
import os
import sys

import pytest

from pyprof.prof.io.reader import records
from pyprof.prof.pricing.conv_parts import conv_outputs, depthwise_partials, depthwise_reduce
from pyprof.prof.pricing.gemm_parts import nvjet_splits, split_k, split_partials
from pyprof.prof.pricing.registry import GEMM, Call, Cost
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "kernel_truth")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from conv_workspace import CASES  # noqa: E402
from tc_truth import ncu_launches  # noqa: E402

WRITES, STORES = "lts__t_sectors_srcunit_tex_op_write.sum", "smsp__sass_data_bytes_mem_global_op_st.sum"
LOADS = "smsp__sass_data_bytes_mem_global_op_ld.sum"
ADDS = ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
# helpers_ncu.csv.xz's models, a spin_kernel opening each (convnext_tiny's step cut short)
NCU_MODELS = ("resnext50_32x4d", "mobilenet_v3_large", "convnext_tiny", "swin_t", "squeezenet1_1", "unet", "lstm")
CAPTURED = ("resnext50_32x4d", "mobilenet_v3_large", "swin_t", "lstm")  # splitk_cov_calls' models
HELPERS = ("splitKreduce_kernel", "wgrad2d_c1_k1_nhwc", "wgrad2d_c1_k1_nhwc_reduce")


def _nsys_name(ncu_name: str) -> str:
    """A splitKreduce_kernel's name as nsys spells it: ncu's demangler drops the `(int)` casts."""
    return ncu_name.replace("splitKreduce_kernel<32, 16,", "splitKreduce_kernel<(int)32, (int)16,")


@pytest.fixture(scope="module")
def pairs() -> list:
    """(case, nvjet launch, its counters, reduction launch, its counters) of every nvjet split-K
    GEMM ncu saw followed by a splitKreduce_kernel, with the case (conv_workspace.CASES) it ran in."""
    launches = ncu_launches(os.path.join(DATA, "conv_ncu_workspace.csv.xz"))
    case, out = -1, []
    for (name, grid, counters), after in zip(launches, launches[1:] + [("", [], {})]):
        case += "spin_kernel" in name
        if name.startswith("nvjet_") and "_splitK_" in name and "splitKreduce_kernel" in after[0]:
            out.append((CASES[case], (name, grid), counters, (_nsys_name(after[0]), after[1]), after[2]))
    return out


def test_nvjet_splits_are_its_blocks_over_the_cluster_padded_tiles(pairs) -> None:
    """Each nvjet split-K GEMM wrote splits x the weight gradient's K x C·taps fp32 partials (ncu's
    L2 write sectors, to the byte: the GEMM's bytes carry them in place of the gradient written
    once), the splits its grid's blocks over the gradient's tiles, each
    count a whole number of clusters (64x32 tiles in 1x4 clusters over 96 x 32: 3 tiles in 4,
    grid 4 x 17, 17 splits); the reduction after it stored the fp16 gradient once and priced
    reads the partials."""
    assert len(pairs) == 48 and len({p[1][0] for p in pairs}) == 13
    for (n, c, h, w, k, r, *_), gemm, counters, reduce, reduced in pairs:
        rows, cols = k, c * r * r
        splits = nvjet_splits(gemm, rows, cols)
        assert 32 * counters[WRITES] == splits * rows * cols * 4, (gemm, rows, cols)
        outputs = conv_outputs([n, c, h, w], [k, c, r, r], None, True, 2)  # dX's tiles are more than its blocks
        # the GEMM priced with the gradient written once in fp16: its partials written instead
        assert split_partials(gemm, outputs, 10 ** 9, 2) == 10 ** 9 - rows * cols * 2 + 32 * counters[WRITES]
        work = split_k(reduce[0], reduce[1], 1, outputs, 2, gemm)
        assert work == ((splits - 1) * rows * cols, splits * rows * cols * 4 + rows * cols * 2)
        assert reduced[STORES] == rows * cols * 2
    padded = [(g[1], nvjet_splits(g, k, c * r * r)) for (_, c, _, _, k, r, *_), g, *_ in pairs
              if g[0] == "nvjet_sm90_hsh_64x32_64x16_1x4_h_bz_splitK_NTT" and (k, c * r * r) == (96, 32)]
    assert padded == [([4, 17, 1], 17)]


def test_nvjet_splits_need_a_split_kernel_and_whole_splits() -> None:
    """Any other GEMM (a non-split nvjet, CUTLASS's, whose splits are its grid's z) and a grid
    that is no whole number (2 or more) of splits give None, never a guess."""
    split = "nvjet_sm90_tst_64x32_64x16_2x4_h_bz_splitK_NTT"
    assert nvjet_splits((split, [8, 12, 1]), 96, 384) == 4  # 6 x 3 tiles in 2x4 clusters: 6 x 4
    assert nvjet_splits((split, [8, 13, 1]), 96, 384) is None
    assert nvjet_splits((split, [8, 3, 1]), 96, 384) is None  # 24 blocks: one split
    assert nvjet_splits(("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", [8, 12, 1]), 96, 384) is None
    assert nvjet_splits(("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(T1::Params)",
                         [26, 1, 5]), 800, 128) is None
    assert nvjet_splits(None, 96, 384) is None
    assert nvjet_splits(("nvjet_sm90_tst_0x32_64x16_2x4_h_bz_splitK_NTT", [8, 12, 1]), 96, 384) is None
    assert nvjet_splits((split, [8, 12, 1]), 0, 384) is None


def test_depthwise_partials_need_its_kernel_a_depthwise_weight_and_its_grid() -> None:
    """A weight of two input channels a filter, a grid whose x is not the 32-channel blocks or
    not 3 ints, a reduction whose grid is not taps x blocks or with no wgrad launch before it:
    None, never a guess."""
    wgrad = ("wgrad2d_c1_k1_nhwc", [21, 8, 3])
    assert depthwise_partials(*wgrad, [672, 1, 5, 5]) == (24, 21 * 32 * 25)
    assert depthwise_partials(*wgrad, [672, 2, 5, 5]) is None
    assert depthwise_partials("wgrad2d_c1_k1_nhwc", [20, 8, 3], [672, 1, 5, 5]) is None
    assert depthwise_partials("wgrad2d_c1_k1_nhwc", [21, 8], [672, 1, 5, 5]) is None
    assert depthwise_partials("wgrad2d_c1_k1_nhwc_reduce", [21, 8, 3], [672, 1, 5, 5]) is None
    reduce = "wgrad2d_c1_k1_nhwc_reduce"
    assert depthwise_reduce(reduce, [25, 21, 1], wgrad, [672, 1, 5, 5], 2) == (23 * 16800, 24 * 16800 * 4 + 16800 * 2)
    assert depthwise_reduce(reduce, [25, 20, 1], wgrad, [672, 1, 5, 5], 2) is None
    assert depthwise_reduce(reduce, [25, 21, 1], None, [672, 1, 5, 5], 2) is None
    assert depthwise_reduce(reduce, [25, 21, 1], wgrad, [672, 1, 5, 5], None) is None


@pytest.fixture(scope="module")
def priced() -> dict:
    """(mode, kernel short name) -> [(record, FLOPs, bytes, ncu counters)] of the coverage calls'
    helper kernels and nvjet split-K GEMMs, each paired with ncu's row of the same name and grid
    by their order (the calls hold every such kernel of the four models, and ncu profiled them all)."""
    launches = ncu_launches(os.path.join(DATA, "helpers_ncu.csv.xz"))
    model, rows = -1, collections.defaultdict(list)
    for name, grid, counters in launches:
        model += "spin_kernel" in name
        short = name.split("(")[0].split("<")[0].split()[-1].split("::")[-1]
        if NCU_MODELS[model] in CAPTURED:
            rows[(short, tuple(grid))].append(counters)
    out: dict = collections.defaultdict(list)
    taken: collections.Counter = collections.Counter()
    with lzma.open(os.path.join(DATA, "splitk_cov_calls.jsonl.xz"), "rb") as stream:
        for rec, facts, _ in analysed(records(stream, Tally()), Tally()):
            name = rec["kShortName"]
            if name not in HELPERS and "_splitK_" not in name:
                continue
            mode = "default" if (rec.get("fwd") or {}).get("marker") else "plain"
            key = (name, tuple(rec["grid"]))
            out[(mode, name)].append((rec, facts.flops, facts.bytes, rows[key][taken[(mode,) + key]]))
            taken[(mode,) + key] += 1
    return out


@pytest.mark.parametrize("mode", ["default", "plain"])
def test_split_k_reductions_move_what_nsight_compute_counted(priced, mode) -> None:
    """Every splitKreduce_kernel of the four models, markers and plain ranges alike: its bytes
    are ncu's loads and stores to the byte (8 after ResNeXt's nvjet weight gradients, 6 after
    MobileNetV3's, 8 after Swin-T's linear ones, 8 in the LSTM's backward), its FLOPs the adds
    (never above ncu's FADDs and FFMAs). The LSTM's four split weight gradients (1024 x 64, 5
    splits) add into the zeroed flat buffer: 6 x 1024 x 64 fp32 loaded and 5 adds an element;
    its input-gradient chunks (800 x 128, 5 splits) load their 5 partials."""
    reductions = priced[(mode, "splitKreduce_kernel")]
    assert len(reductions) == 30
    for rec, flops, nbytes, counters in reductions:
        assert nbytes == counters[LOADS] + counters[STORES], rec["grid"]
        assert flops <= sum(counters[a] for a in ADDS)
    lstm = [(rec["grid"], flops, nbytes) for rec, flops, nbytes, _ in reductions if rec["op"] in ("lstm", "_cudnn_rnn")]
    assert lstm == [([4, 50, 1], 4 * 800 * 128, (5 + 1) * 800 * 128 * 4)] * 4 + \
        [([2, 64, 1], 5 * 1024 * 64, (6 + 1) * 1024 * 64 * 4)] * 4


def test_nvjet_split_gemms_write_their_partials(priced) -> None:
    """Each nvjet split-K GEMM of a 1x1 convolution's or a linear's weight gradient wrote its
    splits' fp32 partials of the K x C (out x in) gradient: ncu's L2 write sectors, to the byte
    (ResNeXt's 256 x 256 in 32x64 tiles, 2x1 clusters, grid 2 x 64: 4 splits), and its bytes
    carry them in place of the gradient written once, markers and plain ranges alike."""
    gemms = [g for (mode, name), found in priced.items() if "_splitK_" in name and mode == "default" for g in found]
    assert len(gemms) == 22
    for rec, _, _, counters in gemms:
        weight = Call(rec["fwd"]["marker"]).tensors()[1].shape
        rows, cols = weight[0], weight[1] * (weight[2] * weight[3] if len(weight) == 4 else 1)
        splits = nvjet_splits((rec["kLongName"], rec["grid"]), rows, cols)
        assert splits * rows * cols * 4 == 32 * counters[WRITES], rec["kShortName"]
    plain = {(r["kShortName"], b) for (mode, name), found in priced.items() if "_splitK_" in name and mode == "plain"
             for r, _, b, _ in found}
    assert plain == {(r["kShortName"], b) for r, _, b, _ in gemms}


@pytest.mark.parametrize("mode", ["default", "plain"])
def test_depthwise_weight_gradients_partials_and_their_sum(priced, mode) -> None:
    """MobileNetV3-Large's depthwise weight gradients (wgrad2d_c1_k1_nhwc, then its _reduce):
    each launch stored y·z partials of its 32·x channels x taps in fp32 (672 channels 5x5, grid
    21 x 8 x 3: 24 partials of 672 x 25), and the reduction loaded them all and stored the bf16
    K x taps gradient: its bytes ncu's loads and stores to the byte, its FLOPs the partials'
    adds (under ncu's FADDs). Markers and plain ranges alike."""
    wgrads, sums = priced[(mode, "wgrad2d_c1_k1_nhwc")], priced[(mode, "wgrad2d_c1_k1_nhwc_reduce")]
    assert len(wgrads) == len(sums) == 8
    for (rec, _, _, counters), (_, flops, nbytes, summed) in zip(wgrads, sums):
        weight = Call(rec["fwd"]["marker"]).tensors()[1].shape if mode == "default" else rec["torchOps"][-1]["sizes"][2]
        count, elems = depthwise_partials(rec["kShortName"], rec["grid"], list(weight))
        assert count * elems * 4 == counters[STORES] == summed[LOADS]
        assert nbytes == summed[LOADS] + summed[STORES] == count * elems * 4 + weight[0] * weight[2] * weight[3] * 2
        assert flops == (count - 1) * weight[0] * weight[2] * weight[3] <= summed[ADDS[0]]


def test_a_grid_z_splits_k_only_for_a_gemm_of_one_product() -> None:
    """A launch's grid z is split-K partials only where the GEMM is one product (an mm, a linear, a
    matmul folding its batch into rows): a bmm's z is its batch. Its output the one whose tiles
    make the grid, else any of one size; None of several sizes: unchanged."""
    from pyprof.prof.pricing.ops.gemm import gemm_cost, matmul_cost
    from pyprof.prof.pricing.values import Tensor
    xmma = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel"
    once = (256 * 256 + 2 * 256 * 320) * 4
    partials = once - 256 * 320 * 4 + 4 * 256 * 320 * 4
    assert split_partials((xmma, [8, 10, 4]), [(256, 320)], once, 4, unbatched=True) == partials
    assert split_partials((xmma, [8, 10, 4]), [(256, 320)], once, 4) == once
    assert split_partials((xmma, [8, 10, 1]), [(256, 320)], once, 4, unbatched=True) == once
    # 32 x 32 tiles: 256 x 320 is 8 x 10 of them, 64 x 256 is not; no tile fits: any of one size.
    assert split_partials((xmma, [8, 10, 4]), [(256, 320), (64, 256)], once, 4, unbatched=True) == partials
    assert split_partials(("Kernel2", [16, 2, 4]), [(256, 320), (320, 256)], once, 4, unbatched=True) == partials
    assert split_partials(("Kernel2", [16, 2, 4]), [(256, 320), (64, 256)], once, 4, unbatched=True) == once
    assert gemm_cost(8, 64, 64, 64, "float32").products == 8 and gemm_cost(1, 64, 64, 64, "float32").products == 1
    assert Cost(2, 8, "", "float32", GEMM).products is None  # a user's Cost says nothing: no split read
    assert matmul_cost(Tensor((8, 128, 256), "float32"), Tensor((256, 512), "float32")).products == 1
    assert matmul_cost(Tensor((8, 128, 256), "float32"), Tensor((8, 256, 512), "float32")).products == 8
    # MaxViT's attention scores by einsum: a bmm over B·G·H (its cutlass launches' z: 32).
    from pyprof.prof.pricing.registry import lookup
    q = {"shape": [1, 4, 8, 49, 32], "dtype": "bfloat16"}
    scores = Call({"v": 1, "kind": "op", "mod": "torch", "op": "einsum", "args": ["BGHID,BGHJD->BGHIJ", q, q]})
    assert lookup("torch", "einsum")(scores).products == 32
    rows = Call({"v": 1, "kind": "op", "mod": "torch", "op": "einsum",
                 "args": ["bij,jk->bik", {"shape": [8, 49, 32], "dtype": "bfloat16"}, {"shape": [32, 64], "dtype": "bfloat16"}]})
    assert lookup("torch", "einsum")(rows).products == 1


def test_nvjet_per_image_needs_whole_tiles_times_the_images_and_an_fp32_output() -> None:
    """unet's 384 x 128 weight gradient over 8 images (64x48 tiles in 1x2 clusters: 2 x 8 tiles,
    grid 2 x 64): 8 products. Not for other image counts, a bf16 output (`tst`), a split-K name
    (nvjet_splits' case) or one image."""
    from pyprof.prof.pricing.gemm_parts import nvjet_per_image
    name = "nvjet_sm90_tss_64x48_64x15_1x2_h_bz_TNT"
    assert nvjet_per_image((name, [2, 64, 1]), 384, 128, 8)
    assert not nvjet_per_image((name, [2, 64, 1]), 384, 128, 4)
    assert not nvjet_per_image((name, [2, 8, 1]), 384, 128, 1)
    assert not nvjet_per_image((name.replace("_tss_", "_tst_"), [2, 64, 1]), 384, 128, 8)
    assert not nvjet_per_image((name.replace("_bz_", "_bz_splitK_"), [2, 64, 1]), 384, 128, 8)
    assert not nvjet_per_image((name, [2, 63, 1]), 384, 128, 8)


def test_a_batched_gemm_s_grid_z_is_its_batch_not_partials() -> None:
    """MaxViT's einsum attention scores (coverage capture, H100: a gradient by cuBLAS's CUTLASS
    kernel, grid 2 x 1 x 32 over the 4·8 heads' batch) and a linear's split-K GEMM of one product,
    grid z 4: the bmm's bytes are its formula's (operands read, output written once), the
    linear's carry its 4 fp32 partials."""
    from test_prof_helpers import analyse, record
    q = {"shape": [1, 4, 8, 49, 32], "dtype": "bfloat16"}
    einsum = {"v": 1, "kind": "op", "mod": "torch", "op": "einsum", "args": ["BGHID,BGHJD->BGHIJ", q, q]}
    cutlass = "void cutlass::Kernel2<cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_64x2_tn_align8>(T1::Params)"
    linear = {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": "linear",
              "args": [{"shape": [256, 256], "dtype": "float32"}, {"shape": [64, 256], "dtype": "float32"}, None]}
    simt = "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_tn_align1>(T1::Params)"
    facts, _ = analyse([record(einsum, cutlass, "bprop", grid=[2, 1, 32]), record(linear, simt, grid=[4, 1, 4])])
    scores = 32 * (2 * 49 * 32 + 49 * 49)  # a gradient kernel: the forward's three matrices
    assert facts[0].bytes == scores * 2
    assert facts[1].bytes == (256 * 256 + 64 * 256) * 4 + 4 * 256 * 64 * 4
