"""The marker encoder (docs/markers.md): values to compact JSON text, built as strings.

Building the text directly is about 4x faster than assembling dicts for json.dumps, and the hot
path runs once per wrapped torch call. The output is byte-for-byte what
`json.dumps(..., separators=(",", ":"), allow_nan=False)` would write for the equivalent dict
(tests check that). Nothing here reads tensor data: tensors are described by metadata only, so no
device synchronization or copy can happen.
"""
from __future__ import annotations

import json
import weakref
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Mapping, Optional, Sequence

import torch

from ..formats import MARKER_VERSION, MAX_RUN_ELEMENTS, op_marker_head
from .emit import layer_marker

MAX_LIST = 16   # list elements kept before {"more": N}
MAX_DEPTH = 3   # list nesting levels written; a deeper list is {"type":"list"}
_CACHE_LIMIT = 8192
# Bytes the caches of marker texts hold together (these here and the wrappers', pyprof.nvtx.memo),
# as SizedCache counts them: arguments that are large and new at every call (a fresh 100,000-int
# tuple) must not make memory grow with the entries' number.
CACHE_BYTES = 64 << 20


class Budget:
    """The bytes several SizedCaches may hold together: passing `limit` empties them all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.caches: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> cache (dicts are unhashable)

    def cache(self, entries: int) -> "SizedCache":
        """A new cache of at most `entries` entries under this budget."""
        c = SizedCache(self, entries)
        self.caches[id(c)] = c
        return c

    def clear(self) -> None:
        """Empty every cache of this budget."""
        for c in list(self.caches.values()):
            c.clear()
        self.held = 0


class SizedCache(dict):
    """A dict of cached texts bounded by entries and, with the other caches of its Budget, by
    bytes; an entry of more than a 64th of the budget is not kept (built again at each call). A
    dict, so that the C hit path (pyprof.nvtx._hot) reads it as one."""

    __slots__ = ("budget", "entries", "held", "__weakref__")

    def __init__(self, budget: Budget, entries: int) -> None:
        super().__init__()
        self.budget = budget
        self.entries = entries
        self.held = 0

    def put(self, key: Any, value: Any, size: int) -> None:
        """Store `value` under `key`, `size` bytes as the caller counts them (key and value)."""
        budget = self.budget
        if size > budget.limit >> 6:
            return
        if len(self) >= self.entries:
            self.clear()
        if budget.held + size > budget.limit:
            budget.clear()
        self[key] = value
        self.held += size
        budget.held += size

    def clear(self) -> None:
        """Empty it, and give its bytes back to the budget."""
        self.budget.held -= self.held
        self.held = 0
        super().clear()


budget = Budget(CACHE_BYTES)

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_strided = torch.strided
_channels_last = torch.channels_last
_channels_last_3d = torch.channels_last_3d
_DisableTorchFunctionSubclass = torch._C.DisableTorchFunctionSubclass

_tensor_text = budget.cache(_CACHE_LIMIT)  # (shape, dtype[, strides]) -> text; shapes repeat in training loops
_dtype_text: dict = {}   # dtype -> '"float32"'
_misc_text: dict = {}    # dtype/device/memory_format value -> text
_key_text = budget.cache(_CACHE_LIMIT)     # kwarg name -> '"name":'
# id(tuple) -> (tuple, text) for short tuples (at most MAX_LIST) of immutable scalars:
# stride/padding tuples stored on modules and tuple constants in code come back as the same object
# call after call. A longer one is written from its first MAX_LIST items alone, cheaply, and
# holding it would hold all its items.
tuple_texts = budget.cache(_CACHE_LIMIT)
_SCALARS = frozenset({int, float, bool, str, type(None)})


def dtype_name(dtype: torch.dtype) -> str:
    """PyTorch's dtype name without the `torch.` prefix (`bfloat16`)."""
    return str(dtype)[6:]


def _dtype_json(dtype: torch.dtype) -> str:
    s = _dtype_text.get(dtype)
    if s is None:
        s = _dtype_text[dtype] = _quote(dtype_name(dtype))
    return s


def _ints(values: Sequence[int]) -> str:
    return "[" + ",".join([int.__repr__(v) for v in values]) + "]"


# A tensor that requires grad says so: prof prices only the gradients the backward computes.
_GRAD = ',"grad":true}'


def _tensor(t: torch.Tensor) -> str:
    try:
        shape = t.shape
        dtype = t.dtype
        grad = t.requires_grad
        if t.is_contiguous():
            key = (shape, dtype, grad)
            s = _tensor_text.get(key)
            if s is None:
                s = '{"shape":' + _ints(shape) + ',"dtype":' + _dtype_json(dtype) + (_GRAD if grad else "}")
                _tensor_text.put(key, s, _tensor_bytes(s, shape))
            return s
        if t.layout is not _strided:
            return _tensor_plain(t)
        strides = t.stride()
        key = (shape, dtype, strides, grad)
        s = _tensor_text.get(key)
        if s is None:
            s = '{"shape":' + _ints(shape) + ',"dtype":' + _dtype_json(dtype)
            if len(shape) == 4 and t.is_contiguous(memory_format=_channels_last):
                s += ',"format":"channels_last"'
            elif len(shape) == 5 and t.is_contiguous(memory_format=_channels_last_3d):
                s += ',"format":"channels_last_3d"'
            else:
                s += ',"strides":' + _ints(strides)
            s += _GRAD if grad else "}"
            _tensor_text.put(key, s, _tensor_bytes(s, shape))
        return s
    except Exception:
        # Sparse and nested tensors have no strides, vmap's batched tensors refuse some layout
        # queries, symbolic shapes are not ints: say what can be said.
        return _tensor_plain(t)


class HostValues:
    """A small host integer tensor whose values, not only its shape, fix an op's work (a packed
    sequence's batch sizes: how many rows each time step's kernels run; the lengths it is packed
    by). Its marker entry is the tensor's, with `"values"` added; the wrappers of ops in
    HOST_VALUE_ARGS hand it to encode()."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


# Most elements a HostValues entry carries: a sequence length, far below what would bloat a marker.
HOST_VALUES_LIMIT = 4096
# torch namespace op -> position of its argument that is read as HostValues: packed RNNs' and
# _pad_packed_sequence's batch_sizes, _pack_padded_sequence's lengths (sorted: its batch sizes).
HOST_VALUE_ARGS = {"lstm": 1, "gru": 1, "rnn_tanh": 1, "rnn_relu": 1,
                   "_pack_padded_sequence": 1, "_pad_packed_sequence": 1}


def host_values(v: Any) -> bool:
    """Whether `v` is a tensor a marker can carry the values of: a 1-D host integer tensor of at
    most HOST_VALUES_LIMIT elements (reading it needs no device synchronisation)."""
    return (type(v) is _Tensor and v.dim() == 1 and v.device.type == "cpu" and v.dtype in _HOST_INT
            and v.numel() <= HOST_VALUES_LIMIT)


_HOST_INT = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})


def _host_values(v: HostValues) -> str:
    return _tensor(v.tensor)[:-1] + ',"values":' + _ints(v.tensor.tolist()) + "}"


def _tensor_bytes(text: str, shape: Sequence[int]) -> int:
    # A generous count of an entry's bytes: the text, and per dimension a size and a stride in
    # the key (each an int object and a slot of its tuple).
    return len(text) + 144 * len(shape) + 400


def _tensor_plain(t: torch.Tensor) -> str:
    try:
        return '{"shape":' + _ints(t.shape) + ',"dtype":' + _dtype_json(t.dtype) + (_GRAD if t.requires_grad else "}")
    except Exception:
        return '{"type":' + _quote(type(t).__name__) + "}"


def _tensor_subclass(t: torch.Tensor) -> str:
    # Reading metadata of a subclass would run its __torch_function__: user code with side
    # effects (and possibly more wrapped calls).
    with _DisableTorchFunctionSubclass():
        return _tensor(t)


def _float(v: float) -> str:
    if v - v == 0.0:
        return float.__repr__(v)
    if v != v:
        return '{"float":"nan"}'
    return '{"float":"inf"}' if v > 0 else '{"float":"-inf"}'


def _seq(v: Sequence[Any], level: int) -> str:
    if level >= MAX_DEPTH:
        return '{"type":"list"}'
    if type(v) is tuple:
        hit = tuple_texts.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
    n = len(v)
    if n <= MAX_LIST:
        s = "[" + ",".join([encode(e, level + 1) for e in v]) + "]"
    else:
        s = "[" + ",".join([encode(e, level + 1) for e in v[:MAX_LIST]]) + "," + _rest(v[MAX_LIST:]) + "]"
    if type(v) is tuple and n <= MAX_LIST and all(type(e) in _SCALARS for e in v):
        # Holding the tuple keeps its id from being reused while the entry lives; its items
        # (scalars) are in the text, hence twice its length.
        tuple_texts.put(id(v), (v, s), 2 * len(s) + 48 * n + 250)
    return s


def _rest(tail: Sequence[Any]) -> str:
    """The entry that stands for a long list's elements past MAX_LIST: `{"more": N}`; where they are
    all plain tensors, at most MAX_RUN_ELEMENTS of them, their entries too, in order, each run of equal
    ones once with its count, at most MAX_LIST runs (`{"more": N, "runs": [[count, entry], ...]}`):
    a cat of many tensors of few shapes (a DenseNet block's) keeps every size, and the text and
    the time stay bounded. Of more runs, where the tensors share one dtype, each one's elements
    (`{"more": N, "numels": [...], "dtype": name}`): a foreach op over a model's gradients."""
    count = '{"more":' + str(len(tail))
    if len(tail) > MAX_RUN_ELEMENTS:
        return count + "}"
    runs: list = []
    for e in tail:
        if type(e) is not _Tensor:
            return count + "}"
        text = _tensor(e)
        if runs and runs[-1][1] == text:
            runs[-1][0] += 1
        elif len(runs) < MAX_LIST:
            runs.append([1, text])
        else:
            return _numels(tail, count)
    return count + ',"runs":[' + ",".join("[" + str(n) + "," + text + "]" for n, text in runs) + "]}"


def _numels(tail: Sequence[Any], count: str) -> str:
    """_rest's `numels` form of a tail of tensors of one dtype; the count alone otherwise."""
    dtype = tail[0].dtype
    if any(type(e) is not _Tensor or e.dtype != dtype for e in tail):
        return count + "}"
    return count + ',"numels":[' + ",".join([str(e.numel()) for e in tail]) + '],"dtype":' + _dtype_json(dtype) + "}"


def _slice(v: slice, level: int) -> str:
    return '{"slice":[' + encode(v.start, level) + "," + encode(v.stop, level) + "," + encode(v.step, level) + "]}"


def _complex(v: complex) -> str:
    return '{"complex":[' + _float(v.real) + "," + _float(v.imag) + "]}"


def _misc(v: Any, key: str, text: str) -> str:
    s = _misc_text.get(v)
    if s is None:
        s = _misc_text[v] = '{"' + key + '":' + _quote(text) + "}"
    return s


def _dtype_obj(v: torch.dtype) -> str:
    return _misc(v, "dtype", dtype_name(v))


def _device(v: torch.device) -> str:
    return _misc(v, "device", str(v))


def _memory_format(v: torch.memory_format) -> str:
    return _misc(v, "format", str(v)[6:])


# One-argument encoders of leaf types, by exact type; C-level callables where possible, since
# every argument of every call goes through here.
_LEAF = {
    int: int.__repr__,
    float: _float,
    bool: {True: "true", False: "false"}.__getitem__,
    type(None): {None: "null"}.__getitem__,
    str: _quote,
    _Parameter: _tensor,
    HostValues: _host_values,
    torch.dtype: _dtype_obj,
    torch.device: _device,
    torch.memory_format: _memory_format,
    complex: _complex,
    type(Ellipsis): {Ellipsis: '{"ellipsis":true}'}.__getitem__,
}
_SEQ = (tuple, list, torch.Size)


def encode(v: Any, level: int = 0) -> str:
    """One value as JSON text, by the value table of docs/markers.md. `level` is the number of
    lists around it."""
    t = type(v)
    if t is _Tensor:
        return _tensor(v)
    f = _LEAF.get(t)
    if f is not None:
        return f(v)
    if t in _SEQ:
        return _seq(v, level)
    if t is slice:
        return _slice(v, level)
    # Subclasses of the types above (IntEnum, numpy's float64, tensor subclasses, named tuples).
    if isinstance(v, _Tensor):
        return _tensor_subclass(v)
    if isinstance(v, int):
        return "true" if v is True else "false" if v is False else int.__repr__(v)
    # A subclass's own methods are user code (a lazy sequence's __iter__ would be consumed, an
    # overridden __sub__ could raise or log): its value is read through the base type's slots.
    if isinstance(v, float):
        return _float(float.__float__(v))
    if isinstance(v, complex):
        return _complex(v)
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, list):
        return _seq(list.__getitem__(v, slice(None)), level)
    if isinstance(v, tuple):
        return _seq(tuple.__getitem__(v, slice(None)), level)
    return '{"type":' + _quote(type(v).__name__) + "}"


def _key(k: str) -> str:
    s = _key_text.get(k)
    if s is None:
        s = _quote(k) + ":"
        _key_text.put(k, s, 3 * len(s) + 100)
    return s


def out_marker(out: Any) -> str:
    """The `out` mark of an op whose output size depends on its input's values: the output as the
    value table encodes it (a tensor, a tuple of them). Never raises."""
    try:
        value = encode(out)
    except Exception:  # a marker must not break the call it describes
        value = "null"
    return f'{{"v":{MARKER_VERSION},"kind":"out","out":{value}}}'


def op_prefix(mod: str, op: str) -> str:
    """The constant head of an op marker, computed once per wrapper."""
    return op_marker_head(mod) + _quote(op) + ',"args":['


def build(prefix: str, args: Sequence[Any], kwargs: Optional[Mapping[str, Any]], tail: str, extra: str = "") -> str:
    """An op marker from its prefix, the call's arguments and `tail` (the already encoded
    `,"site":...`, `,"module":...` and `,"autocast":...` members, each optional). `extra`: already
    encoded members appended to `kwargs` (the optimizer summary).

    Never raises: a marker must not break the call it describes.
    """
    try:
        # Explicit loops: cheaper than comprehensions here (no function object per call).
        parts = []
        for a in args:
            t = type(a)
            parts.append(_tensor(a) if t is _Tensor or t is _Parameter else encode(a))
        s = prefix + ",".join(parts) + "]"
        if kwargs or extra:
            parts = []
            if kwargs:
                for k, v in kwargs.items():
                    parts.append((_key_text.get(k) or _key(k)) + (_tensor(v) if type(v) is _Tensor else encode(v)))
            if extra:
                parts.append(extra)
            s += ',"kwargs":{' + ",".join(parts) + "}"
        return s + tail + "}"
    except Exception:
        return prefix + '{"type":"unencodable"}]' + tail + "}"


def tail(site: Optional[str], module: Optional[str]) -> str:
    """The `site` and `module` members of an op marker, as JSON text (leading comma included)."""
    s = ',"site":' + _quote(site) if site is not None else ""
    return s + (',"module":' + _quote(module) if module is not None else "")


def op_marker(
    mod: str,
    op: str,
    args: Sequence[Any] = (),
    kwargs: Optional[Mapping[str, Any]] = None,
    site: Optional[str] = None,
    module: Optional[str] = None,
) -> str:
    """The exact marker text pyprof pushes for the call `mod.op(*args, **kwargs)`.

    For tests and tools that need the marker of given tensors without duplicating the encoding.
    `site` (`file:line`) and `module` (qualified module name) are left out when None.
    """
    return build(op_prefix(mod, op), args, kwargs, tail(site, module))


def module_marker(name: str, cls: str, extra_repr: str, dist: str = "") -> str:
    """The marker of an `nn.Module` call (`kind: "module"`); `dist`: `,"dist":{...}` of a module
    that owns a process group (distributed.module_dist), else ""."""
    text = json.dumps(
        {"v": MARKER_VERSION, "kind": "module", "module": name, "cls": cls, "repr": extra_repr},
        separators=(",", ":"),
    )
    return text[:-1] + dist + "}" if dist else text


_is_autocast = torch.is_autocast_enabled
# One C call that is False outside every autocast region: the per-device questions cost 3x more.
any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
_autocast_dtype = torch.get_autocast_dtype
_autocast_text: dict = {}  # dtype -> ',"autocast":"bfloat16"'


def autocast_json() -> str:
    """`,"autocast":"<dtype>"` while an autocast region is on (CUDA's, else the CPU's), else "".

    The arguments of a call under autocast are the Python-level fp32 tensors; the matrix kernels
    run in this dtype, and prof needs to know that to count their bytes and pick their peak.
    """
    return autocast_region() if any_autocast() else ""


def autocast_region() -> str:
    """autocast_json() once any_autocast() said True (the hot path asks that first, in one C call)."""
    if _is_autocast("cuda"):
        dtype = _autocast_dtype("cuda")
    elif _is_autocast("cpu"):
        dtype = _autocast_dtype("cpu")
    else:
        return ""
    s = _autocast_text.get(dtype)
    if s is None:
        s = _autocast_text[dtype] = ',"autocast":' + _dtype_json(dtype)
    return s


# Hyperparameters that change how much work a step does (prof's optimizer formulas read them).
OPTIMIZER_KNOBS = ("momentum", "dampening", "nesterov", "weight_decay", "amsgrad", "maximize")


def optimizer_knobs(optimizer: torch.optim.Optimizer) -> str:
    """`"momentum":0.9,...` for the work-changing hyperparameters the optimizer has: one value
    when all parameter groups agree, else the list of the groups' values."""
    parts = []
    for knob in OPTIMIZER_KNOBS:
        if knob in optimizer.defaults:
            values = [group.get(knob) for group in optimizer.param_groups]
            # Only plain scalars are compared: == on a tensor hyperparameter would read its data.
            first = values[0]
            same = all(v is first for v in values) or (
                type(first) in _SCALARS and all(type(v) in _SCALARS and v == first for v in values))
            parts.append('"' + knob + '":' + encode(values[0] if same else values))
    return ",".join(parts)


def optimizer_params(optimizer: torch.optim.Optimizer) -> str:
    """`{"count":..,"numel":..,"dtype":..}` over the parameters the step updates (those with a
    gradient) in all parameter groups; `dtype` is a list of names when they differ. With one such
    group and one dtype, also `"numels"`: each tensor's elements in the group's order, the lists
    a foreach step packs into its launches (prof replays the packing)."""
    count = numel = 0
    dtypes: list = []
    numels: list = []
    groups = 0
    for group in optimizer.param_groups:
        had = count
        for p in group["params"]:
            if p.grad is None:
                continue
            count += 1
            n = p.numel()
            numel += n
            numels.append(n)
            if p.dtype not in dtypes:
                dtypes.append(p.dtype)
        groups += count > had
    if len(dtypes) == 1:
        dt = _dtype_json(dtypes[0])
    else:
        dt = "[" + ",".join([_dtype_json(d) for d in dtypes]) + "]"
    sizes = ',"numels":[' + ",".join(map(str, numels)) + "]" if groups == 1 and len(dtypes) == 1 else ""
    return '{"count":' + str(count) + ',"numel":' + str(numel) + ',"dtype":' + dt + sizes + "}"


__all__ = ["op_marker", "module_marker", "layer_marker", "encode", "dtype_name", "optimizer_params",
           "optimizer_knobs", "autocast_json"]
