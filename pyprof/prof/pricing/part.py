"""What one helper kernel of an op call does (`Part`), the families more than one kind of op call
launches, and a launch's dimensions as one count (and the power-of-two rounding launch
configurations use).

A helper kernel is one an op's formula does not count but its call launches (parts.py: which
parts a call has and which kernel takes which). Each kind of op builds its own parts from these
(conv_parts.py: cuDNN's convolution helpers; gemm_parts.py: a matrix product's output and its
split-K reductions; attention_parts.py: flash and math attention's; rnn_parts.py: an RNN's weight
buffers), and parts.py puts them together: imports flow from here to those modules, and from
them to parts.py, never back.
"""
from __future__ import annotations

import math
from typing import NamedTuple

# PyTorch's copies (a cast; CONTIGUOUS: a strided tensor made contiguous in its own dtype; CONJ: a
# complex tensor's lazy conjugate made real), fills, adds and sums (a bias gradient, a row's sum):
# every kind of op call may launch them.
COPY, FILL, ADD, CONTIGUOUS, CONJ, SUM = "copy", "fill", "add", "contiguous", "conj", "sum"


class Part(NamedTuple):
    """One helper kernel's work: its family (COPY, ...), the elements it reads and writes, FLOPs,
    bytes; for a layout conversion (conv_parts.LAYOUT) the launch grid that converts it."""

    family: str
    numel: int
    flops: int
    bytes: int
    grid: tuple | None = None


def last_pow2(n: int) -> int:
    """The largest power of two not above `n` (1 for n <= 1): how CUDA launch configurations
    (PyTorch's reductions, batch norm's) round a dimension down."""
    return 1 << (max(n, 1).bit_length() - 1)


def launch_count(dims: object) -> int | None:
    """grid or block dimensions as one count; None when the record's value is not a list of
    positive ints (parse writes 3: that case is unpacked, not iterated, as it runs per kernel)."""
    if type(dims) is list and len(dims) == 3:
        x, y, z = dims
        return x * y * z if type(x) is int and type(y) is int and type(z) is int and x > 0 and y > 0 and z > 0 \
            else None
    if not isinstance(dims, list) or not dims or not all(type(d) is int and d > 0 for d in dims):
        return None
    return math.prod(dims)

