"""What parse makes of one NVTX range text, and that memory does not grow with ranges."""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from nsys_synth import SynthExport, torch_text
from pyprof.parse import Export, Stats, attribute, intake, records
from pyprof.parse.ranges import LAYER, MALFORMED, MODULE, OP, OTHER, TORCH, UNKNOWN, classify, torch_op


def entry(text: str) -> dict:
    label = torch_op(text)
    assert label is not None and label.kind == TORCH
    return json.loads(label.js)


def test_modern_pytorch_range_text() -> None:
    text = ("aten::addmm, seq = 45339, op_id = 990761, sizes = [[64, 512], [512, 512], [512]], "
            "input_op_ids = [(12,0), (0,-1), (0,-1)]")
    assert entry(text) == {"name": "aten::addmm", "seq": 45339, "opId": 990761,
                           "sizes": [[64, 512], [512, 512], [512]], "inputOpIds": [[12, 0], [0, -1], [0, -1]]}
    label = torch_op(text)
    assert (label.name, label.seq, label.bwd) == ("aten::addmm", 45339, False)


@pytest.mark.parametrize("text, expected", [
    ("addmm, seq = 33", {"name": "addmm", "seq": 33}),                          # PyTorch 1.x
    ("AddmmBackward, stashed seq = 33", {"name": "AddmmBackward", "seq": 33}),
    ("aten::empty", {"name": "aten::empty"}),                                   # bare, namespaced
    ("AddmmBackward0, seq = 33, op_id = 140", {"name": "AddmmBackward0", "seq": 33, "opId": 140}),
    ("aten::mul, op_id = 7, sizes = [[], [2, 3]]", {"name": "aten::mul", "opId": 7, "sizes": [[], [2, 3]]}),
    ("Optimizer.zero_grad#SGD.zero_grad, op_id = 1", {"name": "Optimizer.zero_grad#SGD.zero_grad", "opId": 1}),
    ("autograd::engine::evaluate_function: AddmmBackward0", {"name": "autograd::engine::evaluate_function: AddmmBackward0"}),
    ("torch::autograd::AccumulateGrad", {"name": "torch::autograd::AccumulateGrad"}),
    ("MulBackward0", {"name": "MulBackward0"}),
])
def test_pytorch_range_forms(text: str, expected: dict) -> None:
    assert entry(text) == expected


@pytest.mark.parametrize("text, autograd", [
    ("AddmmBackward0, seq = 1", True), ("CopyBackwards", True), ("torch::autograd::AccumulateGrad", True),
    ("autograd::engine::evaluate_function: MulBackward0", True), ("aten::mm, op_id = 3", False),
])
def test_autograd_ranges(text: str, autograd: bool) -> None:
    assert torch_op(text).bwd is autograd


@pytest.mark.parametrize("text", [
    "forward", "epoch 1, step 2", "aten::mm, seq = x", "aten::mm, sizes = [[1, 2]",  # unbalanced
    "aten::mm, sizes = [[01]]", "aten::mm, sizes = [[1, 2]]; import os", "aten::mm, op_id = 3, colour = red",
    "aten::mm, input_op_ids = [(1,2), (3]", ", seq = 3",
])
def test_not_pytorch_text_stays_user_text(text: str) -> None:
    assert torch_op(text) is None
    label = classify(None, text)
    assert (label.kind, label.name, json.loads(label.js)) == (OTHER, text, text)


def test_markers_and_layers() -> None:
    op = classify("pyprof", '{"v":1,"kind":"op","mod":"Tensor","op":"backward","args":[],"site":"t.py:3"}')
    assert (op.kind, op.bwd, op.attrs) == (OP, True, ('"Tensor"', '"backward"', '"t.py:3"', None))
    mod = classify("pyprof", '{"v":1,"kind":"module","module":"enc.0","cls":"Linear","repr":""}')
    assert (mod.kind, mod.name) == (MODULE, "enc.0")
    assert (classify("pyprof", '{"v":1,"kind":"layer","name":"enc"}').kind, classify("x", "layer:enc").name) == (LAYER, "enc")
    assert classify("pyprof", '{"v":1,"kind":"future"}').kind == UNKNOWN
    assert classify("pyprof", '[1, 2]').kind == UNKNOWN
    for bad in ('{"v":1', "op(1)", '{"v":1,"kind":"op","op":"x","args":[Infinity]}', "[" * 100000 + "]" * 100000):
        assert classify("pyprof", bad).kind == MALFORMED
    # text in another domain is reported with it; PyTorch's form means nothing there
    other = classify("nccl", "aten::mm, seq = 3")
    assert (other.kind, other.name) == (OTHER, "nccl:aten::mm, seq = 3")


def test_marker_json_is_re_encoded_on_one_line() -> None:
    # Valid JSON spread over lines must not break the one-record-per-line output.
    label = classify("pyprof", '{"v": 1,\n "kind": "op", "mod": "torch", "op": "add", "args": ["\\u00e9"]}')
    assert "\n" not in label.js and json.loads(label.js)["args"] == ["é"]


def _peak_bytes(path: str) -> int:
    tracemalloc.start()
    try:
        with Export(path) as exp:
            for _ in records(exp, Stats()):
                pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _busy_threads(path: Path, n: int) -> str:
    """n ranges on a thread that launches no kernel, n start/end ranges that overlap without
    nesting, then one kernel."""
    syn = SynthExport(str(path))
    main, loader = syn.thread(100, 100), syn.thread(100, 101)
    syn.launch(loader, 500, api="cudaStreamQuery_v3020")  # a CUDA call: its ranges are read
    for i in range(n):
        t = 1000 + i * 100
        syn.push(loader, t, t + 50, torch_text("aten::stack", op_id=i))
        syn.start_end(main, t, t + 150, f"batch {i}")  # each ends after the next one starts
    syn.launch_kernel(main, 1000 + n * 100, "k")
    return syn.close()


@pytest.mark.slow
def test_memory_does_not_grow_with_ranges_that_enclose_nothing(tmp_path: Path) -> None:
    small = _peak_bytes(_busy_threads(tmp_path / "s.sqlite", 5000))
    large = _peak_bytes(_busy_threads(tmp_path / "l.sqlite", 40000))
    # Keeping the 70,000 extra ranges would take over 10 MB.
    assert large - small < 300_000, (small, large)


def test_forward_op_map_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake, "FWD_OPS_PER_PROCESS", 100)
    syn = SynthExport(str(tmp_path / "fwd.sqlite"))
    main, grad = syn.thread(100, 100), syn.thread(100, 101)
    for seq in range(1000):
        syn.push(main, 1000 + seq * 10, 1005 + seq * 10, torch_text("aten::mul", seq=seq, op_id=seq))
    syn.launch(main, 20000, api="cudaStreamSynchronize_v3020")  # the forward thread calls CUDA
    syn.push(grad, 50000, 60000, torch_text("MulBackward0", seq=950, op_id=2000))
    syn.launch_kernel(grad, 51000, "recent")
    syn.push(grad, 70000, 80000, torch_text("MulBackward0", seq=1, op_id=2001))
    syn.launch_kernel(grad, 71000, "evicted")
    with Export(syn.close()) as exp:
        recent, evicted = records(exp, Stats())
    assert recent["fwd"] == {"seq": 950, "marker": None, "torchOp": "aten::mul"} and recent["op"] == "mul"
    assert evicted["fwd"] is None and evicted["dir"] == "bprop" and evicted["op"] == "MulBackward0"


NASTY = ['"', "\\", "\n", "\r\n", "\x00", "\u2028", "é", "😀", "layer:\"q\"\n", 'layer:', "aten::mm, sizes = [[1, 2]]\n",
         '{"v":1,"kind":"op","mod":"torch","op":"add\\n\\"x\\"","args":["\\u0000"],"site":"a\\"b.py:1",'
         '"module":"m\\\\n"}', '{"v":1,"kind":"module","module":"\\ud800"}', '{"v":1,"kind":"layer","name":"\\"L\\""}',
         "aten::\"x\", seq = 1", "x" * 100000, "aten::add, seq = 99999999999999999999999"]


def test_hostile_texts_give_valid_json_lines(tmp_path: Path) -> None:
    # Records are assembled as text: every string from the trace must come out escaped.
    syn = SynthExport(str(tmp_path / "nasty.sqlite"))
    t = syn.thread(100, 100)
    dom = syn.domain(t, "pyprof")
    odd = syn.domain(t, 'dom"ain\n')
    for i, text in enumerate(NASTY):
        base = 1000 + i * 1000
        syn.push(t, base, base + 900, text, domain=dom, registered=i % 2 == 0)
        syn.push(t, base + 10, base + 800, text, domain=odd)
        syn.push(t, base + 20, base + 700, text)
        syn.launch_kernel(t, base + 30, f'void k<"{i}">(\\n)\n')
    with Export(syn.close()) as exp:
        stats = Stats()
        lines = list(attribute.lines(exp, stats))
    assert len(lines) == len(NASTY) == stats.kernels
    for line, text in zip(lines, NASTY):
        assert "\n" not in line
        rec = json.loads(line)
        assert rec["kLongName"].startswith('void k<"')
        assert f'dom"ain\n:{text}' in rec["ranges"] or "layer:" in text
