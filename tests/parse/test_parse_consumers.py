"""parse hands the ranges that first read a data-sized op's output to the next launch on the thread
(pyprof/parse/consumers.py): on H200 captures of benchmarks/data_sized.py made with PyTorch's
emit_nvtx ranges alone and with Nsight Systems' --pytorch=autograd-shapes-nvtx alone, and on
synthetic exports for the rules one by one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from captures import unpacked
from nsys_synth import SynthExport
from pyprof.parse import Export, Stats, records
from pyprof.parse.consumers import DATA_SIZED, HEARD, Consumers

DATA = Path(__file__).resolve().parent.parent / "data"
TRUTH = json.loads((DATA / "data_sized_truth.json").read_text())["outputs"]


def test_the_data_sized_ops_are_those_pytorch_tags_dynamic_output_shape() -> None:
    torch = pytest.importorskip("torch")
    tagged = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        try:
            if any(torch.Tag.dynamic_output_shape in getattr(packet, o).tags for o in packet.overloads()):
                tagged.add(f"aten::{name}")
        except (AttributeError, RuntimeError):  # no op packet (a module attribute)
            continue
    assert tagged == DATA_SIZED


def _consumers(path: Path) -> list[tuple]:
    with Export(str(path)) as exp:
        return [(r["layer"][0], r["kShortName"], [(c["name"], c["sizes"][0], c["inputOpIds"][0]) for c in r["consumers"]])
                for r in records(exp, Stats()) if "consumers" in r]


# Per case of data_sized.py: (kernel, the first consumers' (name, first input's shape)) of each
# record that carries consumers; each read an output whose shape TRUTH holds (613 elements of
# 2,048 above 0.5; 50 distinct values of 1,000; 140 repeats of 96).
EXPECTED = [
    ("nonzero", "index_elementwise_kernel", [("aten::select", [613, 2]), ("aten::select", [613, 2])]),
    ("nonzero", "reduce_kernel", [("aten::sum", [613])]),  # after aten::index, also data-sized
    ("where", "vectorized_gather_kernel", [("aten::unbind", [613, 2])]),
    ("where", "Kernel2", [("aten::matmul", [613, 32])]),
    ("argwhere", "unrolled_elementwise_kernel", [("aten::t", [613, 2])]),  # names argwhere, around nonzero
    ("bool_index", "index_elementwise_kernel", [("aten::select", [613, 2]), ("aten::select", [613, 2])]),
    ("bool_index", "vectorized_elementwise_kernel", [("aten::view", [613])]),
    ("masked_select", "index_elementwise_kernel", [("aten::select", [613, 2]), ("aten::select", [613, 2])]),
    ("masked_select", "vectorized_elementwise_kernel", [("aten::unsqueeze", [613])]),
    ("unique", "unrolled_elementwise_kernel", [("aten::unsqueeze", [50])]),
    ("unique_consecutive", "unrolled_elementwise_kernel", [("aten::view", [50])]),
    # repeat_interleave(x, repeats) runs repeat_interleave(repeats) inside: its own steps' readers
    ("repeat_interleave", "vectorized_elementwise_kernel", [("aten::select", [96])]),
    ("repeat_interleave", "reduce_kernel", [("aten::all", [96])]),
    ("repeat_interleave", "compute_cuda_kernel", [("aten::item", [])]),
    ("repeat_interleave", "_scatter_gather_elementwise_kernel", [("aten::index_select", [96])]),
    ("repeat_interleave", "unrolled_elementwise_kernel", [("aten::view", [140])]),
    ("bincount", "reduce_kernel", [("aten::to", [])]),
    ("bincount", "vectorized_elementwise_kernel", [("aten::item", [])]),
    ("bincount", "unrolled_elementwise_kernel", [("aten::unsqueeze", [50])]),
    ("one_hot", "vectorized_elementwise_kernel", [("aten::item", [])]),
    ("one_hot", "_scatter_gather_elementwise_kernel", [("aten::scatter_", [1000, 50])]),
    ("one_hot", "unrolled_elementwise_kernel", [("aten::t", [1000, 50])]),
    # kv.repeat_interleave(3, dim=1), an int: the same op, its copy of the expanded heads (the
    # copy's record carries the expand, a broadcasting view, whoever listens: its input [2, 4, 1,
    # 64, 32] is what the copy reads), then the flatten inside it and the caller's view of its
    # [2, 12, 64, 32]
    ("repeat_heads", "elementwise_kernel", [("aten::expand", [2, 4, 1, 64, 32])]),
    ("repeat_heads", "reduce_kernel", [("aten::flatten", [2, 4, 3, 64, 32]), ("aten::view", [2, 12, 64, 32])]),
]


@pytest.mark.parametrize("mode", ["plain", "nsyspt"])
def test_the_next_launch_carries_the_ranges_that_read_a_data_sized_output(tmp_path: Path, mode: str) -> None:
    got = _consumers(unpacked(DATA / f"data_sized_{mode}.sqlite.xz", tmp_path))
    assert [(layer, kernel, [c[:2] for c in cs]) for layer, kernel, cs in got] == EXPECTED
    # what prof reads: the shape each case returned, as the program saw it
    firsts = {layer: cs[0][1] for layer, _, cs in got if cs[0][0] in ("aten::unbind", "aten::t", "aten::view",
                                                                         "aten::unsqueeze")}
    assert firsts == {"where": TRUTH["nonzero"][0], "argwhere": TRUTH["argwhere"][0], "bool_index": TRUTH["bool_index"][0],
                      "masked_select": TRUTH["masked_select"][0], "unique": TRUTH["unique"][0],
                      "unique_consecutive": TRUTH["unique_consecutive"][0], "repeat_interleave": TRUTH["repeat_interleave"][0],
                      "bincount": TRUTH["bincount"][0], "one_hot": TRUTH["one_hot"][0]}


def test_a_trace_with_pyprofs_markers_alone_has_no_consumers(tmp_path: Path) -> None:
    """Without PyTorch's op ranges no range names a producer: records stay as they were."""
    assert _consumers(unpacked(DATA / "data_sized_default.sqlite.xz", tmp_path)) == []


def _step(path: Path, ranges: list[tuple[int, int, str]], launches: list[int]) -> None:
    syn = SynthExport(str(path))
    main = syn.thread(100, 100)
    for start, end, text in ranges:
        syn.push(main, start, end, text)
    for t in launches:
        syn.launch_kernel(main, t, "k")
    syn.close()


NONZERO = (1000, 2000, "aten::nonzero, seq = 3, op_id = 38, sizes = [[512, 2]], input_op_ids = [(35,0)]")
UNBIND = (2100, 2600, "aten::unbind, seq = 3, op_id = 45, sizes = [[128, 2], []], input_op_ids = [(38,0), (0,-1)]")
SELECT = (2200, 2300, "aten::select, op_id = 46, sizes = [[128, 2], [], []], input_op_ids = [(38,0), (0,-1), (0,-1)]")
INDEX = (3000, 4000, "aten::index, seq = 3, op_id = 50, sizes = [[512, 256], [128]], input_op_ids = [(2,0), (46,0)]")
ADD = (1000, 2000, "aten::add, seq = 3, op_id = 38, sizes = [[512, 2], []], input_op_ids = [(35,0), (0,-1)]")


def _members(path: Path) -> list:
    with Export(str(path)) as exp:
        return [r.get("consumers") for r in records(exp, Stats())]


def test_a_range_nested_in_a_consumer_kept_is_not_kept_again(tmp_path: Path) -> None:
    _step(tmp_path / "s.sqlite", [NONZERO, UNBIND, SELECT, INDEX], [1500, 3500])
    assert _members(tmp_path / "s.sqlite") == [None, [
        {"name": "aten::unbind", "seq": 3, "opId": 45, "sizes": [[128, 2], []], "inputOpIds": [[38, 0], [0, -1]]}]]


def test_the_readers_of_an_op_that_is_not_data_sized_are_not_listened_for(tmp_path: Path) -> None:
    _step(tmp_path / "s.sqlite", [ADD, UNBIND, INDEX], [1500, 3500])
    assert _members(tmp_path / "s.sqlite") == [None, None]


def test_listening_ends_at_the_threads_next_launch(tmp_path: Path) -> None:
    later = (4100, 4200, "aten::view, op_id = 51, sizes = [[128, 2], []], input_op_ids = [(38,0), (0,-1)]")
    _step(tmp_path / "s.sqlite", [NONZERO, INDEX, later, (5000, 6000, "aten::relu, op_id = 52, sizes = [[4]], "
                                                          "input_op_ids = [(0,-1)]")], [1500, 3500, 5500])
    assert _members(tmp_path / "s.sqlite") == [None, None, None]


def test_user_text_that_holds_a_needle_is_not_a_consumer() -> None:
    c = Consumers()
    assert c.launched(7, [38]) == ""
    c.hear(7, "step (38, 2)", 10, 20)
    c.hear(7, "aten::t, op_id = 40, sizes = [[2, 128]], input_op_ids = [(38,0)]", 30, 40)
    assert c.launched(7, None) == ',"consumers":[{"name":"aten::t","opId":40,"sizes":[[2,128]],"inputOpIds":[[38,0]]}]'
    assert c.listening == {}


def test_a_thread_that_never_launches_again_keeps_a_bounded_number() -> None:
    c = Consumers()
    c.launched(7, [38])
    for i in range(3 * HEARD):
        c.hear(7, f"aten::view, op_id = {100 + i}, sizes = [[4]], input_op_ids = [(38,0)]", 10 * i, 10 * i + 5)
    assert len(c.heard[7]) == HEARD


EXPAND_AS = (2100, 2600, "aten::expand_as, op_id = 60, sizes = [[512, 1], [512, 64]], input_op_ids = [(55,0), (56,0)]")
EXPAND = (2200, 2300, "aten::expand, op_id = 61, sizes = [[512, 1], [], []], input_op_ids = [(55,0), (0,-1), (0,-1)]")
SCATTER = (3000, 4000, "aten::scatter_add_, op_id = 62, sizes = [[64, 64], [], [512, 64], [512, 64]], "
                       "input_op_ids = [(57,0), (0,-1), (60,0), (58,0)]")


def test_a_broadcasting_view_is_carried_by_the_next_launch_whoever_listens(tmp_path: Path) -> None:
    """index.expand_as(src) (its own aten::expand inside, not kept again) before a scatter: the
    scatter's record carries the expand_as range, whose first input [512, 1] is the index's
    storage; the launch before it, inside an add, carries nothing."""
    _step(tmp_path / "s.sqlite", [ADD, EXPAND_AS, EXPAND, SCATTER], [1500, 3500])
    assert _members(tmp_path / "s.sqlite") == [None, [
        {"name": "aten::expand_as", "opId": 60, "sizes": [[512, 1], [512, 64]], "inputOpIds": [[55, 0], [56, 0]]}]]


def test_a_held_broadcast_is_a_threads_state_and_a_seed_carries_it() -> None:
    """A thread that heard a broadcasting view but listens for nothing has a state (a window
    that starts there is parsed again, seeded); seeded with it, the next launch carries it."""
    c = Consumers()
    c.expanded(7, EXPAND[2], EXPAND[0], EXPAND[1])
    c.expanded(7, "aten::expand_copy, op_id = 70, sizes = [[4]], input_op_ids = [(1,0)]", 2400, 2500)
    state = c.state(7)
    assert state is not None and state[0] == () and len(state[1]) == 1 and c.listening == {}
    seeded = Consumers({7: state})
    assert seeded.listening == {}
    assert seeded.launched(7, None) == (',"consumers":[{"name":"aten::expand","opId":61,"sizes":[[512,1],[],[]],'
                                        '"inputOpIds":[[55,0],[0,-1],[0,-1]]}]')
    assert seeded.state(7) is None
