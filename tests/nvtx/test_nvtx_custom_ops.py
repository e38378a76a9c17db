"""Markers for other libraries' custom ops (pyprof/nvtx/custom_ops.py): a call of
`torch.ops.<namespace>.<op>` outside PyTorch's own namespaces pushes an op marker; PyTorch's own
ops and op overloads called directly go straight through."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the wrappers annotate torch calls")

from pyprof.nvtx import recording  # noqa: E402


@pytest.fixture(scope="module")
def scale():
    """A custom op as libraries define them (torch.library), whose Python body runs a torch op."""
    @torch.library.custom_op("pyproftest::scale", mutates_args=())
    def scale(x: torch.Tensor, k: float) -> torch.Tensor:
        return x * k
    return scale


def test_a_custom_ops_call_pushes_its_marker(pyprof_on, scale) -> None:
    """torch.ops.pyproftest.scale(x, 2.0): one marker, mod torch.ops.pyproftest, its arguments as
    any marker's; the op's own body (x * k) hidden inside it; the result unchanged."""
    x = torch.randn(4, 3)
    with recording() as rec:
        y = torch.ops.pyproftest.scale(x, 2.0)
    assert [(r.marker["mod"], r.marker["op"], r.marker["args"]) for r in rec.ranges] == [
        ("torch.ops.pyproftest", "scale", [{"shape": [4, 3], "dtype": "float32"}, 2.0])]
    assert torch.equal(y, x * 2.0)


def test_pytorchs_own_ops_and_overloads_go_straight_through(pyprof_on, scale) -> None:
    """torch.ops.aten.add (PyTorch's builtin namespace) and an overload called directly
    (torch.ops.pyproftest.scale.default, what compiled code calls) push no marker of their own."""
    x = torch.randn(4, 3)
    with recording() as rec:
        torch.ops.aten.add(x, x)
        torch.ops.pyproftest.scale.default(x, 3.0)
    assert [(r.marker["mod"], r.marker["op"]) for r in rec.ranges] == [("Tensor", "__mul__")]  # the op's body


def test_restore_puts_the_packet_call_back() -> None:
    """init() replaces OpOverloadPacket.__call__; restore() puts the original back."""
    import pyprof
    from pyprof.nvtx import patch

    if patch._initialized:
        pytest.skip("pyprof.init() is on in this process")
    before = vars(torch._ops.OpOverloadPacket)["__call__"]
    pyprof.init()
    try:
        assert vars(torch._ops.OpOverloadPacket)["__call__"].__wrapped__ is before
    finally:
        pyprof.restore()
    assert vars(torch._ops.OpOverloadPacket)["__call__"] is before


def test_pytorchs_machinery_gets_no_marker(pyprof_on) -> None:
    """record_function (torch.ops.profiler's enter and exit ops, run around every compiled
    graph's call and optimizer step) is PyTorch's own: no marker."""
    with recording() as rec:
        with torch.autograd.profiler.record_function("step"):
            pass
    assert rec.ranges == []
