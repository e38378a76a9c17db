"""parse gives an op marker the `out` mark inside its range (pyprof/parse/out_marks.py): the output
size of a call whose size its input's values decide (synthetic exports)."""
from __future__ import annotations

from pathlib import Path

from nsys_synth import MARK, SynthExport, marker
from pyprof.parse import Export, Stats, records

COND = {"shape": [512, 2], "dtype": "bool"}
ROWS = [{"shape": [127], "dtype": "int64"}, {"shape": [127], "dtype": "int64"}]


def where_step(path: Path, out_text: str | None, mark_thread: str = "main", mark_t: int = 4500) -> None:
    """torch.where(cond) on the main thread: its op range around two kernel launches, an out
    mark (text `out_text`, on `mark_thread` at `mark_t`) inside it; then an add after it."""
    syn = SynthExport(str(path))
    main = syn.thread(100, 100)
    other = syn.thread(100, 101)
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.push(main, 1000, 5000, marker("op", mod="torch", op="where", args=[COND]), domain=dom, registered=True)
    syn.launch_kernel(main, 2000, "DeviceReduceSingleTileKernel")
    syn.launch_kernel(main, 3000, "write_indices")
    if out_text is not None:
        syn.event(MARK, main if mark_thread == "main" else other, mark_t, None, out_text, domain=dom, registered=True)
    syn.push(main, 6000, 8000, marker("op", mod="torch", op="add", args=[ROWS[0], ROWS[0]]), domain=dom,
             registered=True)
    syn.launch_kernel(main, 7000, "vectorized_elementwise_kernel")
    syn.close()


def markers_of(path: Path) -> list[dict]:
    with Export(str(path)) as exp:
        return [r["marker"] for r in records(exp, Stats())]


def test_an_out_mark_inside_an_op_range_gives_its_marker_the_output(tmp_path: Path) -> None:
    where_step(tmp_path / "w.sqlite", marker("out", out=ROWS))
    got = markers_of(tmp_path / "w.sqlite")
    assert [m["out"] for m in got[:2]] == [ROWS, ROWS]
    assert got[0] == {"v": 1, "kind": "op", "mod": "torch", "op": "where", "args": [COND], "out": ROWS}
    assert "out" not in got[2]  # the add after it


def test_marks_elsewhere_or_malformed_change_nothing(tmp_path: Path) -> None:
    """A mark on another thread, one after the range, one without `out`, one that is no JSON, one
    with NaN in it (not strict JSON), none at all: the markers are as pushed."""
    plain = {"v": 1, "kind": "op", "mod": "torch", "op": "where", "args": [COND]}
    for i, (text, thread, t) in enumerate([(marker("out", out=ROWS), "other", 4500), (marker("out", out=ROWS), "main", 5500),
                                           (marker("out"), "main", 4500), ("{not json", "main", 4500),
                                           ('{"v":1,"kind":"out","out":[{"shape":[NaN]}]}', "main", 4500),
                                           (None, "main", 0)]):
        where_step(tmp_path / f"m{i}.sqlite", text, thread, t)
        assert markers_of(tmp_path / f"m{i}.sqlite")[0] == plain, text


def test_out_values_are_re_encoded_strictly(tmp_path: Path) -> None:
    """The mark's `out` is decoded and encoded again, not pasted: spacing and all."""
    where_step(tmp_path / "s.sqlite", '{"v":1, "kind":"out", "out": [{"shape": [127], "dtype": "int64"}]}')
    with Export(str(tmp_path / "s.sqlite")) as exp:
        line = next(iter(records(exp, Stats())))
    assert line["marker"]["out"] == ROWS[:1]
