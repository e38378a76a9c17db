"""The compile-time table: what Inductor (on the CPU: C++ kernels) generated for a small model,
recorded under pyprof.init(), and its emission as NVTX marks."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="records what Inductor generates: needs torch")

import pyprof  # noqa: E402
from pyprof.nvtx import inductor  # noqa: E402

TINY = '''
import json
import torch
import torch.nn as nn
import pyprof
from pyprof.nvtx import inductor


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(self.ln(x)))  # line 16


pyprof.init()
model = torch.compile(Tiny())
x = torch.randn(4, 16, requires_grad=True)
model(x).sum().backward()
# profiled()'s ranges around compiled-graph calls (PyTorch's NVTX calls observed: no CUDA here).
from unittest import mock
from pyprof.nvtx import graph_calls
pushed = []
with mock.patch("torch.cuda.nvtx.range_push", pushed.append), \
        mock.patch("torch.cuda.nvtx.range_pop", lambda: pushed.append("pop")), \
        mock.patch("torch.autograd.ProfilerConfig", lambda *config: config), \
        mock.patch("torch.autograd._enable_profiler", lambda config, _: pushed.append(f"{config[0]} shapes={config[1]}")), \
        mock.patch("torch.autograd._disable_profiler", lambda: pushed.append("off")):
    with graph_calls.ranges():
        model(x).sum().backward()
    model(x).sum().backward()  # after the capture: no range
print(json.dumps(pushed))
# More tensors than an op marker lists (16): the table keeps whole lists.
extra = [nn.Parameter(torch.zeros(2)) for _ in range(14)]
for p in extra:
    p.grad = torch.ones(2)
opt = torch.optim.AdamW([*model.parameters(), *extra], foreach=True)
# Dynamo warns that it ignores Optimizer.step's own record_function: torch's, with or without pyprof.
import logging
torch._logging.set_logs(dynamo=logging.ERROR)
torch.compile(opt.step)()
with torch.no_grad():
    torch.compile(Tiny(), dynamic=True)(torch.randn(6, 16))
print(json.dumps(inductor.table()))
# A step of the compiled model recorded: the generated code's calls of wrapped torch functions
# (extern_kernels.addmm) push nothing.
from pyprof.nvtx.emit import recording
with recording() as rec:
    model(x).sum().backward()
print(json.dumps([[m["kind"], m.get("op") or m.get("module") or m.get("node")] for m in rec.markers]))
'''
F32 = "float32"


def t(*shape: int, dtype: str = F32, **extra) -> dict:
    return {"shape": list(shape), "dtype": dtype, **extra}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple:
    """The script's output lines, decoded, and its path."""
    script = tmp_path_factory.mktemp("tiny") / "tiny.py"
    script.write_text(TINY)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    # Nothing at interpreter exit either (module-tree weakref callbacks used to run after the
    # module's globals were cleared: "Exception ignored in ... 'NoneType' object is not callable").
    assert out.stderr == ""
    return [json.loads(line) for line in out.stdout.splitlines()], script


@pytest.fixture(scope="module")
def table(tiny) -> tuple:
    lines, script = tiny
    return lines[1], f"{script}:16"


@pytest.mark.slow
def test_graph_call_ranges(tiny) -> None:
    """Inside graph_calls.ranges() (profiled() without emit_nvtx) each call of a compiled graph,
    forward and backward, opens PyTorch's range, numbered, with PyTorch's NVTX op ranges on
    inside it (without shapes: a graph not compiled for CUDA graphs); outside, none."""
    pushed = tiny[0][0]
    assert pushed == ["## Call CompiledFxGraph None ## run 0 graph 0", "ProfilerState.NVTX shapes=False", "off", "pop",
                      "## Call CompiledFxGraph None ## run 1 graph 1", "ProfilerState.NVTX shapes=False", "off", "pop"]


@pytest.mark.slow
def test_compiled_graph_calls_push_no_op_markers(tiny) -> None:
    """The compiled forward's addmm (Inductor's extern kernel, bound to pyprof's wrapper of
    torch.addmm at Inductor's import) runs hidden: the step's markers are the module calls (the
    OptimizedModule's, then its `_orig_mod`'s, whose call wrapper runs eagerly around the compiled
    forward: dynamo_frames.py), the eager sum and backward call, and the backward range of sum's
    node."""
    assert tiny[0][2] == [["module", "OptimizedModule"], ["module", "_orig_mod"], ["op", "sum"], ["op", "backward"],
                          ["bwd", "SumBackward0"]]


@pytest.mark.slow
def test_graphs(table) -> None:
    entries, _ = table
    graphs = [e for e in entries if e["kind"] == "graph"]
    assert graphs == [{"v": 1, "kind": "graph", "graph": 0, "bwd": False, "device": "cpu", "cudagraphs": False, "calls": 3},
                      {"v": 1, "kind": "graph", "graph": 1, "bwd": True, "device": "cpu", "cudagraphs": False, "calls": 4},
                      {"v": 1, "kind": "graph", "graph": 2, "bwd": False, "device": "cpu", "cudagraphs": False, "calls": 1},
                      {"v": 1, "kind": "graph", "graph": 3, "bwd": False, "device": "cpu", "cudagraphs": False, "calls": 3}]


@pytest.mark.slow
def test_forward_kernels(table) -> None:
    entries, site = table
    fwd = [e for e in entries if e["kind"] == "kernel" and e["graph"] == 0]
    ln, addmm, relu = fwd
    # LayerNorm decomposed and fused into one C++ kernel: x, weight and bias read, the output,
    # mean and rstd (kept for the backward) written: 4x16 + 16 + 16 + 4x16 + 4 + 4 floats.
    assert ln["name"].startswith("cpp_fused") and not ln["extern"]
    assert ln["bytes"] == 4 * (64 + 16 + 16 + 64 + 4 + 4)
    assert [n["op"] for n in ln["nodes"]] == ["aten.var_mean.correction", "aten.add.Tensor", "aten.rsqrt.default",
                                              "aten.sub.Tensor", "aten.mul.Tensor", "aten.mul.Tensor", "aten.add.Tensor"]
    assert {(n["orig"], n["module"], n["site"]) for n in ln["nodes"]} == {("aten.native_layer_norm.default", "ln", site)}
    assert ln["nodes"][0]["args"] == [t(4, 16), [1]] and ln["nodes"][0]["out"] == [t(4, 1), t(4, 1)]
    # The Linear: a library call, described by its exact node (the weight's transpose is a view).
    assert addmm == {"v": 1, "kind": "kernel", "graph": 0, "call": 1, "name": "extern_kernels.addmm", "extern": True,
                     "nodes": [{"op": "aten.addmm.default", "args": [t(32), t(4, 16), t(16, 32, strides=[1, 16])],
                                "out": t(4, 32), "module": "fc", "site": site}]}
    # relu at the root (no module of its own), and the mask its backward needs: 4x32 floats
    # read and written, 4x32 bools written.
    assert relu["bytes"] == 4 * 128 * 2 + 128
    assert [(n["op"], n.get("module")) for n in relu["nodes"]] == [("aten.relu.default", None), ("aten.le.Scalar", None)]


@pytest.mark.slow
def test_backward_kernels(table) -> None:
    entries, site = table
    bwd = [e for e in entries if e["kind"] == "kernel" and e["graph"] == 1]
    assert [(e["name"], e["extern"]) for e in bwd][1:3] == [("extern_kernels.mm", True)] * 2
    dx, dw = bwd[1]["nodes"][0], bwd[2]["nodes"][0]
    assert (dx["args"], dx["module"]) == ([t(4, 32), t(32, 16)], "fc")  # dX = dY W (module from the forward op)
    assert (dw["args"], dw["module"]) == ([t(32, 4, strides=[1, 32]), t(4, 16)], "fc")
    origs = {n.get("orig") for n in bwd[3]["nodes"]}
    assert "aten.native_layer_norm_backward.default" in origs


@pytest.mark.slow
def test_compiled_optimizer_step(table) -> None:
    """torch.compile(opt.step) with foreach AdamW: one fused kernel of `aten._foreach_*` nodes,
    each priced as its element-wise op at every index of its lists."""
    from pyprof.prof.pricing.fx_nodes import KernelWork

    entries, _ = table
    [step] = [e for e in entries if e["kind"] == "kernel" and e["graph"] == 2]
    ops = {n["op"] for n in step["nodes"]}
    assert {"aten._foreach_addcmul.Scalar", "aten._foreach_addcdiv.Scalar", "aten._foreach_sqrt.default"} <= ops
    work = KernelWork(step)
    assert work.warnings == []
    # 604 parameter elements (LayerNorm 16 + 16, Linear 512 + 32, 14 x 2 more) through weight
    # decay (mul 1), exp_avg's lerp (sub 1, addcmul 2), exp_avg_sq (mul 1, addcmul 2), sqrt 1, two
    # divisions by the bias corrections (1 each), + eps 1, the addcdiv update 2: 13 per element;
    # the 18 step counters through 9 scalar ops (step + 1, two powers, two 1 - x, neg, div,
    # reciprocal, sqrt).
    assert len(step["nodes"][0]["args"][0]) == 18
    assert work.flops == 13 * 604 + 9 * 18
    assert work.bytes == step["bytes"]


@pytest.mark.slow
def test_dynamic_shapes_recorded_by_their_hints(table) -> None:
    """torch.compile(dynamic=True): the batch size is a symbol; nodes carry the size the graph was
    compiled for (6) and say so, with the symbol of each dynamic dim (the same for the input's
    rows and the output's: what prof binds from a call's op ranges), and are priced as the static
    graph's are."""
    from pyprof.prof.pricing.fx_nodes import KernelWork

    entries, _ = table
    dyn = [e for e in entries if e["kind"] == "kernel" and e["graph"] == 3]
    addmm = dyn[1]["nodes"][0]
    assert (addmm["op"], addmm["args"][1], addmm["out"], addmm["hinted"]) == (
        "aten.addmm.default", t(6, 16), t(6, 32), True)
    rows = addmm["dims"]["args"][1][0]
    assert rows.startswith("s") and addmm["dims"] == {"args": [None, [rows, None], None], "out": [rows, None]}
    assert [KernelWork(e).warnings for e in dyn] == [[], [], []]
    assert KernelWork(dyn[1]).flops == 2 * 6 * 16 * 32


def test_module_path_and_site() -> None:
    assert inductor.module_path("L['self'].blocks.0.attn") == "blocks.0.attn"
    assert inductor.module_path("L['self'].blocks[0].attn") == "blocks.0.attn"
    assert inductor.module_path("L['self']._modules['blocks']._modules['0']") == "blocks.0"
    assert inductor.module_path("G['model'].fc") == "fc"
    assert inductor.module_path("L['self']") == ""
    trace = ('  File "/x/train.py", line 9, in step\n    y = model(x)\n'
             f'  File "{os.path.dirname(pyprof.__file__)}/nvtx/wrappers.py", line 3, in w\n    pass\n')
    assert inductor.user_site(trace) == "/x/train.py:9"
    assert inductor.user_site(None) is None


# Two Linear blocks, a graph break in each one's forward hook, compiled (`model`, on `x`).
BROKEN_NET = '''
import json
import torch
import torch.nn as nn
import pyprof
from unittest import mock
from pyprof.nvtx import emit, graph_calls


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = torch.relu(b(x))
        return x


pyprof.init()
net = Net()
for b in net.blocks:
    b.register_forward_hook(lambda *_: torch._dynamo.graph_break())
model = torch.compile(net)
x = torch.randn(4, 8)
'''
BREAK = BROKEN_NET + '''
with torch.no_grad():
    model(x)
    pushed = []
    with mock.patch("torch.cuda.nvtx.range_push", pushed.append), mock.patch("torch.cuda.nvtx.range_pop", lambda: None):
        with graph_calls.ranges(), emit.recording():
            model(x)
from pyprof.nvtx import inductor
ops = {}
for m in inductor.table():
    if m["kind"] == "kernel":
        ops.setdefault(m["graph"], []).extend(n["op"] for n in m["nodes"])
print(json.dumps(ops))
print(json.dumps(pushed))
'''


@pytest.mark.slow
def test_graph_call_ranges_name_the_calling_module(tmp_path: Path) -> None:
    """A graph break in each block's forward hook: Dynamo compiles each Linear's call as a frame
    of its own, one graph for both, and the rest of Net.forward in graphs between them. Each
    call's range names the graph's table and the module whose code called the graph, relative to
    the compiled model; Net's own graphs name none (paths already relative to it)."""
    script = tmp_path / "brk.py"
    script.write_text(BREAK)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    ops, pushed = (json.loads(line) for line in out.stdout.splitlines()[-2:])
    assert pushed == [
        "## Call CompiledFxGraph None ## run 0 graph 2 in blocks.0", "## Call CompiledFxGraph None ## run 1 graph 3",
        "## Call CompiledFxGraph None ## run 2 graph 2 in blocks.1", "## Call CompiledFxGraph None ## run 3 graph 3"]
    assert ops["2"] == ["aten.addmm.default"] and ops["3"] == ["aten.relu.default"]


def test_op_ranges_leave_a_profiler_already_on(monkeypatch) -> None:
    """A profiler already on this thread (the user's, or emit_nvtx) is left alone: not turned on
    again, and ops_on() says so (the graph call then leaves it on after the call)."""
    import torch.autograd as autograd
    from pyprof.nvtx import graph_calls

    calls = []
    monkeypatch.setattr(autograd, "_profiler_enabled", lambda: True)
    monkeypatch.setattr(autograd, "_enable_profiler", lambda *a: calls.append("on"))
    monkeypatch.setattr(autograd, "_disable_profiler", lambda: calls.append("off"))
    assert graph_calls.ops_on() is False
    assert calls == []


def test_op_ranges_where_torch_cannot_turn_them_on(monkeypatch) -> None:
    """PyTorch refusing the NVTX profiler (a build without CUDA) leaves the body to run as is."""
    import torch.autograd as autograd
    from pyprof.nvtx import graph_calls

    calls = []

    def refuse(*_: object) -> None:
        raise RuntimeError("Can't use NVTX profiler - PyTorch was compiled without CUDA")

    monkeypatch.setattr(autograd, "_profiler_enabled", lambda: False)
    monkeypatch.setattr(autograd, "_enable_profiler", refuse)
    monkeypatch.setattr(autograd, "_disable_profiler", lambda: calls.append("off"))
    assert graph_calls.ops_on() is False
    assert calls == []


def test_op_ranges_turned_on_for_every_op_with_one_configuration(monkeypatch) -> None:
    """Where no profiler is on, ops_on() turns PyTorch's NVTX profiler on for every op (no scopes
    given), with one configuration built once for all calls, and says so."""
    import torch.autograd as autograd
    from pyprof.nvtx import graph_calls

    from pyprof.nvtx import node_ranges

    calls = []
    monkeypatch.setattr(autograd, "_profiler_enabled", lambda: False)
    monkeypatch.setattr(autograd, "_enable_profiler", lambda *a: calls.append(a))
    monkeypatch.setattr(autograd, "ProfilerConfig", lambda *config: config)
    node_ranges._settings.cache_clear()
    try:
        assert graph_calls.ops_on() is True
        assert graph_calls.ops_on() is True
        assert graph_calls.ops_on(shapes=True) is True
    finally:
        node_ranges._settings.cache_clear()  # built with the stand-in ProfilerConfig
    assert [len(a) for a in calls] == [2, 2, 2] and calls[0][1] == calls[1][1] == calls[2][1] == set()
    assert calls[0][0] is calls[1][0]
    assert (calls[0][0][1], calls[2][0][1]) == (False, True)  # ProfilerConfig's report_input_shapes


@pytest.mark.parametrize("turned_on", [True, False])
@pytest.mark.parametrize("fails", [False, True])
def test_graph_call_switches_op_ranges_inside_its_range(monkeypatch, turned_on: bool, fails: bool) -> None:
    """A graph call under ranges(): its numbered range, the op ranges turned on inside it, the
    graph, then the op ranges turned off (only if this call turned them on) and the range
    closed, also when the graph raises. A graph pyprof named (`graph 0`) and compiled for CUDA
    graphs gets shapes in its op ranges."""
    import types

    import torch.autograd as autograd
    import torch.cuda.nvtx as nvtx
    from pyprof.nvtx import graph_calls

    calls = []

    class CompiledFxGraph:
        def __call__(self, inputs):
            calls.append(("graph", inputs))
            if fails:
                raise ValueError("graph failed")
            return "out"

    monkeypatch.setitem(sys.modules, graph_calls._MODULE, types.SimpleNamespace(CompiledFxGraph=CompiledFxGraph))
    monkeypatch.setattr(nvtx, "range_push", lambda text: calls.append(("push", text)))
    monkeypatch.setattr(nvtx, "range_pop", lambda: calls.append("pop"))
    monkeypatch.setattr(graph_calls, "ops_on", lambda shapes=False: calls.append(("on", shapes)) or turned_on)
    monkeypatch.setattr(graph_calls, "sized_calls", lambda gid: gid == 0)
    monkeypatch.setattr(autograd, "_disable_profiler", lambda: calls.append("off"))
    named = CompiledFxGraph()
    named._pyprof_graph = 0
    with graph_calls.ranges() as can_run:
        assert can_run is True
        for graph in (CompiledFxGraph(), named):
            if fails:
                with pytest.raises(ValueError, match="graph failed"):
                    graph([1])
            else:
                assert graph([1]) == "out"
    off = ["off"] if turned_on else []
    assert calls == [("push", "## Call CompiledFxGraph None ## run 0"), ("on", False), ("graph", [1])] + off + ["pop"] + [
        ("push", "## Call CompiledFxGraph None ## run 1 graph 0"), ("on", True), ("graph", [1])] + off + ["pop"]
    assert "__call__" in vars(CompiledFxGraph) and CompiledFxGraph.__call__.__name__ == "__call__"


def test_caller_passes_a_method_that_deleted_its_self() -> None:
    """caller() reads `self` only in methods, and a method may have deleted it: that frame is no
    module's, and the walk goes on through frames counted as internal (here this file's)."""
    from pyprof.nvtx import graph_calls

    class Holder:
        def run(self) -> object:
            del self
            return graph_calls.caller(sys._getframe(), (__file__,))

    assert Holder().run() is None


def test_emit_marks_the_table(monkeypatch) -> None:
    import nvtx

    marked = []
    monkeypatch.setattr(nvtx, "mark", lambda message=None, domain=None, **kw: marked.append((message, domain)))
    monkeypatch.setattr(inductor, "markers", lambda: ['{"v":1,"kind":"graph"}', '{"v":1,"kind":"kernel"}'])
    assert inductor.emit() == 2
    assert marked == [('{"v":1,"kind":"graph"}', "pyprof"), ('{"v":1,"kind":"kernel"}', "pyprof")]


def test_init_turns_inductor_caches_off_and_restore_back() -> None:
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    before = (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache)
    pyprof.init()
    try:
        assert (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache) == (False, False)
    finally:
        pyprof.restore()
    assert (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache) == before


def test_module_tables_dropped_after_module_teardown(monkeypatch) -> None:
    """A model collected at interpreter exit, after pyprof's modules had their globals cleared to
    None (as CPython's finalisation does): its table is dropped, nothing is reported."""
    import gc

    import torch

    from pyprof.nvtx import wrappers

    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    wrappers._names_of(model)
    roots, key = wrappers._roots, id(model)
    assert key in roots
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    saved = dict(vars(wrappers))
    try:
        for name in saved:
            if not name.startswith("__"):
                setattr(wrappers, name, None)
        del model
        gc.collect()
    finally:
        vars(wrappers).update(saved)
    assert [u.exc_value for u in unraisable] == []
    assert key not in roots


def test_foreach_kernel_schedule_unpacked() -> None:
    """A Triton foreach kernel's schedule (a compiled optimizer step on the GPU) holds one fused
    scheduler node per tensor, which has no IR node of its own: the FX nodes are those of the
    nodes fused into each (the H100 capture of compiled_more.py --variant break recorded none)."""
    from types import SimpleNamespace

    from pyprof.nvtx.inductor import _fx_nodes

    def snode(*origins: str) -> SimpleNamespace:
        me = SimpleNamespace(node=SimpleNamespace(origins=list(origins)))
        me.get_nodes = lambda: [me]
        return me

    def fused(*parts: SimpleNamespace) -> SimpleNamespace:
        return SimpleNamespace(node=None, get_nodes=lambda: list(parts))

    marker = SimpleNamespace()  # EnableReduction/DisableReduction: no scheduler node
    schedule = [fused(snode("lerp_0"), snode("mul_0", "addcmul_0")), fused(snode("lerp_1")), marker, snode("sqrt")]
    assert list(_fx_nodes(schedule, False)) == ["lerp_0", "mul_0", "addcmul_0", "lerp_1", "sqrt"]


def test_uninstall_restores_the_compiled_graph_class() -> None:
    """install() names every CompiledFxGraph built after it by its table graph and hides its calls;
    uninstall() puts both methods back as they were."""
    from torch._inductor.output_code import CompiledFxGraph

    from pyprof.nvtx import inductor

    if inductor._installed:
        pytest.skip("pyprof.init() is on in this process")
    before = (vars(CompiledFxGraph)["__init__"], vars(CompiledFxGraph)["__call__"])
    inductor.install()
    try:
        inductor._patch_inductor()
        assert vars(CompiledFxGraph)["__init__"].__wrapped__ is before[0]
        assert vars(CompiledFxGraph)["__call__"].__wrapped__ is before[1]
    finally:
        inductor.uninstall()
    assert (vars(CompiledFxGraph)["__init__"], vars(CompiledFxGraph)["__call__"]) == before


SIZED = '''
import json
import torch
import torch._dynamo
from torch._dynamo.utils import counters
import pyprof
from pyprof.nvtx import emit


def f(x, idx):
    rows, slot = torch.where(idx == 1)
    y = torch.where(x > 0, x, 0.0)
    return (y[rows] * 2).sum()


def run(reset=True):
    if reset:
        torch._dynamo.reset()
    counters.clear()
    g = torch.compile(f)
    x, idx = torch.arange(64.0).reshape(16, 4) - 20, torch.tensor([[1, 0]] * 5 + [[2, 1]] * 11)
    g(x, idx)
    with emit.recording() as rec:
        out = g(x, idx)
    return {"graphs": counters["stats"]["unique_graphs"], "why": sorted(set(counters["graph_break"])),
            "ops": [m.get("op") for m in rec.markers], "marks": [json.loads(t)["out"] for t, _ in rec.marks],
            "out": float(out)}


plain = run()
torch._dynamo.reset()  # before init(): reset() drops Dynamo's start callbacks, pyprof's among them
pyprof.init()
annotated = run(reset=False)
torch._dynamo.config.capture_dynamic_output_shape_ops = True
captured = run()
print(json.dumps([plain, annotated, captured]))
'''


@pytest.mark.slow
def test_a_data_sized_op_at_a_graph_break_runs_with_its_marker(tmp_path: Path) -> None:
    """torch.where(idx == 1) breaks a compiled function's graph (nonzero's output size is the
    data's). Dynamo would run the original op at the break, without marker; pyprof's wrapper hands
    Dynamo a call it does not trace instead, at the same place, and the call runs with its marker
    and its out mark (16 indices found). The result is unchanged; the three-operand where, traced
    into the graph, has none. Where Dynamo captures such ops (capture_dynamic_output_shape_ops),
    nothing breaks, as without pyprof."""
    script = tmp_path / "sized.py"
    script.write_text(SIZED)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    plain, annotated, captured = json.loads(out.stdout.splitlines()[-1])
    assert plain["out"] == annotated["out"] == captured["out"] == 1892.0
    assert (plain["graphs"], len(plain["why"]), "aten.nonzero" in plain["why"][0]) == (2, 1, True)
    assert annotated["ops"] == ["where"] and annotated["marks"] == [[{"shape": [16], "dtype": "int64"}] * 2]
    # The break at the call pyprof hands Dynamo; the wrapper's own frame, which Dynamo compiles when
    # the resumed code calls it, is a graph of its own, as it was before this path.
    assert len(annotated["why"]) == 1 and "torch.compiler.disable" in annotated["why"][0]
    assert annotated["graphs"] == 3
    assert (captured["graphs"], captured["why"], captured["ops"], captured["marks"]) == (2, [], [], [])


GIVEN_UP = '''
import json
import torch
import torch.nn as nn
import torch._dynamo
from torch._dynamo.utils import counters
import pyprof
from pyprof.nvtx import emit


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.GRU(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.rnn(x)[0][-1])


def run():
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model, x = torch.compile(Net()), torch.randn(3, 2, 4)
    for _ in range(3):
        model(x).sum().backward()
    with emit.recording() as rec:
        out = model(x).sum()
    return {"why": sorted(k.splitlines()[0] for k in counters["graph_break"]), "out": float(out),
            "ops": [m.get("op") for m in rec.markers if m.get("kind") == "op"]}


plain = run()
torch._dynamo.reset()
pyprof.init(force=True)
print(json.dumps([plain, run()]))
'''


@pytest.mark.slow
def test_a_frame_dynamo_gives_up_on_breaks_nowhere_else(tmp_path: Path) -> None:
    """Dynamo cannot trace nn.GRU: it runs the model's forward eagerly and offers each Python frame
    called from there for compilation. With markers on, the wrappers' eager path calls pyprof's
    helpers, which Dynamo compiled too: graph breaks at the JSON encoder and at a tensor's hook
    dict, a recompile per call. pyprof.nvtx.dynamo_frames keeps them out, and its module-call
    wrapper, skipped as a frame as torch's own is, no longer reports GRU's break where it called
    it: no graph break is reported, as without pyprof; the result the same, the head's linear
    and the GRU output's indexing with their markers."""
    script = tmp_path / "given_up.py"
    script.write_text(GIVEN_UP)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    plain, annotated = json.loads(out.stdout.splitlines()[-1])
    assert plain["why"] == annotated["why"] == []
    assert plain["out"] == annotated["out"]
    assert plain["ops"] == [] and {"__getitem__", "linear"} <= set(annotated["ops"])


SHARED_ENTRY = '''
import json
import sys
import torch
import torch._dynamo
from torch._dynamo.utils import counters
import pyprof


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.out = torch.nn.Linear(8, 8), torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(8, 8)

    def forward(self, x):
        return self.rnn(x)[0]


def run():
    torch._dynamo.reset()
    counters.clear()
    x = torch.randn(4, 8)
    block = torch.compile(Block(), backend="eager")
    block(x)
    first = counters["stats"]["unique_graphs"]
    torch.compile(Recurrent(), backend="eager")(x.view(4, 1, 8))  # Dynamo gives up on its frame
    after = counters["stats"]["unique_graphs"]
    block(x)
    return [first, counters["stats"]["unique_graphs"] - after]


plain = run()
pyprof.init(force=True)
print(json.dumps([plain, run()]))
'''


@pytest.mark.slow
def test_a_model_dynamo_gives_up_on_leaves_the_other_compiled_models_alone(tmp_path: Path) -> None:
    """torch.compile(model) enters through model.__call__, which pyprof wraps, one code object for
    every module. Compiled as the entry frame, it held every model's graphs, and where Dynamo
    gave up on one model there (nn.GRU), it skipped that code for all: the first model compiled
    again at its next call (MobileNetV3's 20 s recompilation in a profiled step on an H200). The
    wrapper is skipped as a frame, as torch's own Module.__call__ is: one graph for the block, and
    after the GRU none again, with pyprof as without (here after a torch._dynamo.reset(), which
    forgets skipped frames: pyprof marks them again)."""
    script = tmp_path / "shared_entry.py"
    script.write_text(SHARED_ENTRY)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    plain, annotated = json.loads(out.stdout.splitlines()[-1])
    assert plain == annotated == [1, 0]


LEAVES = BROKEN_NET + '''
model(x).sum().backward()
w = nn.Parameter(torch.randn(8, 8))
project = torch.compile(lambda w, x: x @ w)
with torch.no_grad():
    project(w, x)
users = []
net.blocks[1].weight.register_hook(lambda g: users.append("user"))
with mock.patch("torch.cuda.nvtx.range_push", lambda t: None), mock.patch("torch.cuda.nvtx.range_pop", lambda: None):
    with graph_calls.ranges(), emit.recording() as rec:
        with torch.no_grad():
            project(w, x)
        model(x).sum().backward()
    with emit.recording() as after:
        model(x).sum().backward()
stored = lambda markers: [m for m in markers if m.get("node") == "AccumulateGrad"]
print(json.dumps([w._backward_hooks is None, stored(rec.markers), stored(after.markers), users,
                  [type(p._backward_hooks).__name__ for p in net.parameters()]]))
'''


@pytest.mark.slow
def test_leaves_of_training_graphs_store_their_gradients_in_ranges_of_their_own(tmp_path: Path) -> None:
    """While the graph ranges are on, each parameter a training graph takes opens an AccumulateGrad
    range when the engine stores its gradient, its marker naming the parameter (one graph runs for
    both blocks' weights after the graph break); an inference graph's call hooks nothing (its
    parameter `w`, which requires grad). After
    the capture the hooks are gone, and the user's own hook dict is left as it was."""
    script = tmp_path / "leaves.py"
    script.write_text(LEAVES)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    inference_unhooked, during, after, users, dicts = json.loads(out.stdout.splitlines()[-1])

    def stored(shape: list, param: str, module: str) -> dict:
        fwd = {"v": 1, "kind": "op", "mod": "torch._C._functions", "op": "AccumulateGrad",
               "args": [{"shape": shape, "dtype": "float32", "grad": True}], "kwargs": {"param": param},
               "module": module}
        return {"v": 2, "kind": "bwd", "node": "AccumulateGrad", "fwd": fwd}

    assert inference_unhooked
    assert during == [stored([8, 8], "weight", "blocks.1"), stored([8], "bias", "blocks.1"),
                      stored([8, 8], "weight", "blocks.0"), stored([8], "bias", "blocks.0")]
    assert after == [] and users == ["user", "user"]
    assert dicts == ["NoneType", "NoneType", "OrderedDict", "NoneType"]


RESET = '''
import json
import torch
import pyprof
from torch._dynamo.callback import callback_handler
from pyprof.nvtx import inductor

pyprof.init()
torch._dynamo.reset()  # clears every compile callback, pyprof's among them
torch.compile(torch.nn.Linear(4, 4))(torch.randn(2, 4))
kernels = sum(1 for m in inductor.table() if m["kind"] == "kernel")
pyprof.restore()
print(json.dumps([kernels, "clear" in vars(callback_handler)]))
'''


@pytest.mark.slow
def test_a_dynamo_reset_before_the_first_compile_keeps_the_table(tmp_path: Path) -> None:
    """torch._dynamo.reset() between pyprof.init() and the first compilation (a notebook, a test
    suite) clears Dynamo's compile callbacks: pyprof's comes back, and the compiled Linear's
    kernel is recorded; pyprof.restore() leaves the callback handler as torch made it."""
    script = tmp_path / "reset.py"
    script.write_text(RESET)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    assert json.loads(out.stdout.splitlines()[-1]) == [1, False]


def test_leaf_hooks_name_each_parameter_once_and_never_break_the_call() -> None:
    """LeafHooks.take on a training graph's inputs (the module that called it at `enc`): the
    parameters get one hook each, named, however often the graph runs; a non-leaf and a tensor
    that needs no gradient get none; remove() takes them out. A graph that cannot keep its leaf
    positions (no attributes) is skipped without an error: the graph call must run."""
    import types

    import torch

    from pyprof.nvtx.leaf_grads import LeafHooks

    fc = torch.nn.Linear(3, 2)
    x, y = torch.randn(4, 3), torch.randn(4, 3, requires_grad=True) * 2
    hooks, graph = LeafHooks(), types.SimpleNamespace()
    for _ in range(2):
        hooks.take(graph, [x, fc.weight, y, fc.bias], fc, "enc")
    texts = [p._backward_hooks["pyprof"].args[0] for p in (fc.weight, fc.bias)]
    assert [json.loads(t)["fwd"]["kwargs"]["param"] for t in texts] == ["weight", "bias"]
    assert {json.loads(t)["fwd"]["module"] for t in texts} == {"enc"}
    assert (x._backward_hooks, len(fc.weight._backward_hooks), graph._pyprof_leaves) == (None, 1, [1, 3])
    hooks.remove()
    assert (fc.weight._backward_hooks, fc.bias._backward_hooks) == (None, None)
    hooks.take(object(), [fc.weight], fc, "enc")
    assert fc.weight._backward_hooks is None


def test_random_state_wrapper_nodes_describe_the_op_they_run() -> None:
    """A random op that activation checkpointing recomputes reaches Inductor wrapped in a
    higher-order op carrying its random state (graphsafe_run_with_rng_state(op, *args,
    rng_state=...), run_with_rng_state(rng_state, op, *args)): the table describes the op it runs,
    its arguments and output (a compiled checkpointed GPT's cuDNN attention calls had no node and
    no price: 6% of its GPU time); a wrapped view computes nothing, as a view does."""
    import json

    import torch
    from torch._prims.rng_prims import graphsafe_run_with_rng_state, run_with_rng_state

    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4, 6, 8, 16, dtype=torch.bfloat16)
    state = g.placeholder("state")
    state.meta["val"] = torch.empty(2, dtype=torch.int64)
    dropout = torch.ops.aten.native_dropout.default
    out = (torch.empty(4, 6, 8, 16, dtype=torch.bfloat16), torch.empty(4, 6, 8, 16, dtype=torch.bool))
    safe = g.call_function(graphsafe_run_with_rng_state, (dropout, x, 0.1, True), {"rng_state": state})
    plain = g.call_function(run_with_rng_state, (state, dropout, x, 0.1, True))
    view = g.call_function(graphsafe_run_with_rng_state, (torch.ops.aten.view.default, x, [24, 128]), {"rng_state": state})
    for n in (safe, plain):
        n.meta["val"] = out
    expected = {"op": "aten.native_dropout.default", "args": [{"shape": [4, 6, 8, 16], "dtype": "bfloat16"}, 0.1, True],
                "out": [{"shape": [4, 6, 8, 16], "dtype": "bfloat16"}, {"shape": [4, 6, 8, 16], "dtype": "bool"}]}
    assert [json.loads(inductor._node_json(n) + "}") for n in (safe, plain)] == [expected, expected]
    assert [inductor._computes(n) for n in (safe, plain, view, x)] == [True, True, False, False]


FALLBACK = '''
import json
import torch
import pyprof
from pyprof.nvtx import inductor

pyprof.init()


def f(src, idx, x):
    out = torch.zeros(8, 4).scatter_reduce(0, idx, src, "amax", include_self=False)
    return out.sum() + torch.mm(x, x.t()).sum()


torch.compile(f)(torch.randn(16, 4), torch.randint(0, 8, (16, 4)), torch.randn(8, 4))
print(json.dumps([json.loads(m) for m in inductor.markers()]))
'''


@pytest.mark.slow
def test_a_mutating_fallback_is_a_call_site_of_its_own(tmp_path: Path) -> None:
    """scatter_reduce with include_self=False runs as Inductor's ScatterFallback, whose code line
    is written without the provenance hook: recorded anyway, a call site named by its in-place
    overload computing the graph's functional node alone, after the kernel that fills its
    destination, before the sum of its output (before, its kernels were the library call's before it: a GNN's
    scatter_reduce_ amax kernels were its addmm's, 17% of its compiled step na)."""
    script = tmp_path / "fallback.py"
    script.write_text(FALLBACK)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True, timeout=600)
    calls = [(m["name"], m["extern"], [n["op"] for n in m["nodes"]]) for m in json.loads(out.stdout.splitlines()[-1])
             if m.get("kind") == "kernel"]
    assert calls[1:4] == [("aten.scatter_reduce_.two", True, ["aten.scatter_reduce.two"]),
                          ("cpp_fused_sum_1", False, ["aten.sum.default"]),
                          ("extern_kernels.mm", True, ["aten.mm.default"])]
    assert calls[0][0].startswith("cpp_fused_") and "aten.scatter_reduce.two" in calls[0][2]


def test_uninstall_restores_the_schedulers_extern_call() -> None:
    """install() wraps Scheduler.codegen_extern_call (the fallbacks' call sites); uninstall() puts
    it back."""
    from torch._inductor.scheduler import Scheduler

    from pyprof.nvtx import inductor

    if inductor._installed:
        pytest.skip("pyprof.init() is on in this process")
    before = vars(Scheduler)["codegen_extern_call"]
    inductor.install()
    try:
        inductor._patch_inductor()
        assert vars(Scheduler)["codegen_extern_call"].__wrapped__ is before
    finally:
        inductor.uninstall()
    assert vars(Scheduler)["codegen_extern_call"] is before
