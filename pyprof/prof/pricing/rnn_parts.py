"""The helper kernels of a cuDNN RNN call that move its weights' and states' buffers: the flat
weight buffer zeroed (under autocast before the weights are cast into it; backward, its gradient's)
and a backward's zeroed gradients of the final states; and cuDNN's dropout states, seeded where a
dropout descriptor is made. The call's GEMMs and cell kernels are rnn_kernels.py's; these parts are put together with the others in parts.forward_parts and
parts.backward_parts.
"""
from __future__ import annotations

import re

from .part import CONTIGUOUS, FILL, Part, launch_count
from .registry import RNN, Call, Cost
from .values import ITEMSIZE, Tensor


def flat_weights(marker: dict, cost: Cost | None, bprop: bool = False) -> list[Part]:
    """An RNN's flat weight buffer, zeroed (a fill written once): under autocast before the
    weights are cast into it, in the autocast dtype, and its gradient buffer in backward (among the
    casts back of parts.backward_parts); without autocast (`bprop`) the gradient buffer alone, in
    the op's dtype, before cuDNN accumulates the weight gradients into it."""
    low = marker.get("autocast")
    if bprop:
        low = None if low is not None or cost is None else cost.dtype
    if cost is None or cost.kind != RNN or low not in ITEMSIZE:
        return []
    # The weights are the marker's last list: an LSTM's (h0, c0) is a list before it.
    lists = [v for v in Call(marker).args if isinstance(v, list)]
    weights = sum(t.numel for t in lists[-1] if isinstance(t, Tensor)) if lists else 0
    return [Part(FILL, weights, 0, weights * ITEMSIZE[low])] if weights else []


def time_major_copies(marker: dict, cost: Cost | None, bprop: bool = False) -> list[Part]:
    """A batch_first RNN's tensors made time-major (torch's cuDNN path transposes them, cuDNN reads
    them contiguous: a same-dtype copy each, read and written once), in the dtype the call runs in
    (autocast's, else the op's): forward the input; backward the saved input and dOutput (T·N x
    D·R) for the input gradient, and the input again for the weight gradients (torch's two
    backward functions each make it contiguous: the coverage capture's LSTM and fixture_lstm run
    three copies). A tensor of one step or one sequence is contiguous either way: a part no kernel
    takes. None for a packed sequence (its data is time-major already)."""
    s = None if cost is None else cost.rnn
    if s is None or s.packed:
        return []
    c, low = Call(marker), marker.get("autocast")
    size = ITEMSIZE.get(low if low in ITEMSIZE else cost.dtype)
    x = c.args[0] if c.args else None
    if size is None or not isinstance(x, Tensor) or c.get(8, "batch_first") is not True:
        return []
    elems = [x.numel] + ([s.rows * s.dirs * s.rec, x.numel] if bprop else [])
    return [Part(CONTIGUOUS, n, 0, 2 * n * size) for n in elems]


def final_state_grads(cost: Cost) -> list[Part]:
    """An RNN backward's zeroed gradients of the final states h_n (and LSTM's c_n), layers x
    directions x N x R (H), written in the op's dtype: _cudnn_rnn_backward makes them where the
    loss did not use the states (kernel_truth's gru: a 12,288-element fp16 fill), whether or not
    h0 required grad."""
    s, size = cost.rnn, ITEMSIZE.get(cost.dtype)
    if cost.kind != RNN or s is None or size is None:
        return []
    units = s.layers * s.dirs * s.batch
    return [Part(FILL, units * n, 0, units * n * size) for n in ((s.rec, s.hidden) if s.gates == 4 else (s.rec,))]


# cuDNN seeds its dropout states (cudnnSetDropoutDescriptor, torch's _cudnn_init_dropout_state) one
# curandStateXORWOW per thread of this launch: cudnnDropoutGetStatesSize sizes the buffer by it
# (H100: 528 blocks of 256 threads, 48 bytes each, the 6,488,064-byte buffer the traced
# aten::_cudnn_rnn ranges carry).
_DROPOUT_STATES = re.compile(r"\binitstates\(unsigned long long, curandStateXORWOW \*\)")
_XORWOW = 48  # sizeof(curandStateXORWOW): d, v[5], the Box-Muller flags and its two spare values


def dropout_states(kernel: str | None, grid: object, block: object) -> tuple | None:
    """(FLOPs, bytes) of cuDNN's initstates, which its launch alone states: each thread's state
    seeded and written (the skip-ahead to its subsequence is integer work: 0 FLOPs), nothing
    read. None for any other kernel."""
    if not kernel or "initstates" not in kernel or not _DROPOUT_STATES.search(kernel):
        return None
    g, b = launch_count(grid), launch_count(block)
    return None if g is None or b is None else (0, g * b * _XORWOW)
