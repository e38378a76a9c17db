"""What each kernel of a torch.compile'd program computes, recorded while Inductor generates it.

Kernels of a compiled graph run without pyprof's op markers: the generated code calls Triton,
C++ and library kernels directly. Inductor itself knows, for every kernel it emits, the FX nodes
it computes (with their shapes, dtypes, `nn_module_stack` and `stack_trace`) and how many bytes
the fused kernel reads and writes. It hands each kernel, at its call site in the generated code,
to its provenance hook (`torch._inductor.debug.set_kernel_post_grad_provenance_tracing`): we
observe that hook, call the original unchanged and keep one JSON line per call site (the
`kernel` marker of docs/markers.md). `pyprof.profiled()` puts the lines into the trace as NVTX
marks in the `pyprof` domain, so a trace explains its own compiled kernels; `pyprof.parse`
joins kernels to them (pyprof/parse/compiled_kernels.py).

At run time only a depth counter around each graph call runs: the torch functions the generated
code calls (`extern_kernels.mm` is the wrapper of `torch.mm` when Inductor is imported after
init()) then push no op markers, as the docs say of compiled kernels.
"""
from __future__ import annotations

import json
import re
import sys
import threading
import time
import weakref
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Callable, Dict, Iterable, List, Optional

import torch

from ..formats import DOMAIN, MARKER_VERSION
from .dynamo_frames import skip_helpers
from .marker import encode
from .site import is_internal
from . import wrappers
from .wrappers import hiding

_HOOK = "set_kernel_post_grad_provenance_tracing"
_lock = threading.RLock()
_installed = False
_original: Optional[Callable] = None
_patched: List[Any] = []          # modules whose hook attribute we replaced
_saved_config: List[tuple] = []   # (config module, name, value before install)
_graphs: List["_Graph"] = []      # every graph recorded in this process, in compile order
_by_lowering: "weakref.WeakKeyDictionary[Any, _Graph]" = weakref.WeakKeyDictionary()
failures = 0                      # call sites that could not be recorded (the compile goes on)
record_ns = 0                     # time spent recording, for the compile-time benchmark
# The Inductor methods pyprof replaced (CompiledFxGraph's: _hide_graph_calls, _name_graphs;
# Scheduler's: _record_fallbacks), by (class, name), as they were.
_replaced: Dict[tuple, Callable] = {}
hooked = 0                        # call sites the provenance hook gave (_record_fallbacks compares)
# The attribute _name_graphs sets on a CompiledFxGraph: its table graph's id.
_GRAPH_ID = "_pyprof_graph"

# An nn_module_stack entry names a module by the Python source Dynamo read it from:
# `L['self'].blocks.0.attn`, `L['self'].blocks[0]`, `L['self']._modules['blocks']._modules['0']`,
# `G['model'].fc`. The first token is the compiled root; the rest is the qualified name.
_ROOT = re.compile(r"^(?:[LG]\[(?:'[^']*'|\"[^\"]*\")\]|[A-Za-z_]\w*)")
_ITEM = re.compile(r"(?:\._modules)?\[(?:'([^']*)'|\"([^\"]*)\"|(\d+))\]")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


class _Graph:
    """The call sites of one compiled graph (one Inductor compilation), in generated-code order."""

    __slots__ = ("gid", "bwd", "device", "cudagraphs", "calls", "nodes", "order", "hinted", "trains", "__weakref__")

    def __init__(self, gid: int, bwd: bool, device: Optional[str], cudagraphs: bool) -> None:
        self.gid = gid
        self.bwd = bwd
        self.device = device
        self.cudagraphs = cudagraphs
        # (kernel name, extern, bytes or None, FX node names, the names among them whose output
        # the kernel's own buffers are)
        self.calls: List[tuple] = []
        self.nodes: Dict[str, str] = {}  # FX node name -> its JSON (docs/markers.md)
        self.order: Dict[Any, int] = {}  # FX node -> position in its graph
        # A library call's node has sizes the graph was compiled for in place of symbolic ones
        # (dynamic shapes): the sizes of a call come from its op ranges (graph_calls).
        self.hinted = False
        self.trains = False

    def marker(self) -> str:
        """The `graph` marker: what every kernel marker of this graph shares."""
        return json.dumps({"v": MARKER_VERSION, "kind": "graph", "graph": self.gid, "bwd": self.bwd,
                           "device": self.device, "cudagraphs": self.cudagraphs, "calls": len(self.calls)},
                          separators=(",", ":"))

    def kernel_markers(self) -> List[str]:
        """One `kernel` marker per call site. A node's work belongs to one call site: the first
        library or template kernel that computes exactly that node, else the first kernel it
        appears in (Inductor lists a node under every kernel its lowering touched: an attention
        backward under the kernel that lays out its inputs, an inlined node under each consumer).
        The node's other appearances say `"again": true`."""
        owner: Dict[str, int] = {}
        for i, (_, extern, _, names, exact) in enumerate(self.calls):
            if extern or exact:
                for n in exact if not extern else names:
                    owner.setdefault(n, i)
        for i, (_, _, _, names, _) in enumerate(self.calls):
            for n in names:
                owner.setdefault(n, i)
        out = []
        for i, (name, extern, nbytes, names, _) in enumerate(self.calls):
            nodes = ",".join(self.nodes[n] + "}" if owner[n] == i else self.nodes[n] + ',"again":true}' for n in names)
            out.append(f'{{"v":{MARKER_VERSION},"kind":"kernel","graph":{self.gid},"call":{i},"name":{_quote(name)},'
                       f'"extern":{"true" if extern else "false"}' + ("" if nbytes is None else f',"bytes":{nbytes}')
                       + f',"nodes":[{nodes}]}}')
        return out


def module_path(source: str) -> str:
    """The qualified module name in one `nn_module_stack` entry's source: `blocks.0.attn` for
    `L['self'].blocks[0].attn`; "" for the compiled root itself."""
    rest = _ROOT.sub("", source, count=1)
    rest = _ITEM.sub(lambda m: "." + next(g for g in m.groups() if g is not None), rest)
    return rest.lstrip(".")


def user_site(stack_trace: Optional[str]) -> Optional[str]:
    """`file:line` of the innermost frame of a node's `stack_trace` outside torch and pyprof."""
    for name, line in reversed(_FRAME.findall(stack_trace or "")):
        if not is_internal(name):
            return f"{name}:{line}"
    return None


def _module(meta: dict) -> Optional[str]:
    # Backward nodes carry the forward op's stack under fwd_nn_module_stack.
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    entry = list(stack.values())[-1]
    source = entry[0] if isinstance(entry, tuple) else entry
    return module_path(source) if isinstance(source, str) else None


def _hinted(v: Any, hinted: list) -> Any:
    """`v` with symbolic sizes (dynamic shapes) replaced by their hints: the sizes of the inputs
    the graph was compiled for. Appends to `hinted` when it replaced one; a size without a hint
    (data-dependent) stays symbolic and encodes as unknown."""
    if isinstance(v, torch.SymInt):
        hint = v.node.hint
        if hint is None:
            return v
        hinted.append(v)
        return int(hint)
    if isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in (*v.shape, *v.stride())):
        try:
            return torch.empty_strided([_hinted(d, hinted) for d in v.shape], [_hinted(d, hinted) for d in v.stride()],
                                       dtype=v.dtype, device="meta")
        except Exception:  # a size without a hint: the tensor stays as it is (shape unknown)
            return v
    if isinstance(v, (list, tuple)):
        return [_hinted(x, hinted) for x in v]
    return v


def _value(a: Any, hinted: list) -> Any:
    """An FX argument with every node replaced by the value it stands for (a fake tensor),
    symbolic sizes by their hints."""
    if isinstance(a, torch.fx.Node):
        return _hinted(a.meta.get("val"), hinted)
    if isinstance(a, (list, tuple)):
        return [_value(x, hinted) for x in a]
    return _hinted(a, hinted)


def _dims(v: Any) -> Any:
    """The symbolic sizes of an FX argument, shaped as _value's result: a tensor's, a list of each
    dim's expression (`s0`, `2*s0`) or None where the dim is static; None for all else (and for a
    tensor whose sizes are all static). What prof resolves from a call's library ranges
    (pyprof/prof/pricing/call_sizes.py)."""
    if isinstance(v, torch.fx.Node):
        v = v.meta.get("val")
    if isinstance(v, torch.Tensor):
        dims = [str(d.node.expr) if isinstance(d, torch.SymInt) else None for d in v.shape]
        return dims if any(d is not None for d in dims) else None
    if isinstance(v, (list, tuple)):
        dims = [_dims(x) for x in v]
        return dims if any(d is not None for d in dims) else None
    return None


def _whole(v: Any) -> str:
    """JSON of a node's value, lists in full: op markers cut long lists short (`{"more": N}`), but
    a compiled optimizer step's tensor lists are its work, and the table is written once."""
    if isinstance(v, list):
        return "[" + ",".join(_whole(x) for x in v) + "]"
    return encode(v)


def _runs(n: torch.fx.Node) -> tuple:
    """(target, args, kwargs) of the op a node runs: a higher-order op's that runs an op overload
    passed to it (the random-state wrappers AOTAutograd puts around a random op that activation
    checkpointing recomputes: graphsafe_run_with_rng_state(op, *args, rng_state=...),
    run_with_rng_state(rng_state, op, *args), run_and_save_rng_state(op, *args)), else its own."""
    if isinstance(n.target, torch._ops.HigherOrderOperator):
        for i, a in enumerate(n.args):
            if isinstance(a, torch._ops.OpOverload):
                return a, n.args[i + 1:], {k: v for k, v in n.kwargs.items() if k != "rng_state"}
    return n.target, n.args, n.kwargs


def _node_json(n: torch.fx.Node) -> str:
    """The node's JSON object without its closing brace (kernel_markers() may add `again`)."""
    meta = n.meta
    hinted: list = []
    target, args, kwargs = _runs(n)
    parts = ['{"op":' + _quote(str(target)), '"args":' + _whole(_value(list(args), hinted))]
    if kwargs:
        parts.append('"kwargs":{' + ",".join(_quote(k) + ":" + _whole(_value(v, hinted)) for k, v in kwargs.items())
                     + "}")
    parts.append('"out":' + _whole(_hinted(meta.get("val"), hinted)))
    if hinted:
        parts.append('"hinted":true')
        # Each hinted tensor's symbolic dims, by the position of its argument (and the output's).
        parts.append('"dims":' + json.dumps({"args": _dims(list(args)), "out": _dims(meta.get("val"))}))
    orig = meta.get("original_aten")
    if orig is not None and str(orig) != str(target):
        parts.append('"orig":' + _quote(str(orig)))
    module = _module(meta)
    if module is not None:
        parts.append('"module":' + _quote(module))
    site = user_site(meta.get("stack_trace"))
    if site is not None:
        parts.append('"site":' + _quote(site))
    return ",".join(parts)


def _computes(n: Any) -> bool:
    # Views and getitem compute nothing and move nothing: torch's schema says which ops are views.
    if not isinstance(n, torch.fx.Node):
        return False
    target = _runs(n)[0]
    return isinstance(target, torch._ops.OpOverload) and not target.is_view


def _graph(lowering: Any) -> _Graph:
    g = _by_lowering.get(lowering)
    if g is None:
        from torch._inductor import config

        device = getattr(lowering, "device_type", None)
        g = _Graph(len(_graphs), bool(getattr(lowering, "is_backward", False)), device,
                   bool(getattr(config.triton, "cudagraphs", False)))
        # A training graph's forward: an inference graph's leaves get no gradient, and a
        # backward's inputs are saved tensors and gradients.
        g.trains = not g.bwd and getattr(lowering, "is_inference", True) is False
        _graphs.append(g)
        _by_lowering[lowering] = g
    return g


def _fx_nodes(node_schedule: Any, is_extern: bool) -> Iterable[Any]:
    if is_extern:
        # Its origins also hold the nodes of inputs Inductor computed into it; origin_node (or,
        # for a fallback, the nodes of its own op) is the one it computes.
        exact = getattr(node_schedule, "origin_node", None)
        if exact is not None:
            yield exact
            return
        op = getattr(node_schedule, "op_overload", None)
        own = [n for n in node_schedule.origins if n.target is op] \
            or [n for n in node_schedule.origins if _functional_of(n.target, op)]
        yield from own or node_schedule.origins
        return
    for snode in _scheduler_nodes(node_schedule):
        ir = getattr(snode, "node", None)
        if ir is not None:
            yield from ir.origins


def _functional_of(target: Any, op: Any) -> bool:
    """Whether FX node target `target` is the functional form of in-place overload `op` (a
    mutating fallback's aten.scatter_reduce_.two computes the graph's aten.scatter_reduce.two)."""
    try:
        return op._schema.name.endswith("_") and target._schema.name == op._schema.name[:-1] \
            and target._overloadname == op._overloadname
    except AttributeError:
        return False


def _scheduler_nodes(node_schedule: Any) -> Iterable[Any]:
    """The scheduler nodes of a kernel's schedule, fused ones unpacked: a foreach (combo) kernel's
    schedule holds one fused node per tensor of its lists, with no IR node of its own."""
    for item in node_schedule:
        get_nodes = getattr(item, "get_nodes", None)
        if callable(get_nodes):  # not the schedule's EnableReduction/DisableReduction markers
            yield from get_nodes()


def _bytes(node_schedule: Any) -> Optional[int]:
    """Inductor's own estimate of what the fused kernel reads and writes (the fused scheduler
    node's buffer accesses: buffers produced and consumed inside the kernel are not counted)."""
    fused = {}
    for snode in node_schedule:
        scheduler = getattr(snode, "scheduler", None)
        if scheduler is None or not hasattr(snode, "get_name"):
            continue
        f = scheduler.name_to_fused_node.get(snode.get_name(), snode)
        fused[id(f)] = f
    if not fused:
        return None
    return sum(f.get_read_write_buffers_sizes() for f in fused.values())


def _record(node_schedule: Any, kernel_name: str, is_extern: bool) -> None:
    from torch._inductor.virtualized import V

    g = _graph(V.graph)
    if not g.order:
        g.order = {n: i for i, n in enumerate(V.graph.module.graph.nodes)}
    nodes = sorted({n for n in _fx_nodes(node_schedule, is_extern) if _computes(n)},
                   key=lambda n: g.order.get(n, 1 << 30))
    for n in nodes:
        if n.name not in g.nodes:
            g.nodes[n.name] = _node_json(n)
    # (A quoted string holding the same characters is escaped: \"hinted\".)
    if is_extern and any('"hinted":true' in g.nodes[n.name] for n in nodes):
        g.hinted = True
    exact = set()
    nbytes = None
    if not is_extern:
        nbytes = _bytes(node_schedule)
        for snode in _scheduler_nodes(node_schedule):
            ir = getattr(snode, "node", None)
            origin = getattr(ir, "origin_node", None) if ir is not None else None
            if origin is not None and getattr(ir, "make_kernel_render", None) is not None:
                exact.add(origin.name)  # a template kernel computes its GEMM node exactly
    g.calls.append((kernel_name, is_extern, None if nbytes is None else int(nbytes), [n.name for n in nodes], exact))


def _hook(node_schedule: Any, kernel_name: str, is_extern: bool = False, *args: Any, **kwargs: Any) -> Any:
    global hooked
    if kernel_name:
        hooked += 1
        _hook_call(node_schedule, kernel_name, is_extern)
    return _original(node_schedule, kernel_name, is_extern, *args, **kwargs)  # type: ignore[misc]


def _hook_call(node_schedule: Any, kernel_name: str, is_extern: bool) -> None:
    """Record one call site (_record), timed; never failing the compile."""
    global failures, record_ns
    with _lock:
        t0 = time.perf_counter_ns()
        try:
            _record(node_schedule, kernel_name, is_extern)
        except Exception:
            # A table entry missing is a kernel shown as before; a compile that fails is not.
            failures += 1
        record_ns += time.perf_counter_ns() - t0


def _patch_inductor(*_: Any) -> None:
    """Observe Inductor's provenance hook (at the first compilation: importing Inductor's code
    generators at pyprof.init() would cost every program that never compiles)."""
    global _original
    with _lock:
        if not _installed or _original is not None:
            return
        try:
            from torch._inductor import debug
        except ImportError:
            return
        original = getattr(debug, _HOOK, None)
        if original is None:
            return  # a torch without the hook: compiled kernels stay unexplained
        _original = original
        # Code generators bind the name at import: replace it wherever it is already bound.
        for mod in [debug] + [m for name, m in list(sys.modules.items()) if name.startswith("torch._inductor.")]:
            if getattr(mod, _HOOK, None) is original:
                setattr(mod, _HOOK, _hook)
                _patched.append(mod)
        _hide_graph_calls()
        _name_graphs()
        _record_fallbacks()
        _sized_calls_eager()


def _patch_method(module: str, cls_name: str, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace the method `name` of Inductor's class `module.cls_name` by wrap(original), once;
    uninstall() puts it back."""
    try:
        cls = getattr(__import__(module, fromlist=[cls_name]), cls_name)
    except (ImportError, AttributeError):
        return
    original = vars(cls).get(name)
    if original is None or (cls, name) in _replaced:
        return
    _replaced[(cls, name)] = original
    wrapped = wrap(original)
    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(cls, name, wrapped)


def _patch_graph_class(name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace CompiledFxGraph's method `name` by wrap(original) (_patch_method)."""
    _patch_method("torch._inductor.output_code", "CompiledFxGraph", name, wrap)


def _record_fallbacks() -> None:
    """Record the extern calls whose code Inductor writes without its provenance hook (the
    mutating fallbacks, ScatterFallback's scatter_ and scatter_reduce_, IndexPutFallback's
    index_put_, in-place bernoulli_ and copy_, write their line without codegen_comment): each
    a call site named by its op overload, so that the kernels it launches are not given to the
    library call before it (a GNN's scatter_reduce_ amax kernels were its addmm's)."""

    def recorded(original: Callable) -> Callable:
        def codegen_extern_call(self: Any, scheduler_node: Any) -> Any:
            before = hooked
            out = original(self, scheduler_node)
            node = getattr(scheduler_node, "node", None)
            op = getattr(node, "op_overload", None)
            if hooked == before and isinstance(op, torch._ops.OpOverload):
                _hook_call(node, str(op), True)
            return out
        return codegen_extern_call

    _patch_method("torch._inductor.scheduler", "Scheduler", "codegen_extern_call", recorded)


def _hide_graph_calls() -> None:
    """Run every compiled graph with pyprof's wrappers silent (wrappers.hiding): its kernels
    are this module's to explain, and the generated code calls wrapped torch functions."""
    _patch_graph_class("__call__", hiding)


def _name_graphs() -> None:
    """Give every CompiledFxGraph built from now on the id of the table graph its lowering
    recorded (graph_id()): each call's range names it (pyprof.nvtx.graph_calls), so that parse
    need not guess between graphs whose kernels have the same names (every graph numbers its
    kernels from 0: a MoE expert's linear and a convolution both run `triton_poi_fused__to_copy_0`
    and `_1`, casts, before their library kernel)."""

    def named(original: Callable) -> Callable:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            # CompiledFxGraph(current_callable, graph: GraphLowering, ...): generated by then.
            lowering = kwargs["graph"] if "graph" in kwargs else args[1] if len(args) > 1 else None
            g = None if lowering is None else _by_lowering.get(lowering)
            if g is not None:
                setattr(self, _GRAPH_ID, g.gid)
        return init

    _patch_graph_class("__init__", named)


def _call(fn: Callable, args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)


def _dynamic_outputs_break() -> bool:
    from torch._dynamo import config

    return not config.capture_dynamic_output_shape_ops


def _sized_calls_eager() -> None:
    """Give the wrappers of data-sized ops their way through Dynamo (wrappers.eager_call): a call
    Dynamo does not trace, at the graph break the op makes anyway, so that it runs with its
    marker and out mark."""
    wrappers.eager_call = torch.compiler.disable(_call)
    wrappers.breaks_at_sized = _dynamic_outputs_break


def graph_id(compiled: Any) -> Optional[int]:
    """The table graph (its `graph` marker's id) of a CompiledFxGraph, where pyprof saw it
    generated; else None."""
    return getattr(compiled, _GRAPH_ID, None)


def sized_calls(gid: int) -> bool:
    """Whether the op ranges inside a call of table graph `gid` need their inputs' shapes: it was
    compiled to run as CUDA graphs (the graph tree's input copies are priced by them), or one of
    its library calls has sizes that vary from call to call (dynamic shapes: the table holds the
    sizes it was compiled for)."""
    return 0 <= gid < len(_graphs) and (_graphs[gid].cudagraphs or _graphs[gid].hinted)


def trains(gid: int) -> bool:
    """Whether table graph `gid` is the forward of a training graph (its leaf inputs get
    gradients: pyprof.nvtx.leaf_grads)."""
    return 0 <= gid < len(_graphs) and _graphs[gid].trains


def cache_switches() -> List[tuple]:
    """The (config module, attribute) of each compile cache install() turns off, where this torch
    has it: a cached graph skips code generation altogether, so its kernels would never be seen."""
    out = []
    try:
        import torch._inductor.config as inductor_config

        out.append((inductor_config, "fx_graph_cache"))
    except ImportError:
        pass
    try:
        import torch._functorch.config as functorch_config

        out.append((functorch_config, "enable_autograd_cache"))
    except ImportError:
        pass
    return [(m, n) for m, n in out if hasattr(m, n)]


def install() -> None:
    """Record every kernel Inductor generates from now on (pyprof.init()). Turns off Inductor's
    FX-graph and AOTAutograd caches while installed: a graph loaded from them is never generated."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        for mod, name in cache_switches():
            _saved_config.append((mod, name, getattr(mod, name)))
            setattr(mod, name, False)
        # Now, not at the first compilation: by then Dynamo has taken the module-call wrapper
        # as the frame it compiles (dynamo_frames.py); again after each reset (_survive_resets).
        skip_helpers()
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:
            _patch_inductor()
            return
        callback_handler.register_start_callback(_patch_inductor)
        _survive_resets(callback_handler)


def _survive_resets(handler: Any) -> None:
    """Register _patch_inductor again whenever Dynamo's compile callbacks are cleared
    (torch._dynamo.reset() clears every one) before a compilation has run it: a reset between
    pyprof.init() and the first compile would leave every kernel of the program unrecorded. And
    mark pyprof's frames skipped again (dynamo_frames.py): reset() forgets what each code object
    was marked, before it clears the callbacks."""
    clear = handler.clear

    def cleared(*args: Any, **kwargs: Any) -> Any:
        out = clear(*args, **kwargs)
        if _installed and _original is None and _patch_inductor not in handler.start_callbacks:
            handler.register_start_callback(_patch_inductor)
        if _installed:
            skip_helpers()
        return out

    cleared.__wrapped__ = clear  # type: ignore[attr-defined]
    handler.clear = cleared


def uninstall() -> None:
    """Undo install() (pyprof.restore()); the tables recorded so far are kept."""
    global _installed, _original
    with _lock:
        if not _installed:
            return
        _installed = False
        try:
            from torch._dynamo.callback import callback_handler

            if _patch_inductor in callback_handler.start_callbacks:
                callback_handler.remove_start_callback(_patch_inductor)
            if "clear" in vars(callback_handler):  # _survive_resets' wrapper
                del callback_handler.clear
        except ImportError:
            pass
        for mod in _patched:
            if getattr(mod, _HOOK, None) is _hook:
                setattr(mod, _HOOK, _original)
        _patched.clear()
        for (cls, name), original in _replaced.items():
            if getattr(vars(cls).get(name), "__wrapped__", None) is original:
                setattr(cls, name, original)
        _replaced.clear()
        _original = None
        for mod, name, value in _saved_config:
            setattr(mod, name, value)
        _saved_config.clear()


def markers() -> List[str]:
    """Every table line recorded so far: per graph, its `graph` marker then its `kernel` markers."""
    with _lock:
        out = []
        for g in _graphs:
            out.append(g.marker())
            out.extend(g.kernel_markers())
        return out


def table() -> List[dict]:
    """markers(), decoded (for tests and notebooks)."""
    return [json.loads(m) for m in markers()]


def emit() -> int:
    """Put the table into the trace: one NVTX mark per line in the pyprof domain (a no-op when no
    NVTX tool is attached). Returns the number of marks."""
    texts = markers()
    if texts:
        import nvtx

        for text in texts:
            nvtx.mark(message=text, domain=DOMAIN)
    return len(texts)


__all__ = ["install", "uninstall", "markers", "table", "emit", "module_path", "user_site"]
