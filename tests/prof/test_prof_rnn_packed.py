"""A packed sequence's cuDNN RNN kernels, each its own step's work (issue 27), on real records of
an H100 capture (benchmarks/pricing_coverage.py's rnn_packed, tf32: an LSTM(64, 128), then a ReLU
RNN(128, 96), over 16 sequences of lengths 40, 38, ..., 10; one training step):
tests/data/cov_rnn_packed_{default,plain}.jsonl.xz, the two calls' records cut from the capture
unchanged (default: pyprof.init()'s markers, which carry the batch sizes; plain: emit_nvtx ranges
alone, which do not); and of an H200 capture of the same step with emit_nvtx's ranges alone,
the whole step, the pack_padded_sequence that made the sequence included (its kernels' ranges
tell the batch sizes: pricing/packed_runs.py): tests/data/cov_rnn_packed_pack_plain.jsonl.xz."""
from __future__ import annotations

import lzma
import os
from functools import lru_cache

import pytest

from pyprof.prof.io.reader import records
from pyprof.prof.pricing.ops.rnn import rnn_cost
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
LENGTHS = range(40, 8, -2)
# Sequences still running at each step: 16 for 10 steps, then 15, 15, 14, 14, ..., 1, 1.
SIZES = [sum(length > t for length in LENGTHS) for t in range(40)]
ROWS = sum(SIZES)  # 400
SIZE = 4  # fp32
# (op, I, H, G, the cell's FLOPs per row and hidden unit: G·(1 + 2·bias) + LSTM 9 / RNN 1)
CALLS = (("lstm", 64, 128, 4, 21), ("rnn_relu", 128, 96, 1, 4))


@lru_cache(maxsize=None)
def _kernels(mode: str) -> tuple:
    with lzma.open(os.path.join(DATA, f"cov_rnn_packed_{mode}.jsonl.xz"), "rb") as s:
        return tuple((rec, f) for rec, f, _ in analysed(records(s, Tally()), Tally())
                     if rec.get("kind", "kernel") == "kernel")


def kernels(mode: str, op: str, direction: str) -> list:
    """(record, Facts) of the call's kernels, in launch order: default mode by the marker's op,
    plain by the forward's range, the call's by its first kernel's cost (its shape's I)."""
    ins = {"lstm": 64, "rnn_relu": 128}[op]
    return [(r, f) for r, f in _kernels(mode) if r["dir"] == direction and f.cost is not None
            and f.cost.rnn is not None and f.cost.rnn.in_size == ins]


def gemm(m: int, n: int, k: int) -> tuple:
    return 2 * m * n * k, (m * k + k * n + m * n) * SIZE


def cell(rows: int, h: int, g: int, per: int, bprop: bool) -> tuple:
    """A step's cell kernel on its rows: G·H gates (and LSTM's cell state) read, the state written;
    backward twice the FLOPs, the gates' and states' gradients."""
    c = rows * h if g == 4 else 0
    if bprop:
        return 2 * rows * h * per, (2 * rows * g * h + 3 * rows * h + 3 * c) * SIZE
    return rows * h * per, (2 * rows * g * h + rows * h + 2 * c + 2 * g * h + rows * h) * SIZE


def recurrent_ks() -> list:
    """K of dW_hh's GEMMs: the first step's against h0 (16 rows), then one per run of steps whose
    step before ran as many rows: steps 1-10 after 16 rows (9·16 + 15), then pairs after 15, 14,
    ..., 2 rows, the last step after 1 row (K 1)."""
    runs: dict = {}
    for t in range(1, len(SIZES)):
        runs[SIZES[t - 1]] = runs.get(SIZES[t - 1], 0) + SIZES[t]
    return [SIZES[0]] + list(runs.values())


def test_the_batch_sizes_are_each_steps_rows_as_the_cell_kernels_launch_them():
    """What the pricing assumes of cuDNN's order, read off the launches: the forward runs the
    steps from the first (elemWiseRNNcell launches one 256-thread block per 256 of the step's
    rows x H elements: 8 blocks for 16 rows of the LSTM's 128, 1 for its last steps' 2 and 1), the
    backward from the last (RNN_elementWise_bp1 likewise: 1 block for the last step's row of 96,
    6 for the first's 16 rows); both calls' forwards and the ReLU RNN's backward."""
    assert ROWS == 400 and SIZES[:12] == [16] * 10 + [15, 15] and SIZES[-2:] == [1, 1]
    for op, _, h, _, _ in CALLS:
        grids = [r["grid"][0] for r, _ in kernels("default", op, "fprop") if r["kShortName"] == "elemWiseRNNcell"]
        assert grids == [-(-b * h // 256) for b in SIZES], op
    grids = [r["grid"][0] for r, _ in kernels("default", "rnn_relu", "bprop")
             if r["kShortName"] == "RNN_elementWise_bp1"]
    assert grids == [-(-b * 96 // 256) for b in reversed(SIZES)]


@pytest.mark.parametrize("mode", ["default", "pack_plain"])
def test_each_kernel_of_a_packed_call_carries_its_own_steps_rows(mode: str):
    """With the batch sizes b_t (the marker's, or without markers what the pack's kernels told)
    every kernel of both calls is known, FLOPs and bytes.
    Forward: the input projection over all 400 rows (rows x G·H, K = I; its tiles fit 385 to 448
    rows: the cell kernels read ahead say all 40 steps), then per step the recurrent GEMM
    (b_t x G·H, K = H) and the cell kernel. Backward, from the last step: the cell kernel and
    dgates·W_hh (b_t x H, K = G·H), then the input gradient (400 x I, K = G·H), the flat weight
    gradient's fill, the bias gradients' sum, dW_hh in 17 GEMMs (recurrent_ks: the last, K 1, is
    the SIMT kernel cuBLAS picks for it) and dW_ih (K 400). Each call's kernels add up to its
    formula, forward and backward."""
    for op, i, h, g, per in CALLS:
        gh = g * h
        fwd = kernels(mode, op, "fprop")
        want = [gemm(ROWS, gh, i)] + [w for b in SIZES for w in (gemm(b, gh, h), cell(b, h, g, per, False))]
        assert [(f.flops, f.bytes) for _, f in fwd] == want, op
        bwd = [(r["kShortName"], f.flops, f.bytes) for r, f in kernels(mode, op, "bprop")]
        fills = [b for name, _, b in bwd if name == "vectorized_elementwise_kernel"]
        # (without markers the fills run in ranges of their own, aten::zeros_like's and zeros',
        # which price them: they are not the RNN call's kernels)
        assert fills == ([16 * h * SIZE] * (2 if g == 4 else 1) + [(gh * (i + h) + 2 * gh) * SIZE]
                         if mode == "default" else []), op
        steps = [w for b in reversed(SIZES) for w in (cell(b, h, g, per, True), gemm(b, h, gh))]
        ends = [gemm(ROWS, i, gh), ((ROWS - 1) * gh, (ROWS * gh + 2 * gh) * SIZE)]
        ends += [gemm(gh, h, k) for k in recurrent_ks()] + [gemm(gh, i, ROWS)]
        assert [(fl, b) for name, fl, b in bwd if name != "vectorized_elementwise_kernel"] == steps + ends, op
        cost = fwd[0][1].cost
        assert sum(f.flops for _, f in fwd) == cost.flops and sum(fl for _, fl, _ in bwd) == cost.bwd_flops, op
    assert recurrent_ks()[:3] == [16, 159, 29] and len(recurrent_ks()) == 17 and sum(recurrent_ks()) == ROWS
    for op, *_ in CALLS:
        names = [r["kLongName"] for r, _ in kernels(mode, op, "bprop")]
        wgrads = names[next(n for n, name in enumerate(names) if "GENERIC_elementWise_bp2" in name) + 1:]
        assert ["_simt_" in name for name in wgrads] == [False] * 16 + [True, False], op


def test_without_the_batch_sizes_only_the_gemms_whose_rows_do_not_depend_on_them_are_known():
    """At the aten level (aten::_cudnn_rnn carries the batch sizes as no values): forward the
    input projection, the call's one chunk (its cells run to the call's end), over all 400 rows,
    and the first step's recurrent GEMM and cell kernel (16 rows: the batch); every later step's
    GEMM and cell na. Backward the input gradient, the one chunk after every step (no cell
    kernel after it, the records read ahead up to the autograd thread's next call), the bias
    gradients' sum, dW_hh against h0 (K 16) and dW_ih (K 400); the 40 steps' cells and GEMMs and
    the other 16 weight gradients na."""
    for op, i, h, g, per in CALLS:
        gh = g * h
        got = [(f.flops, f.bytes) for _, f in kernels("plain", op, "fprop")]
        assert got[:3] == [gemm(ROWS, gh, i), gemm(16, gh, h), cell(16, h, g, per, False)], op
        assert set(got[3:]) == {(None, None)}, op
        got = [(r["kShortName"], f.flops, f.bytes) for r, f in kernels("plain", op, "bprop")]
        known = [x for x in got if x[1] is not None and x[0] != "vectorized_elementwise_kernel"]
        assert known == [("Kernel2", *gemm(ROWS, i, gh)), ("GENERIC_elementWise_bp2", 399 * gh, (400 * gh + 2 * gh) * 4),
                         ("Kernel2", *gemm(gh, h, 16)), ("Kernel2", *gemm(gh, i, ROWS))], op
        assert sum(x[1] is None for x in got) == 2 * 40 + 16, op


def test_without_the_batch_sizes_the_whole_call_still_carries_the_formula_s_flops():
    """Where a step's kernels are na (the aten level), the call's FLOPs still add up, for the
    views that keep op calls whole (`--by call`): the first na kernel carries the rest of the
    formula (Facts.call_work), as with markers, so each call's whole sum is its formula's FLOPs
    over all 400 rows."""
    for op, *_ in CALLS:
        for direction in ("fprop", "bprop"):
            got = kernels("plain", op, direction)
            cost = got[0][1].cost
            total = cost.bwd_flops if direction == "bprop" else cost.flops
            assert total and sum(f.whole_work()[0] for _, f in got) == total, (op, direction)
            assert all(f.whole_work()[0] is not None for _, f in got), (op, direction)


# The same step's packed sequences through a 2-layer bidirectional GRU(64, 128) (gru_packed of the
# coverage capture, H200, tf32): tests/data/cov_gru_packed_{default,plain}.jsonl.xz, its records
# cut from the capture unchanged (plain: emit_nvtx's ranges alone, the pack included).
GRU_INPUTS = (64, 256)  # each layer's input size (I, then D·H)
GH, H = 3 * 128, 128


def _gru_kernels(mode: str, direction: str) -> list:
    with lzma.open(os.path.join(DATA, f"cov_gru_packed_{mode}.jsonl.xz"), "rb") as s:
        return [(rec["kShortName"], f.flops, f.bytes) for rec, f, _ in analysed(records(s, Tally()), Tally())
                if rec.get("kind", "kernel") == "kernel" and rec["dir"] == direction and f.cost is not None
                and f.cost.rnn is not None]


def _gru_forward() -> list:
    """Per layer both directions' input projections (all 400 rows), then per step i the
    recurrent GEMMs of the first direction (step i, b_i rows) and the second (step 39 - i), then
    their cell kernels in the same order."""
    out = []
    for i_size in GRU_INPUTS:
        out += [gemm(ROWS, GH, i_size)] * 2
        for i in range(40):
            rows = (SIZES[i], SIZES[39 - i])
            out += [gemm(b, GH, H) for b in rows] + [cell(b, H, 3, 17, False) for b in rows]
    return out


def _gru_backward() -> list:
    """From the top layer, per step i the first direction's cell kernel and dgates·W_hh on step
    39 - i, then the second direction's on step i; each direction's input-gradient chunk (all rows)
    and their sum; the flat weight gradient's fill and four bias gradients (one a layer and
    direction); then per layer and direction dW_hh (the first direction against h0, K 16, then per
    run of steps; the second against h0 one run at a time, K 1 each, then the same runs) and
    dW_ih (K 400)."""
    out = [(0, 2 * 2 * 16 * H * SIZE)]  # dh_n zeroed: layers x directions x 16 x H
    for i_size in reversed(GRU_INPUTS):
        for i in range(40):
            for b in (SIZES[39 - i], SIZES[i]):
                out += [cell(b, H, 3, 17, True), gemm(b, H, GH)]
        out += [gemm(ROWS, i_size, GH)] * 2 + [(ROWS * i_size, 3 * ROWS * i_size * SIZE)]
    weights = sum(2 * (GH * (i_size + H) + 2 * GH) for i_size in GRU_INPUTS)
    out += [(0, weights * SIZE)] + [(2 * (ROWS - 1) * GH, (2 * ROWS * GH + 2 * GH) * SIZE)] * 4
    ks = recurrent_ks()
    for i_size in GRU_INPUTS:
        for first in (ks, [1] * 16 + ks[1:]):
            out += [gemm(GH, H, k) for k in first] + [gemm(GH, i_size, ROWS)]
    return out


def test_each_kernel_of_a_packed_bidirectional_two_layer_gru_carries_its_own_steps_rows():
    """Two directions run a layer's steps in turn (the first forward in time, the second from the
    last step; backward the other way), each step's kernels on its own b_t rows, as the cell
    kernels' grids say (elemWiseRNNcell: 8 blocks for the first direction's 16 rows, 1 for the
    second's last step). With the marker's batch sizes and with emit_nvtx's ranges alone (the
    pack's ranges tell them), every kernel is known, and each call's kernels add up to its
    formula."""
    for mode in ("default", "plain"):
        fwd, bwd = _gru_kernels(mode, "fprop"), _gru_kernels(mode, "bprop")
        cells = [name for name, *_ in fwd if name == "elemWiseRNNcell"]
        assert len(cells) == 160
        assert [(fl, b) for _, fl, b in fwd] == _gru_forward(), mode
        # (without markers the fills run in ranges of their own: not the call's kernels)
        want = _gru_backward()
        got = [(fl, b) for name, fl, b in bwd]
        assert got == (want if mode == "default" else [w for w in want if w[0] != 0]), mode
    formula = rnn_cost("gru", ROWS, 64, H, 0, 2, 2, True, 16, "float32", True, tuple(SIZES))
    assert sum(fl for _, fl, _ in _gru_kernels("default", "fprop")) == formula.flops
    assert sum(fl for _, fl, _ in _gru_kernels("default", "bprop")) == formula.bwd_flops


def _wavefront(layers: int, chunks: int, top_down: bool) -> list:
    """(layer, chunk) in cuDNN's wavefront order: chunk c of layer l in wave c + l (backward: c +
    the layer's place from the top), a wave's chunks from the lowest layer up (backward: down)."""
    order = range(layers - 1, -1, -1) if top_down else range(layers)
    return [(layer, w - (layers - 1 - layer if top_down else layer)) for w in range(chunks + layers - 1)
            for layer in order if 0 <= w - (layers - 1 - layer if top_down else layer) < chunks]


def test_a_packed_three_layer_gru_runs_its_steps_as_a_wavefront_each_kernel_its_own():
    """gru3_packed (H200, the same sequences through GRU(64, 128, num_layers=3), tf32): forward in
    chunks of 10 steps, chunk c of layer l in wave c + l, each chunk (its steps' rows x G·H, K the
    layer's input) before its steps' recurrent GEMMs and cells; backward in chunks of 8 steps from
    the last, the top layer first in each wave, each step's cell and dgates·W_hh, then the chunk's
    input gradient. Every kernel carries its own step's rows, with markers and with emit_nvtx's
    ranges alone (the pack's ranges give the batch sizes), and each call adds up to its formula."""
    inputs = (64, 128, 128)
    fwd = []
    for layer, c in _wavefront(3, 4, False):
        steps = range(10 * c, 10 * c + 10)
        fwd += [gemm(sum(SIZES[t] for t in steps), GH, inputs[layer])]
        fwd += [w for t in steps for w in (gemm(SIZES[t], GH, H), cell(SIZES[t], H, 3, 17, False))]
    bwd = [(0, 3 * 16 * H * SIZE)]
    for layer, c in _wavefront(3, 5, True):
        steps = range(39 - 8 * c, 31 - 8 * c, -1)
        bwd += [w for t in steps for w in (cell(SIZES[t], H, 3, 17, True), gemm(SIZES[t], H, GH))]
        bwd += [gemm(sum(SIZES[t] for t in steps), inputs[layer], GH)]
    weights = sum(GH * (i + H) + 2 * GH for i in inputs)
    bwd += [(0, weights * SIZE)] + [(2 * (ROWS - 1) * GH, (2 * ROWS * GH + 2 * GH) * SIZE)] * 3
    bwd += [w for i in inputs for w in [gemm(GH, H, k) for k in recurrent_ks()] + [gemm(GH, i, ROWS)]]
    formula = rnn_cost("gru", ROWS, 64, H, 0, 3, 1, True, 16, "float32", True, tuple(SIZES))
    for mode in ("default", "plain"):
        with lzma.open(os.path.join(DATA, f"cov_gru3_packed_{mode}.jsonl.xz"), "rb") as s:
            got = [(rec["dir"], f.flops, f.bytes) for rec, f, _ in analysed(records(s, Tally()), Tally())
                   if rec.get("kind", "kernel") == "kernel" and f.cost is not None and f.cost.rnn is not None]
        assert [(fl, b) for d, fl, b in got if d == "fprop"] == fwd, mode
        assert [(fl, b) for d, fl, b in got if d == "bprop"] == (bwd if mode == "default" else [w for w in bwd if w[0]]), mode
        assert sum(fl for d, fl, _ in got if d == "fprop") == formula.flops
        assert sum(fl for d, fl, _ in got if d == "bprop") == formula.bwd_flops


def test_under_bfloat16_autocast_a_cudnn_rnn_runs_and_is_priced_in_float16():
    """gru_packed_bf16 (H200: gru_packed's GRU under torch.autocast(dtype=torch.bfloat16), its
    records in tests/data/cov_gru_packed_bf16_{default,plain}.jsonl.xz): ATen's autocast wrapper
    of cuDNN RNNs casts to half whatever the autocast dtype (its kernels are __half ones), so the
    marker's call (autocast "bfloat16") is priced in float16, as the ranges alone price it from
    the kernels; every kernel of the call carries its own FLOPs and bytes, the two levels agree
    kernel by kernel (nvjet GEMMs placed through their clusters' grids), and each call adds up
    to its formula."""
    got = {}
    for mode in ("default", "plain"):
        with lzma.open(os.path.join(DATA, f"cov_gru_packed_bf16_{mode}.jsonl.xz"), "rb") as s:
            got[mode] = [(rec["dir"], rec["kShortName"], f.flops, f.bytes, f.cost.dtype)
                         for rec, f, _ in analysed(records(s, Tally()), Tally())
                         if rec.get("kind", "kernel") == "kernel" and f.cost is not None and f.cost.rnn is not None]
    markers = got["default"]
    assert {k[-1] for k in markers} == {"float16"} and all(k[2] is not None and k[3] for k in markers)
    assert [k for k in markers if k[2]] == [k for k in got["plain"] if k[2]]
    assert sum(k[1].startswith("nvjet") for k in markers) == 394
    formula = rnn_cost("gru", ROWS, 64, H, 0, 2, 2, True, 16, "float16", True, tuple(SIZES))
    assert sum(k[2] for k in markers if k[0] == "fprop") == formula.flops
    assert sum(k[2] for k in markers if k[0] == "bprop") == formula.bwd_flops


def test_a_packed_bidirectional_lstm_with_projections_each_kernel_its_own():
    """lstm_proj_packed (H200, no Nsight Compute: the same sequences through LSTM(64, 128,
    num_layers=2, bidirectional=True, proj_size=32), tf32; records in
    tests/data/cov_lstm_proj_packed_{default,plain}.jsonl.xz): per step both directions' GEMMs,
    then each direction's cell and its projection (b_t x 32, K = 128, on sm90 xmma launches of
    more blocks than tiles, placed by order). Every kernel of both calls is known with markers and
    with the ranges alone, the two equal kernel by kernel, and each call adds up to its formula
    (14.2% of its GPU time, the projections, was na before)."""
    got = {}
    for mode in ("default", "plain"):
        with lzma.open(os.path.join(DATA, f"cov_lstm_proj_packed_{mode}.jsonl.xz"), "rb") as s:
            got[mode] = [(rec["dir"], rec["kShortName"], f.flops, f.bytes)
                         for rec, f, _ in analysed(records(s, Tally()), Tally())
                         if rec.get("kind", "kernel") == "kernel" and f.cost is not None and f.cost.rnn is not None]
    markers = got["default"]
    assert all(k[2] is not None and k[3] for k in markers)
    assert [k for k in markers if k[2]] == [k for k in got["plain"] if k[2]]
    fwd = [k for k in markers if k[0] == "fprop"]
    projections = [(fl, b) for (_, name, _, _), (_, _, fl, b) in zip(fwd, fwd[1:]) if name == "elemWiseRNNcell"]
    rows = [b for i in range(40) for b in (SIZES[i], SIZES[39 - i])] * 2
    assert projections == [gemm(b, 32, H) for b in rows]
    formula = rnn_cost("lstm", ROWS, 64, H, 32, 2, 2, True, 16, "float32", True, tuple(SIZES))
    assert sum(k[2] for k in fwd) == formula.flops
    assert sum(k[2] for k in markers if k[0] == "bprop") == formula.bwd_flops
