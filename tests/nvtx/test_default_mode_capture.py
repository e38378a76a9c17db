"""H100 captures of the examples in one run each twice: pyprof.profiled()'s default (markers and
backward node hooks, no emit_nvtx: `*_default`; since node ranges, `*_nodes`) and with aten=True
(emit_nvtx): every kernel gets the same direction, op, module and call site, and the same FLOPs
but where only PyTorch's op ranges can tell (benchmarks/attribution_compare.py prints the differences)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
sys.path.insert(0, str(HERE.parent / "benchmarks"))

import attribution_compare  # noqa: E402
from captures import unpacked  # noqa: E402

import pyprof  # noqa: E402
from pyprof.prof.pricing.op_ranges import engine_accumulation  # noqa: E402


def _unpacked(tmp_path: Path, name: str) -> str:
    return os.fspath(unpacked(HERE / "data" / "default_mode" / f"{name}.xz", tmp_path))


def test_gpt_default_mode_attributes_every_kernel_as_emit_nvtx_does(tmp_path: Path) -> None:
    default = attribution_compare.kernels(_unpacked(tmp_path, "gpt_default.sqlite"))
    aten = attribution_compare.kernels(_unpacked(tmp_path, "gpt_aten.sqlite"))
    assert len(default) == len(aten) == 139
    assert [r["kernel"] for r in default] == [r["kernel"] for r in aten]
    keys = attribution_compare.KEY
    assert [tuple(r[k] for k in keys) for r in default] == [tuple(r[k] for k in keys) for r in aten]
    bprop = [r for r in default if r["dir"] == "bprop"]
    assert len(bprop) > 50 and all(r["op"] not in (None, "na", "-") for r in bprop)


def _by_op(rows: list) -> dict:
    sums: dict = {}
    for r in rows:
        key = tuple(r[k] for k in attribution_compare.KEY)
        sums[key] = sums.get(key, 0) + (r["flops"] or 0)
    return sums


def test_gpt_default_mode_prices_every_kernel_as_emit_nvtx_does(tmp_path: Path) -> None:
    """FLOPs and bytes per kernel equal, the autograd engine's gradient accumulations too (an
    `aten::add_` between nodes, priced at the aten level; default mode has no range saying a
    kernel is one, but an add of an argument's gradient in a backward is that part, parts.py,
    one add per element). Fused AdamW's two launches each carry their own work in both (multitensor.py:
    the step counter's one element per block, then the step)."""
    default = attribution_compare.kernels(_unpacked(tmp_path, "gpt_default.sqlite"))
    records = list(pyprof.records(_unpacked(tmp_path, "gpt_aten.sqlite")))
    aten = attribution_compare.kernels(os.fspath(tmp_path / "gpt_aten.sqlite"))
    engine = [i for i, rec in enumerate(records) if engine_accumulation(rec)]
    assert engine == [77, 96, 112, 131]
    assert {aten[i]["op"] for i in engine} == {"layer_norm"}
    assert [(aten[i]["flops"], default[i]["flops"]) for i in engine] == [(131072, 131072)] * 4
    adamw = [i for i, r in enumerate(aten) if r["op"] == "AdamW.step"]
    assert adamw == [137, 138]
    assert [default[i]["flops"] for i in adamw] == [aten[i]["flops"] for i in adamw] == [29, 27782144]
    same = [i for i in range(len(aten)) if i not in engine]
    assert [default[i]["flops"] for i in same] == [aten[i]["flops"] for i in same]
    assert [default[i]["bytes"] for i in same] == [aten[i]["bytes"] for i in same]
    # cross_entropy's three backward nodes do its backward once, in both, each kernel its stage:
    # the zero fill of dLogProb (512 x 1024 written in float32, as FillFunctor<float> says: nll_loss
    # runs in float32 under autocast) a part, nll_loss's backward one FLOP per sample, the cast
    # back to bf16 a part, log_softmax's backward 4 per element.
    ce = [i for i, r in enumerate(aten) if r["op"] == "cross_entropy" and r["dir"] == "bprop"]
    assert [aten[i]["flops"] for i in ce] == [0, 512, 0, 4 * 512 * 1024]
    assert aten[ce[0]]["bytes"] == 512 * 1024 * 4
    # Per op: equal, the engine's adds on layer_norm's backward in both.
    d, a = _by_op(default), _by_op(aten)
    assert d == a


def _differences(tmp_path: Path, name: str, default_kind: str = "default", aten_kind: str = "aten") -> dict:
    """Kernels whose (dir, mod, op, module, site, flops, bytes) differ between the two
    captures, by what PyTorch's ranges say they are in the emit_nvtx one:
    (engine accumulation?, outermost range, innermost range) -> kernel indices."""
    default = attribution_compare.kernels(_unpacked(tmp_path, f"{name}_{default_kind}.sqlite"))
    aten_path = _unpacked(tmp_path, f"{name}_{aten_kind}.sqlite")
    aten = attribution_compare.kernels(aten_path)
    assert [r["kernel"] for r in default] == [r["kernel"] for r in aten]
    cols = attribution_compare.KEY + ("flops", "bytes")
    out: dict = {}
    for i, (rec, a, d) in enumerate(zip(pyprof.records(aten_path), aten, default)):
        if tuple(a[k] for k in cols) != tuple(d[k] for k in cols):
            ops = rec["torchOps"]
            out.setdefault((engine_accumulation(rec), ops[0]["name"], ops[-1]["name"]), []).append(i)
    return out


def test_lenet_default_mode_differs_only_in_the_foreach_optimizer_step(tmp_path: Path) -> None:
    """H100 captures of examples/lenet.py (benchmarks/overhead_gpu.sh): 44 kernels, all equal but
    SGD's two `_foreach_add_` launches (momentum and the update, each with an alpha): each
    launch carries its own elements in both modes (multitensor.py), 2 FLOPs an element as the
    default mode reads the launch's functor, 1 as the aten formula of `_foreach_add_` counts."""
    assert _differences(tmp_path, "lenet") == {
        (False, "Optimizer.step#SGD.step", "aten::_foreach_add_"): [42, 43]}


# ResNet-18's kernels that only PyTorch's op ranges price or attribute, in both default modes:
# GradScaler's kernels (launched outside every pyprof marker),
# the foreach SGD step.
_RESNET_KNOWN = {
    (False, "aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_foreach_non_finite_check_and_unscale_"):
        [252],
    # A list split over two launches: without the op ranges' sizes its share is na (multitensor.py).
    (False, "Optimizer.step#SGD.step", "aten::_foreach_add"): [253, 254],
    (False, "Optimizer.step#SGD.step", "aten::_foreach_add_"): [256, 257],
    (False, "aten::_amp_update_scale_", "aten::_amp_update_scale_"): [258]}


def test_resnet_default_mode_differences_are_the_known_ones(tmp_path: Path) -> None:
    """H100 captures of examples/resnet.py (AMP, SGD foreach): besides the foreach step, what only
    op ranges tell (GradScaler's unscale and update-scale kernels, which launch outside any
    pyprof marker; the engine's gradient accumulations after ConvolutionBackward0 are priced
    alike, as accumulation parts) and the backward of
    nn.ReLU(inplace=True), whose node this capture's pyprof did not hook (it runs inside the
    previous op's range; hooked since, see test_nvtx_memo). Its threshold_backward kernels stay na
    there: the range they fall in is another op's, and a kernel's name and grid bound its element
    count without giving it."""
    got = _differences(tmp_path, "resnet")
    relu = "autograd::engine::evaluate_function: ReluBackward0"
    assert got == {
        (False, relu, "aten::threshold_backward"): [130, 135, 141, 146, 156, 161, 167, 172, 182, 187, 193, 198, 209,
                                                    216, 224, 231, 241],
        **_RESNET_KNOWN}


# profiled()'s default since node ranges (pyprof.nvtx.node_ranges): backward kernels find their
# forward op through PyTorch's node ranges and the op ranges' sequence payloads. H100 captures of
# the three examples, each with an emit_nvtx capture of the same run (benchmarks/node_ranges_gpu.sh).
_NODE_DIFFERENCES = {
    "lenet": (44, 44, {
        (False, "Optimizer.step#SGD.step", "aten::_foreach_add_"): [42, 43]}),
    "gpt": (139, 139, {}),
    # GradScaler's two kernels launch outside every pyprof marker: no op without PyTorch's ranges.
    "resnet": (259, 257, _RESNET_KNOWN),
}


@pytest.mark.parametrize("name", sorted(_NODE_DIFFERENCES))
def test_node_range_mode_attributes_as_emit_nvtx_does_but_the_known_kernels(tmp_path: Path, name: str) -> None:
    """Every kernel gets emit_nvtx's direction, op, module and call site (but GradScaler's, which
    no marker encloses); FLOPs and bytes differ only where only PyTorch's op ranges can tell:
    launches of a foreach optimizer step whose share only the op ranges' sizes tell. The engine's
    gradient accumulations are priced alike (accumulation parts, parts.py)."""
    kernels, attributed_alike, differences = _NODE_DIFFERENCES[name]
    default = attribution_compare.kernels(_unpacked(tmp_path, f"{name}_nodes.sqlite"))
    aten_path = _unpacked(tmp_path, f"{name}_nodes_aten.sqlite")
    aten = attribution_compare.kernels(aten_path)
    assert len(default) == len(aten) == kernels
    keys = attribution_compare.KEY
    assert sum(tuple(a[k] for k in keys) == tuple(d[k] for k in keys) for a, d in zip(aten, default)) == attributed_alike
    assert _differences(tmp_path, name, "nodes", "nodes_aten") == differences
    records = list(pyprof.records(aten_path))
    engine = [i for i, rec in enumerate(records) if engine_accumulation(rec)]
    assert engine and all(default[i]["flops"] == aten[i]["flops"] > 0 for i in engine) if name != "lenet" else not engine
    bprop = [r for r in default if r["dir"] == "bprop"]
    assert bprop and all(r["op"] not in (None, "na", "-") for r in bprop)
