"""Batch norm's kernels each carry their own work (ops/batch_norm.py): the kernels PyTorch's CUDA
backend runs for one F.batch_norm call, in both layouts and both directions, as an H100 capture of
torchvision's resnet50 (channels-last bf16 under autocast) and shufflenet_v2 (NCHW bf16) ran them,
kernel names as nsys wrote them."""
from __future__ import annotations

from pyprof.prof.pricing.ops import Call, lookup
from pyprof.prof.pricing.ops.batch_norm import channels_last_grid
from test_prof_helpers import analyse, described, kernels, tensor

FN = "torch.nn.functional"
FILL = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<int>, " \
       "std::array<char *, (unsigned long)1>>(int, T2, T3)"
UPDATE = "void at::native::<unnamed>::unrolled_elementwise_kernel_for_multi_outputs<(int)3, " \
         "at::native::<unnamed>::batch_norm_update_stats_and_invert(const at::Tensor &, const at::Tensor &, " \
         "const at::Tensor &, const at::Tensor &, double, double, long)::[lambda() (instance 1)]"
CL = {"collect": "void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, c10::BFloat16, "
                 "float, (int)4>(const T2 *, T3 *, T3 *, volatile T3 *, int *, int, int, T3)",
      "transform": "void at::native::batch_norm_transform_input_channels_last_kernel<c10::BFloat16, float, float, (int)4>"
                   "(const T1 *, const T1 *, const T2 *, const T2 *, const T3 *, const T3 *, T1 *, int, int, bool)",
      "reduce": "void at::native::batch_norm_backward_reduce_channels_last_kernel<(int)4, c10::BFloat16, float, float>"
                "(const T2 *, const T2 *, const T3 *, const T3 *, T3 *, T3 *, T4 *, T4 *, volatile T3 *, int *, int, int)",
      "elemt": "void at::native::batch_norm_backward_elemt_channels_last_kernel<(int)4, c10::BFloat16, float, float>"
               "(const T2 *, const T2 *, const T3 *, const T3 *, const T4 *, const T3 *, const T3 *, T2 *, T3, int, int)"}
NCHW = {"collect": "void at::native::batch_norm_collect_statistics_kernel<at::native::Var, c10::BFloat16, float, int>(...)",
        "transform": "void at::native::batch_norm_transform_input_kernel<c10::BFloat16, float, float, int>(...)",
        "backward": "void at::native::batch_norm_backward_kernel<c10::BFloat16, float, float, int>(...)"}


def _call(shape: tuple, training: bool = True, **layout) -> dict:
    """resnet50's and shufflenet's calls: a bf16 input under bf16 autocast, fp32 running statistics,
    weight and bias, the input and the affine parameters requiring grad."""
    c = shape[1]
    m = described(FN, "batch_norm", tensor(*shape, dtype="bfloat16", grad=True, **layout), tensor(c), tensor(c),
                  tensor(c, grad=True), tensor(c, grad=True), training, 0.1, 1e-5)
    m["autocast"] = "bfloat16"
    return m


def _work(m: dict, names: list, direction: str = "fprop") -> tuple:
    facts, summary = analyse(kernels(m, names, direction))
    return [(f.flops, f.bytes) for f in facts], summary


def test_channels_last_forward_kernels_each_their_stage():
    """resnet50's first bn on [8, 64, 64, 64]: its statistics kernel runs 128 rows of blocks, so
    PyTorch zeroes 2 int semaphores first (8 bytes); the statistics (X read, mean and variance
    written in fp32), the running statistics' update with the inverse (mean, variance and both
    running statistics read, the running ones and the inverse written), the transform (X, the
    statistics, the weight and bias read, Y written). Their FLOPs add up to the formula's 8 an
    element. Before, the semaphores' fill carried the whole op and the other three were na."""
    e, c = 8 * 64 * 64 * 64, 64
    m = _call((8, 64, 64, 64), format="channels_last")
    got, summary = _work(m, [FILL, CL["collect"], UPDATE, CL["transform"]])
    assert got == [(0, 2 * 4), (4 * e - c, 2 * e + 2 * c * 4), (c, 3 * c * 4 + 4 * c * 4),
                   (4 * e, 4 * e + 2 * c * 4 + 2 * c * 4)]
    assert sum(f for f, _ in got) == lookup(FN, "batch_norm")(Call(m)).flops == 8 * e
    assert not summary.warnings


def test_channels_last_backward_kernels_each_their_stage():
    """resnet50's [8, 256, 16, 16] backward: the gradient sums run 8 rows of blocks, so 8 int
    semaphores are zeroed first (32 bytes; before, the fill took the weight gradient's zero-fill
    part, 1,024 bytes); the sums (dY and X read, the statistics read, sum dY and sum dY·(X - mean)
    and dWeight and dBias written: 2 FLOPs an element each sum), then dX (dY, X, the statistics,
    the sums and the weight read, dX written: the rest of the node's 16 an element)."""
    e, c = 8 * 256 * 16 * 16, 256
    m = _call((8, 256, 16, 16), format="channels_last")
    got, _ = _work(m, [FILL, CL["reduce"], CL["elemt"]], "bprop")
    assert got == [(0, 8 * 4), (4 * e, 4 * e + 4 * c * 4 + 2 * c * 4), (12 * e, 6 * e + 4 * c * 4 + c * 4)]
    assert sum(f for f, _ in got) == lookup(FN, "batch_norm")(Call(m)).bwd_flops == 16 * e


def test_nchw_kernels_each_their_stage():
    """shufflenet's [8, 24, 64, 64] (contiguous NCHW): no semaphores (the channels-last grid's
    would-be fill is a stage no kernel takes), the same three forward stages; backward PyTorch's
    one fused kernel (dY, X, the statistics and the weight read, dX, dWeight and dBias written)
    carries the node."""
    e, c = 8 * 24 * 64 * 64, 24
    m = _call((8, 24, 64, 64))
    got, _ = _work(m, [NCHW["collect"], UPDATE, NCHW["transform"]])
    assert got == [(4 * e - c, 2 * e + 2 * c * 4), (c, 7 * c * 4), (4 * e, 4 * e + 4 * c * 4)]
    assert sum(f for f, _ in got) == 8 * e
    got, _ = _work(m, [NCHW["backward"]], "bprop")
    assert got == [(16 * e, 6 * e + 2 * c * 4 + 3 * c * 4)]


def test_strided_input_kernels_each_their_stage():
    """A strided input (neither contiguous nor channels-last: PyTorch's General path) runs
    at::var_mean's Welford reduction for the statistics and an element-wise kernel for the
    transform (kernel names as PyTorch's source builds them: no capture has this path); they take
    the statistics' and the transform's stages."""
    e, c = 8 * 16 * 10 * 10, 16
    m = _call((8, 16, 10, 10), strides=[1600, 1, 16, 160])
    got, _ = _work(m, ["void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<c10::BFloat16, "
                       "at::native::WelfordOps<c10::BFloat16, float, int, thrust::pair<float, float>>, unsigned int, "
                       "float, (int)2, (int)4>>(T3)", UPDATE,
                       "void at::native::elementwise_kernel<(int)128, (int)4, at::native::gpu_kernel_impl_nocast<"
                       "at::native::<unnamed>::batch_norm_elementwise(const at::Tensor &, const at::Tensor &, "
                       "const std::optional<at::Tensor> &, const std::optional<at::Tensor> &, const at::Tensor &, "
                       "const at::Tensor &)::[lambda() (instance 3)]>(at::TensorIteratorBase &, const T1 &)::"
                       "[lambda(int) (instance 1)]>(int, T3)"])
    assert got == [(4 * e - c, 2 * e + 2 * c * 4), (c, 7 * c * 4), (4 * e, 4 * e + 4 * c * 4)]


def test_cudnn_runs_the_op_as_one_kernel():
    """fp16 and fp32 batch norm run cuDNN's one kernel each way (efficientnet_b0, resnext50's NHWC):
    it carries the op's formula as before."""
    m = described(FN, "batch_norm", tensor(8, 32, 16, 16, grad=True), tensor(32), tensor(32), tensor(32, grad=True),
                  tensor(32, grad=True), True, 0.1, 1e-5)
    cost = lookup(FN, "batch_norm")(Call(m))
    got, _ = _work(m, ["void cudnn::bn_fw_tr_1C11_singleread<float, (int)512, (bool)1, (int)1, (int)2, (int)0>(...)"])
    assert got == [(cost.flops, cost.bytes)]
    got, _ = _work(m, ["void cudnn::batchnorm_bwtr_nhwc_semiPersist<float, float, float>(...)"], "bprop")
    assert got == [(cost.bwd_flops, cost.bwd_bytes)]


def test_eval_kernels_each_their_stage():
    """Eval (PyTorch's batch_norm_cuda_out): the running mean copied as the mean, the running
    variance's inverse, the transform; the formula's 4 FLOPs an element split between the last two."""
    e, c = 8 * 24 * 8 * 8, 24
    m = _call((8, 24, 8, 8), training=False)
    got, _ = _work(m, ["void at::native::vectorized_elementwise_kernel<(int)4, at::native::direct_copy_kernel_cuda"
                       "(at::TensorIteratorBase &)::[lambda() (instance 3)]>(...)",
                       "void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::"
                       "batch_norm_calc_invstd(const at::Tensor &, const at::Tensor &, double)::[lambda]>(...)",
                       NCHW["transform"]])
    assert got == [(0, 2 * c * 4), (c, 2 * c * 4), (4 * e - c, 4 * e + 4 * c * 4)]


def test_channels_last_grid_is_pytorchs_launch():
    """The statistics' and the gradient sums' grids as the H100 capture launched them ([x, y]):
    [8, 64, 64, 64] 2 x 128, [8, 256, 16, 16] 8 x 8, [8, 2048, 4, 4] 32 x 1 (too few rows to
    reduce across blocks: no semaphores), [8, 512, 4, 4] 8 x 1."""
    assert channels_last_grid(8 * 64 * 64, 64) == (2, 128)
    assert channels_last_grid(8 * 16 * 16, 256) == (8, 8)
    assert channels_last_grid(8 * 4 * 4, 2048) == (32, 1)
    assert channels_last_grid(8 * 4 * 4, 512) == (8, 1)


def test_torch_batch_norm_reads_its_own_argument_order():
    """torch.batch_norm(input, weight, bias, running_mean, running_var, training, ...) is
    F.batch_norm(input, running_mean, running_var, weight, bias, training, ...) reordered: the
    same call priced either way, here without running statistics (no update kernel)."""
    x, w, b = tensor(8, 32, 16, 16, grad=True), tensor(32, grad=True), tensor(32, grad=True)
    f = lookup(FN, "batch_norm")(Call(described(FN, "batch_norm", x, None, None, w, b, True, 0.1, 1e-5)))
    t = lookup("torch", "batch_norm")(Call(described("torch", "batch_norm", x, w, b, None, None, True, 0.1, 1e-5,
                                                     True)))
    assert (t.flops, t.bytes, t.bwd_flops, t.bwd_bytes, t.stages) == (f.flops, f.bytes, f.bwd_flops, f.bwd_bytes,
                                                                      f.stages)
    assert "stats" not in f.params
