"""Op ranges carry the autograd sequence number as their payload; inside profiled() PyTorch's node
ranges replace pyprof's node hooks (pyprof.nvtx.node_ranges), but in a program that can run
compiled graphs (pyprof.nvtx.graph_calls)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the wrappers annotate torch calls")

from pyprof.nvtx import emit, graph_calls, node_ranges, recording  # noqa: E402

GAP = 1 << 40  # docs/markers.md, "Payload": the gap's lowest bit


class _Double(torch.autograd.Function):
    """An autograd Function no wrapper sees: its node is made between two op ranges."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_each_op_range_carries_the_sequence_number_of_the_node_its_call_creates(pyprof_on) -> None:
    w = torch.randn(3, 3, requires_grad=True)
    with recording() as rec:
        y = torch.mm(w, w)
        z = y.relu()
        with torch.no_grad():
            w.mul(2)  # no node: the next op range carries the same number
        s = z.sum()
        s.backward()
    payloads = {r.marker["op"]: r.payload for r in rec.ranges if r.marker["kind"] == "op"}
    seqs = [y.grad_fn._sequence_nr(), z.grad_fn._sequence_nr(), s.grad_fn._sequence_nr()]
    assert seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2]
    assert payloads == {"mm": seqs[0], "relu": seqs[1], "mul": seqs[2], "sum": seqs[2], "backward": seqs[2] + 1}


def test_nodes_made_between_op_ranges_are_counted_as_a_gap_in_the_next_payload(pyprof_on) -> None:
    w = torch.randn(3, requires_grad=True)
    with recording() as rec:
        a = w.exp()
        # apply makes its node before forward runs, outside every op range; forward runs
        # without grad (its mul makes no node).
        b = _Double.apply(_Double.apply(a))
        c = b.sum()
    ops = [r for r in rec.ranges if r.marker["kind"] == "op"]
    assert [r.marker["op"] for r in ops] == ["exp", "__mul__", "__mul__", "sum"]
    s0 = a.grad_fn._sequence_nr()
    assert [b.grad_fn._sequence_nr(), c.grad_fn._sequence_nr()] == [s0 + 2, s0 + 3]
    # Each apply's node lies in the gap before the mul inside it: given to no op range.
    assert [r.payload for r in ops] == [ops[0].payload, (s0 + 2) | GAP, (s0 + 3) | GAP, s0 + 3]
    assert ops[0].payload & (GAP - 1) == s0


def test_outside_profiled_the_node_hooks_stay(pyprof_on) -> None:
    w = torch.randn(3, requires_grad=True)
    with recording() as rec:
        w.exp().sum().backward()
    assert [r.marker["kind"] for r in rec.ranges].count("bwd") == 2


def _fake_profiler(monkeypatch, calls: list, enabled: list) -> None:
    """torch.autograd's profiler switches, recording their calls (a CPU build cannot turn the
    NVTX profiler on)."""

    def enable(config, activities, scopes=None):
        calls.append("enable nodes" if scopes else "enable ops")
        enabled.append(True)

    def disable():
        calls.append("disable")
        enabled.pop()

    monkeypatch.setattr(torch.autograd, "_enable_profiler", enable)
    monkeypatch.setattr(torch.autograd, "_disable_profiler", disable)
    monkeypatch.setattr(torch.autograd, "_profiler_enabled", lambda: bool(enabled))


def test_node_ranges_replace_the_hooks_for_the_block(pyprof_on, monkeypatch) -> None:
    calls: list = []
    enabled: list = []
    _fake_profiler(monkeypatch, calls, enabled)
    w = torch.randn(3, requires_grad=True)
    with recording() as rec:
        with node_ranges.node_ranges() as nodes:
            assert nodes is True and not emit.state.hooks
            w.exp().sum().backward()
            # Already on: a nested block changes nothing.
            with node_ranges.node_ranges() as again:
                assert again is False and not emit.state.hooks
            assert not emit.state.hooks
    assert [r.marker["kind"] for r in rec.ranges] == ["op", "op", "op"]  # no bwd ranges
    assert calls == ["enable nodes", "disable"]
    assert emit.state.hooks and not enabled


def test_a_profiler_already_on_keeps_the_hooks(pyprof_on, monkeypatch) -> None:
    calls: list = []
    enabled: list = [True]  # the user's
    _fake_profiler(monkeypatch, calls, enabled)
    with node_ranges.node_ranges() as nodes:
        assert nodes is False and emit.state.hooks
    assert calls == [] and enabled == [True]


def test_a_profiler_started_inside_the_block_takes_over_from_the_node_ranges(pyprof_on, monkeypatch) -> None:
    """PyTorch keeps one profiler per thread: torch.profiler or emit_nvtx started inside
    profiled() would be refused (and torch.profiler's prepared Kineto state would fail the next
    one: H100, torch 2.11). The node ranges step aside and the hooks come back."""
    import torch.autograd.profiler as profiler

    calls: list = []
    enabled: list = []
    _fake_profiler(monkeypatch, calls, enabled)
    user_start = lambda config, activities: calls.append("user prepare")  # noqa: E731
    monkeypatch.setattr(profiler, "_prepare_profiler", user_start)
    w = torch.randn(3, requires_grad=True)
    with recording() as rec:
        with node_ranges.node_ranges() as nodes:
            assert nodes is True and not emit.state.hooks
            profiler._prepare_profiler("config", set())  # what torch.profiler.profile() calls first
            assert emit.state.hooks and not enabled
            w.exp().sum().backward()
            profiler._prepare_profiler("config", set())  # already handed over: nothing more
    assert calls == ["enable nodes", "disable", "user prepare", "user prepare"]
    assert [r.marker["kind"] for r in rec.ranges].count("bwd") == 2  # the hooks attributed backward
    assert profiler._prepare_profiler is user_start and emit.state.hooks


class _CompiledFxGraph:
    def __call__(self, inputs):
        return inputs


def test_profiled_keeps_the_hooks_where_compiled_graphs_can_run(pyprof_on, monkeypatch) -> None:
    """Their op ranges need the NVTX profiler on the autograd thread, where giving way would break
    the node ranges' state: a program with Inductor's compiled graphs keeps the hooks."""
    import sys
    import types

    from pyprof.nvtx.profiled import attribution

    calls: list = []
    enabled: list = []
    _fake_profiler(monkeypatch, calls, enabled)
    monkeypatch.delitem(sys.modules, graph_calls._MODULE, raising=False)  # another test may have compiled
    with attribution():
        assert not emit.state.hooks
    assert calls == ["enable nodes", "disable"]
    monkeypatch.setitem(sys.modules, graph_calls._MODULE, types.SimpleNamespace(CompiledFxGraph=_CompiledFxGraph))
    original = _CompiledFxGraph.__call__
    with attribution():
        assert emit.state.hooks and _CompiledFxGraph.__call__ is not original  # the graph-call ranges
    assert calls == ["enable nodes", "disable"] and _CompiledFxGraph.__call__ is original


def test_without_cuda_the_node_ranges_cannot_be_turned_on_and_the_hooks_stay(pyprof_on) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA build turns the NVTX profiler on")
    with node_ranges.node_ranges() as nodes:
        assert nodes is False and emit.state.hooks
    assert not torch.autograd._profiler_enabled()


class _Attributes:
    def __init__(self, message: str) -> None:
        self.message = message
        self.payload = None


class _Domain:
    def get_event_attributes(self, message: str) -> _Attributes:
        return _Attributes(message)


def test_a_live_push_sets_the_payload_of_the_text_s_attributes_before_pushing(monkeypatch) -> None:
    pushed = []
    monkeypatch.setattr(emit, "_domain", _Domain())
    monkeypatch.setattr(emit, "_attrs", {})
    monkeypatch.setattr(emit, "_lib_push", lambda a, handle: pushed.append((a.message, a.payload)))
    emit._push_live_op("m", 7)
    emit._push_live_op("m", 9 | GAP)
    emit._push_live_plain("m", 11)
    assert pushed == [("m", 7), ("m", 9 | GAP), ("m", 9 | GAP)]


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_a_backward_with_create_graph_runs_with_op_ranges_and_shapes(pyprof_on, monkeypatch) -> None:
    """Inside the block, torch.autograd.grad(..., create_graph=True) (a gradient penalty's) swaps
    the node ranges for op ranges with shapes until it returns, so that the ops it runs name the
    nodes they make with their shapes; without create_graph, and outside the block, nothing
    changes. The gradient is the same."""
    calls: list = []
    enabled: list = []
    _fake_profiler(monkeypatch, calls, enabled)
    shapes: list = []
    config = torch.autograd.ProfilerConfig
    monkeypatch.setattr(torch.autograd, "ProfilerConfig", lambda *a: shapes.append(a[1]) or config(*a))
    node_ranges._settings.cache_clear()
    x = torch.randn(3, requires_grad=True)
    try:
        with node_ranges.node_ranges():
            g, = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
            assert calls == ["enable nodes", "disable", "enable ops", "disable", "enable nodes"]
            torch.autograd.grad(g.sum(), x)
            (x ** 2).sum().backward(create_graph=True)
        swap = ["disable", "enable ops", "disable", "enable nodes"]
        assert calls == ["enable nodes"] + swap * 2 + ["disable"]
        torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
        assert len(calls) == 10 and not enabled
        assert shapes == [False, True]  # the node ranges' configuration, then the op ranges'
    finally:
        node_ranges._settings.cache_clear()
    assert torch.allclose(g, 3 * x.detach() ** 2)
    x.grad = None  # Tensor.backward(create_graph=True)'s reference cycle
