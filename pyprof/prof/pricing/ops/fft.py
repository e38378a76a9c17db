"""Discrete Fourier transforms (torch.fft) as cuFFT and PyTorch run them, kernel by kernel.

cuFFT runs a transform as passes over the data, each a kernel that reads the whole array once
and writes it once: the real-to-complex pass over the last transformed dim (`vector_fft_r2c`:
the real input read, the half spectrum written), the complex passes over the others
(`regular_fft`, `vector_fft`), the complex-to-real pass last (`vector_fft_c2r`); a small 2-D
complex transform may run as one kernel (`vector_2d_fft`). PyTorch adds a copy of a strided input,
a scaling kernel where the norm asks (`MulFunctor`), and in the backwards the zero fill and copy
that rebuild a whole spectrum from a half one (FunctionsManual's fft_r2c_backward) and the
doubling of the bins a half spectrum stands for twice (fft_c2r_backward).

Conventions (docs/prof.md): a complex transform of length L counts 5 L log2 L FLOPs, a real one
half of it (the radix-2 count every FFT benchmark quotes); a scaling 1 FLOP an element, a copy or
fill none. Each kernel is a named stage (registry.Cost.stages): the call's kernels take the stage
their name says, so a plan of other passes leaves its other kernels na rather than mispriced.
PyTorch's op ranges carry neither the dims, nor the sizes `s`, nor the norm; there each cuFFT
kernel under aten::_fft_r2c, _fft_c2r or _fft_c2c is priced from the lengths its name's template
states (`regular_fft<64u, ...>`, `vector_2d_fft<64u, 64u, ...>`) and the range's input: every
pass moves the whole array, whichever dims it runs along (the copies and scalings are ranges of
their own).
"""
from __future__ import annotations

import re
from math import log2, prod
from typing import Any

from ..registry import SIMT, Call, Cost, dims, fmt_params, names, register, register_aten, stage_totals
from ..values import ITEMSIZE, Tensor, complex_of, real_of

# The copy of an input cuFFT cannot read as it is, which runs only where the input is so laid out
# (a channels-last one too, whose marker names no strides): a stage of its own name (the copy
# kernel's name holds it) that no total counts.
_MAYBE_COPY = "direct_copy_kernel_cuda"
# torch.fft's norm modes: whether the forward and the inverse transform scale their result.
_SCALED = {None: (False, True), "backward": (False, True), "ortho": (True, True), "forward": (True, False)}


def _passes(shape: tuple, over: tuple, size: int) -> tuple:
    """The complex passes over dims `over` of an array of `shape` (elements of `size` bytes): a
    2-D transform's one-kernel form first (a stage no kernel takes costs nothing), then one `fft`
    pass a dim, each reading and writing the whole array."""
    n = prod(shape)
    nbytes = 2 * n * size
    per_dim = tuple(("fft", _flops(n, shape[d], False), nbytes) for d in over)
    if len(over) == 2:
        return (("2d_fft", sum(s[1] for s in per_dim), nbytes),) + per_dim
    return per_dim


def _flops(n: int, length: int, real: bool) -> int:
    """FLOPs of transforms of `length` over `n` elements: 5 L log2 L a complex transform, half for
    a real one (n / L transforms)."""
    if length <= 1:
        return 0
    return round((2.5 if real else 5.0) * n * log2(length))


def _scale(n: int, size: int) -> tuple:
    return ("MulFunctor", n, 2 * n * size)


def _args(c: Call, default: tuple | None) -> tuple:
    """(input, the sizes asked, the transformed dims, the norm) of a torch.fft call whose dims
    default to `default` (None: all): a 1-D transform's size is `n` and its dim an int."""
    one = default == (-1,)
    size = c.get(1, "n" if one else "s")
    return c.tensor(0, "input"), None if size is None else (size,) if one else tuple(size), \
        c.get(2, "dim", -1 if one else default), c.get(3, "norm")


def _resolved(x: Tensor, dim, size: tuple | None) -> tuple | None:
    """The transformed dims of x, non-negative and in order; None where they are not understood."""
    rank = len(x.shape)
    if dim is None:
        dim = tuple(range(rank)) if size is None else tuple(range(rank - len(size), rank))
    dim = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dim or not all(isinstance(d, int) and -rank <= d < rank for d in dim):
        return None
    return tuple(d % rank for d in dim)


def r2c_stages(x: Tensor, over: tuple, scaled: bool) -> tuple | None:
    """The kernels of a real-to-complex transform of real x over dims `over` (the last halved):
    the r2c pass, a complex pass per other dim, the scaling, and the copy of x that runs first
    where x is not laid out as cuFFT reads it (a channels-last x too, whose marker names no
    strides: a stage no kernel takes costs nothing)."""
    cdt = complex_of(x.dtype)
    rsize, csize = ITEMSIZE.get(x.dtype), ITEMSIZE.get(cdt)  # type: ignore[arg-type]
    if rsize is None or csize is None or cdt == x.dtype:
        return None
    last = over[-1]
    half = tuple(x.shape[last] // 2 + 1 if i == last else d for i, d in enumerate(x.shape))
    n = prod(half)
    stages = (("_r2c", _flops(x.numel, x.shape[last], True), x.numel * rsize + n * csize),
              (_MAYBE_COPY, 0, 2 * x.numel * rsize))
    stages += _passes(half, over[:-1], csize)
    return stages + ((_scale(n, csize),) if scaled else ())


def c2r_stages(y: Tensor, over: tuple, length: int, scaled: bool) -> tuple | None:
    """The kernels of a complex-to-real transform of the half spectrum y over dims `over` into
    `length` points along the last: the complex passes over the other dims into a buffer (a 1-D
    transform clones y instead: cuFFT's c2r overwrites its input), the c2r pass, the scaling."""
    rdt = real_of(y.dtype)
    rsize, csize = ITEMSIZE.get(rdt), ITEMSIZE.get(y.dtype)  # type: ignore[arg-type]
    if rsize is None or csize is None:
        return None
    last = over[-1]
    out = tuple(length if i == last else d for i, d in enumerate(y.shape))
    n_out = prod(out)
    lead = _passes(y.shape, over[:-1], csize) if len(over) > 1 else \
        (("direct_copy_kernel", 0, 2 * y.numel * csize),)
    stages = (("_c2r", _flops(n_out, length, True), y.numel * csize + n_out * rsize),) + lead
    return stages + ((_scale(n_out, rsize),) if scaled else ())


def c2c_stages(z: Tensor, over: tuple, scaled: bool) -> tuple | None:
    """The kernels of a complex transform of z over dims `over`: its passes, the scaling."""
    size = ITEMSIZE.get(z.dtype) if z.dtype and z.dtype.startswith("complex") else None
    if size is None:
        return None
    return _passes(z.shape, over, size) + ((_scale(z.numel, size),) if scaled else ())


def always_run(stages: tuple) -> tuple:
    """The stages every call runs: not the input copy r2c_stages lists in case (_MAYBE_COPY), nor
    the per-dim passes of a 2-D transform also listed in its one-kernel form (which counts the
    same FLOPs)."""
    kept = tuple(s for s in stages if s[0] != _MAYBE_COPY)
    return tuple(s for s in kept if s[0] != "fft") if any(s[0] == "2d_fft" for s in kept) else kept


def _cost(x: Tensor, stages: tuple | None, bwd: tuple | None, over: tuple, dtype: str | None) -> Cost | None:
    """The op's Cost: its totals those of the stages every call runs (always_run)."""
    if stages is None:
        return None
    bwd_totals = stage_totals(always_run(bwd)) if bwd is not None else (None, None)
    return Cost(*stage_totals(always_run(stages)), fmt_params(x.dtype, shape=dims(x.shape), dim=dims(over)), dtype, SIMT,
                bwd_flops=bwd_totals[0], bwd_bytes=bwd_totals[1], stages=stages, bwd_stages=bwd)


def _rfft(default: tuple | None):
    def formula(c: Call) -> Cost | None:
        """torch.fft.rfft/rfft2/rfftn: r2c_stages over the dims; backward (fft_r2c_backward) the
        whole spectrum zero-filled, the half copied in, the inverse complex transform of it. A
        size that pads or trims the input: na."""
        x, size, dim, norm = _args(c, default)
        over = None if x is None else _resolved(x, dim, size)
        scaled = _SCALED.get(norm)
        if over is None or scaled is None or size is not None and size != tuple(x.shape[d] for d in over):
            return None
        stages = r2c_stages(x, over, scaled[0])
        csize = ITEMSIZE.get(complex_of(x.dtype))  # type: ignore[arg-type]
        bwd = None
        if stages is not None and csize is not None and x.grad is not False:
            last = over[-1]
            half_n = x.numel // x.shape[last] * (x.shape[last] // 2 + 1)
            spectrum = c2c_stages(Tensor(x.shape, complex_of(x.dtype)), over, scaled[0])
            bwd = (("FillFunctor", 0, x.numel * csize), ("direct_copy_kernel", 0, 2 * half_n * csize)) \
                + spectrum  # type: ignore[operator]
        return _cost(x, stages, bwd, over, x.dtype)
    return formula


def _irfft(default: tuple | None):
    def formula(c: Call) -> Cost | None:
        """torch.fft.irfft/irfft2/irfftn of a half spectrum: c2r_stages; backward
        (fft_c2r_backward) the r2c transform of dY, then the bins that stand for two doubled. A
        size that pads or trims the input: na."""
        y, size, dim, norm = _args(c, default)
        over = None if y is None else _resolved(y, dim, size)
        scaled = _SCALED.get(norm)
        if over is None or scaled is None:
            return None
        last = over[-1]
        length = 2 * (y.shape[last] - 1) if size is None else size[-1]
        if size is not None and size[:-1] != tuple(y.shape[d] for d in over[:-1]) or y.shape[last] != length // 2 + 1:
            return None
        stages = c2r_stages(y, over, length, scaled[1])
        bwd = None
        if stages is not None and y.grad is not False:
            grad = Tensor(tuple(length if i == last else d for i, d in enumerate(y.shape)), real_of(y.dtype))
            bwd = r2c_stages(grad, over, scaled[1])
            doubled = length - (length // 2 + 1)
            if bwd is not None and doubled > 0:
                bwd += (_scale(y.numel // y.shape[last] * doubled, ITEMSIZE[y.dtype]),)  # type: ignore[index]
        return _cost(y, stages, bwd, over, real_of(y.dtype))
    return formula


def _fft(default: tuple | None, forward: bool):
    def formula(c: Call) -> Cost | None:
        """torch.fft.fft/ifft/fft2/ifft2/fftn/ifftn of a complex input: c2c_stages; backward the
        opposite transform, scaled as the forward (the same norm). A real input (PyTorch's
        two-sided r2c, then a copy of the other half) or a size that pads or trims: na."""
        z, size, dim, norm = _args(c, default)
        over = None if z is None else _resolved(z, dim, size)
        scaled = _SCALED.get(norm)
        if over is None or scaled is None or size is not None and size != tuple(z.shape[d] for d in over):
            return None
        stages = c2c_stages(z, over, scaled[0] if forward else scaled[1])
        return _cost(z, stages, stages if z.grad is not False else None, over, z.dtype)
    return formula


for _suffix, _default in (("", (-1,)), ("2", (-2, -1)), ("n", None)):
    register(*names([f"rfft{_suffix}"], ("torch.fft",)))(_rfft(_default))
    register(*names([f"irfft{_suffix}"], ("torch.fft",)))(_irfft(_default))
    register(*names([f"fft{_suffix}"], ("torch.fft",)))(_fft(_default, True))
    register(*names([f"ifft{_suffix}"], ("torch.fft",)))(_fft(_default, False))


# A cuFFT kernel's name and the transform lengths its template starts with.
_CUFFT = re.compile(r"\b(\w*fft\w*)<((?:(?:\(unsigned int\))?\d+u?, )+)ept<")


def cufft_pass(kernel: str) -> tuple | None:
    """(kind, lengths) of a cuFFT kernel from its name (lower-cased): kind `r2c`, `c2r` or `c2c`;
    None for any other kernel."""
    m = _CUFFT.search(kernel)
    if m is None:
        return None
    lengths = tuple(int(v) for v in re.findall(r"(\d+)u?, ", m.group(2)))
    kind = "r2c" if m.group(1).endswith("_r2c") else "c2r" if m.group(1).endswith("_c2r") else "c2c"
    return kind, lengths


def _range_stages(kind: str, kernels: list, n: int, rsize: int, csize: int) -> tuple | None:
    """The stages of an FFT range's kernels (cufft_pass'), `n` elements of its input (real for
    r2c, the half spectrum for c2r, complex for c2c): each pass its lengths' FLOPs over the array
    it moves, read and written once. None where a kernel is not a cuFFT pass or the lengths do
    not divide the array."""
    stages = []
    for name in kernels:
        got = cufft_pass(name)
        if got is None or not got[1] or n % prod(got[1]):
            return None
        pass_kind, lengths = got
        key = name[:name.find("ept<")]
        length = prod(lengths)
        if pass_kind == "r2c" and kind == "r2c":
            half = n // length * (length // 2 + 1)
            stages.append((key, _flops(n, length, True), n * rsize + half * csize))
            n = half
        elif pass_kind == "c2r" and kind == "c2r":
            if n % (length // 2 + 1):
                return None
            full = n // (length // 2 + 1) * length
            stages.append((key, _flops(full, length, True), n * csize + full * rsize))
        elif pass_kind == "c2c" and (kind != "r2c" or stages):
            stages.append((key, _flops(n, length, False), 2 * n * csize))
        else:
            return None
    return tuple(stages)


def _fft_range(kind: str):
    def formula(a: Any) -> Cost | None:
        """aten::_fft_r2c (real input) / _fft_c2r / _fft_c2c (complex input): _range_stages of
        the range's kernels (AtenCall.range_kernels), in the kernel's real type."""
        x = a.shape(0)
        rdt = a.dtype if a.dtype in ("float16", "float32", "float64") else None
        kernels = a.range_kernels() if x and rdt else None
        csize = ITEMSIZE.get(complex_of(rdt))  # type: ignore[arg-type]
        if not kernels or csize is None:
            return None
        dtype = rdt if kind == "r2c" else complex_of(rdt)
        first = cufft_pass(kernels[0])
        if kind == "r2c" and first is not None and first[0] == "c2c":
            # A later kernel of the range (its passes after the r2c one): the stage the range's
            # first kernel's cost listed for it is its work.
            return Cost(None, None, fmt_params(dtype, shape=dims(x)), dtype, SIMT)
        stages = _range_stages(kind, kernels, prod(x), ITEMSIZE[rdt], csize)
        if stages is None:
            return None
        return Cost(*stage_totals(stages), fmt_params(dtype, shape=dims(x)), dtype, SIMT, stages=stages)
    return formula


for _kind in ("r2c", "c2r", "c2c"):
    register_aten(f"aten::_fft_{_kind}")(_fft_range(_kind))
