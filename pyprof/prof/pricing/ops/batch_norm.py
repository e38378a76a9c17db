"""Batch norm as the kernels PyTorch's CUDA backend runs it (aten/src/ATen/native/cuda/Normalization.cu
and .cuh): each kernel's work, named by a piece of its name (Cost.stages), for the marker level
and the aten level alike, and for instance norm (batch norm over the N·C planes of one sample).

Training, forward: the statistics (batch_norm_collect_statistics: X read, each channel's mean and
biased variance written), their inverse standard deviations (batch_norm_update_stats_and_invert,
which also updates the running statistics: one multi-output element-wise kernel over the
channels; batch_norm_calc_invstd without running statistics), then the normalized output
(batch_norm_transform_input: X, the statistics and the affine parameters read, Y written). The
channels-last statistics kernel reduces across its blocks when its grid has more than one row:
PyTorch zeroes one int semaphore per column of blocks first (at::zeros, a FillFunctor<int>
kernel). A strided input (neither layout) runs at::var_mean's Welford reduction for the
statistics and an element-wise kernel for the transform. Eval: the running mean copied as the
mean, calc_invstd of the running variance, the transform. Backward (training): contiguous NCHW input runs one fused kernel
(batch_norm_backward_kernel: dY, X, the statistics and the weight read, dX, dWeight and dBias
written); channels-last input (or a gradient in another layout) the per-channel sums
(batch_norm_backward_reduce: dY and X read, sum dY and sum dY·(X - mean), dWeight and dBias
written; semaphores zeroed as for the statistics) and then dX (batch_norm_backward_elemt, or the
element-wise batch_norm_elementwise_backward_train where dY and X differ in layout: dY, X, the
statistics, the sums and the weight read, dX written). cuDNN runs the op as one kernel each way.

Which of these runs depends on the layout and on cuDNN (the stages are alternatives where it
does: the kernel that runs takes its own; the kernels of any one path add up to the op's FLOPs).
FLOPs: the formula's (nn.norm_cost: 6 an element, +1 a parameter; backward twice that) split by
stage: the statistics 4 an element less one a channel, the inverse 1 a channel, the transform 2
an element +1 a parameter; backward the two sums 2 an element each (dBias and dWeight are those
sums), dX the rest. Bytes: what each kernel reads once and writes once; per-channel statistics
in the accumulate type (fp32; fp64 for fp64 input)."""
from __future__ import annotations

from dataclasses import replace

from ..part import last_pow2
from ..registry import Cost
from ..values import Tensor, acc_size

# The launch constants of the channels-last kernels (Normalization.cuh, CUDA): threads a block,
# channels a block's row, elements a thread, rows of blocks at most.
_MAX_BLOCK, _TILE_W, _PER_THREAD, _MAX_ROWS = 512, 32, 16, 128
# A grid reduction is not worth it below this many rows of blocks (flexible_launch_configs' coop_flag).
_MIN_ROWS = 8
# cuDNN's batch norm kernels (bn_fw_tr_1C11_singleread, batchnorm_fwtr_nhwc_semiPersist, ...): the whole op.
_CUDNN_FORWARD, _CUDNN_BACKWARD = ("bn_fw", "batchnorm_fw"), ("bn_bw", "batchnorm_bw")
SEMAPHORES = "FillFunctor<int>"


def channels_last_grid(reduction: int, channels: int) -> tuple[int, int]:
    """The grid (x, y) of PyTorch's channels-last statistics and gradient-sum kernels over
    `reduction` elements of each of `channels` (flexible_launch_configs with its grid reduction):
    y > 1 only where the blocks of a column reduce together."""
    block_x = min(last_pow2(channels), _TILE_W)
    block_y = min(last_pow2(-(-reduction // _PER_THREAD)), _MAX_BLOCK // block_x)
    if block_x * block_y != _MAX_BLOCK:
        block_x = min(last_pow2(channels), _MAX_BLOCK // block_y)
    rows = min(-(-reduction // (block_y * _PER_THREAD)), _MAX_ROWS)
    return -(-channels // block_x), rows if rows >= _MIN_ROWS else 1


def _semaphores(e: int, planes: int) -> tuple:
    """The channels-last reduction's semaphores zeroed (one int a column of blocks), if it has any."""
    columns, rows = channels_last_grid(e // planes, planes)
    return ((SEMAPHORES, 0, 0, 4 * columns),) if rows > 1 else ()


def _either(names: tuple, *work: int) -> tuple:
    """One stage of `work` for each kernel that may run it (the one that runs takes it)."""
    return tuple((name,) + work for name in names)


def cudnn_stages(bprop: bool, *work: int) -> tuple:
    """cuDNN's one batch norm kernel (forward or backward) of `work` as a stage for each of its
    kernels' names, an alternative to PyTorch's own kernels."""
    return _either(_CUDNN_BACKWARD if bprop else _CUDNN_FORWARD, *work)


# The statistics and the transform of a strided input (neither contiguous nor channels-last):
# at::var_mean's Welford reduction and an element-wise kernel of batch_norm_elementwise's.
_STATISTICS = ("batch_norm_collect_statistics", "WelfordOps")
_TRANSFORM = ("batch_norm_transform_input", "batch_norm_elementwise")


def batch_norm_stages(e: int, planes: int, size: int, affine: int, params: int, running: int | None = None,
                      acc: int = 4) -> tuple:
    """The forward kernels in training over E elements of `size` bytes in `planes` channels (the
    module docstring), named (Cost.stages: FLOPs, bytes in the op's dtype, bytes of the statistics
    and parameters): `affine` parameters of `params` bytes together; `running`: the bytes of the
    running mean and variance together (read and written), None without them."""
    invert = (("batch_norm_calc_invstd", planes, 0, 2 * planes * acc) if running is None else
              ("batch_norm_update_stats_and_invert", planes, 0, 3 * planes * acc + 2 * running))
    return (_semaphores(e, planes) + _either(_STATISTICS, 4 * e - planes, e * size, 2 * planes * acc) + (invert,)
            + _either(_TRANSFORM, (2 + affine) * e, 2 * e * size, 2 * planes * acc + params))


def _eval_stages(e: int, planes: int, size: int, affine: int, params: int, rm: Tensor, rv: Tensor,
                 acc: int) -> tuple:
    """Eval's kernels: the running mean copied as the mean, the inverse of the running variance
    (1 a channel), the transform (the formula's 2 an element +1 a parameter, less the inverse's)."""
    return (("direct_copy_kernel_cuda", 0, 0, rm.nbytes + planes * acc),
            ("batch_norm_calc_invstd", planes, 0, rv.nbytes + planes * acc)) + _either(
        _TRANSFORM, (2 + affine) * e - planes, 2 * e * size, 2 * planes * acc + params)


def _backward_stages(cost: Cost, x: Tensor, planes: int, size: int, w: Tensor | None, b: Tensor | None,
                     acc: int) -> tuple:
    """Training's backward kernels (the module docstring) for the node's `cost.bwd_flops`: the
    fused kernel writes the parameters' gradients that are needed, the sums' kernel both where
    there is a weight."""
    e, (dx, dw, db) = x.numel, (t is not None and t.grad is not False for t in (x, w, b))
    weight, bias = (0 if p is None else p.nbytes for p in (w, b))
    sums = 4 * e if dx else cost.bwd_flops
    fused = ("batch_norm_backward_kernel", cost.bwd_flops, 3 * e * size,
             2 * planes * acc + weight * (1 + dw) + bias * db)
    reduce = ("batch_norm_backward_reduce", sums, 2 * e * size, 4 * planes * acc + (weight + bias if w else 0))
    elemt = _either(("batch_norm_backward_elemt", "batch_norm_elementwise_backward_train"), cost.bwd_flops - sums,
                    3 * e * size, 4 * planes * acc + weight) if dx else ()
    return (fused,) + _semaphores(e, planes) + (reduce,) + elemt


def batch_norm_kernels(cost: Cost, x: Tensor, w: Tensor | None, b: Tensor | None, rm: Tensor | None,
                       rv: Tensor | None, training: bool) -> Cost:
    """`cost` (nn.norm_cost's batch norm over `x` with affine `w`, `b` and running statistics
    `rm`, `rv`) with its kernels' stages (the module docstring), forward and, in training,
    backward; as is where the shapes or dtypes are not known."""
    size, params = x.itemsize, [p.nbytes for p in (w, b) if p is not None]
    running = [s.nbytes for s in (rm, rv) if s is not None]
    if size is None or len(x.shape) < 2 or not x.shape[1] or None in params + running or cost.flops is None \
            or cost.bytes is None or (not training and len(running) != 2):
        return cost
    e, planes, acc = x.numel, x.shape[1], acc_size(x.dtype)
    cudnn = cudnn_stages(False, cost.flops, cost.bytes)
    if not training:
        return replace(cost, stages=_eval_stages(e, planes, size, len(params), sum(params), rm, rv, acc) + cudnn)
    stages = batch_norm_stages(e, planes, size, len(params), sum(params), sum(running) if running else None, acc)
    bwd = None
    if cost.bwd_flops is not None and cost.bwd_bytes is not None:
        bwd = _backward_stages(cost, x, planes, size, w, b, acc) + cudnn_stages(True, cost.bwd_flops, cost.bwd_bytes)
    return replace(cost, stages=stages + cudnn, bwd_stages=bwd)
