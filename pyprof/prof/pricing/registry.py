"""The op table: one short formula per op family, registered for the (mod, op) names it covers.

A formula takes the decoded call (`Call`: the marker's args and kwargs) and returns a `Cost`: the
op's algorithmic FLOPs (FMA = 2) and bytes (each input read once, each output written once), the
`params` text and, where known, the same for the backward node the op creates. `analysis.py`
decides which kernel of the op carries that work.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from .values import Tensor, decode, short, with_grads

# Op kinds. GEMM, CONV and ATTN ops run matrix-multiply kernels that could use Tensor Cores;
# their work goes to those kernels (analysis.py). SIMT ops never can. RNN ops (cuDNN's LSTM, GRU,
# RNN) mix GEMMs and cell kernels the trace cannot tell apart: their work goes to the call's
# first kernel, as for SIMT ops, but it is matrix work.
GEMM, CONV, ATTN, SIMT, RNN = "gemm", "conv", "attn", "simt", "rnn"
MMA_KINDS = frozenset((GEMM, CONV, ATTN))
MATRIX_KINDS = frozenset((GEMM, CONV, ATTN, RNN))


@dataclass(frozen=True)
class Cost:
    """Work of one op call. None means "cannot be known" and prints `na`.

    `main_op`: only kernels under that PyTorch range carry the work (when the record has
    PyTorch ranges), instead of the call's first kernel. `elems` (MMA kinds only): the matrix operands' elements read plus written, so that bytes can
    be recomputed in the dtype the kernel really ran in (autocast); `bias_elems`: the added input
    (bias, addmm's `input`), read by the forward only. `bwd_flops`/`bwd_bytes`: the whole backward
    node, for ATTN and SIMT ops; GEMM and CONV gradient kernels each carry the forward's FLOPs and
    its `elems` instead (dY·W and Xᵀ·dY touch the same three matrix sizes as X·W).
    """

    flops: int | None
    bytes: int | None
    params: str
    dtype: str | None
    kind: str = SIMT
    elems: int | None = None
    bwd_flops: int | None = None
    bwd_bytes: int | None = None
    bias_elems: int = 0
    # Input elements no tap of the op reads (a convolution whose stride outruns its window: a 1x1
    # of stride 2 reads a quarter of its input): the forward and the weight gradient do not read
    # them; the data gradient writes them all. Counted in `elems`.
    unread: int = 0
    # Elements the op writes (MMA kinds): the bias gradient sums them (parts.py).
    out_elems: int = 0
    # A convolution's groups (cuDNN may run each group as a launch of its own:
    # matrix_chain.group_launch).
    groups: int = 1
    # The output's shape: a convolution's (N, K, spatial...), whose layout cuDNN converts; a
    # GEMM's (rows, cols), which a split-K reduction sums (parts.py).
    out_shape: tuple | None = None
    # A GEMM's independent products (a bmm's batch; 1 for an mm, a linear, a folded matmul): a
    # launch's grid z beyond them splits K (gemm_parts.split_partials). None where the formula does
    # not say (a user's Cost): no split is read from the grid then.
    products: int | None = None
    # The PyTorch ops (emit_nvtx range names) whose first kernel does the op's work, when the op
    # launches helpers first (a fused optimizer step increments its step counters before the
    # math; an RNN may initialise its dropout state): the other kernels carry 0.
    main_op: tuple | None = None
    # The op is a sequence of PyTorch ops each launching its own kernels (a for-loop or foreach
    # optimizer step): with emit_nvtx ranges, each kernel is priced from its own range (op_ranges.py)
    # instead of the whole op landing on the first kernel.
    composite: bool = False
    # An RNN's shape (ops/rnn.py RnnShape): its per-step kernels carry their own work (parts.py).
    rnn: Any = None
    # Elements of a gradient the backward zero-fills in a kernel of its own before scattering
    # into it (embedding's dWeight): that kernel's part (parts.py), not in `bwd_bytes`.
    grad_fill: int = 0
    # A foreach op's launches (multitensor.launch_elements): the elements each walks, in order;
    # the op's work is shared among its kernels in proportion.
    launches: tuple | None = None
    # The kernels PyTorch runs the op as, in launch order, each its own (FLOPs, bytes of
    # floating-point tensors in the op's dtype[, bytes of integer tensors]) (an element-wise loss,
    # then its reduction; cross_entropy's log_softmax, then its nll_loss): the call's kernels take
    # them in turn (analysis.py) instead of the first carrying the op. Their FLOPs add up to
    # `flops` (`bwd_flops`); their bytes count what one writes and the next reads. Stages led by a
    # piece of a kernel's name (a str) are taken by the kernel whose name holds it, in any order,
    # for an op whose kernels depend on its data (embedding_bag's backward: a copy that runs only
    # for a strided dOut); their third and later numbers: bytes that do not follow the op's dtype.
    # Named stages may be alternatives, one per path the op may take (batch norm's layouts and
    # cuDNN): the FLOPs of each path's stages add up, and a stage no kernel takes costs nothing.
    stages: tuple | None = None
    bwd_stages: tuple | None = None
    # The named stages run in their order, alternatives listed side by side (a for-loop SGD
    # step's momentum buffer: updated, or cloned on its first step; a packed sequence's copies
    # that run only where a region is strided): a kernel taking one drops the stages before it,
    # the path not taken, so a later kernel of the same name takes its own.
    stages_in_order: bool = False
    # Why the FLOPs are only an upper bound, where what decides them is not in the trace
    # (attention priced from PyTorch's ranges, which carry no `is_causal`): prof counts each
    # kernel so priced in a closing warning of this text.
    upper_bound: str | None = None


# A named stage of an op whose kernels include GEMMs (an LSTM cell's gate products): taken by the
# call's matrix kernels, whatever library names them (the analysis looks a matrix kernel's stage
# up behind this role, its name after it).
GEMM_STAGE = "gemm:"


def stage_totals(stages: tuple) -> tuple[int, int]:
    """(FLOPs, bytes) of an op run as `stages` (Cost.stages' tuples: a name, FLOPs, then byte
    counts): what its kernels do together, its Cost's totals."""
    return sum(s[1] for s in stages), sum(sum(s[2:]) for s in stages)


# The upper bound of attention priced from PyTorch's ranges (ops/aten.py).
CAUSAL_UNKNOWN = "attention FLOPs an upper bound (is_causal is not in PyTorch's ranges: the whole score matrix is counted)"


class Call:
    """The decoded arguments of one op marker, looked up by position or keyword."""

    __slots__ = ("args", "kwargs", "marker")

    def __init__(self, marker: dict) -> None:
        self.marker = marker  # the whole marker, for formulas that read more than arguments (dist)
        self.args, self.kwargs = with_grads(decode(marker.get("args") or []),
                                            {k: decode(v) for k, v in (marker.get("kwargs") or {}).items()})

    def get(self, pos: int | None, name: str, default: Any = None) -> Any:
        """Argument `name`, passed by keyword or at position `pos` (None: keyword-only)."""
        if name in self.kwargs:
            return self.kwargs[name]
        if pos is not None and pos < len(self.args):
            return self.args[pos]
        return default

    def tensor(self, pos: int | None, name: str) -> Tensor | None:
        """Argument `name` when it is a tensor, else None."""
        v = self.get(pos, name)
        return v if isinstance(v, Tensor) else None

    def strides(self, pos: int | None, name: str) -> tuple | None:
        """Argument `name`'s strides as its marker states them: only a tensor that is not
        contiguous in any memory format carries them (docs/markers.md); else None."""
        args, kwargs = self.marker.get("args"), self.marker.get("kwargs")
        args, kwargs = args if isinstance(args, list) else [], kwargs if isinstance(kwargs, dict) else {}
        raw = kwargs.get(name) if name in kwargs else args[pos] if pos is not None and pos < len(args) else None
        strides = raw.get("strides") if isinstance(raw, dict) else None
        return tuple(strides) if isinstance(strides, list) and all(type(s) is int for s in strides) else None

    def outputs(self) -> list[Tensor]:
        """The tensors the call returned, where its marker says (the `out` member parse adds from
        pyprof's out mark: an op whose output size its input's values decide); else []."""
        if "out" not in self.marker:
            return []
        v = decode(self.marker["out"])
        return [t for t in (v if isinstance(v, list) else [v]) if isinstance(t, Tensor)]

    def tensors(self) -> list:
        """Every tensor argument in order; an `out=` tensor is a result, not an operand."""
        kw = [v for k, v in self.kwargs.items() if k != "out"]
        return [v for v in (*self.args, *kw) if isinstance(v, Tensor)]


def call(*args: Any, **kwargs: Any) -> Call:
    """A Call over already decoded values (the shape of a torch function's arguments): a formula
    applied to values another formula or level built (a compiled node's, one index of a foreach
    op's lists, a user formula over a PyTorch range)."""
    c = Call({})
    c.args, c.kwargs = list(args), kwargs
    return c


class Unknowable(Exception):
    """Raised by a formula when the marker lacks what the cost depends on; the message says what
    (it becomes the warning's kind in the closing summary)."""


# What a formula raises on arguments it does not understand (its cost: none, "op arguments not
# understood"). RecursionError: marker args nested deeper than decode() can follow (valid JSON,
# never ours).
FORMULA_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError, RecursionError)


Formula = Callable[[Call], "Cost | None"]  # a string: evaluated at import, where 3.9 has no `|`
_TABLE: dict[str, Formula] = {}


def kept(cache: dict, key: Any, value: Any, limit: int) -> Any:
    """Store `value` under `key` in `cache` and return it, emptying the cache first when it holds
    `limit` entries: the costs of an op's call sites repeat every step, so a cache of the distinct
    ones stays small, and one that does not (a trace of ever-new shapes) is kept from growing."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value


def register(*names: str) -> Callable[[Formula], Formula]:
    """Register `formula` for each qualified name `mod.op` (`torch.nn.functional.conv2d`)."""

    def deco(formula: Formula) -> Formula:
        for name in names:
            if name in _TABLE:
                raise RuntimeError(f"two formulas for {name}")
            _TABLE[name] = formula
        return formula

    return deco


def lookup(mod: str | None, op: str | None) -> Formula | None:
    """The formula for a marker's (mod, op), or None when the op is not in the table."""
    return _TABLE.get(f"{mod}.{op}")


def registered() -> list:
    """Every qualified name in the table, sorted."""
    return sorted(_TABLE)


def names(ops: Iterable[str], mods: Iterable[str] = ("torch", "Tensor")) -> list:
    """`mod.op` for every pair: the spellings one op family goes by."""
    return [f"{m}.{o}" for m in mods for o in ops]


def dims(shape: Iterable[int]) -> str:
    """A shape as params prints it: [2,3,4], no spaces."""
    return "[" + ",".join(map(str, shape)) + "]"


def fmt_params(dtype: str | None, **fields: Any) -> str:
    """`k=v,...,type=fp16`, the original PyProf's params form."""
    parts = [f"{k}={dims(v) if isinstance(v, tuple) else v}" for k, v in fields.items()]
    parts.append(f"type={short(dtype)}")
    return ",".join(parts)


def retype(params: str, dtype: str | None) -> str:
    """`params` as fmt_params wrote it (`type=` last), saying `dtype` instead: the dtype the
    kernel computed in, where autocast or the kernel's name says it differs from the marker's."""
    head, sep, _ = params.rpartition("type=")
    return head + sep + short(dtype) if sep else params


# The second level: formulas over PyTorch's own op ranges (emit_nvtx with record_shapes), keyed by
# the range name (`aten::mm`). A formula takes an `AtenCall` (op_ranges.py: the range's `sizes` and the
# dtype the kernel ran in) and returns the Cost of that one aten op.
# Optional, not `Cost | None`: this alias is evaluated at import, and Python 3.9 has no `|` on types.
AtenFormula = Callable[[Any], Optional[Cost]]
_ATEN: dict[str, AtenFormula] = {}


def register_aten(*names: str) -> Callable[[AtenFormula], AtenFormula]:
    """Register `formula` for each PyTorch op range name (`aten::mm`)."""

    def deco(formula: AtenFormula) -> AtenFormula:
        for name in names:
            if name in _ATEN:
                raise RuntimeError(f"two formulas for {name}")
            _ATEN[name] = formula
        return formula

    return deco


def deferring(formula: AtenFormula) -> AtenFormula:
    """Mark an aten formula that prices only some calls of its op (a row gather, not every
    gather): where it returns None, the range around its range is asked (op_ranges.price)
    instead of the kernel being na."""
    formula.defers = True  # type: ignore[attr-defined]
    return formula


def lookup_aten(name: str | None) -> AtenFormula | None:
    """The formula for a PyTorch op range name, or None."""
    return _ATEN.get(name)  # type: ignore[arg-type]


def registered_aten() -> list:
    """Every PyTorch op range name with a formula, sorted."""
    return sorted(_ATEN)
