"""Convolutions, plain and transposed, 1-3 spatial dimensions, any groups, stride, dilation, padding.

FLOPs: 2 * N * K * prod(output positions) * (C/groups) * prod(kernel taps), the GEMM view of
convolution that the original PyProf and torch.utils.flop_counter use (padding taps included).
For a transposed convolution the taps run over the input positions instead.
"""
from __future__ import annotations

from math import prod

from ..registry import CONV, Call, Cost, deferring, dims, fmt_params, names, register, register_aten
from ..values import ITEMSIZE, as_2d, ntuple, promote

_SPATIAL_NAMES = {1: ("W",), 2: ("H", "W"), 3: ("D", "H", "W")}
_OUT_NAMES = {1: ("Q",), 2: ("P", "Q"), 3: ("O", "P", "Q")}
_TAP_NAMES = {1: ("S",), 2: ("R", "S"), 3: ("T", "R", "S")}


def touched(size: int, out: int, taps: int, stride: int, pad: int, dil: int) -> int:
    """How many of an input dim's `size` positions the taps of its `out` outputs read, padding
    aside: all where the windows overlap or abut, fewer where the stride outruns the window (a
    1x1 convolution of stride 2 reads every other row). Dilated windows counted position by
    position (up to 65,536 taps; beyond, every position)."""
    span = dil * (taps - 1) + 1
    if dil == 1 and stride <= span:  # one run from the first window to the last
        return max(0, min(size - 1, (out - 1) * stride - pad + span - 1) - max(0, -pad) + 1)
    if dil == 1:  # disjoint windows, each its span but the few the input's edges clip
        edges = set(range(min(out, -(-pad // stride) + 1))) | set(range(max(0, (size + pad - span) // stride), out))
        return out * span - sum(span - max(0, min(size, o * stride - pad + span) - max(0, o * stride - pad))
                                for o in edges)
    if out * taps > 1 << 16:
        return size
    return len({q for o in range(out) for j in range(taps) if 0 <= (q := o * stride - pad + j * dil) < size})


def conv_cost(c: Call, nd: int, transposed: bool) -> Cost | None:
    """Shared by conv{1,2,3}d and conv_transpose{1,2,3}d; argument positions follow torch."""
    x, w, bias = c.tensor(0, "input"), c.tensor(1, "weight"), c.tensor(2, "bias")
    if transposed:  # conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)
        stride, pad = c.get(3, "stride", 1), c.get(4, "padding", 0)
        out_pad, groups, dil = c.get(5, "output_padding", 0), c.get(6, "groups", 1), c.get(7, "dilation", 1)
    else:  # conv(input, weight, bias, stride, padding, dilation, groups)
        stride, pad = c.get(3, "stride", 1), c.get(4, "padding", 0)
        dil, groups, out_pad = c.get(5, "dilation", 1), c.get(6, "groups", 1), 0
    batched = len(x.shape) == nd + 2
    n = x.shape[0] if batched else 1
    cin, spatial = x.shape[-nd - 1], x.shape[-nd:]
    taps = w.shape[2:]
    stride, dil, out_pad = ntuple(stride, nd), ntuple(dil, nd), ntuple(out_pad, nd)
    if pad == "valid":
        pad = 0
    if pad == "same":
        out = tuple(spatial)
        pad_t = tuple((d * (k - 1)) // 2 for d, k in zip(dil, taps))
    else:
        pad_t = ntuple(pad, nd)
        if transposed:
            out = tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1
                        for i, s, p, d, k, op in zip(spatial, stride, pad_t, dil, taps, out_pad))
        else:
            out = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                        for i, s, p, d, k in zip(spatial, stride, pad_t, dil, taps))
    if transposed:
        kout = w.shape[1] * groups
        flops = 2 * n * prod(spatial) * prod(taps) * cin * w.shape[1]
    else:
        kout = w.shape[0]
        flops = 2 * n * prod(out) * prod(taps) * kout * (cin // groups)
    dtype = promote([x.dtype, w.dtype])
    elems = x.numel + w.numel + n * kout * prod(out)
    bias_elems = bias.numel if bias else 0
    unread = 0 if transposed else n * cin * (prod(spatial) - prod(
        touched(*a) for a in zip(spatial, out, taps, stride, pad_t, dil)))
    size = ITEMSIZE.get(dtype)
    fields = dict(zip(("N", "C", *_SPATIAL_NAMES[nd]), (n, cin, *spatial)))
    fields.update(K=kout, **dict(zip(_OUT_NAMES[nd], out)), **dict(zip(_TAP_NAMES[nd], taps)))
    fields.update(pad=pad_t, stride=stride, dil=dil, g=groups)
    if transposed:
        fields["opad"] = out_pad
    return Cost(flops, None if size is None else (elems - unread + bias_elems) * size, fmt_params(dtype, **fields),
                dtype, CONV, elems, bias_elems=bias_elems, unread=unread, out_elems=n * kout * prod(out),
                out_shape=(n, kout, *out), groups=groups)


def _register(nd: int) -> None:
    fn = ("torch.nn.functional", "torch")
    register(*names([f"conv{nd}d"], fn))(lambda c: conv_cost(c, nd, False))
    register(*names([f"conv_transpose{nd}d"], fn))(lambda c: conv_cost(c, nd, True))


for _nd in (1, 2, 3):
    _register(_nd)



def shape_flops(out: tuple | None, x: tuple | None, w: tuple | None) -> int | None:
    """A convolution's FLOPs from the shapes of its output, input and weight alone (PyTorch's
    op ranges carry no scalars): groups follow from the weight's second dimension, and a weight
    whose first dimension is the input's channels with an output no smaller than the input is a
    transposed convolution's (its taps run over the input). None for shapes that are neither."""
    if not (out and x and w and len(out) == len(x) == len(w) >= 3):
        return None
    n, k, out_sp = out[0], out[1], out[2:]
    c, spatial, taps = x[1], x[2:], w[2:]
    if w[0] == k and prod(out_sp) <= prod(spatial):
        return 2 * n * prod(out_sp) * prod(taps) * k * w[1]
    if w[0] == c:
        return 2 * n * prod(spatial) * prod(taps) * c * w[1]
    return None


# The backends' ops (input, weight, ...); the depthwise one's bias at position 3.
_FORWARD_BIAS = {"aten::cudnn_convolution": None, "aten::cudnn_convolution_transpose": None,
                 "aten::_conv_depthwise2d": 3}


@register_aten(*_FORWARD_BIAS)
@deferring
def convolution_forward(a) -> Cost | None:
    """A convolution backend's forward: its output's shape (stride and padding are not in the
    range) from a consumer's range (tensor_flow.py; the wrappers around it return its output,
    whatever copy of the input they made for it), FLOPs by shape_flops; input, weight, bias read
    and the output written. Where no consumer tells, the ranges around are asked (one of a
    convolution's double backward: convolution_double_backward)."""
    x, w = a.shape(0), a.shape(1)
    out = as_2d(a.output_shape(copied=True), x)
    flops = shape_flops(out, x, w)
    if flops is None:
        return None
    pos = _FORWARD_BIAS[a.name]
    bias = prod(a.shape(pos) or ()) if pos is not None and a.shape(pos) else 0
    elems = prod(x) + prod(w) + prod(out)
    size = ITEMSIZE.get(a.dtype)
    return Cost(flops, None if size is None else (elems + bias) * size,
                fmt_params(a.dtype, input=dims(x), weight=dims(w), out=dims(out)), a.dtype, CONV, elems,
                bias_elems=bias, out_elems=prod(out), out_shape=tuple(out), groups=_groups(x, w, out))


def _groups(x: object, w: object, y: object) -> int:
    """conv_parts.conv_groups of a range's shapes (imported here: conv_parts reads the aten level,
    which fills its table from this module)."""
    from ..conv_parts import conv_groups
    return conv_groups(x, w, y)


@register_aten("aten::convolution_backward")
def convolution_backward(a) -> Cost | None:
    """One gradient's work (data or weight: each one forward's FLOPs on the three tensors,
    shape_flops) from the shapes of grad_output, input and weight; each matrix kernel of the
    backward carries one (analysis.py's gradient slots)."""
    return _one_convolution(a, 0, 1, 2)


@register_aten("aten::_convolution_double_backward")
def convolution_double_backward(a) -> Cost | None:
    """(ggI, ggW, ggb, gO, weight, self, ...): the backward of a convolution's backward (a
    gradient penalty's, taken with create_graph=True). Each of its convolutions (ggI with the
    weight and the input with ggW for gO's gradient, ggW with gO for the input's, ggI with gO for
    the weight's) is one forward's FLOPs on the convolution's three tensors, reading two of them
    and writing the third: one a matrix kernel, as convolution_backward's."""
    return _one_convolution(a, 3, 5, 4)


def _one_convolution(a, g_pos: int, x_pos: int, w_pos: int) -> Cost | None:
    """One convolution's work on the shapes of a range's grad_output, input and weight (at
    those positions): a forward's FLOPs (shape_flops), the three tensors read or written once."""
    g, x, w = a.shape(g_pos), a.shape(x_pos), a.shape(w_pos)
    flops = shape_flops(g, x, w)
    if flops is None:
        return None
    elems = prod(g) + prod(x) + prod(w)
    size = ITEMSIZE.get(a.dtype)
    return Cost(flops, None if size is None else elems * size,
                fmt_params(a.dtype, grad_out=dims(g), input=dims(x), weight=dims(w)), a.dtype, CONV, elems,
                groups=_groups(x, w, g))
