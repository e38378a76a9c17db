"""The aten level (pyprof/prof/pricing/op_ranges.py, ops/aten.py): kernels priced from PyTorch's op ranges when
the pyprof marker cannot, on a synthetic trace made without pyprof.init() (tests/nsys_synth.py),
on records, and formula by formula. Every expected number is derived by hand."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from nsys_synth import SynthExport, torch_text
from pyprof.prof.pricing.op_ranges import AtenCall, template_dtype
from pyprof.prof.pricing.registry import lookup_aten
from test_parse_attribution import parse_all
from test_prof_helpers import analyse, described, prof_text, record, tensor

NVJET_BF16 = "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_bias_TNT"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, " \
        "cutlass::bfloat16_t>, false>(Flash_fwd_params)"
LN = "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)0>(int, float, ...)"
GELU = "void at::native::vectorized_elementwise_kernel<(int)8, at::native::GeluCUDAKernelImpl(...)::" \
       "[lambda(c10::BFloat16) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)"
SUM = "void at::native::reduce_kernel<(int)128, (int)4, at::native::ReduceOp<c10::BFloat16, ...>>(T3)"
Q = [4, 8, 128, 64]  # 262,144 elements, 524,288 B in bf16


def aten_only_step(path: Path) -> str:
    """A bf16 transformer fragment traced with emit_nvtx(record_shapes=True) and no pyprof.init():
    forward addmm, flash attention, layer norm, gelu; backward the two mm of AddmmBackward0, its
    bias-gradient sum, and the flash attention backward (pre, main, post kernels)."""
    syn = SynthExport(str(path))
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    syn.push(main, 1000, 9000, torch_text("aten::linear", seq=1, op_id=1, sizes=[[512, 256], [768, 256], [768]]))
    syn.push(main, 1100, 8000, torch_text("aten::addmm", seq=1, op_id=2, sizes=[[768], [512, 256], [256, 768], [], []]))
    syn.launch_kernel(main, 1200, NVJET_BF16)
    syn.push(main, 10000, 19000, torch_text("aten::scaled_dot_product_attention", seq=2, op_id=3,
                                            sizes=[Q, Q, Q, [], [], [], [], []]))
    syn.push(main, 10100, 18000, torch_text("aten::_scaled_dot_product_flash_attention", seq=2, op_id=4,
                                            sizes=[Q, Q, Q, [], [], [], []]))
    syn.push(main, 10200, 17000, torch_text("aten::_flash_attention_forward", op_id=5,
                                            sizes=[[4, 128, 8, 64]] * 3 + [[]] * 8))
    syn.launch_kernel(main, 10300, FLASH)
    syn.push(main, 20000, 29000, torch_text("aten::native_layer_norm", seq=3, op_id=6,
                                            sizes=[[4, 128, 256], [], [256], [256], []]))
    syn.launch_kernel(main, 20100, LN)
    syn.push(main, 30000, 39000, torch_text("aten::gelu", seq=4, op_id=7, sizes=[[512, 768], []]))
    syn.launch_kernel(main, 30100, GELU)
    syn.push(grad, 50000, 90000, "autograd::engine::evaluate_function: AddmmBackward0")
    syn.push(grad, 50100, 80000, torch_text("AddmmBackward0", seq=1, op_id=10))
    syn.push(grad, 50200, 60000, torch_text("aten::mm", op_id=11, sizes=[[512, 768], [768, 256]]))
    syn.launch_kernel(grad, 50300, "nvjet_sm90_tst_64x32_64x16_1x2_h_bz_NTT")
    syn.push(grad, 60200, 70000, torch_text("aten::mm", op_id=12, sizes=[[256, 512], [512, 768]]))
    syn.launch_kernel(grad, 60300, "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_NNT")
    syn.push(grad, 81000, 89000, torch_text("aten::sum", op_id=13, sizes=[[512, 768], [], [], []]))
    syn.launch_kernel(grad, 81100, SUM)
    syn.push(grad, 100000, 150000, "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0")
    syn.push(grad, 100100, 149000, torch_text("ScaledDotProductFlashAttentionBackward0", seq=2, op_id=20))
    syn.push(grad, 100200, 148000, torch_text("aten::_scaled_dot_product_flash_attention_backward", op_id=21,
                                              sizes=[Q, Q, Q, Q, Q, [4, 8, 128]] + [[]] * 9))
    syn.launch_kernel(grad, 100300, "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<...>>(params)")
    syn.launch_kernel(grad, 100400, "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<"
                                    "64, 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t>>(params)")
    syn.launch_kernel(grad, 100500, "void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<...>>(params)")
    syn.map_device(100, 0, 0)
    return syn.close()


def test_a_trace_without_pyprof_markers_is_priced_from_its_aten_ranges(tmp_path):
    """addmm 2·512·768·256 = 201,326,592 FLOPs; bf16 (nvjet `t`) bytes (512·256 + 256·768 +
    512·768 + 768)·2 = 1,443,328. Flash attention 2·32·128·128·(64 + 64) = 134,217,728; Q, K, V
    and O 4·524,288 B. Layer norm over 131,072 elements, 6 + weight + bias each: 1,048,576;
    x and y 262,144 B each, weight and bias 512 each. gelu 393,216 elements: 1 each, read and
    written in bf16. The backward GEMMs each 201,326,592 (no bias: 1,441,792 B); the bias
    gradient's sum 393,216 - 768 adds, dY read and the [768] bias gradient written: (393,216 + 768)·2 =
    787,968 B (its reduced dims are not in the range: the bias's shape is the forward addmm's
    input the sum reduces to, its node told by the record's fwd.seq, the engine's range having no
    opId). Flash backward
    32·(6·128·128·64 + 4·128·128·64) = 335,544,320 on its main kernel, 2·(Q + K + V) + 2·O
    = 8·524,288 B; its pre and post kernels na (their work is not known)."""
    recs, _ = parse_all(aten_only_step(tmp_path / "aten.sqlite"))
    out, err = prof_text(recs, "dir,op,flops,bytes,level")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows == [
        ["fprop", "addmm", "201326592", "1443328", "aten"],
        ["fprop", "_flash_attention_forward", "134217728", "2097152", "aten"],
        ["fprop", "native_layer_norm", "1048576", "525312", "aten"],
        ["fprop", "gelu", "393216", "1572864", "aten"],
        ["bprop", "addmm", "201326592", "1441792", "aten"],
        ["bprop", "addmm", "201326592", "1441792", "aten"],
        ["bprop", "addmm", "392448", "787968", "aten"],
        ["bprop", "_scaled_dot_product_flash_attention", "na", "na", "aten"],
        ["bprop", "_scaled_dot_product_flash_attention", "335544320", "4194304", "aten"],
        ["bprop", "_scaled_dot_product_flash_attention", "na", "na", "aten"],
    ]
    assert "no op marker" not in err
    # Attention's FLOPs from PyTorch's ranges are an upper bound (no is_causal there): the two
    # kernels that carry them are counted.
    assert ("  attention FLOPs an upper bound (is_causal is not in PyTorch's ranges: the whole score matrix is "
            "counted): 2 kernels: aten._flash_attention_forward (1), aten._scaled_dot_product_flash_attention (1)\n"
            in err)


def test_the_marker_prices_first_and_an_unknown_op_falls_back_to_its_ranges():
    """A trace from an earlier pyprof (no transparent wrappers): the in-projection of
    F.multi_head_attention_forward has that op's marker, which prof cannot price; its kernel is
    priced by aten::addmm (2·40·48·16 = 61,440 FLOPs; fp32 (40·16 + 16·48 + 40·48 + 48)·4 B)."""
    mha = described("torch.nn.functional", "multi_head_attention_forward", tensor(5, 8, 16))
    ops = [{"name": "aten::linear", "opId": 1}, {"name": "aten::addmm", "opId": 2,
                                                  "sizes": [[48], [40, 16], [16, 48], [], []]}]
    facts, summary = analyse([record(mha, "ampere_sgemm_64x32_sliced1x4_tn", torchOps=ops)])
    assert (facts[0].flops, facts[0].bytes, facts[0].level) == (61440, (640 + 768 + 1920 + 48) * 4, "aten")
    assert not summary.warnings
    lin = described("torch.nn.functional", "linear", tensor(40, 16), tensor(48, 16), tensor(48))
    facts, _ = analyse([record(lin, "ampere_sgemm_64x32_sliced1x4_tn", torchOps=ops)])
    assert (facts[0].flops, facts[0].level) == (61440, "marker")


def test_the_engines_gradient_accumulation_is_priced_apart_from_the_node():
    """After a node, the engine sums two gradients of one tensor (aten::add_ under the
    evaluate_function range, outside the node's own): 1 FLOP per element, two reads and a write;
    the node's first kernel still carries the node (relu backward: 1 per element, 3 accesses)."""
    m = described("torch.nn.functional", "relu", tensor(6, 10))
    wrapper = {"name": "autograd::engine::evaluate_function: ReluBackward0"}
    node = [wrapper, {"name": "ReluBackward0", "opId": 5}, {"name": "aten::threshold_backward", "opId": 6,
                                                            "sizes": [[6, 10], [6, 10], []]}]
    acc = [wrapper, {"name": "aten::add_", "opId": 7, "sizes": [[6, 10], [6, 10], []]}]
    ew = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, ...>(int)"
    facts, _ = analyse([record(m, "threshold_backward_kernel", "bprop", torchOps=node),
                        record(m, ew, "bprop", torchOps=acc)])
    assert [(f.flops, f.bytes, f.level) for f in facts] == [(60, 720, "marker"), (60, 720, "aten")]


def test_a_composite_op_without_a_formula_for_a_part_is_na_not_double_counted():
    """A for-loop optimizer step is priced kernel by kernel; a kernel under a range with no
    formula is na with a warning, never the whole step."""
    sgd = {"v": 1, "kind": "op", "mod": "torch.optim", "op": "SGD.step", "args": [],
           "kwargs": {"params": {"count": 2, "numel": 30, "dtype": "float32"}, "momentum": 0, "dampening": 0,
                      "nesterov": False, "weight_decay": 0, "maximize": False, "foreach": False}}
    step = {"name": "Optimizer.step#SGD.step", "opId": 1}
    add = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, ...>(int)"
    recs = [record(sgd, add, torchOps=[step, {"name": "aten::add_", "opId": 2, "sizes": [[20], [20], []]}]),
            record(sgd, add, torchOps=[step, {"name": "aten::add_", "opId": 3, "sizes": [[10], [10], []]}]),
            record(sgd, "mystery_kernel", torchOps=[step, {"name": "aten::mystery", "opId": 4, "sizes": [[10]]}])]
    facts, summary = analyse(recs)
    assert [(f.flops, f.bytes) for f in facts] == [(20, 240), (10, 120), (None, None)]
    assert summary.warnings["PyTorch op without a formula inside a composite op"]["aten::mystery"] == 1
    # Without PyTorch ranges the step is one op: 2 FLOPs per element, 3 passes, on its first
    # kernel; the second kernel's share is not known (na; 0 in the step's sum).
    facts, _ = analyse([record(sgd, add), record(sgd, add, subSeqId=1)])
    assert [(f.flops, f.bytes) for f in facts] == [(60, 360), (None, None)]
    assert [f.whole_work() for f in facts] == [(60, 360), (0, None)]


def call(name: str, sizes: list, kernel: str, dtype: str | None = None):
    return lookup_aten(name)(AtenCall(name, sizes, dtype or template_dtype(kernel), kernel))


@pytest.mark.parametrize("name,sizes,kernel,expected", [
    # Casts: the source dtype is not in the range (its producer's, tensor_flow.py, is not given here)...
    ("aten::copy_", [[4, 5], [4, 5], []], "unrolled_elementwise_kernel<direct_copy_kernel_cuda...lambda(float)..., "
     "LoadWithCast<1>, StoreWithCast<1>>", None),
    # ... but for bfloat16_copy_kernel_cuda, whose lambda's type is the source's: 20·(4 + 2).
    ("aten::copy_", [[4, 5], [4, 5], []], "vectorized_elementwise_kernel<8, bfloat16_copy_kernel_cuda(...)::"
     "[lambda(float)]>", (0, 120)),
    # A same-dtype copy: read and written, 2·20·2 B in fp16.
    ("aten::copy_", [[4, 5], [4, 5], []], "elementwise_kernel<128, 4, gpu_kernel_impl_nocast<direct_copy_kernel_cuda"
     "...lambda(c10::Half)>>", (0, 80)),
    # Tensor.backward's seed: a 0-dim fill, one fp32 element written.
    ("aten::fill_", [[], []], "vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", (0, 4)),
    # abs(self, out) inside aten::abs (l1_loss's; H200): the out= tensor passed empty is no
    # operand: 20 fp32 read and written, 1 an element.
    ("aten::abs", [[4, 5], [0]], "vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, ...>", (20, 160)),
    # AbsBackward0's sign of the input (aten::sgn, the marker level's unary ops all named at this
    # level): 1 an element, read and written.
    ("aten::sgn", [[4, 5]], "vectorized_elementwise_kernel<4, at::native::sign_kernel_cuda(...)::[lambda(float)]>",
     (20, 160)),
    # A cuDNN RNN's dropout seed (torch's get_dropout_state): a 0-dim int64 tensor's random_(), its
    # integers drawn as unsigned long, the tensor's type distribution_nullary_kernel's first.
    ("aten::random_", [[], []], "distribution_elementwise_grid_stride_kernel<unsigned long, (int)2, void "
     "random_kernel<at::CUDAGeneratorImpl *>(...)::[lambda(curandStatePhilox4_32_10 *)], void distribution_nullary_"
     "kernel<long, unsigned long, ulonglong2, at::CUDAGeneratorImpl *, ...>(...)", (0, 8)),
    # cat of opaque 2-byte elements: [4,64,32,32] and [4,32,32,32], 393,216 elements read and written.
    ("aten::cat", [[4, 64, 32, 32], [4, 32, 32, 32], []], "CatArrayBatchedCopy_vectorized<OpaqueType<(unsigned int)2>, "
     "unsigned int, (int)2>", (0, 2 * 393216 * 2)),
    # A full reduction (self, dtype) writes one element (127 adds); over dims the output size is
    # unknown (without a consumer's range or the node's forward op: tensor_flow.py), and with it
    # how many adds.
    ("aten::sum", [[8, 16], []], "reduce_kernel<ReduceOp<float, ...>>", (127, 516)),
    ("aten::sum", [[8, 16], [], [], []], "reduce_kernel<ReduceOp<float, ...>>", (None, None)),
    # Batch norm: training told by cuDNN's kernel name: 6 + 2 per element; running stats read and
    # written. x [8,4,5,5] 800 elements: 2·3200 B, weight and bias 16 each, 4 stats of 16.
    ("aten::cudnn_batch_norm", [[8, 4, 5, 5], [4], [4], [4], [4], [], [], []],
     "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(...)", (6400, 6400 + 32 + 64)),
    ("aten::cudnn_batch_norm", [[8, 4, 5, 5], [4], [4], [4], [4], [], [], []],
     "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(...)", (3200, 6400 + 32 + 32)),
    ("aten::cudnn_batch_norm", [[8, 4, 5, 5], [4], [4], [4], [4], [], [], []], "some_bn_kernel", None),
    # nll_loss of 64 samples: a reduce kernel writes 1 element, a no_reduce one 64.
    ("aten::nll_loss_forward", [[64, 10], [64], [], [], []],
     "nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>", (64, 512 + 65 * 4)),
    ("aten::nll_loss_forward", [[64, 10], [64], [], [], []],
     "nll_loss_forward_no_reduce_cuda_kernel<float, long>", (64, 512 + 128 * 4)),
    # GradScaler's unscale of 30 + 10 fp32 gradients: check and scale, 2 per element; read and written.
    ("aten::_amp_foreach_non_finite_check_and_unscale_", [[30], [10], [], []],
     "multi_tensor_apply_kernel<TensorListMetadata<(int)1>, UnaryOpFunctor<float, 1, 1, 0>>", (80, 320)),
    # Adam's foreach lerp_ (exp_avg toward grad), two lists of 30 + 10: 3 per element (sub, mul,
    # add); both read, the first written.
    ("aten::_foreach_lerp_", [[30], [10], [30], [10], []],
     "multi_tensor_apply_kernel<TensorListMetadata<(int)2>, TernaryOpScalarFunctor<float, 2, 2, 0>>", (120, 480)),
    # Out of place: _foreach_add(grads, params) with alpha: 2 lists read, a third written.
    ("aten::_foreach_add", [[30], [10], [30], [10], []],
     "multi_tensor_apply_kernel<TensorListMetadata<(int)3>, BinaryOpListAlphaFunctor<float, 3, 2, 2>>", (40, 480)),
    # A capturable optimizer's step counters: 29 0-dim tensors += 1. Their sizes are `[]` as the
    # scalar's: the op's one scalar is told apart by the op (add takes one), not the sizes.
    ("aten::_foreach_add_", [[]] * 30,
     "multi_tensor_apply_kernel<TensorListMetadata<(int)1>, BinaryOpScalarFunctor<float, 1, 1, 0>>", (29, 232)),
    # A unary op takes no scalar: every `[]` is a 0-dim tensor.
    ("aten::_foreach_sqrt_", [[]] * 3,
     "multi_tensor_apply_kernel<TensorListMetadata<(int)1>, UnaryOpFunctor<float, 1, 1, 0>>", (3, 24)),
    # One scalar per tensor (a scalar list): the split is not in the sizes, na.
    ("aten::_foreach_add_", [[]] * 4,
     "multi_tensor_apply_kernel<TensorListScalarListMetadata<float, (int)1>, BinaryOpScalarListFunctor<float>>", None),
    # Without the list depth in the name: na.
    ("aten::_foreach_add_", [[30], [10], []], "mystery_kernel<float>", None),
    # where: the condition read as bool. 20 elements: cond 20 B, x, y 80 each, out 80.
    ("aten::where", [[4, 5], [4, 5], [4, 5]], "elementwise_kernel<where_kernel_impl...lambda(bool, float, float)>",
     (20, 260)),
    # where(condition) alone, and nonzero under it: what the call writes, and for a condition of
    # two dims the coordinates it computes, depend on the count, in no range (its kernels one by
    # one: test_prof_ops.py); a [20] condition's two tests an element are known.
    ("aten::where", [[4, 5]], "DeviceReduceSingleTileKernel<...>", (None, None)),
    ("aten::nonzero", [[4, 5]], "DeviceReduceSingleTileKernel<...>", (None, None)),
    ("aten::nonzero", [[20]], "DeviceReduceSingleTileKernel<...>", (40, None)),
    # Max pooling's backward, [8,256,15,15] pooled to [8,256,7,7] (12,544 dY elements): one add per
    # dY element; X's size of dX written (460,800 fp32), dY read and its int64 indices.
    ("aten::max_pool2d_with_indices_backward", [[8, 256, 7, 7], [8, 256, 15, 15], [], [], [], [], [], [8, 256, 7, 7]],
     "max_pool_backward_nchw<float, float, int>(const T1 *, const long *, T3)", (100352, 460800 * 4 + 100352 * 12)),
    # channels_last bf16 [8,64,64,64] to [8,64,32,32] (524,288): dX 2 B an element.
    ("aten::max_pool2d_with_indices_backward", [[8, 64, 32, 32], [8, 64, 64, 64], [], [], [], [], [], [8, 64, 32, 32]],
     "max_pool_backward_nhwc<c10::BFloat16, float>(const T1 *, const long *, int)", (524288, 2097152 * 2 + 524288 * 10)),
    # maxvit's average pooling backward, bf16 [1,256,14,14] pooled to [1,256,7,7]: dY read and dX
    # written; the FLOPs need the window, not in the range: na.
    ("aten::avg_pool2d_backward", [[1, 256, 7, 7], [1, 256, 14, 14], [], [], [], [], [], []],
     "void at::native::<unnamed>::avg_pool2d_backward_out_cuda_frame<c10::BFloat16, float, int>(T3, const T1 *)",
     (None, (256 * 49 + 256 * 196) * 2)),
    # swin's relative position bias table[index]: the table a parameter (no producer: its dtype not
    # known), the gather kernel's 4-byte opaque elements: 2401 int64 indices read, 2401·3 elements
    # written, the table's 169·3 read once.
    ("aten::index", [[169, 3], [2401]], "void at::native::index_elementwise_kernel<(int)128, (int)4, void at::native::"
     "gpu_index_kernel<void at::native::index_kernel_impl<at::native::OpaqueType<(int)4>>(at::TensorIteratorBase &, "
     "c10::ArrayRef<long>, c10::ArrayRef<long>)::[lambda(char *, const char *, long) (instance 1)]>(...)>(long, T3)",
     (0, 2401 * 8 + (2401 * 3 + 169 * 3) * 4)),
    # The vectorized gather's name states no element size: na.
    ("aten::index", [[169, 12], [2401]], "void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, "
     "int, long, long, long, long, bool)", None),
    # smooth_l1_loss's element-wise kernel over [8,64,256] (131,072 fp32): 5 an element, x and t read,
    # the losses written (their mean: an aten::mean range of its own); backward 3 an element, the
    # 0-dim dLoss one element read.
    ("aten::smooth_l1_loss", [[8, 64, 256], [8, 64, 256], [], []],
     "vectorized_elementwise_kernel<4, smooth_l1_kernel_cuda(TensorIteratorBase &, double)::[lambda(float, float)]>",
     (5 * 131072, 3 * 131072 * 4)),
    ("aten::smooth_l1_loss_backward", [[], [8, 64, 256], [8, 64, 256], [], [], [8, 64, 256]],
     "elementwise_kernel<128, 2, gpu_kernel_impl_nocast<smooth_l1_backward_cuda_kernel(...)::[lambda(float, float, "
     "float)]>>", (3 * 131072, 3 * 131072 * 4 + 4)),
    # The eval fast path's QKV split: [2,16,96] with a 96 bias: 3072 adds + 1024 scales; QKV read
    # and written as Q, K, V, the bias read.
    ("aten::_transform_bias_rescale_qkv", [[2, 16, 96], [96], []], "transform_bias_rescale_qkv_kernel<float, float>",
     (4096, 2 * 3072 * 4 + 384)),
])
def test_aten_formulas(name, sizes, kernel, expected):
    c = call(name, sizes, kernel)
    assert (None if c is None else (c.flops, c.bytes)) == expected


def test_the_kernel_name_tells_the_dtype():
    assert template_dtype("void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)0>") == "bfloat16"
    assert template_dtype("flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, cutlass::half_t>>") == "float16"
    assert template_dtype("void at::native::elementwise_kernel<(int)128, CUDAFunctor_add<long>>(int, T3)") == "int64"
    assert template_dtype("void at::native::elementwise_kernel<(int)128, (int)4>(int)") is None  # casts, not types
    assert template_dtype("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") is None


LSTM_WEIGHTS = [[256, 32], [256, 16], [256], [256], [16, 64]] * 4
RNN_BWD = {"name": "aten::_cudnn_rnn_backward", "opId": 30,
           "sizes": [[4, 12, 32]] + LSTM_WEIGHTS + [[], [55296], [4, 4, 16], [4, 4, 64], [4, 12, 32], [4, 12, 32]]
           + [[]] * 11 + [[6488064], [332416], []]}


def test_a_range_opened_inside_another_does_not_restart_it():
    """cuDNN's LSTM backward (tests/data/fixture_plain: nn.LSTM(32, 64, 2 layers, bidirectional,
    proj_size 16), 48 rows, 4 a step) zeroes a buffer through aten::zeros between its kernels:
    the fill kernel is the nested range's ([8] fp32 written: 32 B), and each cell kernel of the
    node, before and after it, carries its own step: 2·4·64·21 FLOPs; the gates and states'
    gradients: (2·4·256 + 3·4·64 + 3·4·64)·4 bytes."""
    node = [{"name": "autograd::engine::evaluate_function: CudnnRnnBackward0"}, {"name": "CudnnRnnBackward0"}, RNN_BWD]
    zeros = node + [{"name": "aten::zeros", "opId": 31, "sizes": [[], [], [], [], []]},
                    {"name": "aten::zero_", "opId": 32, "sizes": [[8]]},
                    {"name": "aten::fill_", "opId": 33, "sizes": [[8], []]}]
    cell = "void LSTM_elementWise_bp1<float, float, float>(int, int, float*, float*)"
    fill = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, ...>(int)"
    recs = [record(None, cell, "bprop", torchOps=node), record(None, fill, "bprop", torchOps=zeros),
            record(None, cell, "bprop", torchOps=node, subSeqId=2)]
    facts, summary = analyse(recs)
    assert [(f.flops, f.bytes, f.level) for f in facts] == [(10752, 14336, "aten"), (0, 32, "aten"),
                                                            (10752, 14336, "aten")]
    assert not summary.warnings


MEAN = "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float, float, " \
       "float, float>, unsigned int, float, (int)4, (int)4>>(T3)"
MEAN_BF16_NHWC = "void at::native::reduce_kernel<(int)128, (int)4, at::native::ReduceOp<c10::BFloat16, at::native::" \
                 "MeanOps<c10::BFloat16, float, float, c10::BFloat16>, unsigned int, c10::BFloat16, (int)4, (int)8>>(T3)"


@pytest.mark.parametrize("sizes,kernel,grid,block,outputs", [
    # adaptive_avg_pool2d's mean of [8, 1000, 7, 7] (its output only read by a flatten): 49
    # inputs an output along x (32 lanes), 16 outputs a block: 500 blocks write 8,000 (H100 capture).
    ([[8, 1000, 7, 7], [], [], []], MEAN, [500, 1, 1], [32, 16, 1], 8000),
    # The same of a channels_last bf16 [8, 2048, 4, 4]: outputs along x, 4 a thread (the kernel's
    # second argument), 128 a block: 32 blocks write 16,384.
    ([[8, 2048, 4, 4], [], [], []], MEAN_BF16_NHWC, [32, 1, 1], [32, 4, 1], 16384),
    # A loss's mean of 131,072 elements split across 16 blocks of one row of 512 threads: one output.
    ([[8, 64, 256], [], [], [], []], MEAN, [1, 16, 1], [512, 1, 1], 1),
    # [16, 16, 16] to 16 outputs along x or to 256 along y launch alike: na.
    ([[16, 16, 16], [], [], []], MEAN, [1, 1, 1], [32, 16, 1], None),
])
def test_a_reduction_over_dims_takes_its_output_size_from_its_launch(sizes, kernel, grid, block, outputs):
    """A reduction whose range carries no dims and whose output no consumer names: the outputs
    its reduce_kernel's launch gives (reduce_launch.py), where one reduction of the input's dims
    alone gives that launch; bytes the input read and those outputs written."""
    c = lookup_aten("aten::mean")(AtenCall("aten::mean", sizes, template_dtype(kernel), kernel, grid=grid, block=block))
    n, size = math.prod(sizes[0]), 2 if "BFloat16" in kernel else 4
    assert (c.flops, c.bytes) == (n, None if outputs is None else (n + outputs) * size)


def _conv_call(x: list, w: list, out: list, kernels: list, inner_input: int = 5) -> list:
    """Records of one convolution priced from its ranges alone (conv2d, _convolution around
    cudnn_convolution, whose first input was made by op `inner_input`: 5, the wrapper's own, or
    an op opened inside _convolution), its kernels in order, then a consumer naming conv2d's output."""
    rest = [[]] * 7
    ops = [{"name": "aten::conv2d", "seq": 3, "opId": 10, "sizes": [x, w] + rest, "inputOpIds": [[5, 0], [4, 0]]},
           {"name": "aten::_convolution", "opId": 11, "sizes": [x, w] + rest, "inputOpIds": [[5, 0], [4, 0]]},
           {"name": "aten::cudnn_convolution", "opId": 13, "sizes": [x, w] + rest,
            "inputOpIds": [[inner_input, 0], [4, 0]]}]
    relu = [{"name": "aten::relu", "seq": 4, "opId": 20, "sizes": [out], "inputOpIds": [[10, 0]]}]
    return [record(None, k, torchOps=ops, subSeqId=i) for i, k in enumerate(kernels)] + \
        [record(None, "vectorized_elementwise_kernel<4, clamp_min_kernel...lambda(c10::BFloat16)>", torchOps=relu)]


PAD = "void nhwcAddPaddingKernel<__nv_bfloat16, __nv_bfloat16, float, (bool)1, (cudnnKernelDataType_t)0>(int, int)"
ALIGN8 = "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_128x128_32x5_nhwc_align8>(T1::Params)"
FIRST_LAYER = "sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64_" \
              "tensor1688_execute_kernel_kernel__5x_cudnn"


@pytest.mark.parametrize("conv,multiple", [(ALIGN8, 8), (FIRST_LAYER.replace("f16f16_f32_f16", "bf16bf16_f32_bf16"), 4)])
def test_a_range_priced_convolution_pads_channels_for_the_kernel_after_it(conv, multiple):
    """A bf16 [8,3,128,128] stem (weight [64,3,7,7], out [8,64,64,64]): cuDNN pads the input, then
    the weight, to the channel multiple of the convolution kernel read ahead (CUTLASS's align8,
    sm90's first-layer c4), each read at 3 channels and written at the multiple; the convolution
    2·8·64·64²·3·49 FLOPs, input, weight and output read and written once in bf16."""
    recs = _conv_call([8, 3, 128, 128], [64, 3, 7, 7], [8, 64, 64, 64], [PAD, PAD, conv])
    facts, _ = analyse(recs)
    x, w = 8 * 3 * 128 * 128, 64 * 3 * 49
    assert [(f.flops, f.bytes) for f in facts[:3]] == [
        (0, (x + x // 3 * multiple) * 2), (0, (w + w // 3 * multiple) * 2),
        (616562688, (x + w + 8 * 64 * 64 * 64) * 2)]


def test_a_convolution_whose_input_its_wrapper_made_contiguous_finds_its_output():
    """ShuffleNet's 1x1 convolution of a strided channel split: aten::_convolution makes the input
    contiguous (an op opened inside it) before aten::cudnn_convolution, whose consumer names the
    outer conv2d's output: 2·8·16·16·58·58 FLOPs, input, weight and output once in bf16."""
    kernel = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_64x1_nn_align2>(T1::Params)"
    x, w = [8, 58, 16, 16], [58, 58, 1, 1]
    facts, _ = analyse(_conv_call(x, w, x, [kernel], inner_input=12))
    assert (facts[0].flops, facts[0].bytes) == (13778944, (2 * 8 * 58 * 256 + 58 * 58) * 2)
    # An input made outside the wrapper (op 3, before it) is not the wrapper's: no output, na.
    facts, _ = analyse(_conv_call(x, w, x, [kernel], inner_input=3))
    assert facts[0].flops is None


WGRAD = "void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::conv::kernel::ImplicitGemmConvolution<cutlass__5x_cudnn::" \
        "conv::threadblock::ImplicitGemmMultistage<cutlass__5x_cudnn::gemm::GemmShape<(int)64, (int)128, (int)32>, " \
        "cutlass__5x_cudnn::conv::threadblock::Conv2dWgradOutputGradientTileAccessIteratorOptimized<cutlass__5x_cudnn::" \
        "MatrixShape<(int)64, (int)32>, cutlass__5x_cudnn::bfloat16_t>>, (cutlass__5x_cudnn::conv::Operator)2>>(T1::Params)"
DGRAD = "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_execute_kernel__5x_cudnn"


@pytest.mark.parametrize("kernels,pads", [
    # The image does not require grad: the input padded, the weight-gradient kernel, dW stripped.
    ([PAD, WGRAD, PAD], ["x", "w"]),
    # Both gradients: the weight padded and dX stripped around dgrad, then as above.
    ([PAD, DGRAD, PAD, PAD, WGRAD, PAD], ["w", "x", "x", "w"]),
    # A kernel between the pads that names neither gradient: na.
    ([PAD, "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_64x1_nn_align2>(T1::Params)", PAD],
     [None, None]),
])
def test_a_range_priced_convolution_backward_pads_around_the_gradient_kernel_it_names(kernels, pads):
    """The backward of the bf16 [8,3,128,128] stem (weight [64,3,7,7]) from its ranges, which do
    not say which arguments required grad: each pair of cuDNN's channel pads (8 channels
    backward) is the one around the gradient kernel after its first pad, as its name says."""
    node = [{"name": "autograd::engine::evaluate_function: ConvolutionBackward0", "opId": 30},
            {"name": "ConvolutionBackward0", "seq": 3, "opId": 31, "sizes": [[8, 64, 64, 64]], "inputOpIds": [[9, 0]]},
            {"name": "aten::convolution_backward", "opId": 32,
             "sizes": [[8, 64, 64, 64], [8, 3, 128, 128], [64, 3, 7, 7]] + [[]] * 8,
             "inputOpIds": [[9, 0], [5, 0], [4, 0]] + [[0, -1]] * 8}]
    facts, _ = analyse([record(None, k, "bprop", torchOps=node, subSeqId=i) for i, k in enumerate(kernels)])
    x, w = 8 * 3 * 128 * 128, 64 * 3 * 49
    want = {"x": (0, (x + x // 3 * 8) * 2), "w": (0, (w + w // 3 * 8) * 2), None: (None, None)}
    assert [(f.flops, f.bytes) for k, f in zip(kernels, facts) if k == PAD] == [want[p] for p in pads]


def test_a_reduction_inside_a_convolution_backward_is_not_taken_for_its_output():
    """The bias gradient's sum inside aten::convolution_backward, over a dY copy the backward made
    (op 12, opened inside it): the backward's consumer names its output 0, dX [8,192,32,32], which
    is not the sum's; the sum's shape is the forward's bias [64] (the node's forward op's input
    that dY reduces to): 524,288 bf16 read, 64 written, 524,288 - 64 adds (UNet's 1x1
    convolution, H100)."""
    fwd = [{"name": "aten::conv2d", "seq": 7, "opId": 2, "sizes": [[8, 192, 32, 32], [64, 192, 1, 1], [64]] + [[]] * 4,
            "inputOpIds": [[1, 0], [0, -1], [0, -1]]}]
    node = [{"name": "autograd::engine::evaluate_function: ConvolutionBackward0", "opId": 9},
            {"name": "ConvolutionBackward0", "seq": 7, "opId": 10, "sizes": [[8, 64, 32, 32]], "inputOpIds": [[8, 0]]},
            {"name": "aten::convolution_backward", "opId": 11, "sizes": [[8, 64, 32, 32], [8, 192, 32, 32],
                                                                        [64, 192, 1, 1]] + [[]] * 8,
             "inputOpIds": [[8, 0], [1, 0], [0, -1]] + [[0, -1]] * 8}]
    bias = node + [{"name": "aten::sum", "opId": 13, "sizes": [[8, 64, 32, 32], [], [], []],
                    "inputOpIds": [[12, 0], [0, -1], [0, -1], [0, -1]]}]
    cast = [{"name": "autograd::engine::evaluate_function: ToCopyBackward0", "opId": 20},
            {"name": "ToCopyBackward0", "seq": 6, "opId": 21, "sizes": [[8, 192, 32, 32]], "inputOpIds": [[11, 0]]},
            {"name": "aten::copy_", "opId": 23, "sizes": [[8, 192, 32, 32], [8, 192, 32, 32], []],
             "inputOpIds": [[22, 0], [11, 0], [0, -1]]}]
    total = "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<c10::BFloat16, at::native::" \
            "func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>>, unsigned " \
            "int, c10::BFloat16, (int)4, (int)8>>(T3)"
    recs = [record(None, "implicit_convolve_sgemm<__nv_bfloat16, __nv_bfloat16, 1024>(int)", torchOps=fwd),
            record(None, total, "bprop", torchOps=bias, grid=[64, 1, 1], block=[32, 16, 1]),
            record(None, "unrolled_elementwise_kernel<direct_copy_kernel_cuda...lambda(float)>", "bprop", torchOps=cast)]
    facts, _ = analyse(recs)
    assert (facts[1].flops, facts[1].bytes) == (524288 - 64, 524288 * 2 + 64 * 2)


ADDCMUL = "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)3>, " \
          "at::native::<unnamed>::PointwiseOpScalarFunctor<float, (int)3, (int)3, (int)0>, std::multiplies<float>, " \
          "float>(T1, T2, T3, T4...)"


@pytest.mark.parametrize("second, third, lists_read", [
    ([[7, 0], [8, 0]], [[7, 0], [8, 0]], 2),   # exp_avg_sq.addcmul_(grad, grad): the gradients read once
    ([[7, 0], [8, 0]], [[9, 0], [8, 0]], 3),   # one tensor differs: three lists
    ([[0, -1], [0, -1]], [[0, -1], [0, -1]], 3),  # producers not named: not known to be the same
])
def test_a_foreach_list_passed_twice_is_read_once(second, third, lists_read):
    """aten::_foreach_addcmul_(self, tensor1, tensor2, value) over 30 + 10 fp32 elements a list
    (ranges flatten the lists): self read and written, each distinct list read; two lists whose
    tensors have the same producers are one list (an H200 capture's Adam: 4/3 of ncu's bytes
    before)."""
    rng = {"name": "aten::_foreach_addcmul_", "opId": 20, "sizes": [[30], [10]] * 3 + [[]],
           "inputOpIds": [[0, -1], [0, -1]] + second + third + [[0, -1]]}
    facts, _ = analyse([record(None, ADDCMUL, "optim", torchOps=[rng])])
    assert (facts[0].flops, facts[0].bytes, facts[0].level) == (80, (lists_read + 1) * 40 * 4, "aten")


COPY_LISTS = "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, " \
             "at::native::<unnamed>::UnaryOpFunctor<float, (int)2, (int)1, (int)1>, at::native::Copy<float, float>>(T1, T2)"


def test_a_graph_trees_input_copies_read_the_inputs_and_write_the_buffers():
    """aten::_foreach_copy_(self, src, non_blocking), a CUDA graph tree copying a compiled graph's
    inputs into its static buffers (H200, mha_weights under reduce-overhead: fp32 [64, 8, 128]
    and [80, 8, 96]): the inputs read, the buffers written, not read; the backward graph's 0-dim
    loss gradient likewise (its sizes `[]` are a 0-dim tensor's, the last one non_blocking)."""
    n = 64 * 8 * 128 + 80 * 8 * 96
    rng = {"name": "aten::_foreach_copy_", "opId": 130, "sizes": [[64, 8, 128], [80, 8, 96]] * 2 + [[]],
           "inputOpIds": [[0, -1]] * 5}
    scalar = {"name": "aten::_foreach_copy_", "opId": 133, "sizes": [[], [], []], "inputOpIds": [[0, -1]] * 3}
    facts, _ = analyse([record(None, COPY_LISTS, torchOps=[rng], grid=[2, 1, 1]),
                        record(None, COPY_LISTS, "bprop", torchOps=[scalar])])
    assert [(f.flops, f.bytes, f.level) for f in facts] == [(0, 2 * n * 4, "aten"), (0, 2 * 4, "aten")]


INDEX_ADD = "void at::native::indexFuncLargeIndex<float, long, unsigned int, (int)2, (int)2, (int)-2, (bool)1, " \
            "at::native::<unnamed>::ReduceAdd>(at::cuda::detail::TensorInfo<T1, T3>, int, int, T3, T3, long, long)"


def test_index_add_finds_its_dim_from_the_shapes():
    """An MoE's out.index_add_(0, rows, y) under emit_nvtx (H200, pricing_coverage's `moe`): the
    range leaves the dim out (a scalar), but only dim 0 has source's size the index's length and
    every other self's: the index and y read, the 128 rows added into read and written, an add
    an element. Where two dims fit (a square source), na."""
    rng = {"name": "aten::index_add_", "opId": 97, "sizes": [[512, 256], [], [128], [128, 256], []],
           "inputOpIds": [[30, 0], [0, -1], [46, 0], [96, 0], [0, -1]]}
    square = dict(rng, sizes=[[4, 4], [], [4], [4, 4], []])
    facts, _ = analyse([record(None, INDEX_ADD, torchOps=[rng]), record(None, INDEX_ADD, torchOps=[square])])
    n = 128 * 256
    assert (facts[0].flops, facts[0].bytes, facts[0].level) == (n, 128 * 8 + 3 * n * 4, "aten")
    assert (facts[1].flops, facts[1].bytes) == (None, None)


def test_split_k_reduction_writes_the_gemms_output_type():
    """cuBLASLt's splitKreduce_kernel sums its float partials into the GEMM's output, its fifth
    template type (the H200 convnext's linear: a bf16 output, which the cast of its gradient in
    the backward reads; as the first type, float32, the cast read and wrote one dtype: na)."""
    from pyprof.prof.pricing.op_ranges import written_dtype
    name = ("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, {}, float, {}, (bool)0, float, {}, {}, "
            "(bool)1, (bool)0, (bool)0, (bool)0>(cublasLt::cublasSplitKParams<T6>, const T4 *, const T10 *, T9 *, T5 *)")
    assert [written_dtype(name.format(*[t] * 4), None) for t in ("__nv_bfloat16", "__half", "float")] == \
        ["bfloat16", "float16", "float32"]


def test_a_comparison_writes_bool():
    """PyTorch's binary functors name what they return, third (an H200 MoE router's idx == e reads
    int64 and writes bool): the flow gives nonzero's condition 1 B an element, not 8."""
    from pyprof.prof.pricing.op_ranges import written_dtype
    eq = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<long, long, bool, "
          "at::native::<unnamed>::CompareEqFunctor<long>>, std::array<char *, (unsigned long)2>>(int, T2, T3)")
    mul = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<c10::BFloat16, "
           "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, std::array<char *, "
           "(unsigned long)3>>(int, T2, T3)")
    # x > 0.5 (the H200 data_sized capture's masks): typed by what it reads, writes bool
    gt = ("void at::native::vectorized_elementwise_kernel<(int)4, void at::native::compare_scalar_kernel<float>("
          "at::TensorIteratorBase &, at::native::<unnamed>::OpType, T1)::[lambda(float) (instance 1)], "
          "std::array<char *, (unsigned long)2>>(int, T2, T3)")
    assert (written_dtype(eq, None), written_dtype(mul, None), written_dtype(gt, None)) == ("bool", "bfloat16", "bool")
    eq_range = {"name": "aten::eq", "opId": 7, "sizes": [[512, 2], []], "inputOpIds": [[3, 1], [0, -1]]}
    where = {"name": "aten::nonzero", "opId": 8, "sizes": [[512, 2]], "inputOpIds": [[7, 0]]}
    count = ("void at_cuda_detail::cub::detail::reduce::DeviceReduceSingleTileKernel<Policy1000, transform_iterator<"
             "at::native::<unnamed>::NonZeroOp<bool>, const bool *>, int *, unsigned long long>(T2, T3, T4, T5, T6, T8)")
    facts, _ = analyse([record(None, eq, torchOps=[eq_range]), record(None, count, torchOps=[where])])
    assert (facts[1].flops, facts[1].bytes) == (1024, 1024 + 4)


# autocast's casts: a linear's fp32 bias down to bf16, and a layer norm's bf16 input up to fp32.
DOWN = "void at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda(" \
       "at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)"
UP = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::" \
     "[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) " \
     "(instance 1)], std::array<char *, (unsigned long)2>, (int)4, TrivialOffsetCalculator<(int)1, unsigned int>, " \
     "TrivialOffsetCalculator<(int)1, unsigned int>, at::native::memory::LoadWithCast<(int)1>, " \
     "at::native::memory::StoreWithCast<(int)1>>(int, T1, T2, T3, T4, T5, T6)"
X = [8, 32, 32, 96]  # 786,432 elements


def _cast(op: dict, shape: list, source: list, op_id: int) -> list:
    """The ranges of autocast's cast of `op`'s argument of `shape` made by `source`."""
    return [op, {"name": "aten::to", "opId": op_id + 1, "sizes": [shape, [], [], [], []],
                 "inputOpIds": [source, [0, -1], [0, -1], [0, -1], [0, -1]]},
            {"name": "aten::_to_copy", "opId": op_id + 2, "sizes": [shape] + [[]] * 6,
             "inputOpIds": [source] + [[0, -1]] * 6},
            {"name": "aten::copy_", "opId": op_id + 4, "sizes": [shape, shape, []],
             "inputOpIds": [[op_id + 3, 0], source, [0, -1]]}]


def _layer_norm_cast(view: list) -> dict:
    """convnext's layer norm under autocast, of a permute's output (a view: no kernel, so no dtype)."""
    norm = {"name": "aten::layer_norm", "seq": 3, "opId": 20, "sizes": [X, [], [96], [96], [], []],
            "inputOpIds": [[10, 0], [0, -1], [0, -1], [0, -1], [0, -1], [0, -1]]}
    return record(None, UP, torchOps=_cast(norm, X, view, 20))


def test_autocast_upcast_reads_autocast_s_16_bit_dtype():
    """Without pyprof.init() a cast's source dtype is its producer's, and a view launches no
    kernel to tell it. A cast to float32 that autocast made of an op's argument (the cast's
    source one of the op's inputs) casts up from autocast's 16-bit dtype, which its casts down
    told (a linear's bias: bfloat16): the 786,432 elements read in bf16 and written in fp32.
    Before any cast down, or for a cast of something the op did not take, na."""
    linear = {"name": "aten::linear", "seq": 1, "opId": 1, "sizes": [[8, 4, 4, 3072], [768, 3072], [768]],
              "inputOpIds": [[9, 0], [0, -1], [0, -1]]}
    down = record(None, DOWN, torchOps=_cast(linear, [768], [0, -1], 1))
    n = math.prod(X)
    facts, _ = analyse([down, _layer_norm_cast([10, 0])])
    assert (facts[0].bytes, facts[1].flops, facts[1].bytes) == (768 * 6, 0, n * 2 + n * 4)
    facts, _ = analyse([_layer_norm_cast([10, 0])])
    assert facts[0].bytes is None
    facts, _ = analyse([down, _layer_norm_cast([11, 0])])
    assert facts[1].bytes is None
    # A 16-bit copy that is no cast (a clone's) tells nothing of autocast.
    clone = [{"name": "aten::clone", "opId": 1, "sizes": [[768], []], "inputOpIds": [[9, 0], [0, -1]]},
             {"name": "aten::copy_", "opId": 3, "sizes": [[768], [768], []], "inputOpIds": [[2, 0], [9, 0], [0, -1]]}]
    facts, _ = analyse([record(None, DOWN, torchOps=clone), _layer_norm_cast([10, 0])])
    assert facts[1].bytes is None


MAX_POOL = "void at::native::<unnamed>::max_pool_forward_nchw<float, float>(int, const T1 *, long, long, long, int, int)"


def test_max_pool_forward_bytes_from_its_consumer_and_its_flops_na():
    """squeezenet's max pooling without pyprof.init() (H200 kernel_truth capture: 0.999 of Nsight
    Compute's bytes): [8,64,63,63] fp32 read, the [8,64,31,31] output its consumer's range gives
    (through aten::max_pool2d around aten::max_pool2d_with_indices) and its int64 indices
    written; one comparison a window tap, but the window is not in the range: FLOPs na."""
    x, out = [8, 64, 63, 63], [8, 64, 31, 31]
    pool = [{"name": "aten::max_pool2d", "seq": 4, "opId": 10, "sizes": [x, [], [], [], [], []],
             "inputOpIds": [[9, 0]] + [[0, -1]] * 5},
            {"name": "aten::max_pool2d_with_indices", "seq": 4, "opId": 11, "sizes": [x, [], [], [], [], []],
             "inputOpIds": [[9, 0]] + [[0, -1]] * 5}]
    conv = [{"name": "aten::conv2d", "seq": 5, "opId": 12, "sizes": [out, [16, 64, 1, 1], [16], [], [], [], []],
             "inputOpIds": [[10, 0]] + [[0, -1]] * 6}]
    facts, _ = analyse([record(None, MAX_POOL, torchOps=pool), record(None, NVJET_BF16, torchOps=conv)])
    n, m = math.prod(x), math.prod(out)
    assert (facts[0].flops, facts[0].bytes, facts[0].level) == (None, (n + m) * 4 + 8 * m, "aten")
    facts, _ = analyse([record(None, MAX_POOL, torchOps=pool)])  # no consumer read ahead: na
    assert facts[0].bytes is None


def test_topk_takes_k_and_dim_from_the_consumer_of_its_values():
    """aten::topk's range holds the input's shape alone (k, dim and sorted are scalars): the MoE
    router's [512, 8] scores, whose values a sum then reads as [512, 2] (H200, emit_nvtx). k = 2
    along dim 1, the kernels as the marker prices them (test_prof_more_ops.py): gatherTopK 512 x 8
    x ceil(log2 2) tests, the scores read and 2 values and int64 indices a row written; then the
    sort of each row's 2 in place."""
    topk = {"name": "aten::topk", "opId": 26, "sizes": [[512, 8], [], [], [], []], "inputOpIds": [[19, 0]] + [[0, -1]] * 4}
    total = {"name": "aten::sum", "opId": 27, "sizes": [[512, 2], [], [], []], "inputOpIds": [[26, 0]] + [[0, -1]] * 3}
    gather = "void at::native::sbtopk::gatherTopK<float, unsigned int, (int)2, (bool)0>(at::cuda::detail::TensorInfo)"
    sort = "void at::native::bitonicSortKVInPlace<(int)2, (int)-1, (int)16, (int)16, float, long>(at::cuda::detail)"
    reduce = "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<" \
             "float, at::native::sum_functor<float, float, float>>>>(T3)"
    facts, _ = analyse([record(None, gather, torchOps=[topk]), record(None, sort, torchOps=[topk], subSeqId=1),
                        record(None, reduce, torchOps=[total])])
    rows = 512
    assert [(f.flops, f.bytes) for f in facts[:2]] == [(512 * 8 * 1, 512 * 8 * 4 + rows * 2 * (4 + 8)),
                                                        (rows * 2 * 1, 2 * rows * 2 * (4 + 8))]
    # Without a consumer in the records read ahead, k is not known: na.
    facts, _ = analyse([record(None, gather, torchOps=[topk])])
    assert (facts[0].flops, facts[0].bytes) == (None, None)


def test_scatter_reads_its_values_dtype_from_their_producer():
    """topk's backward scatters dY ([512, 2]) into zeros ([512, 8], a fill that wrote float32)
    through the indices: the scatter kernel copies opaque 4-byte values and names only its index
    type (long), so the values' dtype comes from self's producer: idx 8 B and dY 4 B an element
    read, 4 B written; no FLOPs. Where no producer tells, the same from the size of the opaque
    elements the kernel moves (OpaqueType<4>: not the index's 8 B)."""
    fill = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, " \
           "std::array<char *, (unsigned long)1>>(int, T2, T3)"
    scatter = "void at::native::_scatter_gather_elementwise_kernel<(int)128, (int)8, void at::native::" \
              "_cuda_scatter_gather_internal_kernel<(bool)1, at::native::OpaqueType<(int)4>, long>::operator ()" \
              "<at::native::TensorAssign>(at::TensorIterator &, long, long, long, const T1 &)::[lambda(int) " \
              "(instance 1)]>(int, T3)"
    zeros = {"name": "aten::fill_", "opId": 1797, "sizes": [[512, 8], []], "inputOpIds": [[1795, 0], [0, -1]]}
    scatter_range = {"name": "aten::scatter_", "opId": 1798, "sizes": [[512, 8], [], [512, 2], [512, 2]],
                     "inputOpIds": [[1797, 0], [0, -1], [26, 1], [1790, 0]]}
    facts, _ = analyse([record(None, fill, torchOps=[zeros]), record(None, scatter, torchOps=[scatter_range])])
    assert (facts[1].flops, facts[1].bytes) == (0, 1024 * 8 + 1024 * 4 * 2)
    facts, _ = analyse([record(None, scatter, torchOps=[scatter_range])])
    assert (facts[0].flops, facts[0].bytes) == (0, 1024 * 8 + 1024 * 4 * 2)


def test_a_cast_tells_the_dtype_of_what_it_read():
    """An MoE's x.reshape(-1, d) is a view: no kernel of it says its dtype, and the gather of its
    rows (x[rows], H200 emit_nvtx) names only its index type. autocast's cast of the same x for
    the gate's linear reads it as float32 (the cast kernel is instantiated with its source type):
    the gather then moves 138 int64 indices and 138 rows of 256 fp32, read and written."""
    cast = ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda("
            "at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")
    gather = "void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)"
    to_copy = {"name": "aten::_to_copy", "opId": 40, "sizes": [[512, 256], [], [], [], [], [], []],
               "inputOpIds": [[2, 0]] + [[0, -1]] * 6}
    copy = {"name": "aten::copy_", "opId": 42, "sizes": [[512, 256], [512, 256], []],
            "inputOpIds": [[41, 0], [2, 0], [0, -1]]}
    rows = {"name": "aten::index", "opId": 302, "sizes": [[512, 256], [138]], "inputOpIds": [[2, 0], [298, 0]]}
    facts, _ = analyse([record(None, cast, torchOps=[to_copy, copy]), record(None, gather, torchOps=[rows])])
    assert (facts[1].flops, facts[1].bytes) == (0, 138 * 8 + 2 * 138 * 256 * 4)
    facts, _ = analyse([record(None, gather, torchOps=[rows])])
    assert (facts[0].flops, facts[0].bytes) == (None, None)


def test_index_add_backward_gathers_the_gradient_rows():
    """index_add_'s backward gathers dOut's 127 rows (aten::index_select, its aten::gather run by
    PyTorch's row gather kernel, H200 emit_nvtx): 127 int64 indices read, 127 rows of 256 read
    and written, in the gradient's dtype (the forward index_add_'s output: fp32)."""
    forward = {"name": "aten::index_add_", "opId": 97, "seq": 1276, "sizes": [[512, 256], [], [127], [127, 256], []],
               "inputOpIds": [[30, 0], [0, -1], [46, 0], [96, 0], [0, -1]]}
    add = "void at::native::indexFuncLargeIndex<float, long, unsigned int, (int)2, (int)2, (int)-2, (bool)1>(T1)"
    gather = "void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)"
    node = [{"name": "autograd::engine::evaluate_function: IndexAddBackward0", "opId": 651},
            {"name": "IndexAddBackward0", "opId": 652, "seq": 1276, "sizes": [[512, 256]], "inputOpIds": [[649, 0]]},
            {"name": "aten::index_select", "opId": 653, "sizes": [[512, 256], [], [127]],
             "inputOpIds": [[649, 0], [0, -1], [487, 0]]},
            {"name": "aten::gather", "opId": 659, "sizes": [[512, 256], [], [127, 256], [], [127, 256]],
             "inputOpIds": [[649, 0], [0, -1], [657, 0], [0, -1], [655, 0]]}]
    facts, _ = analyse([record(None, add, torchOps=[forward]), record(None, gather, "bprop", torchOps=node)])
    assert (facts[1].flops, facts[1].bytes) == (0, 127 * 8 + 2 * 127 * 256 * 4)


def test_a_gather_it_cannot_price_is_left_to_the_range_around():
    """An embedding's lookup runs the same row gather inside aten::index_select's aten::gather
    (the H200 Llama block, emit_nvtx): its weight is a parameter, no producer gives its dtype, so
    the gather defers to the embedding's own formula, as without the gather's range. The kernel's
    name types only its index (vectorized_gather_kernel<16, long>), so without a reader of its
    output ahead (test_a_parameter_tables_gather_takes_the_dtype_its_reader_computed_in) neither
    knows the rows' element size: na (they were priced in int64, the index's type)."""
    gather = "void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)"
    ranges = [{"name": "aten::embedding", "opId": 3, "sizes": [[4096, 512], [4, 256], [], [], []],
               "inputOpIds": [[0, -1], [0, -1], [0, -1], [0, -1], [0, -1]]},
              {"name": "aten::index_select", "opId": 4, "sizes": [[4096, 512], [], [1024]],
               "inputOpIds": [[0, -1], [0, -1], [2, 0]]},
              {"name": "aten::gather", "opId": 6, "sizes": [[4096, 512], [], [1024, 512], [], [1024, 512]],
               "inputOpIds": [[0, -1], [0, -1], [5, 0], [0, -1], [4, 0]]}]
    inner, _ = analyse([record(None, gather, torchOps=ranges)])
    outer, _ = analyse([record(None, gather, torchOps=ranges[:2])])
    assert (inner[0].flops, inner[0].bytes) == (outer[0].flops, outer[0].bytes) == (None, None)
    from pyprof.prof.pricing.op_ranges import kernel_element_dtype, written_dtype
    assert kernel_element_dtype(gather, None) is None and written_dtype(gather, None) is None


def test_an_index_backward_over_two_index_tensors_adds_each_position_once():
    """weights[rows, slot]'s backward at the aten level (an H200 MoE router: fp32 [512, 2], two
    int64 index tensors of 127 positions): indexing_backward adds dY's 127 elements into dX's rows,
    each of one element (both indices and dY read, 127 rows read and written), as the default
    mode's marker prices it (test_prof_index_parts.py); not 127 rows of 2 through the first
    index alone."""
    node = {"name": "IndexBackward0", "seq": 40}
    put = {"name": "aten::_index_put_impl_", "opId": 9, "sizes": [[512, 2], [127], [127], [127], [], []],
           "inputOpIds": [[8, 0], [5, 0], [6, 0], [7, 0], [0, -1], [0, -1]]}
    kernel = "void at::native::indexing_backward_kernel_stride_1<float, float>(const long *, const long *, ...)"
    facts, _ = analyse([record(None, kernel, "bprop", torchOps=[node, put])])
    assert (facts[0].flops, facts[0].bytes) == (127, (127 + 2 * 127) * 4 + 16 * 127)


def test_a_parameter_tables_gather_takes_the_dtype_its_reader_computed_in():
    """The H100 Llama block from emit_nvtx's and nsys's ranges alone (kt_plain, kt_nsyspt): its
    embedding's row gather names only its index type and no producer gives the fp32 table's dtype;
    the first op reading its output (not a copy or a cast) computed in float32, so its 1,024 rows
    of 512 are priced in it: 4,202,496 bytes, 1.06 of what Nsight Compute counted (it had the
    index's 8 bytes an element, 2.1x)."""
    from test_prof_parts import measured

    for mode in ("plain", "nsyspt"):
        [(rec, f, moved)] = [(r, f, m) for r, f, m, _ in measured("llama_block", mode) if r["kShortName"] ==
                             "vectorized_gather_kernel"]
        assert (f.flops, f.bytes) == (0, 1024 * 8 + 2 * 1024 * 512 * 4) and 1.05 <= f.bytes / moved <= 1.06
