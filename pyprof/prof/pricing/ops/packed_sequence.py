"""Packing and unpacking padded sequences: torch._pack_padded_sequence and
torch._pad_packed_sequence, what nn.utils.rnn.pack_padded_sequence and pad_packed_sequence call
(PyTorch's aten/src/ATen/native/PackedSequence.cpp). Both only move data (0 FLOPs but the
backward's gradient sums); which rows each of their kernels moves follows from the lengths (the
batch sizes) whose values the marker carries (docs/markers.md), so each kernel is a stage of its
own (Cost.stages, taken in turn or by name):

- _pack_padded_sequence(input, lengths, batch_first), lengths sorted longest first: scanning from
  the shortest sequence, each new length l (after prev) cuts a block of the l - prev time steps
  of the sequences at least that long, made contiguous (a copy kernel, none where the block
  already is: a batch-first block of one sequence, a time-first block of the whole batch or one
  step), then one cat of the blocks (CatArrayBatchedCopy) writes the packed data. Backward
  (_pack_padded_sequence_backward): the input's gradient zero-filled (every op's gradient fill
  part, parts._gradients), each step's rows copied in (contiguous both sides: cudaMemcpy).
- _pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length): the padded
  output [T, B, *F] filled with padding_value (T = total_length where larger than the longest
  sequence), then each run of steps with one batch size b copied into output[steps, :b] (a
  kernel where that region is not contiguous, else cudaMemcpy). It is composite: its backward is
  autograd's nodes of that copy_ and those slices, per run, last first: CopySlices copies the
  whole output gradient once (the first node, where it arrives strided: batch_first's transpose),
  clones the run's region, zero-fills it (CopyBackwards) and writes the zeros back (copies where
  the region is not contiguous; the first run's node has no such work, the output before its
  copy needing no gradient); SliceBackward0 zero-fills a data-sized gradient and copies the run's
  rows in (cudaMemcpy); the engine sums the runs' data gradients (an add each after the first).
  The first of those sums is every op's part (parts._gradients' add), the rest this op's stages
  (named: each run's copies only where its region is strided, Cost.stages_in_order).

PyTorch's own ranges (emit_nvtx) carry no values: there the inner ops' ranges (aten::clone,
aten::cat, aten::fill_, aten::copy_) price the kernels, and these ops are not in the aten table.
"""
from __future__ import annotations

from math import prod

from ..registry import SIMT, Call, Cost, fmt_params, register
from ..values import ITEMSIZE, Tensor

# Stage names: a piece of each kernel's name (registry.Cost.stages).
_COPY, _FILL, _ADD = "direct_copy_kernel_cuda", "FillFunctor", "CUDAFunctor_add"


def contiguous(sizes: tuple, strides: tuple) -> bool:
    """PyTorch's is_contiguous: dimensions of size 1 do not count."""
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def packed_sizes(values: tuple | None) -> tuple | None:
    """`values` where they can be a packed sequence's lengths or batch sizes: positive and
    largest first; else None."""
    if not values or any(x <= 0 for x in values) or any(a < b for a, b in zip(values, values[1:])):
        return None
    return values


def _sorted_values(t: Tensor | None) -> tuple | None:
    """The values of a lengths or batch sizes argument where they are a packed sequence's."""
    return packed_sizes(t.values) if isinstance(t, Tensor) else None


def _plain(c: Call, pos: int) -> Tensor | None:
    """Argument `pos` where it is a contiguous tensor (its marker entry has no strides or format)."""
    args = c.marker.get("args") or []
    raw = args[pos] if len(args) > pos else None
    t = c.args[pos] if len(c.args) > pos else None
    ok = isinstance(raw, dict) and "strides" not in raw and "format" not in raw
    return t if ok and isinstance(t, Tensor) and t.itemsize else None


def pack_cost(shape: tuple, dtype: str, lengths: tuple, batch_first: bool) -> Cost | None:
    """_pack_padded_sequence of a contiguous `shape` input by `lengths` (sorted, longest first),
    kernel by kernel (the module docstring)."""
    if len(shape) < 2:
        return None
    steps, batch = (shape[1], shape[0]) if batch_first else shape[:2]
    if len(lengths) != batch or lengths[0] > steps:
        return None
    feat, size = prod(shape[2:]), ITEMSIZE[dtype]
    # The time-first view's strides of (step, sequence, features...).
    st, sb = (feat, steps * feat) if batch_first else (batch * feat, feat)
    stages, prev = [], 0
    for i, length in enumerate(reversed(lengths)):
        if length > prev:
            cur = batch - i
            if not contiguous((length - prev, cur, feat), (st, sb, 1)):
                stages.append((0, 2 * (length - prev) * cur * feat * size))
            prev = length
    rows = sum(lengths)
    stages.append((0, 2 * rows * feat * size))  # the cat: every block read, the packed data written
    # Backward: the input's gradient zero-filled (every op's gradient fill part, parts._gradients).
    return Cost(0, (rows + batch * steps) * feat * size, fmt_params(dtype, T=steps, N=batch, F=feat, rows=rows),
                dtype, SIMT, bwd_flops=0, bwd_bytes=steps * batch * feat * size, stages=tuple(stages))


def _runs(batch_sizes: tuple) -> list[tuple[int, int]]:
    """(steps, batch size) of each run of equal batch sizes, in order."""
    out: list = []
    for b in batch_sizes:
        if out and out[-1][1] == b:
            out[-1] = (out[-1][0] + 1, b)
        else:
            out.append((1, b))
    return out


def pad_cost(rows: int, feat: int, dtype: str, batch_sizes: tuple, batch_first: bool, total_length: int) -> Cost | None:
    """_pad_packed_sequence of `rows` packed rows of `feat` elements with `batch_sizes`, forward
    and backward kernel by kernel (the module docstring)."""
    if sum(batch_sizes) != rows or total_length > 0 and total_length < len(batch_sizes):
        return None
    steps, top, size = max(total_length, len(batch_sizes)), batch_sizes[0], ITEMSIZE[dtype]
    out, data = steps * top * feat, rows * feat
    runs = [(k, b, not contiguous((k, b, feat), (top * feat, feat, 1))) for k, b in _runs(batch_sizes)]
    stages = [(0, out * size)] + [(0, 2 * k * b * feat * size) for k, b, strided in runs if strided]
    bwd: list = [(_COPY, 0, 2 * out * size)] if batch_first else []
    for r in range(len(runs) - 1, -1, -1):
        k, b, strided = runs[r]
        e = k * b * feat
        if r:
            region = [(_COPY, 0, 2 * e * size)] if strided else []
            bwd += region + [(_FILL, 0, e * size)] + region
        bwd.append((_FILL, 0, data * size))
        if r != len(runs) - 1:  # the first sum is parts._gradients' add
            bwd.append((_ADD, data, 3 * data * size))
    return Cost(0, (data + out) * size, fmt_params(dtype, T=steps, N=top, F=feat, rows=rows), dtype, SIMT,
                bwd_flops=(len(runs) - 1) * data, bwd_bytes=(data + out) * size, stages=tuple(stages),
                bwd_stages=tuple(bwd), stages_in_order=True)


@register("torch._pack_padded_sequence")
def pack_padded_sequence(c: Call) -> Cost | None:
    x, lengths = _plain(c, 0), _sorted_values(c.tensor(1, "lengths"))
    if x is None or lengths is None:
        return None
    return pack_cost(x.shape, x.dtype, lengths, bool(c.get(2, "batch_first", False)))


@register("torch._pad_packed_sequence")
def pad_packed_sequence(c: Call) -> Cost | None:
    data, batch_sizes = _plain(c, 0), _sorted_values(c.tensor(1, "batch_sizes"))
    total = c.get(4, "total_length", -1)
    if data is None or batch_sizes is None or len(data.shape) < 1 or type(total) is not int:
        return None
    return pad_cost(data.shape[0], prod(data.shape[1:]), data.dtype, batch_sizes, bool(c.get(2, "batch_first", False)),
                    total)
