"""Fuzz: the annotation side, `pyprof.init()`, on CPU (docs/reliability.md).

- Generated call programs (module calls, ops, `pyprof.annotate` blocks, wrapped user functions,
  exceptions raised at any depth and caught at any other, `restore()`/`init()` in the middle)
  against an oracle of the ranges they must push: exact markers, nesting depths and module
  names, every push popped, no thread state left behind.
- Generated arguments, hostile ones included (subclasses whose methods raise or are single-use,
  NaN, huge integers, deep and self-containing lists, lone surrogates, generators): a wrapped call
  returns or raises exactly what the unwrapped call does, reads nothing but metadata, and its
  marker is valid JSON.
- Threads calling ops while init()/restore()/recordings/torch.jit.script toggle, under a live NVTX
  tool (tests/nvtx_count_tool.c, loaded as Nsight Systems loads its own): pushes and pops balance
  on every thread, and the process exits with stderr empty.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the annotation wraps torch: needs torch")

import torch.nn.functional as F  # noqa: E402

import pyprof  # noqa: E402
from fuzz_harness import cached_bytes, examples  # noqa: E402
from pyprof.nvtx import emit, recording, wrappers  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # tests/, where the helpers are


class Boom(Exception):
    """Raised by generated programs."""


# --- generated call programs against an oracle ---------------------------------------------------
# A program is a list of nodes: ("op",) torch.relu; ("raise",); ("mod", [...]) a module call whose
# forward runs the nodes; ("ann", name, [...]) an annotate block; ("fn", [...]) a call of a
# pyprof.wrap()ed user function; ("catch", [...]) try/except Boom; ("restore",) and ("init",).

leaf = st.sampled_from([("op",), ("op",), ("raise",), ("restore",), ("init",)])
programs = st.lists(st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda b: ("mod", b)),
        st.tuples(st.just("ann"), st.text(max_size=6), st.lists(inner, max_size=4)),
        st.lists(inner, max_size=4).map(lambda b: ("fn", b)),
        st.lists(inner, max_size=4).map(lambda b: ("catch", b)),
    ),
    max_leaves=14), max_size=5)


def _indexed(body: list, mods: list) -> list:
    """`body` with each module node ("mod", child) made ("mod", i, child): the module it calls is
    kids[i] of the Node running the body (module nodes inside annotate/fn/catch included)."""
    out = []
    for n in body:
        if n[0] == "mod":
            out.append(("mod", len(mods)))
            mods.append(n[1])
        elif n[0] == "ann":
            out.append(("ann", n[1], _indexed(n[2], mods)))
        elif n[0] in ("fn", "catch"):
            out.append((n[0], _indexed(n[1], mods)))
        else:
            out.append(n)
    return out


class Node(torch.nn.Module):
    """A module whose forward runs its part of a program; the modules it calls are registered
    children, so their qualified names are `kids.0`, `kids.1.kids.0`, ..."""

    def __init__(self, body: list) -> None:
        super().__init__()
        mods: list = []
        self.body = _indexed(body, mods)
        self.kids = torch.nn.ModuleList(Node(b) for b in mods)

    def forward(self, run: "Runner", x: torch.Tensor) -> torch.Tensor:
        return run.block(self.body, x, self)


class Runner:
    """Runs a program for real."""

    def __init__(self) -> None:
        self.fn = pyprof.wrap(self._fn, "fuzz")

    def _fn(self, body: list, x: torch.Tensor, node: Node) -> torch.Tensor:
        return self.block(body, x, node)

    def block(self, body: list, x: torch.Tensor, node: Node) -> torch.Tensor:
        for n in body:
            kind = n[0]
            if kind == "op":
                x = torch.relu(x)
            elif kind == "raise":
                raise Boom()
            elif kind == "restore":
                pyprof.restore()
            elif kind == "init":
                pyprof.init()
            elif kind == "mod":
                x = node.kids[n[1]](self, x)
            elif kind == "ann":
                with pyprof.annotate(n[1]):
                    x = self.block(n[2], x, node)
            elif kind == "fn":
                x = self.fn(n[1], x, node)
            else:
                try:
                    x = self.block(n[1], x, node)
                except Boom:
                    pass
        return x


class Oracle:
    """The ranges a program must push, as (kind, name, module, depth): module calls and ops
    only while wrapped (between init() and restore()), ops not inside another wrapped call,
    annotate blocks and the wrap()ed function always (they need no init())."""

    def __init__(self) -> None:
        self.out: list[tuple] = []
        self.patched = True

    def block(self, body: list, node: Node, depth: int, prefix: str, module: str, in_op: bool) -> None:
        for n in body:
            kind = n[0]
            if kind == "op":
                if self.patched and not in_op:
                    self.out.append(("op", "relu", module, depth))
            elif kind == "raise":
                raise Boom()
            elif kind == "restore":
                self.patched = False
            elif kind == "init":
                self.patched = True
            elif kind == "mod":
                name = f"{prefix}kids.{n[1]}"
                if self.patched:
                    self.out.append(("module", name, None, depth))
                    self.block(node.kids[n[1]].body, node.kids[n[1]], depth + 1, name + ".", name, in_op)
                else:  # an unwrapped call: ops inside still name the module around it
                    self.block(node.kids[n[1]].body, node.kids[n[1]], depth, name + ".", module, in_op)
            elif kind == "ann":
                self.out.append(("layer", n[1], None, depth))
                self.block(n[2], node, depth + 1, prefix, module, in_op)
            elif kind == "fn":
                if in_op:
                    self.block(n[1], node, depth, prefix, module, True)
                else:
                    self.out.append(("op", "_fn", module, depth))
                    self.block(n[1], node, depth + 1, prefix, module, True)
            else:
                try:
                    self.block(n[1], node, depth, prefix, module, in_op)
                except Boom:
                    pass


def _observed(rec) -> list[tuple]:
    out = []
    for r in rec.ranges:
        m = r.marker
        if m["kind"] == "module":
            out.append(("module", m["module"], None, r.depth))
        elif m["kind"] == "layer":
            out.append(("layer", m["name"], None, r.depth))
        else:
            out.append(("op", m["op"], m.get("module"), r.depth))
    return out


@examples(600)
@given(program=programs)
def test_generated_programs_push_what_the_oracle_says(program):
    pyprof.init()
    try:
        root = Node(program)
        oracle = Oracle()
        oracle.out.append(("module", "Node", None, 0))
        try:
            oracle.block(root.body, root, 1, "", "Node", False)
            expected = torch.ones(2)
        except Boom:
            expected = None
        x, run = torch.ones(2), Runner()
        with recording() as rec:
            try:
                got = root(run, x)
            except Boom:
                got = None
        assert (got is None) == (expected is None) and (got is None or torch.equal(got, expected))
        assert _observed(rec) == oracle.out
        assert rec._stacks.get(threading.get_ident(), []) == []  # every push popped
        tl = wrappers.thread_state()
        assert (tl.depth, tl.mod, tl.names, emit._pushed.stack) == (0, "", None, [])
    finally:
        pyprof.restore()


# --- the holes found, each with its exact outcome ------------------------------------------------

def test_annotate_refuses_a_name_that_is_no_str_with_or_without_a_profiler():
    for name in (None, 5, object(), b"step"):
        with pytest.raises(TypeError) as err:
            pyprof.annotate(name)
        assert str(err.value) == f"pyprof.annotate: the name must be a str, not {type(name).__name__}"
    with recording() as rec, pyprof.annotate("\ud800 lone surrogate"):
        pass
    assert rec.ranges[0].text == '{"v":1,"kind":"layer","name":"\\ud800 lone surrogate"}'


def test_a_backward_pass_started_unwrapped_closes_its_ranges():
    """Forward under pyprof.init(), backward after restore() (or inside torch.jit.script's
    unpatched() on another thread): the hooks of the forward pass still open bwd ranges, and
    no wrapper of the backward call was there to close the last one; it stayed open on the
    thread until its next backward pass (found by the thread stress after a merge)."""
    net = torch.nn.Linear(3, 2)
    with recording() as rec:
        pyprof.init()
        try:
            loss = net(torch.ones(4, 3)).sum()
        finally:
            pyprof.restore()
        loss.backward()  # the original Tensor.backward
    assert [(m["kind"], m.get("op") or m.get("node")) for m in rec.markers] == [
        ("op", "ones"), ("module", None), ("op", "linear"), ("op", "sum"), ("bwd", "SumBackward0"),
        ("bwd", "AddmmBackward0")]
    assert rec._stacks[threading.get_ident()] == []  # every push popped


def test_modules_whose_named_modules_or_extra_repr_misbehave_still_run(pyprof_on):
    class FailingTree(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def named_modules(self, *args, **kwargs):
            raise RuntimeError("named_modules broke")

        def forward(self, x):
            return self.fc(x)

    class OddTree(torch.nn.Module):
        def named_modules(self, *args, **kwargs):
            yield from [("a", 5), (7, self), ("", self)]

        def extra_repr(self):
            return {"not": "a str"}

        def forward(self, x):
            return x + 1

    with recording() as rec:
        assert FailingTree()(torch.ones(1, 2)).shape == (1, 2)
        assert torch.equal(OddTree()(torch.ones(1)), torch.full((1,), 2.0))
    modules = [m for m in rec.markers if m["kind"] == "module"]
    assert modules == [
        {"v": 1, "kind": "module", "module": "FailingTree", "cls": "FailingTree", "repr": ""},
        {"v": 1, "kind": "module", "module": "Linear", "cls": "Linear",
         "repr": "in_features=2, out_features=2, bias=True"},
        {"v": 1, "kind": "module", "module": "OddTree", "cls": "OddTree", "repr": "{'not': 'a str'}"},
    ]


def test_marker_runs_no_method_of_argument_subclasses(pyprof_on):
    class Lazy(list):
        """A sequence filled on first iteration: reading it twice gives nothing the second time."""

        def __iter__(self):
            raise AssertionError("the marker iterated the argument")

        def __len__(self):
            raise AssertionError("the marker took the argument's len()")

    class Loud(float):
        def __sub__(self, other):
            raise AssertionError("the marker ran the argument's __sub__")

    seen = []
    fn = pyprof.wrap(lambda *a: seen.append(a) or "done", "user")
    with recording() as rec:
        assert fn(Lazy([1, 2]), Loud(0.5), (Loud(2.0),)) == "done"
    marker = rec.markers[0]
    assert (marker["mod"], marker["op"], marker["args"]) == ("user", "<lambda>", [[1, 2], 0.5, [2.0]])
    assert len(seen) == 1


# --- generated arguments: a wrapped call does exactly what the unwrapped one does ---------------

class Raising:
    """An argument whose every protocol method raises."""

    def __repr__(self):
        raise RuntimeError("repr")

    def __len__(self):
        raise RuntimeError("len")

    def __iter__(self):
        raise RuntimeError("iter")

    def __index__(self):
        raise RuntimeError("index")

    def __float__(self):
        raise RuntimeError("float")

    def __eq__(self, other):
        raise RuntimeError("eq")

    __hash__ = object.__hash__


def _self_containing() -> list:
    x: list = [1]
    x.append(x)
    return x


# Recipes, not values: each call gets fresh arguments (a generator is used up by one call).
scalar_recipes = st.one_of(
    st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=5), st.sampled_from([10**5000, -0.0, 1e308, "\ud800", b"bytes", 1 + 2j, Ellipsis,
                                          slice(None, 2, -1), torch.float16, torch.device("cpu"),
                                          torch.channels_last])).map(lambda v: (lambda: v))
tensor_recipes = st.tuples(st.lists(st.integers(0, 3), max_size=3),
                           st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16]),
                           st.booleans()).map(
    lambda t: (lambda: (lambda x: x.t() if t[2] and x.dim() == 2 else x)(torch.zeros(t[0], dtype=t[1]))))
odd_recipes = st.sampled_from([Raising, _self_containing, lambda: (i for i in range(3)), lambda: iter([1, 2]),
                               lambda: [[[[[[1]]]]]], lambda: list(range(100)), lambda: {"a": torch.ones(1)},
                               lambda: torch.Size([2, 3]), lambda: torch.ones(2).as_subclass(_Sub),
                               lambda: torch.ones(2).to_sparse(), lambda: torch.empty(2, device="meta")])
arg_recipes = st.one_of(scalar_recipes, tensor_recipes, odd_recipes,
                        st.lists(st.one_of(scalar_recipes, tensor_recipes), max_size=3).map(
                            lambda rs: (lambda: [r() for r in rs])))


class _Sub(torch.Tensor):
    pass


TARGETS = {
    "torch.add": lambda: torch.add, "torch.cat": lambda: torch.cat, "torch.where": lambda: torch.where,
    "F.pad": lambda: F.pad, "torch.tensor": lambda: torch.tensor,
    "Tensor.__getitem__": lambda: torch.Tensor.__getitem__,
    "Tensor.view": lambda: torch.Tensor.view, "torch.full": lambda: torch.full, "F.linear": lambda: F.linear,
    "torch.nn.functional.softmax": lambda: F.softmax, "Tensor.__mul__": lambda: torch.Tensor.__mul__,
}


def _outcome(fn, args: list, kwargs: dict):
    try:
        return "value", fn(*args, **kwargs)
    except Exception as err:
        return "error", (type(err), re.sub(r"0x[0-9a-f]+", "0x", str(err)))  # object addresses differ


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.is_sparse or b.is_sparse or a.is_meta or b.is_meta:
            return (a.shape, a.dtype, a.layout) == (b.shape, b.dtype, b.layout)
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and (a is b or a == b)


@examples(1000)
@given(target=st.sampled_from(sorted(TARGETS)), args=st.lists(arg_recipes, max_size=4),
       kwargs=st.dictionaries(st.sampled_from(["dim", "alpha", "out", "dtype", "value", "x"]), arg_recipes, max_size=2))
def test_hostile_arguments_change_nothing(pyprof_on, target, args, kwargs):
    wrapped = TARGETS[target]()
    assert getattr(wrapped, "__wrapped__", None) is not None
    original = wrapped.__wrapped__
    expected = _outcome(original, [a() for a in args], {k: v() for k, v in kwargs.items()})
    with recording() as rec:
        got = _outcome(wrapped, [a() for a in args], {k: v() for k, v in kwargs.items()})
    assert got[0] == expected[0], (got, expected)
    if got[0] == "error":
        assert got[1] == expected[1]
    else:
        assert _same(got[1], expected[1])
    for marker in rec.markers:  # json.loads: every text is JSON
        assert marker["kind"] == "op"
    assert rec._stacks.get(threading.get_ident(), []) == []


# --- size-bounded caches: large arguments, new at every call ----------------------------------

big_recipes = st.tuples(st.sampled_from(["int tuple", "float tuple", "str tuple", "str", "list", "nested"]),
                        st.integers(0, 40_000)).map(lambda k: (lambda i: {
                            "int tuple": lambda: tuple(range(i, i + k[1])),
                            "float tuple": lambda: tuple(float(j) for j in range(i, i + k[1] // 8)),
                            "str tuple": lambda: tuple(str(j) for j in range(i, i + k[1] // 8)),
                            "str": lambda: "s" * (k[1] + i),
                            "list": lambda: [i] * k[1],
                            "nested": lambda: ((i,) * 8, "t" * (k[1] // 4 + i), tuple(range(k[1] // 4)))}[k[0]]()))


@examples(60)
@given(recipes=st.lists(big_recipes, min_size=1, max_size=3), calls=st.integers(1, 20))
def test_marker_caches_hold_at_most_their_bytes_whatever_the_arguments(pyprof_on, recipes, calls):
    """Issue 31, item 6, as a class: calls whose arguments are large and new at every call (long
    tuples of any scalars, long strings, lists, nests of them) through wrapped torch functions and
    a wrap()ed user function: the marker caches never hold more than their byte bound."""
    from pyprof.nvtx.marker import budget

    limit, budget.limit = budget.limit, 1 << 20
    budget.clear()
    user = pyprof.wrap(lambda *a: None, "user")
    try:
        with recording():
            for i in range(calls):
                args = [r(i) for r in recipes]
                user(*args)
                if type(args[0]) is tuple and all(type(v) is int for v in args[0]):
                    torch.tensor(args[0])
                assert cached_bytes() <= budget.limit and budget.held <= budget.limit
    finally:
        budget.limit = limit
        budget.clear()


# --- threads, toggles and exit under a live NVTX tool --------------------------------------------

@pytest.fixture(scope="module")
def count_tool(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler to build the counting NVTX tool")
    lib = tmp_path_factory.mktemp("nvtx-tool") / "libcount.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(HERE / "nvtx_count_tool.c")], check=True)
    return lib


def _under_tool(tool: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, NVTX_INJECTION64_PATH=str(tool), PYTHONPATH=os.pathsep.join(
        [str(HERE.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def test_threads_while_init_restore_and_recordings_toggle_under_a_live_tool(count_tool):
    res = _under_tool(count_tool, [str(HERE / "annotation_stress.py"), str(count_tool), "400", "4"])
    assert res.returncode == 0 and res.stderr == "", res.stderr  # exit under a live tool: stderr empty
    got = json.loads(res.stdout)
    assert got["pushes"] == got["pops"] and got["pushes"] > 2000
    assert got["toggles"] > 0 and got["main_depth"] == 0
    assert got["threads"] == {str(i): {"bad": [], "underflows": 0} for i in range(4)}


EXIT_SCRIPT = """
import sys, threading, types, torch, pyprof
pyprof.init()
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
    def forward(self, x):
        return torch.relu(self.fc(x))
net = Net()
opt = torch.optim.Adam(net.parameters())
net(torch.ones(2, 4)).sum().backward()
opt.step()
late = types.ModuleType("late"); sys.modules["late"] = late
late.net = Net(); late.net(torch.ones(1, 4))      # module tables alive until the very end
class Cycle: pass
c = Cycle(); c.me = c; c.net = Net(); c.net(torch.ones(1, 4))   # freed by the last collection
del c
torch.nn.Linear(2, 2)(torch.ones(1, 2))           # a root whose table dies before exit
with pyprof.annotate("open at exit"):
    pyprof.restore(); pyprof.init()
    print("ok")
    sys.exit(0)
"""


def test_exit_under_a_live_tool_leaves_stderr_empty(count_tool):
    res = _under_tool(count_tool, ["-c", EXIT_SCRIPT])
    assert (res.returncode, res.stdout, res.stderr) == (0, "ok\n", "")
