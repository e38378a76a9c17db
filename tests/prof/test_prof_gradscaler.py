"""The optimizer phase without PyTorch's op ranges: GradScaler's unscale_ and update, priced from
their markers (pyprof.init() wraps both: their kernels run in private ops, which get no marker),
and a foreach step's launches from the marker's per-tensor sizes. tests/data/gradscaler_resnet
.sqlite.xz: one step of examples/resnet.py (ResNet-18, batch 2, 64 x 64, fp16 AMP, foreach SGD
with momentum and weight decay, GradScaler) captured on an H100 in pyprof's default mode."""
from __future__ import annotations

from pathlib import Path

import pytest

from captures import unpacked
from pyprof.parse import Export, Stats, records
from pyprof.prof.pricing.analysis import Analyzer
from pyprof.prof.warnings_tally import Tally

DATA = Path(__file__).resolve().parents[1] / "data"
# The capture's one-element fill and its unscale launch (grid given per test).
KERNELS = [
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, "
     "(unsigned long)1>>(int, T2, T3)", [1, 1, 1]),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)1>, "
     "at::native::<unnamed>::UnaryOpFunctor<float, (int)1, (int)1, (int)0>, at::native::_amp_foreach_non_finite_check_"
     "and_unscale_cuda_(c10::ArrayRef<at::Tensor>, at::Tensor &, const at::Tensor &)::[lambda() (instance 1)]::"
     "operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) (instance 1)]>(T1, T2, T3...)",
     [227, 1, 1]),
]


def _record(name: str, grid: list, marker: dict) -> dict:
    return {"kind": "kernel", "kLongName": name, "kShortName": name.split("<")[0].split("::")[-1], "grid": grid,
            "block": [512, 1, 1], "dir": "optim", "mod": marker["mod"], "op": marker["op"], "marker": marker,
            "torchOps": [], "pid": 1, "tid": 1}
NUMEL = 11689512  # ResNet-18's 62 parameters, every one with a gradient


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    path = unpacked(DATA / "gradscaler_resnet.sqlite.xz", tmp_path_factory.mktemp("gs"))
    with Export(str(path)) as exp:
        recs = list(records(exp, Stats()))
    an = Analyzer(Tally())
    return [(r, an.facts(r)) for r in recs]


def test_unscale_stages_and_launch_carry_their_own_work_adding_up_to_the_formula(rows):
    unscale = [(r, f) for r, f in rows if r["op"] == "GradScaler.unscale_"]
    assert {(r["dir"], r["mod"]) for r, _ in unscale} == {("optim", "torch.amp")}
    params = unscale[0][0]["marker"]["kwargs"]["params"]
    assert (params["count"], params["numel"], params["dtype"], sum(params["numels"])) == (62, NUMEL, "float32", NUMEL)
    # scale.double() (fp32 read, fp64 written), .reciprocal() (1 FLOP), .float(), full((), 0.);
    # then one launch over every gradient element (read and written once; a multiply and a
    # finiteness test each).
    assert [(r["kShortName"], f.flops, f.bytes) for r, f in unscale] == [
        ("unrolled_elementwise_kernel", 0, 12), ("vectorized_elementwise_kernel", 1, 16),
        ("unrolled_elementwise_kernel", 0, 12), ("vectorized_elementwise_kernel", 0, 4),
        ("multi_tensor_apply_kernel", 2 * NUMEL, 2 * NUMEL * 4)]
    cost = unscale[0][1].cost
    assert (cost.flops, cost.bytes) == (sum(f.flops for _, f in unscale), sum(f.bytes for _, f in unscale))
    assert len({f.call for _, f in unscale}) == 1


def test_update_is_its_one_kernel(rows):
    [(r, f)] = [(r, f) for r, f in rows if r["op"] == "GradScaler.update"]
    assert (r["kShortName"], r["dir"], f.flops, f.bytes) == ("amp_update_scale_cuda_kernel", "optim", 0, 20)


def test_update_with_a_scale_given_is_not_priced():
    """update(new_scale) fills or copies the scale instead of running the update kernel."""
    marker = {"v": 1, "kind": "op", "mod": "torch.amp", "op": "GradScaler.update", "args": [1024.0]}
    f = Analyzer(Tally()).facts(_record(KERNELS[0][0], [1, 1, 1], marker))
    assert (f.flops, f.bytes) == (None, None)


def test_foreach_step_launches_carry_their_own_elements(rows):
    """SGD's weight decay (grad + wd * param into a new list: 3 lists, 48 tensors a launch) runs
    as two launches of 62 tensors (grad and param read, the sum written); the marker's `numels` replays the packing (multitensor.py),
    each launch checked against its grid. Then the momentum buffer's mul_ and add_, and the
    parameter's add_: one launch each, the whole list."""
    step = [(r, f) for r, f in rows if r["op"] == "SGD.step"]
    first, second = 7926912 // 2, 15452112 // 2  # elements: 2 FLOPs each (a multiply and an add)
    assert first + second == NUMEL
    assert [(r["grid"][0], f.flops, f.bytes) for r, f in step] == [
        (100, 2 * first, 3 * first * 4), (127, 2 * second, 3 * second * 4),
        (227, NUMEL, 2 * NUMEL * 4), (227, 2 * NUMEL, 3 * NUMEL * 4), (227, 2 * NUMEL, 3 * NUMEL * 4)]


def test_the_check_of_a_self_unscaling_optimizer_splits_its_launches_by_the_packing():
    """GradScaler.step's _check_inf_per_device (an optimizer that unscales in its own kernels,
    fused Adam): inv_scale = 1 and found_inf filled, then the finiteness test over every gradient,
    written back. 120 gradients of 1,000 elements: launches of 110 and 10 tensors (one block each)."""
    [*fills, launch] = [(n, g) for n, g in KERNELS if "FillFunctor" in n or "multi_tensor" in n]
    marker = {"v": 1, "kind": "op", "mod": "torch.amp", "op": "GradScaler._check_inf_per_device", "args": [],
              "kwargs": {"params": {"count": 120, "numel": 120000, "dtype": "float32", "numels": [1000] * 120}}}
    an = Analyzer(Tally())
    kernels = [fills[0], fills[0], (launch[0], [110, 1, 1]), (launch[0], [10, 1, 1])]
    got = [an.facts(_record(name, grid, marker)) for name, grid in kernels]
    assert [(f.flops, f.bytes) for f in got] == [(0, 4), (0, 4), (110000, 110000 * 8), (10000, 10000 * 8)]
