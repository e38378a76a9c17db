"""What an NVTX range's text means: a pyprof marker, a PyTorch op range, a user layer, or other text.

Nothing from the trace is executed: our markers are decoded with json.loads; PyTorch's op ranges
are split with string methods and each field checked with a precompiled regular expression
before it is written out as JSON.
"""
from __future__ import annotations

import functools
import json
import re
from typing import NamedTuple

from pyprof.formats import DOMAIN, LAYER_PREFIX

# Range kinds, small ints because the per-kernel loop compares them for every enclosing range.
OTHER = 0       # any other text: reported in `ranges`
TORCH = 1       # a PyTorch emit_nvtx op range
OP = 2          # a pyprof `op` marker
MODULE = 3      # a pyprof `module` marker
LAYER = 4       # `layer:NAME` in any domain, or a pyprof `layer` marker
BWD = 5         # a pyprof `bwd` marker: an autograd node run, carrying its forward op's marker
MALFORMED = 6   # pyprof-domain text that is not JSON: skipped and counted
UNKNOWN = 7     # pyprof-domain JSON that is no marker we know: kept in `ranges`, counted
EMPTY = 8       # no text at all: nothing to report

# name[, seq = N][, op_id = N][, sizes = [[..]]][, input_op_ids = [(a,b), ..]], always in this
# order (PyTorch's getNvtxStr). PyTorch 1.x wrote only "name, seq = N" (backward nodes:
# "stashed seq"). The name never contains a comma. Parsed field by field with str methods, much
# faster than one regular expression over the whole text; each value is then checked alone.

# A bare name counts as a PyTorch op only when it looks like one: namespaced (`aten::empty`),
# an autograd node (`MulBackward0`, `CopyBackwards`; `CopySlices` or, in PyTorch's node ranges,
# `torch::autograd::CopySlices`, the node an in-place op on a view gives its base; a C++ autograd
# Function's, `torch::autograd::CppNode<vision::ops::(anonymous namespace)::ROIAlignFunction>`:
# a custom op's backward) or the engine's wrapper range. Plain user text such as "forward" stays
# user text.
_NAMESPACED = re.compile(r"[A-Za-z_][\w.]*::[\w.:]+\Z")
_AUTOGRAD = re.compile(r"(?:autograd::engine::evaluate_function: .*|.*Backwards?\d*|(?:torch::autograd::)?CopySlices|"
                       r"(?:struct )?torch::autograd::AccumulateGrad|torch::autograd::CppNode<.*>)\Z", re.S)
_NAME_SEQ = re.compile(r"([^,]+), (?:stashed )?seq = (-?\d+)")
_INT = r"(?:0|-?[1-9]\d*)"
# `sizes = [[64, 512], [], [512]]`: a list of lists of integers, as PyTorch's shapesToStr writes it.
_SHAPE = rf"\[(?:{_INT}(?:, {_INT})*)?\]"
_SIZES = re.compile(rf"\[(?:{_SHAPE}(?:, {_SHAPE})*)?\]\Z")
# `input_op_ids = [(12,0), (0,-1)]`, after turning parentheses into brackets and dropping spaces.
_PAIR = rf"\[{_INT},{_INT}\]"
_OP_IDS = re.compile(rf"\[(?:{_PAIR}(?:,{_PAIR})*)?\]\Z")
_ID_BRACKETS = str.maketrans("()", "[]", " ")
# Strict JSON (no NaN: a record must stay valid JSON for every reader), encoded once per label.
encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
encode_str = json.encoder.encode_basestring_ascii


def _no_constants(name: str) -> None:
    # json.loads accepts NaN/Infinity, which no marker contains and json.dumps(allow_nan=False)
    # could not write back out.
    raise ValueError(name)


def _finite(text: str) -> float:
    # Nor a number past float's range (1e400), which json.loads reads as infinity.
    value = float(text)
    if value in (_INF, -_INF):
        raise ValueError(text)
    return value


_INF = float("inf")


# Pyprof op markers that run autograd: kernels they enclose are backward kernels.
_BACKWARD_CALLS = frozenset({("Tensor", "backward"), ("torch.autograd", "backward"), ("torch.autograd", "grad")})


class Label(NamedTuple):
    """A classified range. Its JSON fragments are encoded once here, because a range that
    encloses many kernels (a layer, a module) is written into every one of their records.

    kind: one of the module constants. js: the range's JSON value in a record (a torchOps
    entry, the decoded and re-encoded marker, or the JSON string of `name`; for a bwd marker,
    its forward op's marker). name: layer name, op name, module name, autograd node name, or the
    text reported in `ranges`. seq: PyTorch sequence number. bwd: an autograd range, or a marker
    of a backward call. attrs: for op markers, the JSON of their mod, op, site and module (None
    when the marker has no module); for bwd markers, those of the forward op's marker. op_id: a
    PyTorch range's `op_id`, which its consumers' `input_op_ids` name.
    """

    kind: int
    js: str
    name: str | None
    seq: int | None
    bwd: bool
    attrs: tuple[str, str, str, str | None] | None = None
    op_id: int | None = None


def is_accumulation(label: Label) -> bool:
    """Whether a range is PyTorch's AccumulateGrad node range (a leaf's gradient stored), which
    carries no seq."""
    return label.bwd and label.seq is None and bool(label.name) and label.name.endswith("AccumulateGrad")


_EMPTY = Label(EMPTY, "null", None, None, False)
_MALFORMED = Label(MALFORMED, "null", None, None, False)


@functools.lru_cache(maxsize=4096)
def _sizes_json(sizes: str) -> str | None:
    # Shapes repeat every iteration, unlike the rest of the text: cached.
    return sizes.replace(" ", "") if _SIZES.match(sizes) else None


def _field(rest: str, key: str, stop: str | None = ", ") -> tuple[str | None, str]:
    # (value, what follows) when `rest` starts with `key`, else (None, rest). The value runs to
    # `stop`, or to the end when `stop` is None or absent.
    if not rest.startswith(key):
        return None, rest
    end = rest.find(stop, len(key)) if stop is not None else -1
    return (rest[len(key):], "") if end < 0 else (rest[len(key):end], rest[end:])


def torch_op(text: str) -> Label | None:
    """Parse a PyTorch emit_nvtx range text; None when the text is not one."""
    cut = text.find(", ")
    if cut < 0:
        name, rest = text, ""
    else:
        name, rest = text[:cut], text[cut:]
    seq_text, rest = _field(rest, ", seq = ")
    if seq_text is None:
        seq_text, rest = _field(rest, ", stashed seq = ")
    op_text, rest = _field(rest, ", op_id = ")
    sizes, rest = _field(rest, ", sizes = ", ", input_op_ids = ")
    ids, rest = _field(rest, ", input_op_ids = ", None)
    if rest or not name:
        return None  # text after the known fields, or none before: not PyTorch's
    is_autograd = _AUTOGRAD.match(name) is not None
    if cut < 0 and not is_autograd and _NAMESPACED.match(name) is None:
        return None
    js = '{"name":' + encode_str(name)
    try:
        seq = None if seq_text is None else int(seq_text)
        if seq is not None:
            js += f',"seq":{seq}'
        op_id = None if op_text is None else int(op_text)
        if op_id is not None:
            js += f',"opId":{op_id}'
    except ValueError:
        return None
    if sizes is not None:
        sizes = _sizes_json(sizes)
        if sizes is None:
            return None
        js += ',"sizes":' + sizes
    if ids is not None:
        ids = ids.translate(_ID_BRACKETS)
        if _OP_IDS.match(ids) is None:
            return None
        js += ',"inputOpIds":' + ids
    return Label(TORCH, js + "}", name, seq, is_autograd, None, op_id)


def _op_label(marker: dict) -> Label:
    module, mod = marker.get("module"), marker.get("mod")
    attrs = (encode(mod), encode_str(marker["op"]), encode(marker.get("site")), None if module is None else encode(module))
    backward = isinstance(mod, str) and (mod, marker["op"]) in _BACKWARD_CALLS  # a list or {} hashes not
    return Label(OP, encode(marker), marker["op"], None, backward, attrs)


def _is_op(marker: object) -> bool:
    return isinstance(marker, dict) and marker.get("kind") == "op" and isinstance(marker.get("op"), str)


def _marker(text: str) -> Label:
    try:
        marker = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except (ValueError, RecursionError):  # RecursionError: a crafted '[[[[...' thousands deep
        return _MALFORMED
    kind = marker.get("kind") if isinstance(marker, dict) else None
    if kind == "op" and _is_op(marker):
        return _op_label(marker)
    if kind == "bwd" and isinstance(marker.get("node"), str) and _is_op(marker.get("fwd")):
        # js: the record's whole `fwd` object, written into every kernel of the node.
        fwd = _op_label(marker["fwd"])
        js = f'{{"seq":null,"marker":{fwd.js},"torchOp":null,"node":{encode_str(marker["node"])}}}'
        return Label(BWD, js, marker["node"], None, True, fwd.attrs)
    if kind == "module" and isinstance(marker.get("module"), str):
        return Label(MODULE, encode_str(marker["module"]), marker["module"], None, False)
    if kind == "layer" and isinstance(marker.get("name"), str):
        return Label(LAYER, encode_str(marker["name"]), marker["name"], None, False)
    return _text_label(UNKNOWN, f"{DOMAIN}:{text}")


def _text_label(kind: int, name: str) -> Label:
    return Label(kind, encode_str(name), name, None, False)


@functools.lru_cache(maxsize=16384)
def classify(domain: str | None, text: str | None) -> Label:
    """Classify one range by its domain name (None: the default domain) and text.

    Cached because layer, module and marker texts repeat every iteration; the cache is bounded,
    so texts that never repeat (PyTorch's op_id makes each op range unique) only cost a slot.
    Labels are immutable and shared.
    """
    if text is None:
        return _EMPTY
    if domain == DOMAIN:
        return _marker(text)
    if text.startswith(LAYER_PREFIX):
        return _text_label(LAYER, text[len(LAYER_PREFIX):])
    if domain is None:
        label = torch_op(text)
        if label is not None:
            return label
        return _text_label(OTHER, text)
    return _text_label(OTHER, f"{domain}:{text}")


def forward_op(text: str) -> tuple[str, int] | None:
    """(name, seq) of a PyTorch range text that carries a sequence number, without a full parse."""
    m = _NAME_SEQ.match(text)
    return (m[1], int(m[2])) if m is not None else None
