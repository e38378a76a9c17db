"""What `pyprof.init()` wraps, and undoing it (`pyprof.restore()`).

The rule (docs/annotation.md): in `torch`, `torch.nn.functional`, `torch.linalg`,
`torch.special` and `torch.fft`, every public (no leading `_`) plain function or builtin that
the namespace itself defines (its `__module__` is one of torch's op modules, so re-exports like
`torch.load`, `torch.vmap`, `F.handle_torch_function` stay as they are), minus the queries and
switches in `_SKIP` and names starting with `is_`, `get_`, `set_`, `sym_`, plus the private entry
points nn code calls in `torch` (`_PRIVATE_ENTRY_POINTS`: nn.MultiheadAttention's and
nn.TransformerEncoderLayer's inference fast paths, nn.utils.rnn's packing and unpacking of padded
sequences, torch.distributions' argument checks), and the foreach ops `torch._foreach_*` (gradient clipping's, a moving average's);
those whose work depends on a small host tensor's values get
wrappers.host_values_wrapper (marker.HOST_VALUE_ARGS). On `torch.Tensor`, every public method
minus `_TENSOR_SKIP` and `is_*`, plus the operator dunders in `_TENSOR_DUNDERS`; never
properties, classmethods or other dunders. Plus `torch.autograd.backward`
and `grad` (with PyTorch's op ranges on for a call with create_graph=True: node_ranges.graphing),
the collectives and point-to-point calls of `torch.distributed` (distributed.py),
`nn.Module.__call__`, the calls of other libraries' custom ops (`torch.ops.<namespace>.<op>`:
custom_ops.py), the `step` of every optimizer class, present and future, and GradScaler's
`unscale_` and `update` (whose kernels run in private ops). `torch._VF`
(through which `nn.LSTM` and co. call `torch.lstm`, `torch.gru`, ...) hands out the same
wrappers as `torch`.

A wrapped call hides the wrapped calls made inside it when prof's op table prices it (priced.py:
the annotation's copy of that table's names); one the table does not know
(`F.multi_head_attention_forward`) lets them carry markers of their own, so that prof prices its
work from them.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
import types
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch

from . import custom_ops, ddp_buckets, defaults, distributed, emit, inductor, node_ranges, warnsite, wrappers
from .priced import PRICED
from .marker import HOST_VALUE_ARGS
from .wrappers import host_values_wrapper, is_wrapper, module_call, op_wrapper, scaler_wrapper, step_wrapper

_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType)
_METHOD_TYPES = (types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)

# Modules whose functions count as a namespace's own (see the module docstring).
_OP_MODULES = frozenset({
    "torch", "torch.functional", "torch._lowrank", "torch._lobpcg", "torch.nn.functional",
    "torch._C._nn", "torch._C._linalg", "torch._C._special", "torch._C._fft",
})

_SKIP_PREFIXES = ("is_", "get_", "set_", "sym_")

# Private torch functions that nn code calls in place of public ops, whose kernels no other marker
# covers: the inference fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer, and
# nn.utils.rnn's pack_padded_sequence and pad_packed_sequence (through torch._VF), and the
# reductions torch.distributions' argument checks run (`torch._is_all_true(constraint.check(x))`).
_PRIVATE_ENTRY_POINTS = frozenset({"_native_multi_head_attention", "_transformer_encoder_layer_fwd",
                                   "_pack_padded_sequence", "_pad_packed_sequence", "_is_all_true",
                                   "_is_any_true"})
# The foreach ops (torch._foreach_mul_, ...) that code outside an optimizer step calls: gradient
# clipping's clip_grad_norm_, a weights' moving average (inside a wrapped step or GradScaler
# method they emit nothing).
_FOREACH = "_foreach_"

# Launch no kernels and are called often (metadata, dtype arithmetic, global switches), or
# belong to machinery that must see torch unwrapped (compile, TorchScript's parser and futures).
_SKIP = frozenset({
    "compile", "typename", "numel", "result_type", "can_cast", "promote_types",
    "broadcast_shapes", "compiled_with_cxx11_abi", "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled", "autocast_increment_nesting",
    "autocast_decrement_nesting", "clear_autocast_cache", "from_numpy", "frombuffer",
    "cudnn_is_acceptable", "init_num_threads", "q_scale", "q_zero_point", "q_per_channel_axis",
    "cond", "fork", "wait", "unify_type_list", "parse_ir", "parse_schema", "parse_type_comment",
    "merge_type_from_type_comment", "import_ir_module", "import_ir_module_from_buffer",
})

_TENSOR_SKIP = frozenset({
    "size", "dim", "ndimension", "stride", "numel", "nelement", "storage_offset", "data_ptr",
    "element_size", "get_device", "storage", "untyped_storage", "type",
    "dim_order", "requires_grad_", "retain_grad", "register_hook",
    "register_post_accumulate_grad_hook", "module_load", "share_memory_", "numpy",
    "new_empty", "new_empty_strided",
})

_BINARY = ("add", "sub", "mul", "matmul", "truediv", "floordiv", "div", "mod", "pow",
           "and", "or", "xor", "lshift", "rshift")
_TENSOR_DUNDERS = frozenset(
    [f"__{p}{n}__" for n in _BINARY for p in ("", "r", "i")]
    + [f"__{n}__" for n in ("eq", "ne", "lt", "le", "gt", "ge", "neg", "pos", "abs", "invert",
                            "getitem", "setitem")]
)


def _always(args: tuple, kwargs: dict) -> bool:
    return True


def _condition_alone(args: tuple, kwargs: dict) -> bool:
    return len(args) == 1 and not kwargs


def _boolean_index(args: tuple, kwargs: dict) -> bool:
    index = args[1] if len(args) > 1 else None
    if type(index) is tuple and len(index) == 1:
        index = index[0]
    return isinstance(index, torch.Tensor) and index.dtype is torch.bool


# Calls whose output size depends on their input's values get an `out` mark (wrappers.op_wrapper
# `sized`). Those whose ATen op of the same name PyTorch tags dynamic_output_shape (nonzero,
# masked_select, unique_consecutive, bincount, repeat_interleave, one_hot) are found by the tag
# (_sized); these composites run such an op under another name: argwhere and where with the
# condition alone (nonzero), unique (_unique2), x[mask] with a boolean mask (index, nonzero).
_SIZED_COMPOSITES = {"argwhere": _always, "unique": _always, "where": _condition_alone, "__getitem__": _boolean_index}


def _sized(name: str) -> Optional[Callable[[tuple, dict], bool]]:
    """Whether a call of the entry point `name` has an output size its input's values decide,
    given its arguments (None: never)."""
    if name in _SIZED_COMPOSITES:
        return _SIZED_COMPOSITES[name]
    try:
        packet = getattr(torch.ops.aten, name)
        tagged = any(torch.Tag.dynamic_output_shape in getattr(packet, o).tags for o in packet.overloads())
    except Exception:  # no ATen op of that name (a Python-level function), or no tags in this torch
        return None
    return _always if tagged else None


_MISSING = object()
_lock = threading.RLock()
# (owner, attribute, value before, wrapper) in the order applied; restore() undoes them in reverse.
_patches: List[Tuple[Any, str, Any, Any]] = []
_optimizer_classes: List[type] = []
_initialized = False
_unpatched_depth = 0


def _set(owner: Any, name: str, value: Any) -> None:
    _patches.append((owner, name, vars(owner).get(name, _MISSING), value))
    setattr(owner, name, value)


def _namespace_targets(ns: types.ModuleType) -> Iterator[Tuple[str, Callable]]:
    for name, obj in list(vars(ns).items()):
        if (
            (not name.startswith("_") or (ns is torch and (name in _PRIVATE_ENTRY_POINTS
                                                             or name.startswith(_FOREACH))))
            and isinstance(obj, _FUNCTION_TYPES)
            and getattr(obj, "__module__", None) in _OP_MODULES
            and name not in _SKIP
            and not name.startswith(_SKIP_PREFIXES)
            and not is_wrapper(obj)
        ):
            yield name, obj


def _tensor_targets() -> Iterator[Tuple[str, Callable]]:
    for name in dir(torch.Tensor):
        if name.startswith("_"):
            if name not in _TENSOR_DUNDERS:
                continue
        elif name in _TENSOR_SKIP or name.startswith("is_"):
            continue
        raw = next(vars(k)[name] for k in torch.Tensor.__mro__ if name in vars(k))
        if isinstance(raw, _METHOD_TYPES) and not is_wrapper(raw):
            yield name, raw


def _wrap_step(cls: type) -> None:
    step = vars(cls).get("step")
    if isinstance(step, types.FunctionType) and not is_wrapper(step):
        _optimizer_classes.append(cls)
        cls.step = step_wrapper(step)


def _all_subclasses(cls: type) -> List[type]:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def _optimizer_init_subclass(cls: type, **kwargs: Any) -> None:
    # Optimizers defined after init() override step: wrap theirs as the class is created.
    super(torch.optim.Optimizer, cls).__init_subclass__(**kwargs)
    with _lock:
        if _initialized and not _unpatched_depth:
            _wrap_step(cls)


def _script(obj: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.jit.script, run with the originals in place: the script compiler resolves F.relu
    and co. by identity and compiles Python functions from their source."""
    with unpatched():
        return _original_script(obj, *args, **kwargs)


_original_script: Callable = torch.jit.script


# Tables torch fills on first use by looking torch functions up in the live namespaces (by
# identity or id). Filled after init() they would hold wrappers in place of the originals (and
# keep them after restore()): `with torch.device("meta")` would stop placing factories, Dynamo
# would stop recognizing Tensor methods. init() fills them first. Names absent from the torch
# at hand are skipped.
_LAZY_TABLES = (
    ("torch.jit._builtins", "_get_builtin_table"),
    ("torch.utils._device", "_device_constructors"),
    ("torch.overrides", "_get_overridable_functions"),
    ("torch.overrides", "_get_tensor_methods"),
    ("torch._prims.context", "torch_to_refs_map"),
    ("torch._dynamo.trace_rules", "get_torch_obj_rule_map"),
    ("torch._dynamo.trace_rules", "get_tensor_method"),
    ("torch._dynamo.variables.torch", "get_overridable_functions"),
    ("torch._dynamo.variables.nn_module", "UnspecializedNNModuleVariable._nn_module_method_ids"),
)


def _prepare() -> None:
    for module, attr in _LAZY_TABLES:
        try:
            fn: Any = importlib.import_module(module)
            for part in attr.split("."):
                fn = getattr(fn, part)
            fn()
        except (ImportError, AttributeError):
            pass


def _patch() -> None:
    vf = torch._C._VariableFunctions
    for ns in (torch, torch.nn.functional, torch.linalg, torch.special, torch.fft):
        for name, obj in _namespace_targets(ns):
            priced = f"{ns.__name__}.{name}" in PRICED
            if ns is torch and name in HOST_VALUE_ARGS:
                w = host_values_wrapper(obj, ns.__name__, name, ns.__name__, name, HOST_VALUE_ARGS[name], priced)
            else:
                w = op_wrapper(obj, ns.__name__, name, ns.__name__, name, priced, _sized(name))
            _set(ns, name, w)
            if ns is torch and getattr(vf, name, None) is obj:
                _set(torch._VF, name, w)
    for name, raw in _tensor_targets():
        sized = None if name == "where" else _sized(name)  # Tensor.where(condition, other) selects
        _set(torch.Tensor, name, op_wrapper(raw, "Tensor", name, "torch", "Tensor." + name, f"Tensor.{name}" in PRICED,
                                            sized))
    for name in ("backward", "grad"):
        fn = getattr(torch.autograd, name)
        _set(torch.autograd, name, op_wrapper(node_ranges.graphing(fn), "torch.autograd", name, "torch.autograd", name))
    for name, fn in distributed.targets():
        w = distributed.collective_wrapper(fn, name)
        _set(torch.distributed, name, w)
        # c10d compares ops by identity (P2POp accepts only its own isend/irecv) and calls them
        # by their module names: both names must be the one wrapper.
        c10d = torch.distributed.distributed_c10d
        if getattr(c10d, name, None) is fn:
            _set(c10d, name, w)
    for name, fn in distributed.binding_targets():
        _set(torch.distributed, name, distributed.collective_wrapper(fn, name))
    _set(torch.nn.Module, "__call__", module_call(torch.nn.Module.__call__))
    _set(torch._ops.OpOverloadPacket, "__call__", custom_ops.packet_call(torch._ops.OpOverloadPacket.__call__))
    for owner, name, wrapper in ddp_buckets.targets():
        _set(owner, name, wrapper)
    for cls in _all_subclasses(torch.optim.Optimizer):
        _wrap_step(cls)
    _set(torch.optim.Optimizer, "__init_subclass__", classmethod(_optimizer_init_subclass))
    # torch.cuda.amp's and torch.cpu.amp's GradScaler inherit them. step() runs the private
    # _check_inf_per_device instead of unscale_ for an optimizer that unscales in its own kernels.
    for name in ("unscale_", "_check_inf_per_device", "update"):
        _set(torch.amp.GradScaler, name, scaler_wrapper(vars(torch.amp.GradScaler)[name], name))
    _set(torch.jit, "script", _script)


def _unpatch() -> List[Tuple[Any, str, Any, Any]]:
    undone = []
    for owner, name, before, wrapper in reversed(_patches):
        # Whoever replaced our wrapper since keeps their replacement (and it keeps ours inside).
        if vars(owner).get(name) is not wrapper:
            continue
        undone.append((owner, name, before, wrapper))
        if before is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, before)
    undone.reverse()
    _patches.clear()
    for cls in _optimizer_classes:
        step = vars(cls).get("step")
        if is_wrapper(step):
            cls.step = step.__wrapped__
        elif is_wrapper(getattr(step, "__wrapped__", None)):
            # Optimizer put its hook runner around our wrapper at the first instance: keep a
            # hook runner, around the original.
            hooked = torch.optim.Optimizer.profile_hook_step(step.__wrapped__.__wrapped__)
            hooked.hooked = True  # type: ignore[attr-defined]
            cls.step = hooked
    _optimizer_classes.clear()
    return undone


def init(*, nested: bool = False, force: Optional[bool] = None) -> None:
    """See pyprof.init."""
    global _initialized
    with _lock:
        emit.state.compiling = torch.compiler.is_compiling
        emit.configure(nested=nested, force=emit.force_from_env() if force is None else force)
        if _initialized:
            return
        _prepare()
        _patch()
        defaults.swap({id(before): wrapper for _, _, before, wrapper in _patches if callable(before)},
                      _all_subclasses(torch.nn.Module))
        inductor.install()
        warnsite.install(wrappers.frame_codes, [wrappers, distributed])
        _initialized = True


def restore() -> None:
    """See pyprof.restore."""
    global _initialized
    with _lock:
        defaults.restore()
        _unpatch()
        inductor.uninstall()
        warnsite.uninstall()
        _initialized = False


@contextlib.contextmanager
def unpatched() -> Iterator[None]:
    """Run a block with every original back in place (for all threads), then put the wrappers
    back. Reentrant; used around torch.jit.script."""
    global _unpatched_depth
    with _lock:
        undone = _unpatch() if _unpatched_depth == 0 else []
        _unpatched_depth += 1
        try:
            yield
        finally:
            _unpatched_depth -= 1
            for owner, name, before, wrapper in undone:
                _patches.append((owner, name, before, wrapper))
                setattr(owner, name, wrapper)
            if undone and _initialized:
                for cls in _all_subclasses(torch.optim.Optimizer):
                    _wrap_step(cls)


def wrap(obj: Any, name: str) -> Callable:
    """See pyprof.wrap."""
    with _lock:
        target = getattr(obj, name, None)
        if callable(target):
            if is_wrapper(target):
                return target
            is_type = isinstance(obj, type)
            if isinstance(obj, types.ModuleType):
                mod, home, qualname = obj.__name__, obj.__name__, name
            elif is_type:
                mod, home, qualname = obj.__name__, obj.__module__, f"{obj.__qualname__}.{name}"
            else:
                mod = type(obj).__name__
                home, qualname = type(obj).__module__, f"{type(obj).__qualname__}.{name}"
            w: Any = op_wrapper(target, mod, name, home, qualname)
            # Bound (class- and static) methods already carry their binding: install them so
            # that the class does not bind them a second time.
            raw = next((vars(k)[name] for k in obj.__mro__ if name in vars(k)), None) if is_type else None
            _set(obj, name, staticmethod(w) if isinstance(raw, (staticmethod, classmethod)) else w)
            return w
        if not callable(obj):
            raise TypeError(f"pyprof.wrap: {obj!r} is not callable and has no callable attribute {name!r}")
        op = getattr(obj, "__name__", type(obj).__name__)
        return op_wrapper(obj, name, op, getattr(obj, "__module__", None) or name,
                          getattr(obj, "__qualname__", op))
