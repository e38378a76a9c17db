"""Recurrent layers: torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu (what nn.LSTM, nn.GRU and
nn.RNN call, through torch._VF), any number of layers, bidirectional, proj_size, batch_first,
packed sequences; and the single-step cells.

Per layer and direction, with `tok` input rows (T·N for padded input, the packed data's rows for
a PackedSequence: the work depends only on the total, not on how the batch shrinks over time;
each step's kernels on that step's rows, its batch size, where the marker carries them),
G gates (LSTM 4, GRU 3, RNN 1), hidden size H, recurrent size R (proj_size P when set, else H),
layer input size I_l (the input's features for layer 0, D·R above it; D = 2 when bidirectional):
- GEMMs: 2·tok·G·H·(I_l + R) (input and recurrent projections), + 2·tok·H·P (LSTM projection);
- cell, per row and hidden unit: G·(1 + 2·bias) adds combining the two projections and the
  biases, plus the gate math: LSTM 9 (4 activations, c' = f·c + i·g 3, h = o·tanh(c') 2), GRU 8
  (2 sigmoids, n = tanh(x_n + r·h_n) 3, h' = (1 - z)·n + z·h 4, counting b_hn inside), RNN 1.
Bytes: the input, all weights, h0 (and c0) read; the output, h_n (and c_n) written; each
activation between layers written once and read once.
Backward (cuDNN computes every gradient, the first layer's input gradient included): twice the
forward's GEMM FLOPs (data and weight gradients), twice its cell FLOPs, plus each bias
gradient's sum over the rows (one per layer and direction; GRU two, its n gate's hidden bias
having a gradient of its own), bidirectional, each layer's input gradient summed over the two
directions (T·N·I_l adds) and, with a projection, each step's output gradient and recurrent
gradient summed (tok·P adds per layer and direction); bytes: the input, the weights, the
output, h0/c0 and dOutput read, dInput, dWeights and dh0/dc0 written (twice each of those),
dh_n/dc_n read, each activation between layers read and its gradient written and read.

The cuDNN kernels of one call (input-projection chunks, per-step recurrent and projection GEMMs,
cell kernels, weight gradients) each carry their own part of this work where the trace tells
which they are (pricing/rnn_kernels.py), else na. The cells (torch.lstm_cell, ...) are
composites: their GEMMs and fused cell kernels are priced from their own PyTorch ranges.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import NamedTuple

from ..registry import GEMM_STAGE, RNN, SIMT, Call, Cost, dims, fmt_params, register, register_aten, stage_totals
from ..values import ITEMSIZE, Tensor, reduce_adds
from .packed_sequence import packed_sizes

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_CELL = {"lstm": 9, "gru": 8, "rnn_tanh": 1, "rnn_relu": 1}
MAIN_OPS = ("aten::_cudnn_rnn", "aten::_cudnn_rnn_backward")


class RnnShape(NamedTuple):
    """What an RNN call's per-step kernels depend on: gates G, batch N (rows of h0), hidden H,
    recurrent size R, layers, directions, input features, bias, input rows, projection P
    (0 for none), the cell's FLOPs per row and hidden unit, whether the input is a packed
    sequence (a step's rows then as many as its sequences still running, not N), and then those
    rows per step where the marker carries them (its batch sizes; None where not known)."""

    gates: int
    batch: int
    hidden: int
    rec: int
    layers: int
    dirs: int
    in_size: int
    bias: bool
    rows: int
    proj: int
    cell: int
    packed: bool = False
    batch_sizes: tuple | None = None


def rnn_cost(mode: str, x_rows: int, in_size: int, hidden: int, proj: int, layers: int, dirs: int, bias: bool,
             state_rows: int, dtype: str | None, packed: bool = False, batch_sizes: tuple | None = None) -> Cost:
    """Forward and backward of a multi-layer RNN over `x_rows` input rows of `in_size` features;
    `proj` 0 for none; `state_rows`: the batch (rows of h0); `packed`: a packed sequence's rows,
    `batch_sizes` its rows per step where known (kept only where they are a packed sequence's:
    positive, not growing, the first the batch, summing to the rows)."""
    g = _GATES[mode]
    r = proj or hidden
    gemm = cell = weights = sums = 0
    for layer in range(layers):
        i = in_size if layer == 0 else dirs * r
        gemm += dirs * 2 * x_rows * (g * hidden * (i + r) + (hidden * proj if proj else 0))
        cell += dirs * x_rows * hidden * (g * (1 + 2 * bias) + _CELL[mode])
        weights += dirs * (g * hidden * (i + r) + 2 * g * hidden * bias + proj * hidden)
        # The backward's adds beside its GEMMs and cells: a bias gradient is its gates' gradients
        # summed over the rows (LSTM's and RNN's two biases share one; GRU's hidden n gate, r·dn,
        # has its own), and with two directions the layer's input gradient is their sum.
        sums += dirs * reduce_adds(x_rows * g * hidden, g * hidden) * (2 if mode == "gru" else 1) if bias else 0
        sums += x_rows * i if dirs == 2 else 0
        # With a projection each step's output gradient and recurrent gradient (rows x P) are
        # summed before the projection's backward (cuDNN's LSTM_dgrad_combine_dh_di).
        sums += dirs * x_rows * proj
    states = layers * dirs * state_rows * (r + (hidden if mode == "lstm" else 0))  # h (and c), one end
    x, y, inter = x_rows * in_size, x_rows * dirs * r, x_rows * dirs * r * (layers - 1)
    size = ITEMSIZE.get(dtype)
    fwd = bwd = None
    if size is not None:
        fwd = (x + weights + 2 * states + y + 2 * inter) * size
        bwd = (2 * (x + weights + states + y) + states + 3 * inter) * size
    params = fmt_params(dtype, mode=mode, rows=x_rows, I=in_size, H=hidden, P=proj, layers=layers, dirs=dirs,
                        bias=int(bias))
    sizes = packed_sizes(batch_sizes) if packed else None
    sizes = sizes if sizes and sizes[0] == state_rows and sum(sizes) == x_rows else None
    shape = RnnShape(g, state_rows, hidden, r, layers, dirs, in_size, bias, x_rows, proj,
                     g * (1 + 2 * bias) + _CELL[mode], packed, sizes)
    return Cost(gemm + cell, fwd, params, dtype, RNN, bwd_flops=2 * (gemm + cell) + sums, bwd_bytes=bwd, main_op=MAIN_OPS,
                rnn=shape)


def _rnn(mode: str):
    def formula(c: Call) -> Cost | None:
        x = c.args[0]
        second = c.args[1]
        packed = isinstance(second, Tensor) and second.dtype == "int64" and len(second.shape) == 1
        off = 1 if packed else 0  # a PackedSequence's batch sizes come second
        hx, params = c.args[1 + off], c.args[2 + off]
        bias, layers, bidirectional = c.args[3 + off], c.args[4 + off], c.args[7 + off]
        h0, c0 = (hx[0], hx[1]) if mode == "lstm" else (hx, None)
        in_size = x.shape[-1]
        hidden = c0.shape[-1] if c0 is not None else h0.shape[-1]
        proj = h0.shape[-1] if c0 is not None and h0.shape[-1] != hidden else 0
        w_ih = params[0]
        if not isinstance(w_ih, Tensor) or w_ih.shape != (_GATES[mode] * hidden, in_size):
            return None  # not the weight layout this formula reads
        rows = x.shape[0] if packed else x.numel // in_size
        return rnn_cost(mode, rows, in_size, hidden, proj, layers, 2 if bidirectional else 1, bool(bias),
                        h0.shape[-2] if len(h0.shape) == 3 else 1, x.dtype, packed, second.values if packed else None)
    return formula


for _mode in _GATES:
    register(f"torch.{_mode}")(_rnn(_mode))


def _cell_composite(c: Call) -> Cost | None:
    """gru_cell and the plain RNN cells: their GEMMs and cell kernels are priced from their
    PyTorch ranges (`composite`); without ranges, na."""
    x = c.args[0]
    return Cost(None, None, fmt_params(x.dtype, shape=dims(x.shape)), x.dtype, SIMT, composite=True)


register(*[f"torch.{m}_cell" for m in _GATES if m != "lstm"])(_cell_composite)

# FLOPs per row and hidden unit of _thnn_fused_lstm_cell_backward's kernel: tanh(cy), dO,
# dC's five (dY·o·(1 - tanh²) + dC), the four gates' products with dC, and each gate's
# derivative (sigmoid: 1 - g, two products; tanh: a square, a difference, a product).
_LSTM_CELL_BACKWARD = 23


def fused_cell_work(gates: int, extra: int, rows: int, hidden: int, bias: bool, size: int) -> tuple:
    """(FLOPs, bytes) of _thnn_fused_lstm_cell's (gates 4, `extra` 9) or _thnn_fused_gru_cell's
    (3, 8) kernel over `rows` x `hidden`: the gate sums and the cell math of the module docstring;
    both gate GEMMs' outputs, the state and the biases read, the new state(s) and the workspace
    the backward reads (LSTM: the four gates; GRU: five per unit) written."""
    state = rows * hidden
    flops = state * (gates * (1 + 2 * bias) + extra)
    writes = (2 + 4) * state if gates == 4 else (1 + 5) * state
    return flops, (2 * gates * state + state + (2 * gates * hidden if bias else 0) + writes) * size


def lstm_cell_backward_work(rows: int, hidden: int, size: int) -> tuple:
    """(FLOPs, bytes) of _thnn_fused_lstm_cell_backward's kernel: dhy, dcy, cx, cy and the four
    gates of the workspace read, the four gates' gradients and dcx written."""
    state = rows * hidden
    return _LSTM_CELL_BACKWARD * state, (4 * state + 4 * state + 4 * state + state) * size


@register("torch.lstm_cell")
def lstm_cell(c: Call) -> Cost | None:
    """torch.lstm_cell(input, (hx, cx), w_ih, w_hh, b_ih, b_hh) (nn.LSTMCell) as PyTorch runs it on
    the GPU, kernel by kernel: the input's and the state's gate GEMMs, the fused cell
    (fused_cell_work). Backward: the cell's kernel, the bias gradient's sum over the rows, then
    each GEMM's two gradients (the state's first: backward runs in reverse), each touching its
    three matrices once. Under autocast, in its dtype; autocast's casts and the engine's sums of
    gradients are the call's parts."""
    x, state = c.tensor(0, "input"), c.get(1, "hx")
    w_ih, w_hh = c.tensor(2, "w_ih"), c.tensor(3, "w_hh")
    hx = state[0] if isinstance(state, (list, tuple)) and state and isinstance(state[0], Tensor) else None
    if x is None or hx is None or w_ih is None or w_hh is None or len(x.shape) != 2 or len(hx.shape) != 2:
        return None
    dtype = c.marker.get("autocast") or x.dtype
    size = ITEMSIZE.get(dtype)
    if size is None:
        return None
    rows, in_size, hidden = x.shape[0], x.shape[1], hx.shape[1]
    g, bias = 4 * hidden, c.tensor(4, "b_ih") is not None
    gemms = tuple((GEMM_STAGE, 2 * rows * k * g, (rows * k + k * g + rows * g) * size) for k in (in_size, hidden))
    stages = gemms + (("lstm_cell_forward",) + fused_cell_work(4, _CELL["lstm"], rows, hidden, bias, size),)
    bwd = (("lstm_cell_backward",) + lstm_cell_backward_work(rows, hidden, size),) \
        + ((("sum_functor", reduce_adds(rows * g, g), (rows * g + g) * size),) if bias else ()) \
        + (gemms[1], gemms[1], gemms[0], gemms[0])
    # RNN: matrix work (its GEMMs), and autocast casts its arguments down as for the matrix ops.
    return Cost(*stage_totals(stages), fmt_params(dtype, shape=dims(x.shape), hidden=hidden), dtype, RNN,
                bwd_flops=stage_totals(bwd)[0], bwd_bytes=stage_totals(bwd)[1], stages=stages, bwd_stages=bwd)


def _fused_cell(gates: int, extra: int):
    """_thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias, hidden_bias) and the GRU's
    (input_gates, hidden_gates, hx, ...): fused_cell_work."""
    def formula(a) -> Cost | None:
        ig, state = a.tensor(0), a.tensor(2)
        size = ITEMSIZE.get(a.dtype)
        if ig is None or state is None or size is None:
            return None
        rows, hidden = state.shape[0] if len(state.shape) > 1 else 1, state.shape[-1]
        return Cost(*fused_cell_work(gates, extra, rows, hidden, a.tensor(3) is not None, size),
                    fmt_params(a.dtype, shape=dims(state.shape)), a.dtype, SIMT)
    return formula


register_aten("aten::_thnn_fused_lstm_cell")(_fused_cell(4, 9))
register_aten("aten::_thnn_fused_gru_cell")(_fused_cell(3, 8))


@register_aten("aten::_thnn_fused_lstm_cell_backward_impl")
def fused_lstm_cell_backward(a) -> Cost | None:
    """_thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias): its
    kernel's lstm_cell_backward_work (the bias gradient's sum is a range of its own)."""
    cx = a.tensor(2)
    size = ITEMSIZE.get(a.dtype)
    if cx is None or size is None:
        return None
    rows, hidden = cx.shape[0] if len(cx.shape) > 1 else 1, cx.shape[-1]
    return Cost(*lstm_cell_backward_work(rows, hidden, size), fmt_params(a.dtype, shape=dims(cx.shape)), a.dtype, SIMT)


_MODE_OF_GATES = {4: "lstm", 3: "gru", 1: "rnn_tanh"}  # rnn_relu costs what rnn_tanh does


def _cudnn_rnn(backward: bool):
    """aten::_cudnn_rnn(_backward) from its range's sizes alone (traces without pyprof.init()):
    input, the flat weight list (per layer and direction w_ih, w_hh, [b_ih, b_hh], [w_hr]), an
    empty entry (weight_stride0), the weight buffer, hx, cx ([] without: GRU, RNN). The weights
    say the mode (w_ih has G·H rows), bias and projection; hx's first dimension layers x
    directions. Directions: 2 when the second weight group reads the input's features again
    (and a third, if any, twice the recurrent size). With two groups and equal input and
    recurrent sizes one bidirectional layer and two one-directional layers cost the same FLOPs
    but not the same bytes: bytes na."""
    def formula(a) -> Cost | None:
        x = a.shape(0)
        end = next((i for i in range(1, len(a.sizes)) if a.sizes[i] == []), None)
        if not x or end is None or end + 2 >= len(a.sizes):
            return None
        weights = [a.shape(i) for i in range(1, end)]
        hx, cx = a.shape(end + 2), a.shape(end + 3)
        if hx is None or len(hx) != 3 or any(w is None for w in weights):
            return None
        groups, state_rows, r = hx
        hidden = cx[-1] if cx and len(cx) == 3 else r
        weights = _unflattened(weights, hidden, r)
        per_group, rest = divmod(len(weights), groups)
        g, odd = divmod(weights[0][0], hidden)
        mode = _MODE_OF_GATES.get(g)
        if rest or odd or mode is None or per_group not in (2, 3, 4, 5):
            return None
        proj = r if r != hidden else 0
        in_size = x[-1]
        group_in = [weights[k * per_group][1] for k in range(groups)]
        dirs = 2 if groups % 2 == 0 and group_in[1] == in_size and (groups == 2 or group_in[2] == 2 * r) else 1
        # A 2-D input with a batch of states is a packed sequence's data (unbatched input has one):
        # its batch sizes are no range's values, but its pack's kernels tell them (packed_runs.py).
        packed = len(x) == 2 and state_rows > 1
        cost = rnn_cost(mode, prod(x) // in_size, in_size, hidden, proj, groups // dirs, dirs, per_group >= 4,
                        state_rows, a.dtype, packed, a.batch_sizes() if packed else None)
        ambiguous = groups == 2 and in_size == r
        if backward:
            cost = replace(cost, flops=cost.bwd_flops, bytes=cost.bwd_bytes)
        return replace(cost, bytes=None) if ambiguous else cost
    return formula


def _unflattened(weights: list, hidden: int, r: int) -> list:
    """The weights as (rows, columns), where autocast's inner `_cudnn_rnn` range sees views of
    the flat buffer ([numel, 1] each): w_hh of the first group, G·H x R, says G·H; a view of G·H
    elements is a bias. With a projection (whose w_hr is P x H) the views stay as they are."""
    if len(weights) < 2 or any(len(w) != 2 or w[1] != 1 for w in weights) or r != hidden:
        return weights
    gh = weights[1][0] // r
    if gh <= 0 or any(w[0] % gh for w in weights):
        return weights
    return [(gh,) if w[0] == gh else (gh, w[0] // gh) for w in weights]


register_aten("aten::_cudnn_rnn")(_cudnn_rnn(False))
register_aten("aten::_cudnn_rnn_backward")(_cudnn_rnn(True))
