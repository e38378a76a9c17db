"""The wrappers pyprof installs: one per torch callable, `nn.Module.__call__`, optimizer steps,
GradScaler's unscale_ and update.

Hot path. Per call of a wrapped op: one attribute test when markers are off; otherwise a
thread-local depth check, the marker text (a call key and one look-up in the wrapper's own cache,
pyprof.nvtx.memo, in C where built; encoded only for a new key), one NVTX push carrying the autograd sequence number
as its payload and one pop, and - unless PyTorch's own node ranges are on (pyprof.nvtx.node_ranges)
- a pre-hook on the autograd node the call gave its output (pyprof.nvtx.backward), if any.
"""
from __future__ import annotations

import functools
import threading
import weakref
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Callable, Optional

import torch

from ..formats import AMP_MOD, OPTIM_MOD
from . import backward as _backward
from . import memo as _memo
from .emit import state as _state
from .marker import HostValues
from .marker import build as _build
from .marker import encode as _encode
from .marker import host_values as _host_values
from .marker import module_marker, op_prefix, optimizer_knobs, optimizer_params
from .marker import out_marker as _out_marker
from .site import site_json as _site

_is_compiling = torch.compiler.is_compiling
_lookup = _memo.lookup
# The seq the next autograd node created on this thread gets (one C call, no node needed).
_seq = torch._C._autograd._get_sequence_nr
_GAP_SHIFT = 40                      # docs/markers.md, "Payload": bits 0-39 seq, 40-62 gap
_GAP_MAX = (1 << 23) - 1


class ThreadState:
    """What the wrappers keep per thread."""

    __slots__ = ("depth", "mod", "names", "seq_end")

    def __init__(self) -> None:
        self.depth = 0      # wrapped calls open on this thread (nested ones emit nothing by default)
        self.mod = ""       # ',"module":"..."' of the innermost module being called; "" outside modules
        self.names: Optional[_Names] = None  # qualified-name table of the module tree being called
        self.seq_end = 0    # the autograd sequence number when the last op range on this thread closed


class _Threads(threading.local):
    # One thread-local read per call, then plain slot reads and writes: each attribute of a
    # threading.local costs a look-up of the thread's dict (0.5 us of a wrapped call's 3.2 on
    # the development VM when the four were thread-local attributes themselves).
    def __init__(self) -> None:
        self.s = ThreadState()


_threads = _Threads()


def thread_state() -> ThreadState:
    """This thread's wrapper state (depth, module fragment and table, last op range's seq end)."""
    return _threads.s


# The data-sized calls' way through torch.compile (set by pyprof.nvtx.inductor at the first
# compilation, None before): `eager_call(fn, args, kwargs)`, which Dynamo does not trace, and
# whether Dynamo breaks its graph at such an op. Where it does, Dynamo would run the original op
# at the break, not its wrapper, and the call would have no marker: the wrapper hands Dynamo
# eager_call instead, a break at the same place, which then runs the wrapper as it is.
eager_call: Optional[Callable] = None


def breaks_at_sized() -> bool:
    """Whether Dynamo breaks its graph at a data-sized op (replaced by pyprof.nvtx.inductor)."""
    return False


def op_wrapper(orig: Callable, mod: str, op: str, home: str, qualname: str, opaque: bool = True,
               sized: Optional[Callable[[tuple, dict], bool]] = None) -> Callable:
    """A wrapper of `orig` that pushes an op marker `mod`/`op` around each outermost call.

    `home`/`qualname` are where the wrapper is installed: pickle finds a function by those, so a
    wrapped function pickles by reference and unpickles as whatever is installed there.
    `opaque`: the wrapped calls made inside this one emit nothing (its marker accounts for their
    work); False for an op prof cannot price, whose inner calls then carry markers of their own.
    `sized`: whether a call's output size depends on its input's values (nonzero; where with the
    condition alone), given its arguments: before such a call's range closes, an `out` mark inside
    it gives the output's shapes (marker.out_marker).
    """
    prefix = op_prefix(mod, op)
    hides = 1 if opaque else 0  # added to the depth: chosen here, so the call path has no branch
    texts = _memo.new_cache()  # call key -> marker text (pyprof.nvtx.memo)
    # A backward call may leave a bwd range open on this thread (CPU autograd runs here).
    runs_backward = (mod, op) in _BACKWARD_CALLS

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Dynamo sees is_compiling() as True and traces straight into the original: no graph
        # break, no marker inside compiled graphs.
        if not _state.on or _is_compiling():
            if sized is not None and eager_call is not None and _is_compiling() and sized(args, kwargs) \
                    and breaks_at_sized():
                return eager_call(wrapper, args, kwargs)
            return orig(*args, **kwargs)
        tl = _threads.s
        depth = tl.depth
        if depth and not _state.nested:
            return orig(*args, **kwargs)
        tl.depth = depth + hides
        try:
            mod_text = tl.mod
            text = _lookup(texts, args, kwargs, mod_text)
            if text.__class__ is not str:  # a miss: `text` is the key to store the marker under
                text = _memo.marker(texts, prefix, args, kwargs, mod_text, text)
            seq = _seq()
            _state.push_op(text, seq if seq == tl.seq_end else _payload(seq, tl.seq_end))
            try:
                out = orig(*args, **kwargs)
                if sized is not None and sized(args, kwargs):
                    _state.mark(_out_marker(out))
            finally:
                tl.seq_end = _seq()
                if runs_backward:
                    _backward.close()
                _state.pop()
            if _state.hooks:
                _backward.attach(out, args, text, seq, tl.seq_end)
            return out
        finally:
            tl.depth = depth

    _dress(wrapper, orig, home, qualname)
    return wrapper


def host_values_wrapper(orig: Callable, mod: str, op: str, home: str, qualname: str, index: int,
                        opaque: bool = True) -> Callable:
    """op_wrapper's wrapper of an op whose positional argument `index`, when a small host integer
    tensor (marker.host_values), fixes how its kernels run: that argument reaches the marker as
    HostValues, so its values are in the text and in the call's memo key (encode()'s text is the
    key of a value that is not a plain tensor), and reaches `orig` as itself. `opaque`: as op_wrapper's."""

    def unwrapped(*args: Any, **kwargs: Any) -> Any:
        if len(args) > index and type(args[index]) is HostValues:
            args = args[:index] + (args[index].tensor,) + args[index + 1:]
        return orig(*args, **kwargs)

    inner = op_wrapper(unwrapped, mod, op, home, qualname, opaque)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _state.on and len(args) > index and _host_values(args[index]) and not _is_compiling():
            args = args[:index] + (HostValues(args[index]),) + args[index + 1:]
        return inner(*args, **kwargs)

    _dress(wrapper, orig, home, qualname)
    return wrapper


def _payload(seq: int, end: int) -> int:
    """An op range's payload when autograd nodes were created on this thread since the last op
    range closed (by code no wrapper saw: a custom autograd.Function's apply): parse must not give
    those nodes to the op before."""
    return seq | (min(seq - end, _GAP_MAX) << _GAP_SHIFT)


_BACKWARD_CALLS = frozenset({("Tensor", "backward"), ("torch.autograd", "backward"), ("torch.autograd", "grad")})


def _dress(wrapper: Callable, orig: Callable, home: str, qualname: str) -> None:
    # Not functools.wraps: copying orig.__dict__ would copy torch's own flags (Dynamo and
    # TorchScript markers) onto a function they do not describe.
    wrapper.__name__ = getattr(orig, "__name__", qualname.rpartition(".")[2])
    wrapper.__qualname__ = qualname
    wrapper.__module__ = home
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig  # type: ignore[attr-defined]


def is_wrapper(obj: Any) -> bool:
    """True for functions made by op_wrapper, module_call, step_wrapper or scaler_wrapper (whose
    code is step_wrapper's)."""
    return getattr(obj, "__code__", None) in _WRAPPER_CODES


# ---------------------------------------------------------------------------------------------
# nn.Module.__call__

class _Names(dict):
    """id(module) -> (marker, module fragment, weakref to module, table for its children,
    qualified name: "" for the root) for the module tree under one root, built from
    root.named_modules() once."""

    __slots__ = ("root", "rebuilds")


# A root's table is rebuilt when a module missing from it is called (children created lazily),
# at most this many times; after that, unknown modules are roots of their own.
_REBUILDS = 4
_roots: dict = {}  # id(root) -> _Names
# id(module) -> the last root's table that holds it below its root (_outermost_entry); used
# only while that table is its root's and holds the module; dropped with the root.
_member_of: dict = {}


def _forgetter(key: int) -> Callable[[weakref.ref], None]:
    """The weakref callback that drops a dead root's table. It holds the table dict itself, not
    this module's globals: roots collected at interpreter exit run it after the module's globals
    were cleared to None."""
    roots, members = _roots, _member_of

    def forget(ref: weakref.ref) -> None:
        t = roots.get(key)
        if t is not None and t.root is ref:
            del roots[key]
            for k in [k for k, held in members.items() if held is t]:
                del members[k]

    return forget


def _entry(m: torch.nn.Module, name: str, names: _Names, qualified: str) -> tuple:
    # A module's own methods may fail or misbehave; the call they describe must not.
    try:
        rep = m.extra_repr()
        if type(rep) is not str:
            rep = str(rep)
    except Exception:
        rep = ""
    from .ddp_buckets import module_json  # both import this module
    from .distributed import module_dist
    return (module_marker(name, type(m).__name__, rep, module_dist(m) + module_json(m)), ',"module":' + _quote(name),
            weakref.ref(m), names, qualified)


def _fill(names: _Names, root: torch.nn.Module) -> None:
    # extra_repr() may call torch (formatting a buffer): that is not a user op.
    tl = _threads.s
    depth = tl.depth
    tl.depth = depth + 1
    try:
        names.clear()
        root_name = type(root).__name__
        try:
            for name, m in root.named_modules():
                if isinstance(m, torch.nn.Module) and isinstance(name, str):
                    names[id(m)] = _entry(m, name or root_name, names, name)
                    if name:
                        _member_of[id(m)] = names
        except Exception:
            # named_modules overridden and failing: modules it did not name become roots of
            # their own (_miss); the call goes on as it would without pyprof.
            pass
    finally:
        tl.depth = depth


def _names_of(root: torch.nn.Module) -> _Names:
    key = id(root)
    t = _roots.get(key)
    if t is not None and t.root() is root:
        return t
    t = _Names()
    t.root = weakref.ref(root, _forgetter(key))
    t.rebuilds = 0
    _fill(t, root)
    if key not in t:  # named_modules overridden without the root itself
        t[key] = _entry(root, type(root).__name__, t, "")
    _roots[key] = t
    return t


def forget_module(m: torch.nn.Module) -> None:
    """Drop the tables that hold `m`'s marker: its next call builds them, and its marker, again
    (a marker that says what changed in the module: ddp_buckets)."""
    for key, t in list(_roots.items()):
        e = t.get(id(m))
        if e is not None and e[2]() is m:
            del _roots[key]


def _miss(names: _Names, m: torch.nn.Module) -> tuple:
    root = names.root()
    if root is not None and names.rebuilds < _REBUILDS:
        names.rebuilds += 1
        _fill(names, root)
        e = names.get(id(m))
        if e is not None and e[2]() is m:
            return e
    # Not in the tree being called (kept in a plain list, built inside forward): name it as
    # a root of its own.
    return _names_of(m)[id(m)]


def _outermost_entry(m: torch.nn.Module) -> tuple:
    """The entry of a module called outside any module call: its entry in the tree of a root it
    belongs to (a block whose forward activation checkpointing runs again in the backward, a
    submodule called on its own: named by its path there), else its own as a root."""
    t = _member_of.get(id(m))
    e = None if t is None else t.get(id(m))
    root = None if e is None or e[2]() is not m else t.root()
    if root is not None and _roots.get(id(root)) is t:  # a table forget_module dropped is stale
        return e
    return _names_of(m)[id(m)]


def module_name(m: torch.nn.Module) -> Optional[str]:
    """`m`'s qualified name in the module tree being called on this thread ("" for its root);
    None outside module calls or when `m` is not in that tree."""
    names = _threads.s.names
    e = names.get(id(m)) if names is not None else None
    return e[4] if e is not None and e[2]() is m else None


def module_call(orig: Callable) -> Callable:
    """The replacement of `nn.Module.__call__`: a module range around each module call, and
    the module's qualified name for the op markers inside it."""

    def __call__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if not _state.on or _is_compiling():
            return orig(self, *args, **kwargs)
        tl = _threads.s
        names = tl.names
        if names is None:
            e = _outermost_entry(self)
        else:
            e = names.get(id(self))
            if e is None or e[2]() is not self:
                e = _miss(names, self)
        prev_mod = tl.mod
        tl.names = e[3]
        tl.mod = e[1]
        try:
            _state.push(e[0])
            try:
                return orig(self, *args, **kwargs)
            finally:
                _state.pop()
        finally:
            tl.names = names
            tl.mod = prev_mod

    _dress(__call__, orig, "torch.nn.modules.module", "Module.__call__")
    return __call__


# ---------------------------------------------------------------------------------------------
# Optimizer.step

_step_prefix: dict = {}  # optimizer class -> op prefix "torch.optim", "<Class>.step"


def _params_json(opt: torch.optim.Optimizer) -> str:
    """`"params":{...}` (optimizer_params) of an optimizer; unencodable where reading it fails."""
    try:
        return '"params":' + optimizer_params(opt)
    except Exception:
        return '"params":{"type":"unencodable"}'


def _step_marker(opt: torch.optim.Optimizer, args: tuple, kwargs: dict, tail: str) -> str:
    cls = type(opt)
    prefix = _step_prefix.get(cls)
    if prefix is None:
        prefix = _step_prefix[cls] = op_prefix(OPTIM_MOD, cls.__name__ + ".step")
    try:
        extra = _params_json(opt)
        for flag in ("foreach", "fused"):
            if flag in opt.defaults:
                extra += ',"' + flag + '":' + _encode(opt.defaults[flag])
        knobs = optimizer_knobs(opt)
        if knobs:
            extra += "," + knobs
    except Exception:
        extra = '"params":{"type":"unencodable"}'
    return _build(prefix, args, kwargs, tail, extra)


def _phase_wrapper(orig: Callable, marker: Callable[[Any, tuple, dict, str], str],
                   attr: Optional[str] = None) -> Callable:
    """A wrapper of a method of the optimizer phase whose marker `marker(self, args, kwargs,
    tail)` builds: the calls it makes are inside its range and emit nothing (unless nested).
    `attr`: an attribute of the instance that, false, means the call launches nothing (no marker)."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _state.on or _is_compiling() or (attr is not None and not getattr(self, attr, True)):
            return orig(self, *args, **kwargs)
        tl = _threads.s
        depth = tl.depth
        if depth and not _state.nested:
            return orig(self, *args, **kwargs)
        tl.depth = depth + 1
        try:
            _state.push(marker(self, args, kwargs, _site() + tl.mod))
            try:
                return orig(self, *args, **kwargs)
            finally:
                _state.pop()
        finally:
            tl.depth = depth

    # update_wrapper copies torch's `hooked` flag: Optimizer then does not wrap the step again.
    functools.update_wrapper(method, orig)
    return method


def step_wrapper(orig: Callable) -> Callable:
    """A wrapper of one optimizer class's `step` (op `<Class>.step`, mod `torch.optim`)."""
    return _phase_wrapper(orig, _step_marker)


def scaler_wrapper(orig: Callable, name: str) -> Callable:
    """A wrapper of GradScaler's `unscale_`, `_check_inf_per_device` or `update` (op
    `GradScaler.<name>`, mod `torch.amp`): PyTorch runs their kernels through private ops
    (`torch._amp_foreach_non_finite_check_and_unscale_`, `torch._amp_update_scale_`), which pyprof
    does not wrap. The marker of a method taking the optimizer describes its gradients as a step's
    describes its parameters (`kwargs.params`); a disabled scaler launches nothing and gets no
    marker."""
    prefix = op_prefix(AMP_MOD, "GradScaler." + name)

    def marker(scaler: Any, args: tuple, kwargs: dict, tail: str) -> str:
        opt = args[0] if args else kwargs.get("optimizer")
        if not isinstance(opt, torch.optim.Optimizer):
            return _build(prefix, args, kwargs, tail)
        return _build(prefix, (), None, tail, _params_json(opt))

    return _phase_wrapper(orig, marker, "_enabled")


def hiding(fn: Callable) -> Callable:
    """A wrapper of `fn` under which the wrapped calls it makes emit nothing, as inside an opaque
    op: for code whose work is explained otherwise. A compiled graph's generated code calls
    `extern_kernels.mm` (bound to the wrapper of `torch.mm` when Inductor is imported after
    init()) and `torch.addmm`; its kernels are explained by the recorder's table, and a marker
    per call would cost every step of a compiled model."""

    def hidden(*args: Any, **kwargs: Any) -> Any:
        tl = _threads.s
        depth = tl.depth
        tl.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            tl.depth = depth

    functools.update_wrapper(hidden, fn)
    return hidden


_WRAPPER_CODES = frozenset(
    f.__code__ for f in (op_wrapper(len, "", "", "", "x"), module_call(len), step_wrapper(len),
                         host_values_wrapper(len, "", "", "", "x", 0))
)


def frame_codes() -> frozenset:
    """The code objects of every frame pyprof puts between a caller and the original it wraps
    (the wrappers of is_wrapper, and hiding's): warnsite places warnings raised on them."""
    return _WRAPPER_CODES | _HIDING_CODES


_HIDING_CODES = frozenset({hiding(len).__code__})


def recognise(wrapper: Callable) -> None:
    """Count functions sharing `wrapper`'s code as pyprof wrappers in is_wrapper (for wrappers
    defined beside these ones: nvtx/distributed.py)."""
    global _WRAPPER_CODES
    _WRAPPER_CODES = _WRAPPER_CODES | {wrapper.__code__}
