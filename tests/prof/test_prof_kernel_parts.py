"""Each kernel of an op call its own FLOPs and bytes (issue 27), on the real H100 captures of
tests/data/kernel_truth/ held against Nsight Compute: the kernels of an op's decomposition
(Cost.stages, parts.py) that the op's formula alone put on one kernel or left na."""
from __future__ import annotations

from math import prod

from test_prof_parts import analysed_capture, cost_of, measured


def test_embedding_bag_backward_kernels_carry_their_named_stages():
    """recommender's EmbeddingBag(50000, 64, mode="sum") backward, 1,022 int64 indices in 256
    bags (kernel_truth capture, H100): each kernel of PyTorch's dense backward its own work, the
    segments counted as if every index were its own row (the most): dOut's copy (256 x 64 fp32 read
    and written), the positions' arange, cub's sort, unique-by-key and scan, the partial segments'
    bookkeeping, compute_grad_weight_bags (the 65,408 adds; dOut, the indices' bags and positions
    read, the fp32 partial sums written) and sum_and_scatter (the partials read, the rows
    written). The two big ones within 6% of ncu's bytes; cub's init kernels their tile-status
    arrays (cub_init.tile_init: one 16-byte descriptor a tile, 32 of padding, the unique-by-key's
    8-byte counter; ncu wrote 576 and 544 bytes, whole 32-byte sectors); the FLOPs add up to the
    backward's; the same in aten mode, and from the op's own range (aten::_embedding_bag_dense_backward)
    in the captures without pyprof's markers (plain emit_nvtx, nsys --pytorch)."""
    n, d, b = 1022, 64, 256
    want = [("elementwise_kernel", 0, 2 * b * d * 4), ("elementwise_kernel_with_index", 0, n * 8),
            ("DeviceRadixSortSingleTileKernel", 0, 4 * n * 8), ("vectorized_elementwise_kernel", 0, 50000 * d * 4),
            ("DeviceCompactInitKernel", 0, (1 + 32) * 16 + 8), ("DeviceUniqueByKeySweepKernel", 0, 3 * n * 8),
            ("krn_partials_per_segment", 0, 2 * n * 8), ("DeviceScanInitKernel", 0, (1 + 32) * 16),
            ("DeviceScanKernel", 0, 2 * n * 8), ("compute_num_of_partial_segments", 0, 24),
            ("krn_partial_segment_offset", 0, 4 * n * 8),
            ("compute_grad_weight_bags", n * d, b * d * 4 + n * d * 4 + 3 * n * 8),
            ("sum_and_scatter", 0, n * d * 4 + n * d * 4 + 2 * n * 8)]
    rows = [(r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("recommender")
            if r["op"] == "embedding_bag" and r["dir"] == "bprop"]
    assert [r[:3] for r in rows] == want * 4
    assert all(0.94 <= nb / moved <= 1.0 for name, _, nb, moved in rows if name in ("compute_grad_weight_bags", "sum_and_scatter"))
    fwd = next(f.cost for r, f in analysed_capture("default")["recommender"] if r["op"] == "embedding_bag")
    assert fwd.bwd_flops == n * d and fwd.flops == n * d  # mode "sum" passed by position: no mean's divides
    aten = [(r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture("aten")["recommender"]
            if r["op"] == "embedding_bag" and r["dir"] == "bprop"]
    assert aten == want * 4
    for mode in ("plain", "nsyspt"):
        ranges = [(r["kShortName"], f.flops, f.bytes, f.level) for r, f in analysed_capture(mode)["recommender"]
                  if r["op"] == "_embedding_bag" and r["dir"] == "bprop"]
        assert [g[:3] for g in ranges] == want * 4, mode
        assert {g[3] for g in ranges} == {"aten"}, mode


def test_embedding_bag_backward_stages_only_where_the_dense_kernels_run():
    """mean reads each index's bag size too; max, scale_grad_by_freq and sparse run other kernels:
    no stages (the first kernel carries the node, as before)."""
    idx, w, off = {"shape": [12], "dtype": "int64"}, {"shape": [50, 4], "dtype": "float32"}, {"shape": [3], "dtype": "int64"}
    m = {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": "embedding_bag", "args": [idx, w, off],
         "kwargs": {"mode": "mean"}}
    stages = dict((s[0], s[1:]) for s in cost_of(m).bwd_stages)
    assert stages["compute_grad_weight_bags"] == (96, 3 * 4 * 4, 12 * 4 * 4 + 4 * 12 * 8)
    assert sum(s[0] for s in stages.values()) == cost_of(m).bwd_flops == 96
    for kw in ({"mode": "max"}, {"mode": "sum", "scale_grad_by_freq": True}, {"mode": "sum", "sparse": True}):
        m["kwargs"] = kw
        assert cost_of(m).bwd_stages is None, kw


def test_broadcast_multiply_backward_kernels_carry_their_gradients():
    """efficientnet_b0's squeeze-excite scale, [8, 1152, 1, 1] * [8, 1152, 4, 4] in fp16 (kernel_truth
    default capture, H100): the backward's three kernels each their own work, where the first
    carried the node and the other two were na: dOther = dY·a (dY and a read, n written), the
    full-size dY·b (dY and b read, n written) and its sum down to a's 9,216 elements (n - m adds,
    n read, m written). Their FLOPs add up to the node's."""
    n, m = 8 * 1152 * 16, 8 * 1152
    rows = [(r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture("default")["efficientnet_b0"]
            if r["op"] == "__mul__" and r["dir"] == "bprop"
            and [a.get("shape") for a in r["fwd"]["marker"]["args"]] == [[8, 1152, 1, 1], [8, 1152, 4, 4]]]
    assert rows == [("elementwise_kernel", n, (2 * n + m) * 2), ("vectorized_elementwise_kernel", n, 3 * n * 2),
                    ("reduce_kernel", n - m, (n + m) * 2)] * 4
    cost = next(f.cost for r, f in analysed_capture("default")["efficientnet_b0"] if r["op"] == "__mul__"
                and r["dir"] == "bprop" and r["fwd"]["marker"]["args"][0].get("shape") == [8, 1152, 1, 1])
    assert cost.bwd_flops == 3 * n - m


def test_gru_backward_bias_gradient_kernels_carry_their_sums():
    """gru's 3-layer GRU(128, 256) over 50 x 16 rows under fp16 autocast (kernel_truth capture,
    H100): each layer's GRU_elementWise_bp2 sums its 800 rows of 768 gate gradients twice (b_ih,
    b_hh), both read, the two bias gradients written: within 1% of ncu's bytes, default and aten."""
    rows, gh = 800, 768
    want = (2 * (rows - 1) * gh, (2 * rows * gh + 2 * gh) * 2)
    got = [(f.flops, f.bytes, moved) for r, f, moved, _ in measured("gru") if r["kShortName"] == "GRU_elementWise_bp2"]
    assert [g[:2] for g in got] == [want] * 3
    assert all(0.99 <= b / moved <= 1.0 for _, b, moved in got)
    aten = [(f.flops, f.bytes) for r, f in analysed_capture("aten")["gru"] if r["kShortName"] == "GRU_elementWise_bp2"]
    assert aten == [want] * 3


# gru's cuDNN chunks, (layer, steps) in launch order: forward each layer's input projection in
# chunks of 12 steps and a last one of 2, a wavefront over the layers; backward the input
# gradient in runs of 8 steps (then 2), top layer first.
GRU_FWD_CHUNKS = [(0, 12), (0, 12), (1, 12), (0, 12), (1, 12), (2, 12), (0, 12), (1, 12), (2, 12), (0, 2), (1, 12),
                  (2, 12), (1, 2), (2, 12), (2, 2)]
GRU_BWD_CHUNKS = [(2, 8), (2, 8), (1, 8), (2, 8), (1, 8), (0, 8), (2, 8), (1, 8), (0, 8), (2, 8), (1, 8), (0, 8),
                  (2, 8), (1, 8), (0, 8), (2, 2), (1, 8), (0, 8), (1, 2), (0, 8), (0, 2)]
# The one-step GEMMs: forward h·W_hhᵀ, backward dgates·W_hh.
GRU_RECURRENT = ("nvjet_sm90_hsh_64x8_64x16_4x2_h_bz_TNT", "nvjet_sm90_hsh_64x8_64x16_4x2_h_badd_NNT")


def gru_gemms(kernels: list) -> list:
    """(dir, FLOPs, bytes) of the gru capture's GEMMs but the recurrent ones, in launch order."""
    return [(r["dir"], f.flops, f.bytes) for r, f in kernels
            if r["kShortName"].startswith("nvjet") and r["kShortName"] not in GRU_RECURRENT]


def test_gru_input_projection_chunks_and_weight_gradients_carry_their_own_rows():
    """gru's 3-layer GRU(128, 256) over 50 x 16 rows under fp16 autocast (kernel_truth captures,
    H100; rnn_kernels.py): each forward chunk of the input projection 2·rows·768·K, K 128 in
    layer 0 and 256 above, its rows the steps whose cell kernels follow it (the records read
    ahead), its layer the wavefront's; each backward input-gradient chunk dgates·W_ih over the
    steps run since the last one (rows x K, K 768); per layer the weight gradients, the first
    step's against h0 (K 16), the other 49 steps' (K 784), dW_ih (K 800); dh_n's zero fill (3 x 16
    x 256 fp16). The chunks' FLOPs are what ncu's Tensor Core counters executed, the weight
    gradients' at most it (ncu pads K to 64), every one within 6% of ncu's bytes; the same in all
    four modes. Every kernel of both calls is known: the forward's add up to the call's
    formula, the backward's to it and the bias gradients' sums."""
    n, gh, ks = 16, 768, (128, 256, 256)
    want = [("fprop", 2 * s * n * gh * ks[lay], (s * n * ks[lay] + gh * ks[lay] + s * n * gh) * 2)
            for lay, s in GRU_FWD_CHUNKS]
    want += [("bprop", 2 * s * n * ks[lay] * gh, (s * n * gh + gh * ks[lay] + s * n * ks[lay]) * 2)
             for lay, s in GRU_BWD_CHUNKS]
    want += [("bprop", 2 * gh * cols * k, (k * gh + k * cols + gh * cols) * 2)
             for lay in range(3) for k, cols in ((16, 256), (49 * 16, 256), (50 * 16, ks[lay]))]
    rows = [(r, f, moved, mma) for r, f, moved, mma in measured("gru")
            if r["kShortName"].startswith("nvjet") and r["kShortName"] not in GRU_RECURRENT]
    assert [(r["dir"], f.flops, f.bytes) for r, f, _, _ in rows] == want
    assert all(f.flops == mma for r, f, _, mma in rows if "_NTN" not in r["kShortName"])
    assert all(f.flops <= mma for r, f, _, mma in rows)
    assert all(0.94 <= f.bytes / moved <= 1.0 for r, f, moved, _ in rows)
    for mode in ("aten", "plain", "nsyspt"):
        assert gru_gemms(analysed_capture(mode)["gru"]) == want, mode
    kernels = [(r, f) for r, f in analysed_capture("default")["gru"] if r["op"] == "gru"]
    assert all(f.flops is not None and f.bytes for r, f in kernels)
    fill = next((f.flops, f.bytes) for r, f in kernels if r["dir"] == "bprop")
    assert fill == (0, 3 * 16 * 256 * 2)
    cost = kernels[0][1].cost
    assert sum(f.flops for r, f in kernels if r["dir"] == "fprop") == cost.flops == 1740595200
    assert sum(f.flops for r, f in kernels if r["dir"] == "bprop") == cost.bwd_flops  # bias sums included


def test_cudnn_weight_gradient_sums_carry_their_partials():
    """cuDNN's weight-gradient helpers (kernel_truth captures, H100): unet's 1x1 convolutions (bf16
    autocast, batch 8) sum their 8 per-sample fp32 weight gradients in reduce_wgrad_nchw_helper
    (7 adds an element, the bf16 gradient written; within 2% of ncu's bytes), and
    efficientnet_b0's CUTLASS wgrad kernels, split K-wise over their grid's z, are followed by a
    ReduceSplitK that sums the z fp32 partial gradients into the fp16 weight gradient (the
    [40, 240] weight of features.3.1: z 12)."""
    helpers = [(r["fwd"]["marker"]["args"][1]["shape"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("unet")
               if r["kShortName"] == "reduce_wgrad_nchw_helper"]
    w = 64 * 192
    assert helpers[0][:3] == ([64, 192, 1, 1], 7 * w, 8 * w * 4 + w * 2)
    assert len(helpers) == 7 and all(0.98 <= b / moved <= 1.0 for _, _, b, moved in helpers)
    reduce = [(f.flops, f.bytes) for r, f in analysed_capture("default")["efficientnet_b0"]
              if "ReduceSplitK" in r["kLongName"] and r["fwd"]["marker"]["args"][1]["shape"] == [40, 240, 1, 1]]
    w = 40 * 240
    assert reduce == [(11 * w, 12 * w * 4 + w * 2)]
    aten = [(f.flops, f.bytes) for r, f in analysed_capture("aten")["efficientnet_b0"]
            if "ReduceSplitK" in r["kLongName"] and r["fwd"]["marker"]["args"][1]["shape"] == [40, 240, 1, 1]]
    assert aten == reduce


def test_per_image_weight_gradients_carry_their_partials():
    """unet's 1x1 convolutions (bf16 autocast, batch 8; kernel_truth captures, H100): cuDNN runs each
    weight gradient as an nvjet GEMM of one product per image (its blocks the gradient's tiles times
    8, its output fp32: `nvjet_sm90_tss_...`), 8 fp32 gradients that reduce_wgrad_nchw_helper then
    sums: each GEMM's bytes are its input and dY read and those 8 written (ncu's L2 writes, to the
    byte), 0.98-0.997 of ncu's bytes in every mode (0.30-0.92 with the gradient written once)."""
    for mode in ("default", "aten", "plain", "nsyspt"):
        found = measured("unet", mode)
        gemms = [(r, f, moved) for (r, f, moved, _), (after, _, _, _) in zip(found, found[1:])
                 if after["kShortName"] == "reduce_wgrad_nchw_helper"]
        assert [r["kShortName"][:14] for r, _, _ in gemms] == ["nvjet_sm90_tss"] * 7, mode
        for r, f, moved in gemms:
            assert 0.98 <= f.bytes / moved <= 1.0, (mode, r["grid"])
            if mode != "default":  # aten::convolution_backward's (dY, input, weight, ...)
                dy, x, w = r["torchOps"][-1]["sizes"][:3]
                assert f.bytes == (prod(dy) + prod(x)) * 2 + 8 * prod(w) * 4, (mode, r["grid"])


def test_math_attention_path_kernels_carry_their_own_work():
    """unet's attention at 16 x 16 (bf16 [8, 4, 256, 32] query, key and value; PyTorch ran the math
    path: kernel_truth captures, H100): every kernel of the forward and backward its own work,
    in fp32 after Q, K, V are cast up: the casts, Q and Kᵀ scaled, Q·Kᵀ, softmax and
    _safe_softmax's isneginf / all / where, the casts back, P·V; backward dO cast up, dV, dP,
    dP·P (softmax's backward's first kernel: 1 FLOP an element), the rest of softmax's backward (3),
    dK, dQ, their scaling and casts back, the same in default and aten
    mode; each kernel of the model's attention that moved >= 1 MB within 5% of ncu's bytes; the GEMMs' FLOPs are flop_counter's
    products."""
    n, ns, rows = 8 * 4 * 256 * 32, 32 * 256 * 256, 32 * 256
    gemm = (2 * ns * 32, (2 * n + ns) * 4)
    cast, scale = (0, n * 6), (n, n * 8)
    fwd = [cast] * 3 + [scale] * 2 + [gemm, (5 * ns, 8 * ns), (ns, 5 * ns), (ns - rows, ns + rows), (0, 4),
                                      (ns, rows + 8 * ns), (0, ns * 6), gemm, cast]
    bwd = [cast, gemm, gemm, (ns, 12 * ns), (3 * ns, 12 * ns), gemm, gemm, scale, scale, cast, cast, cast]
    for mode in ("default", "aten"):
        calls = {}
        for r, f in analysed_capture(mode)["unet"]:
            if r["op"] == "scaled_dot_product_attention":
                m = r["fwd"]["marker"] if r["dir"] == "bprop" else r["marker"]
                if m["args"][0]["shape"] == [8, 4, 256, 32]:
                    calls.setdefault(r["dir"], []).append((f.flops, f.bytes))
        assert calls == {"fprop": fwd, "bprop": bwd}, mode
    big = [f.bytes / moved for r, f, moved, _ in measured("unet") if r["op"] == "scaled_dot_product_attention"
           and moved >= 1 << 20]
    assert len(big) == 35 and all(0.95 <= x <= 1.0 for x in big)


def test_interpolate_backward_copy_and_kernel_carry_their_own_work():
    """unet's bilinear x2 upsampling of [8, 128, 16, 16] under bf16 autocast (run in fp32; kernel_truth
    captures, H100): backward dX's zero fill, dY made contiguous (a copy of [8, 128, 32, 32] fp32,
    which carried the node before), upsample_bilinear2d_backward_out_frame (4 taps x 2 FLOPs per
    dY element: dY read, dX written, in fp32) and the cast back, each within 1% of ncu's bytes."""
    x, y = 8 * 128 * 16 * 16, 8 * 128 * 32 * 32
    want = [(0, x * 4), (0, y * 8), (8 * y, (x + y) * 4), (0, x * 6)]
    rows = [(f.flops, f.bytes, moved) for r, f, moved, _ in measured("unet")
            if r["op"] == "interpolate" and r["dir"] == "bprop"]
    assert [r[:2] for r in rows] == want and all(0.99 <= b / moved <= 1.0 for _, b, moved in rows)
    aten = [(f.flops, f.bytes) for r, f in analysed_capture("aten")["unet"] if r["op"] == "interpolate" and r["dir"] == "bprop"]
    assert aten == want


def test_grouped_query_attention_backward_helpers_carry_their_work():
    """llama_block's causal grouped-query attention (8 query heads, 2 key/value heads, [4, 8, 256, 64]
    under bf16 autocast; cuDNN's SDPA, kernel_truth capture, H100): compute_dot_do_o also zeroes
    dQ's fp32 accumulator (within 4% of ncu's bytes, where it read 0.49 without), and each of the
    two fmha_reduce_head kernels sums a key or value gradient's 4 per-query-head copies into its
    head (the 524,288 copies read, 131,072 sums written in bf16: within 1% of ncu's bytes)."""
    rows, kv = 4 * 8 * 256, 4 * 2 * 256 * 64
    got = [(r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("llama_block")
           if r["kShortName"] in ("compute_dot_do_o_specialized", "fmha_reduce_head")]
    assert [g[:3] for g in got] == ([("compute_dot_do_o_specialized", 2 * rows * 64,
                                     2 * rows * 64 * 2 + rows * 4 + rows * 64 * 4)] + [
        ("fmha_reduce_head", 3 * kv, 5 * kv * 2)] * 2) * 2
    assert all(0.96 <= b / moved <= 1.0 for _, _, b, moved in got)


def test_instance_norm_kernels_carry_their_stages():
    """unet's affine InstanceNorm2d(64) on bf16 [8, 64, 32, 32] (kernel_truth captures, H100), run as
    batch norm over 512 planes: the weight's and bias's repeats, the statistics, the inverse
    standard deviations and the normalized output, each its own work (the two >= 1 MB within 4% of
    ncu's bytes), adding up to the formula's 8 FLOPs an element; backward batch_norm_backward_kernel
    and the repeats' two sums over the 8 samples, adding up to the node's FLOPs."""
    e, planes, c = 8 * 64 * 32 * 32, 512, 64
    want = {"fprop": [(0, (c + planes) * 4)] * 2 + [(4 * e - planes, e * 2 + 2 * planes * 4), (planes, 2 * planes * 4),
                                                   (4 * e, 2 * e * 2 + 4 * planes * 4)],
            "bprop": [(2 * e * 8 - 2 * 7 * c, 3 * e * 2 + 5 * planes * 4)] + [(7 * c, (planes + c) * 4)] * 2}
    for mode in ("default", "aten"):
        got: dict = {}
        for r, f in analysed_capture(mode)["unet"]:
            if r["op"] == "instance_norm":
                got.setdefault(r["dir"], []).append((f.flops, f.bytes))
        assert got == want, mode
    cost = next(f.cost for r, f in analysed_capture("default")["unet"] if r["op"] == "instance_norm")
    assert (cost.flops, cost.bwd_flops) == (8 * e, 16 * e)
    big = [f.bytes / moved for r, f, moved, _ in measured("unet") if r["op"] == "instance_norm" and moved >= 1 << 20]
    assert len(big) == 3 and all(0.96 <= x <= 1.0 for x in big)


def test_linear_output_helpers_carry_their_work():
    """recommender's fp32 linears (kernel_truth captures, H100): nn.Linear(13, 256) on 256 rows runs
    cuBLAS's scal_kernel zeroing the 256 x 256 output (written once: ncu wrote 262,144 bytes and
    read none), a split-K GEMM accumulating into it, and cuBLASLt's epilogue kernel adding the bias
    (output and bias read, output written: within 2% of ncu's); nn.Linear(256, 1) broadcasts its
    bias into the 256-row output before a beta-1 GEMV (the bias read, the output written: ncu wrote
    1,024 bytes). The same numbers from the marker and from aten::addmm's range."""
    out = 256 * 256
    names = ("scal_kernel", "globalKernel", "elementwise_kernel")
    want = [("scal_kernel", 0, out * 4), ("globalKernel", out, (2 * out + 256) * 4),
            ("elementwise_kernel", 0, (256 + 1) * 4)]
    got = [(r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("recommender")
           if r["dir"] == "fprop" and r["op"] == "linear" and r["kShortName"] in names]
    assert [g[:3] for g in got] == want
    assert all(0.98 <= nb / moved <= 1.0 for _, _, nb, moved in got[:2])
    for mode in ("plain", "nsyspt"):
        ranges = [(r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture(mode)["recommender"]
                  if r["dir"] == "fprop" and r["op"] == "addmm" and r["kShortName"] in names]
        assert ranges == want, mode


def test_split_k_pass_of_a_backward_with_gradients_of_one_shape():
    """recommender's nn.Linear(320, 256) backward (kernel_truth captures, H100): the input gradient's
    split-K GEMM ([8, 10, 4] blocks of 32 x 32 tiles) and cuBLAS's split-K pass after it, whose
    output, 256 x 320, is the shape of the input's and of the weight's gradient alike (one
    output: the bias gradient is no tiled one): 4 partials read in fp32, 3 adds an element, the
    gradient written (ncu: within 2%). Was na from the marker; the same from the range."""
    out = 256 * 320
    want = (3 * out, 4 * out * 4 + out * 4)
    got = [(f.flops, f.bytes, moved) for r, f, moved, _ in measured("recommender")
           if r["dir"] == "bprop" and "execute_split_k_kernel" in r["kLongName"]]
    assert [g[:2] for g in got] == [want]
    assert 0.98 <= got[0][1] / got[0][2] <= 1.0
    for mode in ("aten", "plain", "nsyspt"):
        assert [(f.flops, f.bytes) for r, f in analysed_capture(mode)["recommender"]
                if r["dir"] == "bprop" and "execute_split_k_kernel" in r["kLongName"]] == [want], mode


def test_split_k_gemms_write_their_partials():
    """recommender's fp32 linears (kernel_truth captures, H100): a GEMM of one product whose grid has
    a z of 2 or more split K, each split writing an fp32 partial of the output, not the output
    once. nn.Linear(256, 64)'s forward (cuBLAS's CUTLASS Kernel2 [4, 1, 4], 256 x 64) and its
    weight gradient (64 x 256: the output whose 64 x 64 tiles make the grid; the input's gradient
    is 256 x 256) and nn.Linear(320, 256)'s two gradients of one shape (256 x 320, xmma's and
    CUTLASS's), each followed by the split-K reduction that reads the 4 partials: the operands
    read and the partials written (ncu's L2 writes, to the byte), within 5% of ncu's bytes (0.48
    to 0.64 of them before). nn.Linear(13, 256)'s sgemm_largek ([8, 8, 2]) adds its 2 splits into
    the zeroed output, no reduction after it: 2 passes of the output (ncu counted 4: 0.41 of its
    bytes, 0.21 before). The same bytes from the markers and from PyTorch's ranges."""
    def gemm(rows, cols, k, splits, bias=0):  # the two operands and the bias read, the partials written
        return (rows * k + k * cols + bias) * 4 + splits * rows * cols * 4
    want = [("fprop", [8, 8, 2], gemm(256, 256, 13, 2, 256)), ("fprop", [4, 1, 4], gemm(256, 64, 256, 4, 64)),
            ("bprop", [8, 10, 4], gemm(256, 320, 256, 4)), ("bprop", [16, 2, 4], gemm(256, 320, 256, 4)),
            ("bprop", [4, 1, 4], gemm(64, 256, 256, 4))]
    got = [(r["dir"], r["grid"], f.bytes, moved) for r, f, moved, _ in measured("recommender")
           if f.tc is not None and r["grid"][2] >= 2]
    assert [g[:3] for g in got] == want
    assert all(0.95 <= nb / moved <= 1.0 for _, _, nb, moved in got[1:])
    for mode in ("aten", "plain", "nsyspt"):
        assert [(r["dir"], r["grid"], f.bytes) for r, f in analysed_capture(mode)["recommender"]
                if f.tc is not None and r["grid"][2] >= 2] == want, mode


def test_bce_with_logits_kernels_carry_their_stages():
    """recommender's F.binary_cross_entropy_with_logits on 256 fp32 logits, mean (kernel_truth
    captures, H100): each of PyTorch's kernels its own step (named stages), where the first carried
    the op and the others were na: log_sigmoid (4 an element), the fill and subtraction of 1 - t,
    the product with x, the log-sigmoid subtracted, the mean (ncu wrote 1,024 bytes for each
    element-wise step, 32 for the mean); backward sigmoid, minus t, times dY (one element), the
    mean's divide by 256. Their FLOPs add up to the op's. From the ranges (plain emit_nvtx),
    aten::mean under aten::mean(self, dtype) is a whole-tensor mean: its bytes known."""
    n, s = 256, 4
    fwd = [(4 * n, 2 * n * s), (0, n * s), (n, 3 * n * s), (n, 3 * n * s), (n, 3 * n * s), (n, (n + 1) * s)]
    bwd = [(n, 2 * n * s), (n, 3 * n * s), (n, 2 * n * s + s), (n, 2 * n * s)]
    rows = [(r["dir"], f.flops, f.bytes) for r, f in analysed_capture("default")["recommender"]
            if r["op"] == "binary_cross_entropy_with_logits"]
    assert rows == [("fprop",) + w for w in fwd] + [("bprop",) + w for w in bwd]
    cost = next(f.cost for r, f in analysed_capture("default")["recommender"]
                if r["op"] == "binary_cross_entropy_with_logits")
    assert cost.flops == sum(w[0] for w in fwd) == 7 * n + n and cost.bwd_flops == sum(w[0] for w in bwd) == 4 * n
    mean = [(f.flops, f.bytes) for r, f in analysed_capture("plain")["recommender"] if r["op"] == "mean"]
    assert mean == [(n, (n + 1) * s)]


def test_cudnn_attention_backward_helpers_from_the_range():
    """llama_block's cuDNN attention backward without pyprof's markers (plain emit_nvtx and nsys
    --pytorch captures, H100): compute_dot_do_o, convert_dq and the two fmha_reduce_head kernels
    take the helpers of aten::_scaled_dot_product_cudnn_attention_backward's query, key and value,
    in the query's dtype (bf16, as its producer wrote it; their names say `float` for a scale):
    the marker level's numbers, kernel for kernel."""
    names = ("compute_dot_do_o_specialized", "convert_dq_to_16bits", "fmha_reduce_head")
    want = [(r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture("default")["llama_block"]
            if r["kShortName"] in names]
    assert len(want) == 8 and all(w[2] for w in want)
    for mode in ("plain", "nsyspt"):
        assert [(r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture(mode)["llama_block"]
                if r["kShortName"] in names] == want, mode


def test_legacy_elementwise_launch_is_exact():
    """unet's torch.cat of an fp32 [8, 128, 32, 32] and a bf16 [8, 64, 32, 32] under bf16 autocast
    (kernel_truth capture, H100): PyTorch's legacy elementwise_kernel<128, k> launches exactly
    ceil(n / (128 x k)) blocks, so the fp32 input's copy (k 2, 4,096 blocks: 1,048,576 elements)
    is not the bf16 input's cast up (524,288 elements), which it took before; the copy that casts
    (k 4, 1,024 blocks) takes it (2 bytes read, 4 written: within 2% of ncu's bytes) and the other
    carries its own input's copy (cat_parts.py: it carried the whole cat before)."""
    def first_shape(r: dict) -> list | None:
        args = (r.get("marker") or {}).get("args") or [[{}]]
        return args[0][0].get("shape") if isinstance(args[0], list) and args[0] else None
    got = [(r["kLongName"].split("(int)")[2][:1], f.flops, f.bytes, moved) for r, f, moved, _ in measured("unet")
           if r["op"] == "cat" and r["dir"] == "fprop" and first_shape(r) == [8, 128, 32, 32]]
    big, cast = 8 * 128 * 32 * 32, 8 * 64 * 32 * 32
    assert [g[:3] for g in got] == [("2", 0, big * 8), ("4", 0, cast * 6)]
    assert all(0.98 <= g[2] / g[3] <= 1.0 for g in got)


def _rows(mode: str, model: str, keep) -> list:
    """(kernel short name, FLOPs, bytes) of the `model` kernels of the `mode` capture that `keep` takes."""
    return [(r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture(mode)[model] if keep(r)]


def test_aten_level_convolution_helpers_are_the_marker_level_parts():
    """Without markers (plain emit_nvtx, nsys --pytorch; kernel_truth captures, H100) a convolution's
    helpers are its marker's parts, made from its ranges' shapes (conv_parts.range_parts): efficientnet_b0's
    six CUTLASS ReduceSplitK kernels sum their wgrad's grid-z fp32 partials into the fp16 weight
    gradient (the [40, 240] weight: z 12, as with markers; they were na); unet's seven
    reduce_wgrad_nchw_helper sums and 126 layout conversions and efficientnet_b0's 66 carry what they
    carry with markers (the [8, 32, 64, 64] input and the [8, 16, 64, 64] dY of a 1x1 convolution's
    backward, one grid for both, one tile of channels each, converted for the wgrad engine after
    its dgrad ran as a GEMM: the input, the engine's first, then dY, where both were na; without
    markers the first stays na, the range's helpers made only at its first helper, after the
    GEMM, so a 1x1 filter's dgrad engine might have converted dY first); and
    efficientnet_b0's first convolution (autocast's aten::conv2d around the cast input's: its
    consumer names the outer one) its 2·8·32·64·64·27 FLOPs."""
    w = 40 * 240
    first = ("implicit_convolve_sgemm", 2 * 8 * 32 * 64 * 64 * 27, (8 * 3 * 128 * 128 + 32 * 27 + 8 * 32 * 64 * 64) * 2)

    def helper(r):
        return any(k in r["kLongName"] for k in ("ReduceSplitK", "reduce_wgrad_nchw_helper", "Nhwc", "Nchw"))
    default = _rows("default", "unet", helper) + _rows("default", "efficientnet_b0", helper)
    assert len(default) == 7 + 126 + 6 + 66 and sum(1 for _, _, b in default if b is None) == 0
    tie = [f.bytes for r, f in analysed_capture("default")["efficientnet_b0"]
           if r["grid"] == [128, 1, 8] and r["dir"] == "bprop" and "Nhwc" in r["kShortName"]]
    assert tie[:2] == [2 * 8 * 32 * 64 * 64 * 2, 2 * 8 * 16 * 64 * 64 * 2]  # the third: another call's input
    for mode in ("plain", "nsyspt"):
        eff = _rows(mode, "efficientnet_b0", lambda r: "ReduceSplitK" in r["kLongName"])
        assert len(eff) == 6 and eff[0][1:] == (11 * w, 12 * w * 4 + w * 2), mode
        ranged = _rows(mode, "unet", helper) + _rows(mode, "efficientnet_b0", helper)
        assert len(ranged) == len(default), mode
        assert [(a, b) for a, b in zip(ranged, default) if a != b] == \
            [(("nchwToNhwcKernel", None, None), ("nchwToNhwcKernel", 0, 2 * 8 * 32 * 64 * 64 * 2))], mode
        assert _rows(mode, "efficientnet_b0", lambda r: "implicit_convolve_sgemm" in r["kLongName"]) == [first], mode


def test_broadcast_add_backward_sum_knows_its_operand():
    """unet's time embedding added to [8, C, H, W] feature maps as [8, C, 1, 1] (bf16, plain
    emit_nvtx): AddBackward0's sum of dY down to the broadcast operand runs in the engine's range,
    outside the node's, whose range says nothing of the operand; the record's fwd.seq names the
    forward add, whose inputs' shapes tell the one dY reduces to: dY read, the [8, C] sum written
    (within 0.89 of ncu's bytes; they were na), 8·C·(HW - 1) adds."""
    want = [(8 * c * (hw - 1), (8 * c * hw + 8 * c) * 2)
            for c, hw in ((64, 1024), (128, 256), (128, 64), (128, 256), (64, 1024))]
    for mode in ("plain", "nsyspt"):
        got = [(f.flops, f.bytes, moved) for r, f, moved, _ in measured("unet", mode)
               if r["op"] == "add" and r["dir"] == "bprop" and r["kShortName"] == "reduce_kernel"]
        assert [g[:2] for g in got] == want, mode
        assert all(0.66 <= b / moved <= 1.0 for _, b, moved in got)


def test_aten_level_unet_ops_each_kernel_its_work():
    """unet without markers (plain emit_nvtx, nsys --pytorch; kernel_truth captures, H100), each
    within 8% of ncu's bytes where it moved >= 1 MB: the cat of an fp32 [8, 128, 32, 32] and a bf16
    [8, 64, 32, 32] PyTorch runs as one copy per input (each its input read in its dtype, written
    in fp32); the math attention's isneginf (the fp32 scores read, a bool written); instance norm's
    native batch norm over 512 planes without running statistics, its three kernels their stages
    (as with markers, but the repeated weight and bias in the kernel's bf16: the range does not say
    theirs); the reflection pad of [8, 3, 32, 32] to [8, 3, 34, 34] in fp32; mse_loss's
    mean of its 24,576 fp32 squares, whose dims the range does not carry, to the one element its
    reduce_kernel's launch of one block of one row of threads writes (as with markers). All were na
    but the statistics kernel, which carried the whole norm (and the mean's FLOPs)."""
    a, b, e, planes = 8 * 128 * 1024, 8 * 64 * 1024, 8 * 64 * 1024, 512
    want = [("reflection_pad2d_out_kernel", 0, (8 * 3 * 32 * 32 + 8 * 3 * 34 * 34) * 4),
            ("batch_norm_collect_statistics_kernel", 4 * e - planes, e * 2 + 2 * planes * 4),
            ("vectorized_elementwise_kernel", planes, 2 * planes * 4),
            ("batch_norm_transform_input_kernel", 4 * e, 2 * e * 2 + 2 * planes * 4 + 2 * planes * 2),
            ("vectorized_elementwise_kernel", 32 * 256 * 256, 32 * 256 * 256 * 5),
            ("vectorized_elementwise_kernel", 32 * 64 * 64, 32 * 64 * 64 * 5),
            ("elementwise_kernel", 0, a * 8), ("elementwise_kernel", 0, b * 6), ("reduce_kernel", 24576, 24576 * 4 + 4)]
    ops = ("reflection_pad2d", "native_batch_norm", "isneginf", "cat", "mean")
    for mode in ("plain", "nsyspt"):
        got = [(r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("unet", mode)
               if r["op"] in ops and r["dir"] == "fprop" and "CatArray" not in r["kShortName"]]
        assert [g[:3] for g in got] == want, mode
        assert all(0.92 <= nb / moved <= 1.0 for _, _, nb, moved in got if moved >= 1 << 20)


def test_cast_parts_go_to_kernels_that_cast():
    """unet under bf16 autocast (kernel_truth captures, H100). A conv_transpose2d backward whose dY
    arrives strided (the gradient of a cat's slice) copies it contiguous in bf16 first (a same-dtype
    copy: gpu_kernel_impl_nocast), then casts the [128, 128, 4, 4] weight gradient back to fp32:
    the copy took the weight's cast-back part (same element count) and the cast was na. The first
    conv2d's bias (64) and weight (1,728) casts, one block and two: the nearest-size rule gave the
    one block the weight. A reshape's backward copy of a strided bf16 gradient is the gradient read
    and written (it took a cast part). Each within 4% of ncu's bytes but the tiny ones."""
    y, w = 8 * 128 * 16 * 16, 128 * 128 * 16
    for mode in ("default", "aten"):
        rows = [(r["op"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("unet", mode)
                if r["dir"] == "bprop" and "direct_copy_kernel_cuda" in r["kLongName"] and r["op"] in (
                    "conv_transpose2d", "reshape")]
        assert [g[:3] for g in rows] == [("conv_transpose2d", 0, y * 4), ("conv_transpose2d", 0, w * 6),
                                         ("conv_transpose2d", 0, 128 * 6), ("reshape", 0, 8 * 384 * 64 * 4),
                                         ("reshape", 0, 8 * 384 * 256 * 4)], mode
        assert all(0.96 <= b / moved <= 1.0 for _, _, b, moved in rows if moved >= 1 << 20)
    casts = [(f.flops, f.bytes) for r, f in analysed_capture("default")["unet"][:30]
             if r["op"] == "conv2d" and "bfloat16_copy_kernel_cuda" in r["kLongName"]]
    assert casts[:3] == [(0, 64 * 6), (0, 1728 * 6), (0, 8 * 3 * 34 * 34 * 6)]


def test_in_place_dropout_kernels_carry_their_stages():
    """efficientnet_b0's classifier Dropout(0.2, inplace=True) on fp16 [8, 1280] (kernel_truth
    captures, H100): PyTorch draws the noise (bernoulli_: an fp16 tensor written, its kernel's first
    type the float accumulator), scales it by 1 / 0.8 and multiplies the input by it in place: each
    kernel its own work, the same with markers and without (the fused kernel's formula put all on
    the first and left two na; without markers bernoulli_ was na); stochastic depth's bernoulli_ on
    [8, 1, 1, 1] fp16 writes 16 bytes (autocast's float32 rule read the accumulator and doubled it)."""
    n = 8 * 1280
    want = [("distribution_elementwise_grid_stride_kernel", 0, n * 2), ("vectorized_elementwise_kernel", n, 2 * n * 2),
            ("vectorized_elementwise_kernel", n, 3 * n * 2)]
    for mode in ("default", "aten", "plain", "nsyspt"):
        eff = analysed_capture(mode)["efficientnet_b0"]
        got = [(r["kShortName"], f.flops, f.bytes) for r, f in eff if r["dir"] == "fprop" and (
            r["op"] == "dropout" or any(o.get("name") == "aten::dropout_" for o in r.get("torchOps") or []))]
        assert got == want, mode
        noise = [f.bytes for r, f in eff if r["dir"] == "fprop" and r["op"] == "bernoulli_"
                 and "dropout" not in str(r.get("torchOps"))]
        assert noise == [16] * 9, mode


def test_cutlass_split_k_partials_are_channel_padded():
    """unet's 3-channel 3x3 convolution in bf16 (kernel_truth captures, H100): cuDNN's CUTLASS
    wgrad kernel splits K over its grid's 23 z, then ReduceSplitK sums the fp32 partials of the
    [64, 3, 3, 3] weight gradient padded to 8 channels (conv_parts.conv_outputs): 64 x 72 read 23 times,
    22 adds each, written in bf16, within 2% of ncu's bytes; the same without markers, from the
    convolution's range (it was na there); efficientnet_b0's 3-channel stem ([32, 3, 3, 3], z 97)
    likewise."""
    w, stem = 64 * 72, 32 * 72
    for mode in ("default", "plain"):
        got = [(f.flops, f.bytes, moved) for r, f, moved, _ in measured("unet", mode) if "ReduceSplitK" in r["kLongName"]]
        assert [g[:2] for g in got] == [(22 * w, 23 * w * 4 + w * 2)], mode
        assert 0.98 <= got[0][1] / got[0][2] <= 1.0
        eff = _rows(mode, "efficientnet_b0", lambda r: "ReduceSplitK" in r["kLongName"])
        assert eff[-1][1:] == (96 * stem, 97 * stem * 4 + stem * 2), mode


def test_operand_of_fewer_dims_is_summed_over_its_leading_dims_of_size_one():
    """maxvit_t's grid attention (H200 default capture): bf16 scores [1, 1, 16, 49, 49] plus the
    fp32 relative position bias [1, 16, 49, 49] under autocast, the sum fp32. Backward, dScores
    and dBias are dY itself, but autograd's sum_to still sums dBias over the leading dim its
    operand lacks (one reduce kernel of no adds: the 38,416 fp32 read and written), then casts
    dScores to bf16; that reduce kernel was na."""
    marker = {"v": 1, "kind": "op", "mod": "Tensor", "op": "__add__",
              "args": [{"shape": [1, 1, 16, 49, 49], "dtype": "bfloat16", "grad": True},
                       {"shape": [1, 16, 49, 49], "dtype": "float32", "grad": True}],
              "module": "blocks.3.layers.1.layers.grid_attention.attn_layer.1", "autocast": "bfloat16"}
    n = 16 * 49 * 49
    assert cost_of(marker).bwd_stages == (("copy_kernel_cuda", 0, 4 * n + 2 * n), ("reduce_kernel", 0, 8 * n))


def test_a_cub_second_pass_is_priced_only_right_after_its_first_pass_on_its_stream():
    """cub_reduce.TwoPassReduce: the single-tile pass reads the partials of the first pass just
    before it on its stream (one a block; long partials of a sum of longs: 8 bytes each); the
    same kernel after another kernel, on another stream, or alone (an input of one tile, which
    the op's formula prices) is not the launch's to price."""
    from pyprof.prof.pricing.cub_reduce import TwoPassReduce

    policy = "cub::detail::reduce::policy_hub<long, int, cuda::std::plus<void>>::Policy1000"
    first = f"void cub::detail::reduce::DeviceReduceKernel<{policy}, const long *, int, cuda::std::plus<void>, long>"
    second = (f"void cub::detail::reduce::DeviceReduceSingleTileKernel<{policy}, long *, long *, int, "
              "cuda::std::plus<void>, long, long, cuda::std::__identity>(T2, T3, T4, T5, T6, T8)")
    other = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>>"

    def on(stream: int, grid: list) -> dict:
        return {"pid": 1, "device": 0, "stream": stream, "grid": grid, "block": [256, 1, 1]}

    passes = TwoPassReduce()
    assert passes.work(on(7, [132, 1, 1]), first) is None
    assert passes.work(on(9, [4, 1, 1]), other) is None  # another stream meanwhile
    assert passes.work(on(7, [1, 1, 1]), second) == (131, 132 * 8 + 8)
    assert passes.work(on(7, [1, 1, 1]), second) is None  # a single-tile reduction alone
    assert passes.work(on(7, [132, 1, 1]), first) is None
    assert passes.work(on(7, [8, 1, 1]), other) is None
    assert passes.work(on(7, [1, 1, 1]), second) is None
    assert passes.work(on(7, [132, 1, 1]), first) is None
    assert passes.work(on(8, [1, 1, 1]), second) is None
