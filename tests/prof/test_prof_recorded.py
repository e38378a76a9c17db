"""Markers of real torch calls, recorded by the annotation itself (pyprof.init() + the recording
hook), through prof's op table: the (mod, op) names the wrappers write are the ones the table
knows, and the FLOPs equal torch.utils.flop_counter's for the same calls."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="records real torch calls: needs torch")

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import pyprof
from pyprof.nvtx.emit import recording
from pyprof.prof.pricing.ops import Call, lookup


def recorded(fn) -> list:
    """The op markers pushed while `fn` runs under pyprof.init() that are not inside another op
    marker (module markers may enclose them)."""
    pyprof.init()
    try:
        with recording() as rec:
            fn()
    finally:
        pyprof.restore()
    markers = [r.marker for r in rec.ranges]

    def inside_op(i):
        parent = rec.ranges[i].parent
        while parent is not None:
            if markers[parent].get("kind") == "op":
                return True
            parent = rec.ranges[parent].parent
        return False
    return [m for i, m in enumerate(markers) if m.get("kind") == "op" and not inside_op(i)]


def counted(fn) -> int:
    with FlopCounterMode(display=False) as mode:
        fn()
    return mode.get_total_flops()


x, w = torch.randn(8, 16), torch.randn(4, 16)
img, k3 = torch.randn(2, 3, 12, 12), torch.randn(6, 3, 3, 3)
q = torch.randn(2, 2, 8, 4)
# (scaled_dot_product_attention is compared in test_prof_flops.py: on CPU with these shapes torch
# picks _scaled_dot_product_flash_attention_for_cpu, which flop_counter does not count.)

CALLS = {
    "F.linear": lambda: F.linear(x, w),
    "x @ w.t()": lambda: x @ w.t(),
    "torch.matmul": lambda: torch.matmul(x, w.t()),
    "Tensor.matmul": lambda: x.matmul(w.t()),
    "torch.mm": lambda: torch.mm(x, w.t()),
    "torch.bmm": lambda: torch.bmm(q[0], q[1].transpose(1, 2)),
    "torch.addmm": lambda: torch.addmm(torch.zeros(4), x, w.t()),
    "nn.Linear": lambda: torch.nn.Linear(16, 4)(x),
    "F.conv2d": lambda: F.conv2d(img, k3, padding=1, stride=2),
    "nn.Conv2d": lambda: torch.nn.Conv2d(3, 6, 3, groups=3)(img),
    "F.conv_transpose2d": lambda: F.conv_transpose2d(img, torch.randn(3, 5, 2, 2), stride=2),
    "einsum": lambda: torch.einsum("bhqd,bhkd->bhqk", q, q),
    "mlp": lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))(x),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_recorded_markers_match_flop_counter(name):
    fn = CALLS[name]
    markers = recorded(fn)
    total = 0
    for m in markers:
        formula = lookup(m["mod"], m["op"])
        if formula is not None:
            cost = formula(Call(m))
            total += cost.flops if cost and cost.kind != "simt" else 0
    assert total == counted(fn)


def test_every_op_of_a_small_training_step_is_in_the_table():
    """Model, loss, backward and optimizer as a user writes them: every op that launches a
    kernel has a formula (views, metadata and Tensor.backward itself need none)."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data, target = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))

    def step():
        loss = F.cross_entropy(model(data), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    no_kernel = {"Tensor.backward", "Tensor.t", "Tensor.view", "Tensor.flatten", "torch.flatten",
                 "Tensor.dim", "Tensor.size", "torch.optim.SGD.zero_grad"}
    missing = {f"{m['mod']}.{m['op']}" for m in recorded(step)} - no_kernel
    missing = {n for n in missing if lookup(*n.rsplit(".", 1)) is None}
    assert missing == set()
