"""RNN formulas (ops/rnn.py): hand-derived numbers, the GEMM part against FlopCounterMode on the
CPU's decomposed LSTM/GRU/RNN, the markers nn.LSTM/GRU/RNN really write, and which kernels of a
cuDNN call carry the work."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="compared with torch.utils.flop_counter and real nn.LSTM/GRU/RNN calls: needs torch")

from torch.utils.flop_counter import FlopCounterMode

import pyprof
from pyprof.nvtx.emit import recording
from pyprof.prof.pricing.ops import Call, lookup
from pyprof.prof.pricing.registry import RNN
from pyprof.prof.pricing.values import Tensor, decode
from test_prof_helpers import analyse, marker, record


def rnn_markers(module, *inputs) -> list:
    """The torch.lstm/gru/rnn_* markers `module(*inputs)` pushes under pyprof.init()."""
    pyprof.init()
    try:
        with recording() as rec:
            module(*inputs)
    finally:
        pyprof.restore()
    return [r.marker for r in rec.ranges if r.marker.get("op") in ("lstm", "gru", "rnn_tanh", "rnn_relu")]


def cost_of(module, *inputs):
    (m,) = rnn_markers(module, *inputs)
    return lookup(m["mod"], m["op"])(Call(m))


def test_lstm_two_layers_bidirectional_projection_batch_first():
    """I=10, H=20, P=5, 2 layers, both directions, batch (3, 7): 21 rows, G=4, R=5; layer 1's
    input is 2·5 = 10 wide like layer 0's. Per layer and direction: GEMMs 2·21·(4·20·(10+5) +
    20·5) = 54,600; cell 21·20·(4·3 + 9) = 8,820. Four of each: 253,680.
    Weights per layer and direction 4·20·15 + 2·4·20 + 5·20 = 1,460 (5,840 in all); h and c at
    one end 2·2·3·(5 + 20) = 300; x 210, y 21·2·5 = 210, between layers 210.
    Bytes fwd (210 + 5,840 + 2·300 + 210 + 2·210)·4 = 29,120; bwd (2·(210 + 5,840 + 300 + 210) +
    300 + 3·210)·4 = 56,200; bwd FLOPs twice the forward's, plus the bias gradients' sums over the
    rows, 2·2·20·80 = 6,400, each layer's input gradient summed over the two directions,
    2·21·10 = 420, and per layer and direction each step's output and recurrent gradients summed
    before the projection's backward, 2·2·21·5 = 420: 514,600."""
    lstm = torch.nn.LSTM(10, 20, 2, bidirectional=True, proj_size=5, batch_first=True)
    c = cost_of(lstm, torch.randn(3, 7, 10))
    assert (c.flops, c.bytes, c.bwd_flops, c.bwd_bytes) == (253680, 29120, 514600, 56200)
    assert c.kind == RNN and c.params == "mode=lstm,rows=21,I=10,H=20,P=5,layers=2,dirs=2,bias=1,type=fp32"


def test_gru_over_a_packed_sequence():
    """Lengths 5, 3, 2: 10 packed rows whatever the order. I=4, H=6, one layer, G=3: GEMMs
    2·10·3·6·(4 + 6) = 3,600; cell 10·6·(3·3 + 8) = 1,020. Bytes: x 40, weights 3·6·10 + 2·3·6
    = 216, h0 and h_n 2·3·6 = 36, y 60: 352 elements, 1,408 B."""
    gru = torch.nn.GRU(4, 6)
    seq = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(5, 3, 4), [3, 5, 2], enforce_sorted=False)
    c = cost_of(gru, seq)
    assert (c.flops, c.bytes) == (4620, 1408)


def test_relu_rnn_unbatched_without_bias():
    """T=5, I=3, H=4, no bias: GEMMs 2·5·4·(3 + 4) = 280; cell 5·4·(1 + 1) = 40."""
    rnn = torch.nn.RNN(3, 4, nonlinearity="relu", bias=False)
    c = cost_of(rnn, torch.randn(5, 3))
    assert c.flops == 320 and c.params.startswith("mode=rnn_relu,rows=5,I=3,H=4,P=0,layers=1,dirs=1,bias=0")


@pytest.mark.parametrize("module,x,cell", [
    (torch.nn.LSTM(10, 20, 2, bidirectional=True, proj_size=5, batch_first=True), torch.randn(3, 7, 10),
     4 * 21 * 20 * (4 * 3 + 9)),
    (torch.nn.GRU(4, 6, 3), torch.randn(5, 2, 4), 3 * 10 * 6 * (3 * 3 + 8)),
    (torch.nn.RNN(3, 4, 2, bidirectional=True), torch.randn(5, 2, 3), 4 * 10 * 4 * (3 + 1)),
])
def test_gemm_part_equals_flop_counter_on_the_decomposed_cpu_path(module, x, cell):
    """On the CPU (oneDNN off) PyTorch runs an RNN as mm/addmm calls FlopCounterMode counts: the
    formula minus its cell part is exactly that count."""
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
        module(x)
    assert cost_of(module, x).flops - cell == counter.get_total_flops()


def test_autocast_counts_bytes_in_the_cast_dtype():
    """Under fp16 autocast the marker's tensors are fp32 but cuDNN reads and writes fp16: a cell
    kernel's step (N 1, H 4, no bias: 1·4·(1 + 1) FLOPs; both projections, h and h' moved) in 2 bytes."""
    m = marker("torch", "rnn_tanh", torch.randn(5, 3), torch.zeros(1, 4), [torch.randn(4, 3), torch.randn(4, 4)],
               False, 1, 0.0, False, False, False)
    facts, _ = analyse([record(dict(m, autocast="float16"), "RNN_elementWise_fp")])
    assert (facts[0].flops, facts[0].bytes, facts[0].dtype) == (8, (2 * 4 + 4 + 4) * 2, "float16")


def test_each_kernel_under_the_cudnn_range_carries_its_own_step_or_na():
    """No kernel carries the call: torch draws the dropout states' seed (one int64 written) and
    cuDNN's dropout-state initialisation writes its launch's 528 x 256 curandStateXORWOW states
    (48 bytes each), 0 FLOPs each; the GEMMs the order does not place are
    na (cuBLAS's gemmSN, no tile in its name: forward the call's first, a chunk whose steps no
    record read ahead tells; backward one before any cell); each cell kernel its step (N 1, H 4:
    8 FLOPs forward, 16 backward), whether under aten::_cudnn_rnn or _cudnn_rnn_backward."""
    m = marker("torch", "rnn_tanh", torch.randn(5, 3), torch.zeros(1, 4), [torch.randn(4, 3), torch.randn(4, 4)],
               False, 1, 0.0, False, False, False)
    outer = {"name": "aten::rnn_tanh", "opId": 1}
    init = [outer, {"name": "aten::_cudnn_init_dropout_state", "opId": 2}]
    fwd = [outer, {"name": "aten::_cudnn_rnn", "opId": 3}]
    bwd = [{"name": "CudnnRnnBackward0"}, {"name": "aten::_cudnn_rnn_backward", "opId": 9}]
    seed = ("distribution_elementwise_grid_stride_kernel<unsigned long, (int)2, void random_kernel<at::CUDAGeneratorImpl"
            " *>(...)::[lambda(curandStatePhilox4_32_10 *)], void distribution_nullary_kernel<long, unsigned long, ...>")
    recs = [record(m, seed),
            record(m, "cudnn::initstates(unsigned long long, curandStateXORWOW *)", torchOps=init,
                   grid=[528, 1, 1], block=[256, 1, 1]),
            record(m, "gemmSN_TN_kernel", torchOps=fwd), record(m, "elemWiseRNNcell", torchOps=fwd, subSeqId=1),
            record(m, "gemmSN_NN_kernel", "bprop", torchOps=bwd), record(m, "RNN_elementWise_bp1", "bprop",
                                                                        torchOps=bwd, subSeqId=1)]
    facts, summary = analyse(recs)
    assert [f.flops for f in facts] == [0, 0, None, 8, None, 16]
    assert [f.bytes for f in facts[:2]] == [8, 528 * 256 * 48]
    assert not summary.warnings


def test_a_marker_tensor_carries_its_values_only_where_they_are_one_int_per_element():
    """A packed sequence's batch sizes decode with their values (a tuple: the Tensor still hashes);
    an entry without values, or with values that are not one int per element, decodes as before,
    equal to a Tensor built without them."""
    sizes = decode({"shape": [3], "dtype": "int64", "values": [2, 2, 1]})
    assert sizes == Tensor((3,), "int64", None, (2, 2, 1)) and hash(sizes) == hash(Tensor((3,), "int64", None, (2, 2, 1)))
    for bad in ({"shape": [3], "dtype": "int64"}, {"shape": [3], "dtype": "int64", "values": [2, 2]},
                {"shape": [3], "dtype": "int64", "values": [2, 2.0, 1]}, {"shape": [3], "dtype": "int64", "values": 5}):
        assert decode(bad) == Tensor((3,), "int64") and decode(bad).values is None
    assert Call({"args": [{"shape": [3], "dtype": "int64", "values": [2, 2, 1]}, {"shape": [2], "dtype": "float32",
                                                                                   "grad": True}]}).args[0] \
        == Tensor((3,), "int64", False, (2, 2, 1))


def test_a_packed_sequence_without_its_batch_sizes_prices_only_what_does_not_depend_on_them():
    """Lengths 3, 5, 2, 2 (12 packed rows, batch 4) in a marker without the batch sizes' values
    (pyprof before it wrote them; the aten ranges carry none either): a step's kernels run as
    many rows as its sequences still running, which is then not known, so the second step's GEMM
    and cell kernel and the backward's cell are na; known are the input projection, the call's
    one chunk (its cells run to the call's end) over all 12 rows (12 x 18: tile 4 x 8, 9
    blocks; 2·12·18·5), and the first step's recurrent GEMM and cell kernel, on the batch's 4
    rows (2·4·18·6, 4·6·17). The same padded (3 steps of 4): every step on its 4 rows."""
    gru = torch.nn.GRU(5, 6)
    seq = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(5, 4, 5), [3, 5, 2, 2], enforce_sorted=False)
    gemm = "nvjet_sm90_sss_4x8_64x16_4x2_h_bz_TNT"
    chunk, step, cell = 2 * 12 * 18 * 5, 2 * 4 * 18 * 6, 4 * 6 * 17
    for x in (seq, torch.randn(3, 4, 5)):
        (m,) = rnn_markers(gru, x)
        if x is seq:
            assert m["args"][1].pop("values") == [4, 4, 2, 1, 1]
        fwd = [(gemm, [3, 3, 1])] + [(gemm, [1, 3, 1]), ("elemWiseRNNcell", [4, 1, 1])] * 2
        recs = [record(m, k, grid=g, subSeqId=i) for i, (k, g) in enumerate(fwd)]
        recs.append(record(m, "GRU_elementWise_bp1", "bprop", torchOps=[{"name": "aten::_cudnn_rnn_backward", "opId": 9}]))
        facts, _ = analyse(recs)
        later = [None, None, None] if x is seq else [step, cell, 2 * cell]
        assert [f.flops for f in facts] == [chunk, step, cell] + later


def test_a_packed_sequence_prices_each_step_on_its_batch_size():
    """The same GRU(5, 6) over lengths 3, 5, 2, 2 with the marker's batch sizes 4, 4, 2, 1, 1
    (G·H 18): forward the input projection over all 12 rows (its tiles fit 10, 11 or 12 rows:
    the five cell kernels read ahead say 5 steps), then per step t the recurrent GEMM
    2·b_t·18·6 and the cell b_t·6·17; backward from the last step (b_t 1, 1, 2, 4, 4) each cell
    twice its forward and the GEMM dgates·W_hh 2·b_t·6·18, the input gradient over the 12 rows
    (12 x 5, K 18), the bias gradients' sums 2·11·18, then dW_hh against h0 (K 4) and the other
    steps in runs whose previous step ran as many rows (t 1-2 after 4 rows: K 4 + 2; t 3: K 1;
    t 4: K 1), and dW_ih (18 x 5, K 12). Each direction's kernels add up to the call's formula."""
    gru = torch.nn.GRU(5, 6)
    seq = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(5, 4, 5), [3, 5, 2, 2], enforce_sorted=False)
    (m,) = rnn_markers(gru, seq)
    sizes = m["args"][1]["values"]
    assert sizes == [4, 4, 2, 1, 1]
    gemm = "nvjet_sm90_sss_4x8_64x16_4x2_h_bz_TNT"
    bwd = [{"name": "aten::_cudnn_rnn_backward", "opId": 9}]
    fwd = [(gemm, [3, 3, 1])] + [(gemm, [1, 3, 1]), ("elemWiseRNNcell", [4, 1, 1])] * 5
    back = [("GRU_elementWise_bp1", [4, 1, 1]), (gemm, [1, 1, 1])] * 5 + [(gemm, [3, 1, 1]), (
        "GRU_elementWise_bp2", [1, 1, 1])] + [(gemm, [5, 1, 1])] * 5
    recs = [record(m, k, grid=g, subSeqId=i) for i, (k, g) in enumerate(fwd)]
    recs += [record(m, k, "bprop", grid=g, subSeqId=i, torchOps=bwd) for i, (k, g) in enumerate(back)]
    facts, _ = analyse(recs)
    cell = [b * 6 * 17 for b in sizes]
    want = [2 * 12 * 18 * 5] + [w for b, c in zip(sizes, cell) for w in (2 * b * 18 * 6, c)]
    want += [w for b, c in zip(sizes[::-1], cell[::-1]) for w in (2 * c, 2 * b * 6 * 18)]
    want += [2 * 12 * 5 * 18, 2 * 11 * 18] + [2 * 18 * 6 * k for k in (4, 6, 1, 1)] + [2 * 18 * 5 * 12]
    assert [f.flops for f in facts] == want
    cost = lookup("torch", "gru")(Call(m))
    assert sum(want[:len(fwd)]) == cost.flops and sum(want[len(fwd):]) == cost.bwd_flops


def test_a_packed_lstm_with_a_projection_prices_each_steps_projection_on_its_rows():
    """LSTM(5, 6, proj_size=3) over lengths 3, 1 (batch sizes 2, 1, 1; G·H 24, R = P 3), cuBLAS's
    gemmSN GEMMs (no tile: the order places them): forward the input projection (4 x 24, K 5),
    per step the recurrent GEMM (b_t x 24, K 3), the cell b_t·6·21 and the projection (b_t x 3,
    K 6); backward from the last step the gradients' sum (b_t·3 adds), the projection's gradient
    (b_t x 6, K 3), the cell, dgates·W_hh (b_t x 3, K 24); the input gradient (4 x 5, K 24), the
    bias gradient's sum 3·24, dW_hh against h0 (K 2) and the other two steps, each after a step
    of other rows (K 1, 1), dW_ih (K 4) and dW_hr (3 x 6, K 4). Each direction adds up to the
    call's formula."""
    lstm = torch.nn.LSTM(5, 6, proj_size=3)
    seq = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(3, 2, 5), [3, 1])
    (m,) = rnn_markers(lstm, seq)
    sizes = m["args"][1]["values"]
    assert sizes == [2, 1, 1]
    sn = "gemmSN_TN_kernel"
    bwd = [{"name": "aten::_cudnn_rnn_backward", "opId": 9}]
    fwd = [sn] + [sn, "elemWiseRNNcell", sn] * 3
    back = ["LSTM_dgrad_combine_dh_di", sn, "LSTM_elementWise_bp1", sn] * 3 + [sn, "GENERIC_elementWise_bp2"] + [sn] * 5
    recs = [record(m, k, subSeqId=i) for i, k in enumerate(fwd)]
    recs += [record(m, k, "bprop", subSeqId=i, torchOps=bwd) for i, k in enumerate(back)]
    facts, _ = analyse(recs)
    want = [2 * 4 * 24 * 5] + [w for b in sizes for w in (2 * b * 24 * 3, b * 6 * 21, 2 * b * 3 * 6)]
    want += [w for b in reversed(sizes) for w in (b * 3, 2 * b * 6 * 3, 2 * b * 6 * 21, 2 * b * 3 * 24)]
    want += [2 * 4 * 5 * 24, 3 * 24] + [2 * 24 * 3 * k for k in (2, 1, 1)] + [2 * 24 * 5 * 4, 2 * 3 * 6 * 4]
    assert [f.flops for f in facts] == want
    cost = lookup("torch", "lstm")(Call(m))
    assert sum(want[:len(fwd)]) == cost.flops and sum(want[len(fwd):]) == cost.bwd_flops


def test_a_one_step_chunk_is_told_from_a_recurrent_gemm_by_order():
    """GRU(5, 6) over 3 steps of 4: cuDNN projects the input in chunks before their steps. The
    first chunk's tiles say 8 rows (2 steps, 2·8·18·5); after its two steps (recurrent GEMM 2·4·18·6
    and cell each) the next GEMM is the next chunk although its tiles, like a recurrent GEMM's,
    say 4 rows: 1 step, K the input's 5 features. The kernels add up to the call's formula."""
    gru = torch.nn.GRU(5, 6)
    (m,) = rnn_markers(gru, torch.randn(3, 4, 5))
    gemm = "nvjet_sm90_sss_4x8_64x16_4x2_h_bz_TNT"
    kernels = [(gemm, [2, 3, 1])] + [(gemm, [1, 3, 1]), ("elemWiseRNNcell", [4, 1, 1])] * 2 + [(gemm, [1, 3, 1])] + [
        (gemm, [1, 3, 1]), ("elemWiseRNNcell", [4, 1, 1])]
    facts, _ = analyse([record(m, k, grid=g, subSeqId=i) for i, (k, g) in enumerate(kernels)])
    step, cell = 2 * 4 * 18 * 6, 4 * 6 * 17
    assert [f.flops for f in facts] == [2 * 8 * 18 * 5, step, cell, step, cell, 2 * 4 * 18 * 5, step, cell]
    assert sum(f.flops for f in facts) == lookup("torch", "gru")(Call(m)).flops == 5976
