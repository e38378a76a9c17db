"""Fuzz: the marker cache's C key (pyprof.nvtx._hot.key) against its Python twin (memo.key).

Over generated calls - tensors of random shapes, dtypes and strides (transposed, sliced with a
step, expanded, parameters), ints (beyond 64 bits too), floats (0.0, -0.0, nan, inf), bools,
strings, None, tuples of them and keyword arguments, inside and outside autocast - two calls at one
site get equal C keys exactly when their Python keys are equal, and calls with equal keys have the
same marker text. A C key that tells two calls apart where the Python key does not only costs a
miss; one that mixes up two calls the Python key tells apart would hand one call another's marker.
Each value is drawn together with a twin made afresh (another tensor of the same description, a
tuple rebuilt), so that equal keys of distinct objects are met as often as different ones.
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the keys describe torch calls")

from fuzz_harness import examples  # noqa: E402
from pyprof.nvtx import memo  # noqa: E402
from pyprof.nvtx.marker import autocast_region, build, op_prefix  # noqa: E402

pytestmark = pytest.mark.skipif(memo._hot is None, reason="pyprof.nvtx._hot was not built (no C compiler at install)")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int8, torch.bool]


@st.composite
def tensors(draw: st.DrawFn) -> tuple:
    """(a tensor, a fresh tensor of the same description) of a drawn shape, dtype and layout."""
    shape = draw(st.lists(st.integers(0, 4), max_size=4))
    dtype = draw(st.sampled_from(DTYPES))
    view = draw(st.sampled_from(["plain", "t", "step", "expand", "permute", "parameter"]))
    grad = dtype.is_floating_point and draw(st.booleans())  # its text says so: the keys must tell it

    def make() -> torch.Tensor:
        t = _made()
        return t.requires_grad_() if grad and t.is_leaf and not t.requires_grad else t

    def _made() -> torch.Tensor:
        t = torch.zeros(shape, dtype=dtype)
        if view == "t" and t.dim() >= 2:
            return t.transpose(0, 1)
        if view == "step" and t.dim() >= 1:
            return t[::2]
        if view == "expand":
            return torch.zeros((1,) + tuple(shape), dtype=dtype).expand((3,) + tuple(shape))
        if view == "permute" and t.dim() >= 3:
            return t.permute(2, 0, 1, *range(3, t.dim()))
        if view == "parameter":
            return torch.nn.Parameter(t, requires_grad=False)
        return t

    return make(), make()


scalars = st.one_of(
    st.integers(-3, 3), st.integers(-(2 ** 70), 2 ** 70), st.booleans(), st.none(),
    st.sampled_from([0.0, -0.0, 1.5, float("nan"), float("inf"), -float("inf"), 1e-5]), st.floats(),
    st.text(max_size=4),
)


def _rebuilt(v):
    """v made again as another object where the type makes new ones (tuples, floats); a nan with
    the other sign bit (the same text)."""
    if type(v) is tuple:
        return tuple(_rebuilt(x) for x in v)
    if type(v) is float:
        return float(repr(v)) if v == v else -v
    return v


values = st.one_of(
    tensors(),
    scalars.map(lambda v: (v, _rebuilt(v))),
    st.lists(scalars, max_size=3).map(tuple).map(lambda v: (v, _rebuilt(v))),
    # a list and a tuple of the same ints write the same text; past marker.MAX_LIST items the
    # text stops listing them
    st.lists(st.integers(-2, 2), max_size=3).map(lambda v: (v, tuple(v))),
    st.lists(st.integers(0, 1), min_size=15, max_size=18).map(lambda v: (tuple(v), tuple(v[:16] + [2] * (len(v) - 16)))),
)
# Calls of one layout (so many positional, these keywords) filled from a small pool of values,
# so that calls share values often and equal keys are common.
calls = st.tuples(st.lists(values, min_size=1, max_size=4), st.integers(0, 3),
                  st.lists(st.sampled_from(["alpha", "out", "dim"]), unique=True, max_size=2)).flatmap(
    lambda drawn: st.lists(st.tuples(st.lists(st.sampled_from(drawn[0]), min_size=drawn[1], max_size=drawn[1]),
                                     st.fixed_dictionaries({k: st.sampled_from(drawn[0]) for k in drawn[2]}),
                                     st.integers(0, 1)),  # which of each value's pair the call passes
                           min_size=2, max_size=6))


def _at_one_site(fn, *args):
    return fn(*args)  # the key describes the call site of this frame's caller


@examples(300)
@given(calls, st.sampled_from([None, torch.bfloat16, torch.float16]))
def test_the_c_key_tells_generated_calls_apart_exactly_where_the_python_key_does(drawn, autocast) -> None:
    made = []
    for args, kwargs, twin in drawn:
        made.append((tuple(pair[twin] for pair in args), {k: pair[twin] for k, pair in kwargs.items()}))
        made.append((tuple(pair[1 - twin] for pair in args), {k: pair[1 - twin] for k, pair in kwargs.items()}))
    mod = ',"module":"m"'
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        c_keys, py_keys, texts = [], [], []
        for args, kwargs in made:
            for fn, keys in ((memo._hot.key, c_keys), (memo.key, py_keys)):  # one call site for both
                keys.append(_at_one_site(fn, args, kwargs, mod))
            texts.append(build(op_prefix("torch", "add"), args, kwargs, mod + autocast_region()))
    assert all(type(k) is bytes for k in c_keys)
    pairs = range(len(made))
    c_equal = {(i, j) for i in pairs for j in pairs if c_keys[i] == c_keys[j]}
    assert c_equal == {(i, j) for i in pairs for j in pairs if py_keys[i] == py_keys[j]}
    assert all(texts[i] == texts[j] for i, j in c_equal)
    # every call and its twin: equal keys (the twins are made to be)
    assert all((i, i + 1) in c_equal for i in range(0, len(made), 2))
