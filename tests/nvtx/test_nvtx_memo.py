"""The hot path's marker cache and the backward node hooks, checked through recorded markers."""
from __future__ import annotations

import sys
import threading

import pytest

torch = pytest.importorskip("torch", reason="the wrappers annotate torch calls")
import torch.nn.functional as F  # noqa: E402

import pyprof  # noqa: E402
from pyprof.nvtx import memo, recording, wrappers  # noqa: E402
from pyprof.nvtx.backward import bwd_marker  # noqa: E402
from pyprof.nvtx.marker import op_marker  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

HERE = __file__


@pytest.fixture(params=["c", "python"])
def on(request, monkeypatch):
    """Markers on, the cache's hit path in C (pyprof.nvtx._hot) or in Python (no C compiler)."""
    if request.param == "python":
        monkeypatch.setattr(wrappers, "_lookup", memo._lookup)
    elif memo._hot is None:
        pytest.skip("pyprof.nvtx._hot was not built (no C compiler at install)")
    pyprof.init()
    try:
        yield
    finally:
        pyprof.restore()


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


def test_a_repeated_call_reuses_the_marker_text_and_it_equals_a_fresh_encoding(on) -> None:
    xt = torch.randn(4, 6).t()
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    k = torch.randn(3, 3, 1, 1)
    with recording() as rec:
        for _ in range(3):
            line = _line() + 1
            torch.add(xt, 1.5, alpha=2)
            F.conv2d(cl, k, None, (1, 1), padding=0)
    texts = [r.text for r in rec.ranges]
    assert len(texts) == 6 and texts[0] is texts[2] is texts[4]  # the stored object: found, not rebuilt
    assert texts[0] == op_marker("torch", "add", (xt, 1.5), {"alpha": 2}, site=f"{HERE}:{line}")
    assert texts[1] == op_marker("torch.nn.functional", "conv2d", (cl, k, None, (1, 1)), {"padding": 0},
                                 site=f"{HERE}:{line + 1}")
    assert '"strides":[1,6]' in texts[0] and '"format":"channels_last"' in texts[1]


def test_equal_but_differently_typed_arguments_get_their_own_markers(on) -> None:
    x = torch.ones(3)
    with recording() as rec:
        for v in (1, True, 1.0, float("nan"), 1):
            torch.add(x, v)
    args = [r.marker["args"][1] for r in rec.ranges]
    assert args == [1, True, 1.0, {"float": "nan"}, 1]


def test_equal_floats_written_differently_and_nan_get_their_own_markers(on) -> None:
    x = torch.ones(3)
    values = (0.0, -0.0, 0.0, float("nan"), float("inf"), float("-inf"), 0.1, 0.1 + 2e-17, 1e308 * 10, -0.0)
    with recording() as rec:
        for v in values:
            torch.add(x, v)
            torch.full((2,), fill_value=v)
    texts = [r.text for r in rec.ranges]
    assert [t.split('"float32"},')[1].split("]")[0] for t in texts[0::2]] == [
        "0.0", "-0.0", "0.0", '{"float":"nan"}', '{"float":"inf"}', '{"float":"-inf"}', "0.1",
        "0.10000000000000002", '{"float":"inf"}', "-0.0"]
    assert [t.split('"fill_value":')[1].split(',"site"')[0][:-1] for t in texts[1::2]] == [
        "0.0", "-0.0", "0.0", '{"float":"nan"}', '{"float":"inf"}', '{"float":"-inf"}', "0.1",
        "0.10000000000000002", '{"float":"inf"}', "-0.0"]


def test_tuple_arguments_built_afresh_each_call_get_their_own_markers(on) -> None:
    x = torch.ones(6)
    shapes = [(3, 2), (2, 3), (3, 2), (6, 1), (1, 6)]
    with recording() as rec:
        for shape in shapes:
            x.view(tuple([int(v) for v in shape]))  # a new tuple object each time, ids may repeat
            x.view(shape)
    assert [r.marker["args"][1] for r in rec.ranges] == [list(s) for s in shapes for _ in (0, 1)]


def test_equal_but_differently_typed_keyword_arguments_get_their_own_markers(on) -> None:
    x = torch.ones(3)
    with recording() as rec:
        for v in (2, 2.0, 2):
            torch.add(x, x, alpha=v)
        for mode in ("floor", None, "trunc", "floor"):
            torch.div(x, x, rounding_mode=mode)
    kwargs = [r.marker["kwargs"] for r in rec.ranges]
    assert kwargs == [{"alpha": 2}, {"alpha": 2.0}, {"alpha": 2}] + [
        {"rounding_mode": m} for m in ("floor", None, "trunc", "floor")]
    assert type(kwargs[0]["alpha"]) is int and type(kwargs[1]["alpha"]) is float


def test_a_new_shape_stride_or_dtype_at_the_same_site_is_a_new_marker(on) -> None:
    tensors = (torch.ones(2, 3), torch.ones(3, 2).t(), torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3))
    with recording() as rec:
        for t in tensors:
            t.sum()
    assert [r.marker["args"][0] for r in rec.ranges] == [
        {"shape": [2, 3], "dtype": "float32"}, {"shape": [2, 3], "dtype": "float32", "strides": [1, 2]},
        {"shape": [2, 3], "dtype": "float64"}, {"shape": [2, 3], "dtype": "float32"}]


def test_autocast_and_module_are_part_of_the_key(on) -> None:
    lin = torch.nn.Linear(2, 2)
    x = torch.ones(1, 2)
    with recording() as rec:
        for cast in (False, True, False):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cast):
                F.linear(x, lin.weight)
                lin(x)
    ops = [(r.marker.get("autocast"), r.marker.get("module")) for r in rec.ranges if r.marker["kind"] == "op"]
    assert ops == [(None, None), (None, "Linear"), ("bfloat16", None), ("bfloat16", "Linear"), (None, None),
                   (None, "Linear")]


def test_each_backward_node_runs_in_a_bwd_range_carrying_its_forward_marker(on) -> None:
    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(2, 4)
    with recording() as rec:
        y = F.linear(x, w).relu()
        y.contiguous().sum().backward()  # contiguous() returns y itself: no node, no hook
    fwd = {r.marker["op"]: r.text for r in rec.ranges if r.marker["kind"] == "op"}
    assert set(fwd) == {"linear", "relu", "contiguous", "sum", "backward"}
    got = [(r.depth, r.text) for r in rec.ranges if r.marker["kind"] == "bwd"]
    assert got == [(1, bwd_marker("SumBackward0", fwd["sum"])), (1, bwd_marker("ReluBackward0", fwd["relu"])),
                   (1, bwd_marker("MmBackward0", fwd["linear"]))]
    assert rec.ranges[-1].marker == {"v": 2, "kind": "bwd", "node": "MmBackward0", "fwd": rec.ranges[0].marker}
    # The backward call closed the last one on this thread: later calls are not inside it.
    with recording() as after:
        torch.ones(1).add(1)
    assert [r.depth for r in after.ranges] == [0, 0]  # ones, add


def test_in_place_ops_hook_the_node_they_give_their_argument(on) -> None:
    w = torch.randn(3, requires_grad=True)
    with recording() as rec:
        y = w * 2
        y.add_(1)
        y.sum().backward()
    assert [(r.marker["node"], r.marker["fwd"]["op"]) for r in rec.ranges if r.marker["kind"] == "bwd"] == [
        ("SumBackward0", "sum"), ("AddBackward0", "add_"), ("MulBackward0", "__mul__")]


def _user_hooks() -> tuple:
    w = torch.randn(3, requires_grad=True)
    seen = []
    y = w * 2
    handle = y.register_hook(lambda g: seen.append(("first", g.tolist())) or g * 10)
    y2 = w * 3
    y2.register_hook(lambda g: seen.append(("removed", g.tolist()))).remove()
    z = w + 1
    z.mul_(5)
    z.register_hook(lambda g: seen.append(("after mul_", g.tolist())))
    (y + y2 + z).sum().backward()
    handle.remove()
    return sorted(seen), w.grad.tolist(), len(y._backward_hooks or {})


def test_user_hooks_on_a_hooked_output_run_and_come_off_as_without_pyprof() -> None:
    """The bwd hook sits in the output's own hook dict: a user's later register_hook runs after
    it (and may change the gradient), its handle removes only the user's hook, and an in-place
    op after it hooks the tensor's new node, where a hook registered after the op goes."""
    plain = _user_hooks()
    assert plain == ([("after mul_", [1.0] * 3), ("first", [1.0] * 3)], [28.0] * 3, 0)
    pyprof.init()
    try:
        with recording() as rec:
            assert _user_hooks() == plain[:2] + (1,)  # ours stays in y's dict
    finally:
        pyprof.restore()
    bwd = [(r.marker["node"], r.marker["fwd"]["op"]) for r in rec.ranges if r.marker["kind"] == "bwd"]
    assert sorted(bwd) == sorted([("SumBackward0", "sum"), ("AddBackward0", "__add__"), ("AddBackward0", "__add__"),
                                  ("MulBackward0", "__mul__"), ("MulBackward0", "__mul__"), ("MulBackward0", "mul_"),
                                  ("AddBackward0", "__add__")])


def test_an_output_with_a_hook_dict_of_its_own_gets_a_node_pre_hook(on) -> None:
    from pyprof.nvtx import backward

    w = torch.randn(3, requires_grad=True)
    seen = []
    y = w * 2  # made outside any recording: not hooked by the wrapper
    y.register_hook(lambda g: seen.append("user"))
    text = op_marker("torch", "mul", (w, 2))
    node = y.grad_fn._sequence_nr()
    with recording() as rec:
        backward.attach(y, (w, 2), text, node, node + 1)
        y.sum().backward()
    assert seen == ["user"]
    assert [r.text for r in rec.ranges if r.marker["kind"] == "bwd"][-1] == bwd_marker("MulBackward0", text)


def test_saving_a_hooked_activation_does_not_warn_about_the_hook(on, tmp_path) -> None:
    import warnings

    w = torch.randn(3, requires_grad=True)
    with recording():
        y = w * 2
    assert y._backward_hooks
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.save(y, tmp_path / "y.pt")


def test_calls_with_inplace_true_hook_the_node_they_give_their_argument(on) -> None:
    """nn.ReLU(inplace=True) calls F.relu(x, inplace=True): its output is its argument, with a
    ReluBackward0 node of its own that must open relu's range (else ResNet's relu backward
    kernels ran inside the previous op's)."""
    w = torch.randn(3, requires_grad=True)
    with recording() as rec:
        y = w * 2
        F.relu(y, inplace=True)
        z = torch.nn.ReLU(inplace=True)(y + 1)
        (y + z).sum().backward()
    assert [(r.marker["node"], r.marker["fwd"]["op"]) for r in rec.ranges if r.marker["kind"] == "bwd"] == [
        ("SumBackward0", "sum"), ("AddBackward0", "__add__"), ("ReluBackward0", "relu"), ("AddBackward0", "__add__"),
        ("ReluBackward0", "relu"), ("MulBackward0", "__mul__")]


class _AtenInRange(TorchDispatchMode):
    """Each aten op run, with the node and forward op of the innermost recorded bwd range open
    on its thread: the range its kernels would fall in."""

    def __init__(self, rec) -> None:
        super().__init__()
        self.rec, self.calls = rec, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        stack = self.rec._stacks.get(threading.get_ident())
        m = self.rec.ranges[stack[-1]].marker if stack else {}
        self.calls.append((func.overloadpacket.__name__, m.get("node"), m.get("fwd", {}).get("op")))
        return func(*args, **(kwargs or {}))


class _InPlaceNet(torch.nn.Module):
    """Activations and a dropout that torch's modules call in place with `inplace` passed by
    position (F.leaky_relu(x, 0.1, True), F.hardtanh for ReLU6, F.hardswish, F.dropout), and a
    residual `+=`, each after a convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(2, 2, 3, padding=1) for _ in range(5))
        self.acts = torch.nn.ModuleList([torch.nn.LeakyReLU(0.1, True), torch.nn.ReLU6(True),
                                         torch.nn.Hardswish(True), torch.nn.Dropout(0.5, True)])

    def forward(self, x):
        for conv, act in zip(self.convs, self.acts):
            x = act(conv(x))
        y = self.convs[4](x)
        y += x
        return y


def test_in_place_calls_hook_their_node_however_inplace_is_spelled(on) -> None:
    """The backward of an in-place op runs in that op's bwd range, whatever says it is in place:
    nn.LeakyReLU(inplace=True) and its kin pass `inplace` by position (before, their backward ran
    in the range of the convolution that follows them in the forward pass)."""
    torch.manual_seed(0)
    net = _InPlaceNet()
    with recording() as rec:
        y = net(torch.randn(1, 2, 4, 4)).sum()
        with _AtenInRange(rec) as log:
            y.backward()
    got = [c for c in log.calls if c[0] != "detach"]  # AccumulateGrad's, of the parameters
    conv = ("convolution_backward", "ConvolutionBackward0", "conv2d")
    assert got == [
        ("ones_like", None, None), ("expand", "SumBackward0", "sum"),
        conv, ("add", "ConvolutionBackward0", "conv2d"),  # the residual's gradients meet
        ("mul", "MulBackward0", "dropout"), conv,  # the dropout mask's product
        ("hardswish_backward", "HardswishBackward0", "hardswish"), conv,
        ("hardtanh_backward", "HardtanhBackward0", "hardtanh"), conv,
        ("leaky_relu_backward", "LeakyReluBackward1", "leaky_relu"), conv]
    assert [(r.marker["node"], r.marker["fwd"]["op"]) for r in rec.ranges if r.marker["kind"] == "bwd"][:3] == [
        ("SumBackward0", "sum"), ("AddBackward0", "__iadd__"), ("ConvolutionBackward0", "conv2d")]


def test_an_in_place_op_on_a_view_hooks_the_base_s_new_node(on) -> None:
    """`y[0].relu_()` gives y a CopySlices node that runs relu's backward on the slice: relu_'s
    range, not that of y's consumer (the view's own new node, unused here, never runs)."""
    w = torch.randn(2, 3, requires_grad=True)
    with recording() as rec:
        y = w * 2
        y[0].relu_()
        s = (y * 3).sum()
        with _AtenInRange(rec) as log:
            s.backward()
    assert [c for c in log.calls if c[0] != "detach"] == [
        ("ones_like", None, None), ("expand", "SumBackward0", "sum"), ("mul", "MulBackward0", "__mul__"),
        ("new_empty_strided", "CopySlices", "relu_"), ("copy_", "CopySlices", "relu_"),
        ("as_strided", "CopySlices", "relu_"), ("clone", "CopySlices", "relu_"),
        ("threshold_backward", "CopySlices", "relu_"), ("copy_", "CopySlices", "relu_"),
        ("mul", "MulBackward0", "__mul__")]


def test_an_assignment_into_a_tensor_hooks_the_node_it_gives_the_tensor(on) -> None:
    """`y[0] = v` returns nothing but gives y a CopySlices node, whose backward (the gradient
    split between y's old values and v) runs in `__setitem__`'s range."""
    w = torch.randn(2, 3, requires_grad=True)
    v = torch.randn(3, requires_grad=True)
    with recording() as rec:
        y = w * 2
        y[0] = v * 5
        s = (y * 3).sum()
        with _AtenInRange(rec) as log:
            s.backward()
    setitem = ("CopySlices", "__setitem__")
    assert [c for c in log.calls if c[0] != "detach"] == [
        ("ones_like", None, None), ("expand", "SumBackward0", "sum"), ("mul", "MulBackward0", "__mul__"),
        ("new_empty_strided", *setitem), ("copy_", *setitem), ("as_strided", *setitem), ("clone", *setitem),
        ("zeros_like", *setitem), ("copy_", *setitem),
        ("mul", "MulBackward0", "__mul__"), ("mul", "MulBackward0", "__mul__")]


def test_no_hooks_without_markers() -> None:
    pyprof.init()
    try:
        w = torch.randn(3, requires_grad=True)
        y = w * 2  # no recorder, no tool, not forced: the wrapper's off path
        assert y.grad_fn._backward_pre_hooks == {} if hasattr(y.grad_fn, "_backward_pre_hooks") else True
        with recording() as rec:
            y.sum().backward()
        assert [r.marker["kind"] for r in rec.ranges] == ["op", "op", "bwd"]  # sum, backward, SumBackward0
    finally:
        pyprof.restore()


def test_one_site_seeing_two_signatures_in_turn_gets_each_its_own_marker(on) -> None:
    a, b, c = torch.ones(2, 3), torch.ones(3, 2).t(), torch.ones(2, 3, dtype=torch.float64)  # b: other strides
    with recording() as rec:
        for t in (a, b, a, b, c, a):
            line = _line() + 1
            t.sum()
    assert [r.text for r in rec.ranges] == [
        op_marker("Tensor", "sum", (t,), site=f"{HERE}:{line}") for t in (a, b, a, b, c, a)]
    assert rec.ranges[0].text is rec.ranges[2].text is rec.ranges[5].text  # found, not rebuilt
    assert rec.ranges[1].text is rec.ranges[3].text


def test_a_dict_argument_is_described_by_its_type(on) -> None:
    x = torch.ones(2)
    with recording() as rec:
        for d in ({"a": 1}, {"b": [2]}):  # unhashable: the key holds the encoding
            with pytest.raises(TypeError):
                torch.add(x, d)
            torch.add(x, x, out=None)
    assert [r.marker["args"][1] if r.marker["op"] == "add" and "kwargs" not in r.marker else r.marker["kwargs"]
            for r in rec.ranges] == [{"type": "dict"}, {"out": None}, {"type": "dict"}, {"out": None}]


def test_sites_in_code_objects_made_one_after_another_name_their_own_file(on) -> None:
    """The caches key code objects by id and hold them: a dead code object's id, reused by the
    next one made, must not find the dead one's site."""
    x = torch.ones(2)
    with recording() as rec:
        for i in range(20):
            scope = {"torch": torch, "x": x}
            exec(compile("def f():\n    return torch.neg(x)\n", f"<gen{i}>", "exec"), scope)
            scope["f"]()
            del scope
    assert [r.marker["site"] for r in rec.ranges] == [f"<gen{i}>:2" for i in range(20)]


def _at_one_site(fn, *args):
    return fn(*args)  # the key describes the call site of this frame's caller


needs_hot = pytest.mark.skipif(memo._hot is None, reason="pyprof.nvtx._hot was not built (no C compiler at install)")


def _calls() -> list:
    """Calls of one op that the marker cache must tell apart, or not, each (args, kwargs)."""
    x = torch.randn(3, 4)
    cached = (1, 2)
    memo.encode(cached)  # now in encode's tuple cache: read by identity
    return [
        ((x,), {}), ((torch.randn(3, 4),), {}),                        # another tensor, same description
        ((x.t(),), {}), ((x.t().contiguous(),), {}), ((x[:, :2],), {}),  # same shape, other strides
        ((x.to(torch.bfloat16),), {}), ((torch.nn.Parameter(x.clone()),), {}),  # a parameter is described as its tensor
        ((x, 1), {}), ((x, True), {}), ((x, 1.0), {}), ((x, 2 ** 70), {}), ((x, 2 ** 70 + 1), {}),
        ((x, "s"), {}), ((x, "t"), {}), ((x, None), {}), ((x, False), {}),
        ((x, 1.5), {}), ((x, float("1.5")), {}), ((x, 0.0), {}), ((x, -0.0), {}), ((x, float("nan")), {}),
        ((x, cached), {}), ((x, tuple([1, 2])), {}), ((x, (3, 4)), {}), ((x, (1, True)), {}), ((x, ((1, 2),)), {}),
        ((x, [5, 6]), {}), ((x, [5, 6.0]), {}), ((x, {"a": 1}), {}), ((x, torch.float16), {}), ((x, torch.float32), {}),
        ((x, x), {}), ((x,), {"other": x}), ((x,), {"alpha": 2}), ((x,), {"alpha": 3}), ((x,), {"beta": 2}),
        ((x,), {"alpha": 2, "beta": 2}), ((x,), {"beta": 2, "alpha": 2}), ((x, "alpha", 2), {}),
        ((x,), {"weight": torch.nn.Parameter(torch.randn(2)), "eps": 1e-5, "padding": cached}),
    ]


@needs_hot
@pytest.mark.parametrize("autocast", [False, True])
def test_the_c_key_tells_calls_apart_exactly_where_the_python_key_does(autocast) -> None:
    """Two calls at one site get equal C keys exactly when their Python keys are equal: the C
    path never finds another call's marker, and finds a repeated call's."""
    calls = _calls()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        c_keys, py_keys = [], []
        for args, kwargs in calls:
            for fn, keys in ((memo._hot.key, c_keys), (memo.key, py_keys)):  # one call site for all
                keys.append(_at_one_site(fn, args, kwargs, ',"module":"m"'))
    assert all(type(k) is bytes for k in c_keys)
    pairs = range(len(calls))
    c_equal = {(i, j) for i in pairs for j in pairs if c_keys[i] == c_keys[j]}
    assert c_equal == {(i, j) for i in pairs for j in pairs if py_keys[i] == py_keys[j]}
    # the equal ones among them: a fresh tensor of one description, 1.5 made twice, (1, 2) made twice (a
    # parameter of that description requires grad: its text, and so its key, differ)
    assert sorted((i, j) for i, j in c_equal if i < j) == [(0, 1), (16, 17), (21, 22)]


@needs_hot
def test_the_c_key_holds_site_module_autocast_and_each_part_in_a_fixed_layout() -> None:
    import struct

    x = torch.randn(3, 4)
    mod = ',"module":"m\u00e9"'
    with torch.autocast("cpu", dtype=torch.bfloat16):
        keys = []
        for fn in (memo._hot.key, memo.key):  # one call site for both
            keys.append(_at_one_site(fn, (x.t(), 7, None, True, False, -0.5, "ab", (2, 3)), {"eps": 1e-5}, mod))
    site = struct.pack("=qq", keys[1][0], keys[1][1])  # the code object's address and instruction offset
    assert keys[1][0] == id(sys._getframe().f_code)

    def text(tag: bytes, s: str) -> bytes:
        return tag + struct.pack("=q", len(s.encode())) + s.encode()

    # the dtype object's address, then shape and strides each with its length
    tensor = b"G" + struct.pack("=7q", id(torch.float32), 2, 4, 3, 2, 1, 4)
    assert keys[0] == (site + text(b"m", mod) + text(b"a", ',"autocast":"bfloat16"') + tensor
                       + b"i" + struct.pack("=q", 7) + b"Ntf" + b"d" + struct.pack("=d", -0.5) + text(b"s", "ab")
                       + b"(" + struct.pack("=qqq", 2, 2, 3) + b"K" + text(b"k", "eps") + b"d" + struct.pack("=d", 1e-5))


def _nested() -> "torch.Tensor":
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The PyTorch API of nested tensors is in prototype stage"
        return torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])  # its shape raises


@needs_hot
def test_the_c_lookup_gives_no_key_for_a_call_it_cannot_key_and_refuses_wrong_arguments() -> None:
    assert memo._hot.lookup({}, (_nested(),), {}, "") is None
    with pytest.raises(TypeError, match="pyprof._hot.lookup: cache must be a dict"):
        memo._hot.lookup([], (), {}, "")
    with pytest.raises(TypeError, match=r"pyprof._hot.lookup takes 4 arguments \(3 given\)"):
        memo._hot.lookup({}, (), {})


def wrappers_cache(wrapper) -> dict:
    """The marker cache a wrapper made by wrappers.op_wrapper holds (its closure's `texts`)."""
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__))
    return cells["texts"].cell_contents


def test_a_call_whose_key_cannot_be_made_gets_its_marker_built_each_time(on) -> None:
    nested = _nested()
    cache = wrappers_cache(torch.add)
    with recording() as rec:
        for _ in range(2):
            line = _line() + 1
            torch.add(nested, nested)
    assert [r.text for r in rec.ranges] == [op_marker("torch", "add", (nested, nested), {}, site=f"{HERE}:{line}")] * 2
    assert cache == {}  # nothing stored


@needs_hot
def test_the_c_lookup_finds_what_it_missed_once_stored_and_leaves_every_reference_count_as_it_was() -> None:
    x = torch.randn(2, 3)
    args, kwargs, mod = (x, 1.5, (1, 2), None), {"weight": x, "eps": 2}, ',"module":"m"'
    cache: dict = {}
    text = "marker text"
    watched = (x, args, kwargs, mod, text, cache)
    found = []
    for i in range(1001):  # one call site for the miss and every look-up after it
        got = _at_one_site(memo._hot.lookup, cache, args, kwargs, mod)
        if i == 0:
            assert type(got) is bytes  # the key, to store the text under
            cache[got] = (text, None)
            before = [sys.getrefcount(o) for o in watched]
        else:
            found.append(got)
    assert found == [text] * 1000
    del found, got
    misses = {memo._hot.lookup({}, args, kwargs, mod) for _ in range(1000)}
    assert len(misses) == 1 and type(misses.pop()) is bytes
    assert [sys.getrefcount(o) for o in watched] == before


def test_a_wrapped_op_run_as_a_threads_own_function_gets_a_marker_without_a_site(on, monkeypatch) -> None:
    import _thread
    import time

    x = torch.ones(3)
    errors: list = []
    monkeypatch.setattr(sys, "unraisablehook", errors.append)  # where _thread reports a failed function
    with recording() as rec:
        _thread.start_new_thread(torch.add, (x, x))  # no Python frame above the wrapper on that thread
        deadline = time.monotonic() + 10
        while not (rec.ranges or errors) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [e.exc_value for e in errors] == []
    assert [r.text for r in rec.ranges] == [op_marker("torch", "add", (x, x), {})]


class _Clears:
    """An argument whose type check (encode()'s isinstance reads __class__) empties a dict."""

    def __init__(self, victim: dict) -> None:
        self.victim = victim

    @property
    def __class__(self):  # noqa: ANN204
        self.victim.clear()
        return _Clears


@needs_hot
def test_the_c_key_refuses_keyword_arguments_changed_while_it_is_made() -> None:
    kwargs: dict = {}
    kwargs.update(a=_Clears(kwargs), b=1, c=2)
    with pytest.raises(RuntimeError, match="pyprof._hot: kwargs changed size"):
        _at_one_site(memo._hot.key, (), kwargs, "")
    kwargs.update(a=_Clears(kwargs), b=1, c=2)
    assert memo._hot.lookup({}, (), kwargs, "") is None  # a miss: the Python path then raises as Python does


@needs_hot
def test_under_a_torch_function_mode_the_c_key_reads_tensors_through_it() -> None:
    """The mode sees the getters' calls as it does without pyprof's C path; a shape it answers
    with something else than ints makes no key (markers are then built each call)."""
    import struct

    from torch.overrides import TorchFunctionMode

    class Shape:
        pass

    class Passing(TorchFunctionMode):
        def __init__(self, odd_shape: bool) -> None:
            super().__init__()
            self.odd, self.seen = odd_shape, []

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            self.seen.append(getattr(func, "__name__", None))
            if self.odd and getattr(func, "__self__", None) is torch._C.TensorBase.__dict__["shape"]:
                return Shape()
            return func(*args, **(kwargs or {}))

    t = torch.ones(2, 3)
    with Passing(odd_shape=False) as mode:
        key = memo._hot.key((t,), None, "")
    assert mode.seen == ["__get__", "stride", "__get__", "__get__"]  # shape, stride(), dtype, requires_grad
    assert key.endswith(b"-G" + struct.pack("=7q", id(torch.float32), 2, 2, 3, 2, 3, 1))
    with Passing(odd_shape=True):
        assert memo._hot.lookup({}, (t,), None, "") is None
        with pytest.raises(TypeError, match="^pyprof._hot: a tensor's shape, stride\\(\\) or dtype is not torch's$"):
            memo._hot.key((t,), None, "")


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
def test_a_call_traced_by_torch_jit_and_the_same_call_untraced_get_their_own_markers(on) -> None:
    """While torch.jit.trace runs the getters' shapes are 0-dim tensors and the marker says only
    "Tensor": the untraced call at the same site must not get that marker from the cache."""
    x = torch.randn(3, 4)

    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.neg(t)

    line = f.__code__.co_firstlineno + 1
    with recording() as rec:
        torch.jit.trace(f, (x,), check_trace=False)
        f(x)
        torch.jit.trace(f, (x,), check_trace=False)
    site = f"{HERE}:{line}"
    traced = '{"v":1,"kind":"op","mod":"torch","op":"neg","args":[{"type":"Tensor"}],"site":"%s"}' % site
    assert [r.text for r in rec.ranges] == [traced, op_marker("torch", "neg", (x,), {}, site=site), traced]


def test_the_marker_caches_stay_under_their_byte_bound_when_arguments_are_large_and_new(on, monkeypatch) -> None:
    """Issue 31, item 6: a fresh 100,000-int tuple per call reached 8.5 GB under init(): the
    tuple-text cache kept up to 8,192 such tuples, and the C key of each cached marker held every
    int. The caches are now bounded in bytes (marker.CACHE_BYTES, here 1 MiB), a long tuple is
    keyed by the text its marker writes (its first MAX_LIST items and its length)."""
    from fuzz_harness import cached_bytes
    from pyprof.nvtx.marker import MAX_LIST, budget, tuple_texts

    monkeypatch.setattr(budget, "limit", 1 << 20)
    budget.clear()
    user = pyprof.wrap(lambda *a: None, "user")
    peak = 0
    with recording() as rec:
        for i in range(300):
            torch.tensor(tuple(range(i, i + 10_000)))
            user("x" * (5_000 + i), [i] * 5_000, tuple(float(j) for j in range(i, i + 2_000)))
            peak = max(peak, cached_bytes())
            assert budget.held <= budget.limit
    assert peak <= budget.limit, peak
    assert all(len(v[0]) <= MAX_LIST for v in tuple_texts.values())
    # Markers are still found: the same long tuple, at one site, is one cached text.
    t = tuple(range(100_000))
    with recording() as rec:
        for _ in range(3):
            torch.tensor(t)
    assert rec.ranges[0].text is rec.ranges[2].text and '{"more":99984}' in rec.ranges[0].text
    assert len(rec.markers) == 3 and rec.markers[0]["args"][0][:3] == [0, 1, 2]
