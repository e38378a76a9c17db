"""An attentional seq2seq's kernels (benchmarks/pricing_coverage.py's seq2seq, a decoder unrolled
as an nn.LSTMCell loop, captured on an H200 at stop 52 before any change for it): torch.lstm_cell
kernel by kernel (every kernel of its 24 cells na with pyprof's markers, the cell's backward
kernel na from PyTorch's ranges; 64 rows, 512 input features, 256 hidden units, fp16 autocast)
and the embedding backward of a strided token batch. Every number derived by hand."""
from __future__ import annotations

from pyprof.prof.pricing.op_ranges import AtenCall
from pyprof.prof.pricing.registry import Call, lookup, lookup_aten
from test_prof_helpers import analyse, kernels

ROWS, IN, HIDDEN = 64, 512, 256
GATES = 4 * HIDDEN
MARKER = {"v": 1, "kind": "op", "mod": "torch", "op": "lstm_cell", "autocast": "float16", "kwargs": {},
          "args": [{"shape": [ROWS, IN], "dtype": "float32", "grad": True},
                   [{"shape": [ROWS, HIDDEN], "dtype": "float16"}, {"shape": [ROWS, HIDDEN], "dtype": "float16"}],
                   {"shape": [GATES, IN], "dtype": "float32", "grad": True},
                   {"shape": [GATES, HIDDEN], "dtype": "float32", "grad": True},
                   {"shape": [GATES], "dtype": "float32", "grad": True}, {"shape": [GATES], "dtype": "float32", "grad": True}]}
GEMM_IN = 2 * ROWS * IN * GATES, (ROWS * IN + IN * GATES + ROWS * GATES) * 2
GEMM_H = 2 * ROWS * HIDDEN * GATES, (ROWS * HIDDEN + HIDDEN * GATES + ROWS * GATES) * 2
STATE = ROWS * HIDDEN
# The fused cell: per unit 4 gates x (a gate sum and two bias adds) + 9 of cell math; both gate
# GEMMs' outputs, cx and the two biases read; hy, cy and the four gates' workspace written.
CELL = STATE * (4 * 3 + 9), (2 * 4 * STATE + STATE + 2 * GATES + 6 * STATE) * 2
CELL_BACKWARD = 23 * STATE, 13 * STATE * 2
CAST = "void at::native::vectorized_elementwise_kernel<8, at::native::float16_copy_kernel_cuda>(int, T2, T3)"
NVJET = "nvjet_sm90_hsh_64x8_64x16_1x2_h_bz_TNT"
FORWARD = "void at::native::kernel::lstm_cell_forward<c10::Half, float, int, 1>(TensorInfo<T1, T3>)"
BACKWARD = "void at::native::kernel::lstm_cell_backward<c10::Half, float, int, 1>(TensorInfo<T1, T3>)"
BIAS_SUM = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<c10::Half, " \
           "at::native::sum_functor<c10::Half, float, c10::Half>::operator ()>>(T3)"


def test_the_cells_gemms_and_fused_kernel_each_carry_their_own():
    """Forward: the input's cast down (autocast: read in fp32, written in fp16), the input's gate
    GEMM, the state's, the fused cell; the GEMMs whatever cuBLAS names them. (The cast's grid,
    32 blocks of 1,024 elements, tells it from the weights' casts of a first call.)"""
    records = kernels(MARKER, [CAST, NVJET, NVJET, FORWARD], dur=20_000)
    records[0]["grid"] = [32, 1, 1]
    facts, _ = analyse(records)
    assert [(f.flops, f.bytes) for f in facts] == [(0, ROWS * IN * 6), GEMM_IN, GEMM_H, CELL]
    cost = lookup("torch", "lstm_cell")(Call(MARKER))
    assert (cost.flops, cost.kind) == (GEMM_IN[0] + GEMM_H[0] + CELL[0], "rnn")


def test_the_cells_backward_runs_its_kernel_the_bias_sum_and_each_gemms_two_gradients():
    """Backward: the fused cell's kernel (dhy, dcy, cx, cy and the workspace's gates read; the
    gates' gradients and dcx written), the bias gradient's sum over the 64 rows (1024 columns:
    63 adds each), then the state GEMM's two gradients and the input GEMM's (reverse order)."""
    facts, _ = analyse(kernels(MARKER, [BACKWARD, BIAS_SUM, NVJET, NVJET, NVJET, NVJET], "bprop", dur=20_000))
    bias = (63 * GATES, (ROWS * GATES + GATES) * 2)
    assert [(f.flops, f.bytes) for f in facts] == [CELL_BACKWARD, bias, GEMM_H, GEMM_H, GEMM_IN, GEMM_IN]


def test_the_fused_kernels_from_pytorchs_ranges():
    """The same kernels from their ranges: _thnn_fused_lstm_cell (input gates, hidden gates, cx,
    b_ih, b_hh) and _thnn_fused_lstm_cell_backward_impl (dhy, dcy, cx, cy, workspace, has_bias)."""
    fwd = lookup_aten("aten::_thnn_fused_lstm_cell")(AtenCall(
        "aten::_thnn_fused_lstm_cell", [[ROWS, GATES], [ROWS, GATES], [ROWS, HIDDEN], [GATES], [GATES]], "float16", FORWARD))
    assert (fwd.flops, fwd.bytes) == CELL
    bwd = lookup_aten("aten::_thnn_fused_lstm_cell_backward_impl")(AtenCall(
        "aten::_thnn_fused_lstm_cell_backward_impl", [[ROWS, HIDDEN], [ROWS, HIDDEN], [ROWS, HIDDEN], [ROWS, HIDDEN],
                                                      [ROWS, GATES], []], "float16", BACKWARD))
    assert (bwd.flops, bwd.bytes) == CELL_BACKWARD


def test_a_cell_without_its_state_or_of_other_ranks_is_na():
    bare = dict(MARKER, args=MARKER["args"][:1])
    assert lookup("torch", "lstm_cell")(Call(bare)) is None


def test_a_strided_token_batchs_embedding_backward_copies_its_indices_first():
    """The decoder's target embedding: 64 x 24 int64 indices sliced out of a [64, 25] batch
    (strided), into an 8000 x 256 fp32 table. Of fewer than 3,072 indices, PyTorch makes the
    indices contiguous (a copy: 12,288 bytes read and written), zero-fills the weight's gradient
    (a part), then adds each index's dOut row into its row (embedding_backward_feature_kernel:
    393,216 adds; the indices and dOut read, the rows read and written). The H200 capture's
    copy had carried the whole node and the scatter kernel was na."""
    idx = {"shape": [64, 24], "dtype": "int64", "strides": [25, 1]}
    marker = {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": "embedding", "kwargs": {},
              "args": [idx, {"shape": [8000, 256], "dtype": "float32", "grad": True}, 0, None, 2.0, False, False]}
    copy = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)>(int, T3)"
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)"
    scatter = "void at::native::embedding_backward_feature_kernel<float, float, long>(const T3 *, const T1 *, T1 *)"
    records = kernels(marker, [copy, fill, scatter], "bprop", dur=20_000)
    records[1]["grid"] = [2000, 1, 1]
    n = 64 * 24 * 256
    facts, _ = analyse(records)
    assert [(f.flops, f.bytes) for f in facts] == [(0, 2 * 64 * 24 * 8), (0, 8000 * 256 * 4), (n, 3 * n * 4 + 64 * 24 * 8)]
