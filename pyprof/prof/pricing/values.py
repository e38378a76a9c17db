"""Marker values as prof sees them: decoded tensors, dtype facts, shape arithmetic.

A marker (docs/markers.md) encodes a tensor as `{"shape": [...], "dtype": "float16"}`; everything
the op formulas need is its shape and element size. Nothing here imports torch.
"""
from __future__ import annotations

from math import prod
from typing import Any, Iterable, NamedTuple, Sequence

from ...formats import MAX_RUN_ELEMENTS

# Element sizes in bytes, by PyTorch dtype name (without the `torch.` prefix).
ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "complex128": 16, "complex64": 8, "complex32": 4,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1,
}
# The floating-point dtypes (a gradient is in one of them).
FLOATING = frozenset(("float64", "float32", "float16", "bfloat16"))

# The short names the original PyProf printed in `params` (type=fp16).
SHORT = {
    "float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
    "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "float8_e4m3fnuz": "e4m3fnuz",
    "float8_e5m2fnuz": "e5m2fnuz", "complex128": "c128", "complex64": "c64", "complex32": "c32",
}

# Promotion ranks inside a category: the larger rank wins; bf16 with fp16 gives fp32 (below).
_FLOAT_RANK = {"float8_e4m3fn": 0, "float8_e5m2": 0, "bfloat16": 1, "float16": 1, "float32": 2, "float64": 3}
_COMPLEX_FOR = {"float16": "complex32", "bfloat16": "complex64", "float32": "complex64", "float64": "complex128"}


class Tensor(NamedTuple):
    """A tensor argument of a marker: its shape and dtype name (None when the marker lacked one),
    whether it required grad: True, False, or None where the marker does not say (markers
    of pyprof before it wrote `"grad":true`; Call settles it per marker, see with_grads), and its
    values where the marker carries them (a packed sequence's batch sizes: docs/markers.md), else None."""

    shape: tuple
    dtype: str | None
    grad: bool | None = None
    values: tuple | None = None

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def itemsize(self) -> int | None:
        return ITEMSIZE.get(self.dtype)

    @property
    def nbytes(self) -> int | None:
        size = ITEMSIZE.get(self.dtype)
        return None if size is None else size * prod(self.shape)


class Unknown(NamedTuple):
    """A value the marker could not carry in full (a truncated list whose last entry does not
    carry the rest, an unencodable object)."""

    what: str


def decode(value: Any) -> Any:
    """Turn one encoded marker value into Tensor, dtype name, float, list, ... (docs/markers.md)."""
    if isinstance(value, dict):
        if "shape" in value:
            shape = value["shape"]
            if isinstance(shape, list) and all(type(d) is int for d in shape):
                return Tensor(tuple(shape), value.get("dtype"), True if value.get("grad") is True else None,
                              _values(value.get("values"), shape))
            return Unknown("tensor")
        if len(value) == 1:  # the one-key encodings; anything else (optimizer params) stays a dict
            if "dtype" in value:
                return value["dtype"]
            if "float" in value:
                return float(value["float"])
            if "more" in value or "type" in value:
                return Unknown(value.get("type", "more"))
            if "complex" in value:
                return complex(*(float(v) if isinstance(v, dict) else v for v in value["complex"]))
        return value
    if isinstance(value, list):
        out = [decode(v) for v in value]
        return out[:-1] + _runs(out[-1]) if out and isinstance(out[-1], dict) and "more" in out[-1] else out
    return value


def _values(values: Any, shape: list) -> tuple | None:
    """A tensor entry's `values` as a tuple of ints, None where there are none or they are not one
    int per element of its shape."""
    if not isinstance(values, list) or len(values) != prod(shape) or not all(type(v) is int for v in values):
        return None
    return tuple(values)


def _runs(rest: dict) -> list:
    """The elements a long list's last entry stands for: its tensors where it carries them run by
    run (`{"more": N, "runs": [[count, tensor], ...]}`, counts adding up to N, N no more than
    annotation reads: formats.MAX_RUN_ELEMENTS), or each one's elements and their one dtype
    (`{"more": N, "numels": [...], "dtype": name}`: 1-D tensors of those sizes); else one Unknown."""
    more, runs = rest.get("more"), rest.get("runs")
    numels, dtype = rest.get("numels"), rest.get("dtype")
    if type(more) is int and more <= MAX_RUN_ELEMENTS and isinstance(numels, list) and len(numels) == more \
            and isinstance(dtype, str) and all(type(n) is int and n >= 0 for n in numels):
        return [Tensor((n,), dtype) for n in numels]
    if type(more) is not int or more > MAX_RUN_ELEMENTS or not isinstance(runs, list) or not all(
            isinstance(r, list) and len(r) == 2 and type(r[0]) is int and r[0] > 0 for r in runs):
        return [Unknown("more")]
    tensors = [(r[0], decode(r[1])) for r in runs]
    if sum(n for n, _ in tensors) != more or not all(isinstance(t, Tensor) for _, t in tensors):
        return [Unknown("more")]
    return [t for n, t in tensors for _ in range(n)]


def with_grads(args: list, kwargs: dict) -> tuple[list, dict]:
    """A marker's decoded arguments with every tensor's `grad` settled: where one tensor says it
    required grad, the marker was written by a pyprof that says so of each, and the others did
    not (False); where none says so, it is not known (None, priced as requiring grad): an old
    marker, or an op with no backward, whose kernels are never priced as one."""
    found: list = []
    _tensors([args, list(kwargs.values())], found)
    if not any(t.grad for t in found):
        return args, kwargs
    return _settled(args), {k: _settled(v) for k, v in kwargs.items()}


def _tensors(value: Any, out: list) -> None:
    if isinstance(value, Tensor):
        out.append(value)
    elif isinstance(value, list):
        for v in value:
            _tensors(v, out)


def _settled(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value if value.grad else value._replace(grad=False)
    if isinstance(value, list):
        return [_settled(v) for v in value]
    return value


def is_truncated(values: Sequence[Any]) -> bool:
    """True when a decoded list lost elements (the encoder keeps 16 and a `{"more": N}` that does not
    carry the rest's tensors)."""
    return any(isinstance(v, Unknown) for v in values)


def broadcast(*shapes: Sequence[int]) -> tuple:
    """NumPy/PyTorch broadcast of shapes; raises ValueError when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i:
                d = s[i]
                if d != 1:
                    if size not in (1, d):
                        raise ValueError(f"shapes {shapes} do not broadcast")
                    size = d
        out.append(size)
    return tuple(out)


def is_shape(s: object) -> bool:
    """Whether `s` is a tensor's sizes as a marker or a PyTorch range writes them: a non-empty
    list (or tuple) of ints."""
    return isinstance(s, (list, tuple)) and bool(s) and all(type(d) is int for d in s)


def is_floating(dtype: str | None) -> bool:
    """True for the dtypes autograd differentiates: floating point and complex."""
    return dtype in _FLOAT_RANK or (dtype is not None and dtype.startswith("complex"))


def acc_size(dtype: str | None) -> int:
    """The bytes of the type PyTorch and cuDNN accumulate `dtype`'s elements in (at::acc_type on
    the GPU): fp64 for float64, fp32 for everything else."""
    return 8 if dtype == "float64" else 4


def reduce_adds(n_from: int, n_to: int) -> int:
    """Adds that sum `n_from` elements down to `n_to` (a broadcast operand's gradient summed back
    over the broadcast dims): one per element that is not the first of its sum."""
    return max(n_from - n_to, 0) if n_to else 0


def ntuple(v: Any, n: int) -> tuple:
    """An int-or-sequence argument (stride=2, padding=(1, 2), kernel_size=[3]) as an n-tuple."""
    if isinstance(v, (list, tuple)):
        return tuple(v) * n if len(v) == 1 else tuple(v)
    return (v,) * n


def promote(dtypes: Iterable[str | None]) -> str | None:
    """Result dtype of PyTorch type promotion among tensor dtypes (None if any is unknown)."""
    result = None
    for dt in dtypes:
        if dt is None or dt not in ITEMSIZE:
            return None
        if result is None or result == dt:
            result = dt
            continue
        result = _promote2(result, dt)
    return result


def _kind(dt: str) -> int:
    if dt == "bool":
        return 0
    if dt.startswith("complex"):
        return 3
    if dt in _FLOAT_RANK:
        return 2
    return 1


def _promote2(a: str, b: str) -> str | None:
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        hi, lo = (a, b) if ka > kb else (b, a)
        if max(ka, kb) == 3 and lo in _FLOAT_RANK:
            c = _COMPLEX_FOR.get(lo)
            return c if c and ITEMSIZE[c] > ITEMSIZE[hi] else hi
        return hi
    if ka == 2:
        ra, rb = _FLOAT_RANK[a], _FLOAT_RANK[b]
        if ra == rb:  # bf16 with fp16, or two fp8 formats: PyTorch goes one rank up
            return {1: "float32", 0: "bfloat16"}.get(ra, a)
        return a if ra > rb else b
    if {a, b} == {"uint8", "int8"}:  # PyTorch widens rather than pick either
        return "int16"
    return a if ITEMSIZE[a] >= ITEMSIZE[b] else b


def mac_flops(dtype: str | None) -> int:
    """FLOPs of one multiply-add of a matrix product in `dtype`: 2, or 8 for a complex dtype
    (four real products and four sums: the count cuBLAS's CGEMM and ZGEMM are quoted in)."""
    return 8 if dtype is not None and dtype.startswith("complex") else 2


def complex_of(dtype: str | None) -> str | None:
    """The complex dtype whose parts are `dtype` (float32 -> complex64; a complex dtype itself);
    None for other dtypes. bfloat16 has none of its own: PyTorch's FFTs refuse it."""
    if dtype is not None and dtype.startswith("complex"):
        return dtype
    return None if dtype == "bfloat16" else _COMPLEX_FOR.get(dtype)  # type: ignore[arg-type]


def real_of(dtype: str | None) -> str | None:
    """The real dtype of a complex dtype's parts (complex64 -> float32); None for other dtypes."""
    return {"complex32": "float16", "complex64": "float32", "complex128": "float64"}.get(dtype)  # type: ignore[arg-type]


def short(dtype: str | None) -> str:
    """The dtype as `params` prints it: fp16, bf16, fp32, int64, ..."""
    if dtype is None:
        return "na"
    return SHORT.get(dtype, dtype)


def as_2d(out: tuple | None, x: tuple | None) -> tuple | None:
    """An output shape `out` of a 1-D convolution or pooling as the 2-D op PyTorch runs it as
    sees it: its input `x` is the 1-D one viewed with a 1 at dim 2 (aten::_convolution,
    max_pool1d's max_pool2d_with_indices), its output one dim short of it; else `out` as is."""
    if out and x and len(out) == len(x) - 1 >= 2 and x[2] == 1:
        return (*out[:2], 1, *out[2:])
    return out


def reduces_to(x: tuple, out: tuple) -> bool:
    """Whether a reduction of a tensor of shape `x` can give one of shape `out`: dims dropped
    (out is x without some), or kept as 1 (`keepdim`, sum_to_size: out right-aligned with x,
    each dim x's or 1), to fewer elements: not x itself, nor x with its 1s dropped (a 1-D
    convolution's dY [8, 256, 1, 200] reduces to its bias [256], not to its input [8, 256, 200])."""
    if len(out) > len(x) or prod(out) >= prod(x):
        return False
    it = iter(x)
    if all(any(d == e for e in it) for d in out):
        return True
    return all(o in (1, i) for o, i in zip(reversed(out), reversed(x)))
