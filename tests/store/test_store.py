"""The Parquet record store (pyprof/store): parse -o X.parquet gives the records JSON Lines gives,
every field, key order included; prof's views print the same bytes from either; a store that is
damaged or not pyprof's is one line and a documented status."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402

import pyprof  # noqa: E402
from captures import unpacked  # noqa: E402
from pyprof.errors import EXIT_BAD_FORMAT, EXIT_CORRUPT, EXIT_NO_INPUT, EXIT_OUTPUT, PyprofError  # noqa: E402
from pyprof.store import read, write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _run(tool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"pyprof.{tool}", *args], capture_output=True, env=ENV, cwd=cwd)


def _both(tmp_path: Path, *args: str) -> tuple[Path, Path]:
    """The records of `args` parsed to JSON Lines and to a store."""
    lines, store = tmp_path / "net.dict", tmp_path / "net.parquet"
    for out in (lines, store):
        p = _run("parse", "-q", "-j", "1", *args, "-o", str(out))
        assert p.returncode == 0, p.stderr
    return lines, store


def _lines(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> tuple[Path, Path]:
    """The two-rank DDP capture (with memcpy records) as JSON Lines and as a store."""
    tmp = tmp_path_factory.mktemp("ddp")
    exports = [str(unpacked(ROOT / "tests" / "data" / f"ddp_{r}.sqlite.xz", tmp)) for r in (0, 1)]
    return _both(tmp, "--memcpy", *exports)


def test_ranked_store_is_partitioned_and_gives_every_field(ddp):
    lines, store = ddp
    assert sorted(p.relative_to(store).as_posix() for p in store.rglob("*.parquet")) == \
        ["rank=0/part-0.parquet", "rank=1/part-0.parquet"]
    want = _lines(lines)
    got = list(pyprof.records(store))
    assert len(got) == len(want) == 1492
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]  # key order too
    assert {r["kind"] for r in got} == {"kernel", "memcpy", "memset"}


@pytest.mark.parametrize("view", [[], ["--summary"], ["--summary", "--by", "layer"], ["--stragglers"], ["--overlap"],
                                  ["--modules"], ["--json"]])
def test_prof_views_are_the_same_from_either(ddp, view):
    lines, store = ddp
    a, b = _run("prof", *view, str(lines)), _run("prof", *view, str(store))
    assert a.returncode == b.returncode == 0, b.stderr
    assert a.stdout and a.stdout == b.stdout
    assert a.stderr == b.stderr


@pytest.mark.parametrize("example", ["lenet.sqlite", "gpt_compiled.sqlite"])
def test_examples_round_trip(tmp_path, example):
    lines, store = _both(tmp_path, str(ROOT / "examples" / example))
    assert [p.name for p in store.iterdir()] == ["part-0.parquet"]  # no rank: no partition
    want = _lines(lines)
    got = list(pyprof.records(store))
    assert got == want and [list(r) for r in got] == [list(r) for r in want]
    if example == "gpt_compiled.sqlite":
        assert sum("compiled" in r for r in got) > 0
    a, b = _run("prof", "--summary", str(lines)), _run("prof", "--summary", str(store))
    assert a.stdout == b.stdout and a.returncode == b.returncode == 0


ODD = [
    {"v": 1, "kind": "kernel", "kShortName": "k\udcff", "kDuration": 1.5, "regs": True, "grid": [1, None, 2.0],
     "launch": {"api": "cudaLaunchKernel", "start": 1}, "gpu": {"name": "Tesla V100-SXM2-16GB"},
     "marker": {"args": [2**70, -2**64, "\udcff"]}, "torchOps": [], "layer": ["a", "b\udcff"], "newKey": {"x": [1]}},
    {"v": 2, "rank": -1, "kind": "memset", "kStart": 2**63, "tid": None, "launch": None, "ranges": "text"},
    {"v": 1, "kind": "kernel", "kShortName": None, "compiled": {"graph": 1, "call": 2}},
]


def test_values_that_fit_no_column_come_back_exactly(tmp_path):
    text = "".join(json.dumps(r) + "\n" for r in ODD).encode()
    n = write.convert(io.BytesIO(text), "odd.dict", str(tmp_path / "odd.parquet"), "odd.parquet")
    assert n == 3
    got = list(read.records(str(tmp_path / "odd.parquet")))
    assert got == ODD and [list(r) for r in got] == [list(r) for r in ODD]


def test_table_selects_columns_and_pushes_the_filter_down(ddp):
    lines, store = ddp
    t = pyprof.table(store, ["rank", "op", "kDuration"], (ds.field("rank") == 1) & (ds.field("kind") == "kernel"))
    want = [{"rank": r["rank"], "op": r["op"], "kDuration": r["kDuration"]} for r in _lines(lines)
            if r["rank"] == 1 and r["kind"] == "kernel"]
    assert t.column_names == ["rank", "op", "kDuration"]
    assert t.to_pylist() == want and len(want) == 622
    assert pyprof.table(lines, ["rank", "op", "kDuration"],
                        (ds.field("rank") == 1) & (ds.field("kind") == "kernel")).equals(t)
    with pytest.raises(ValueError, match="unknown record field 'ops'"):
        pyprof.table(store, ["ops"])


def test_dataframe_of_fields_builds_no_record_dict(ddp, monkeypatch):
    pytest.importorskip("pandas")
    lines, store = ddp
    # A dict per record would come from _batch_records: the fields path never reaches it.
    monkeypatch.setattr(read, "_batch_records", None)
    df = pyprof.dataframe(store, fields=["op", "kDuration", "layer"], where=ds.field("kind") == "kernel")
    kernels = [r for r in _lines(lines) if r["kind"] == "kernel"]
    assert len(df) == len(kernels) == 1244
    assert df["kDuration"].dtype == "int64" and int(df["kDuration"].sum()) == sum(r["kDuration"] for r in kernels)
    assert [list(v) for v in df["layer"]] == [r["layer"] for r in kernels]
    with pytest.raises(ValueError, match="one or the other"):
        pyprof.dataframe(store, "op", fields=["op"])


def _prof_error(path: Path) -> tuple[int, str]:
    p = _run("prof", "--summary", str(path))
    assert p.stdout == b""
    return p.returncode, p.stderr.decode()


def test_a_truncated_store_is_one_line_and_status_6(ddp, tmp_path):
    _, store = ddp
    cut = tmp_path / "cut.parquet"
    data = (store / "rank=0" / "part-0.parquet").read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    status, err = _prof_error(cut)
    assert status == EXIT_CORRUPT
    assert err.startswith(f"pyprof.prof: error: {cut}: the Parquet record store is truncated or corrupted (")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_parquet_that_is_not_records_is_status_4(ddp, tmp_path):
    lines, _ = ddp
    table = tmp_path / "table.parquet"
    p = _run("prof", "--parquet", str(table), str(lines))
    assert p.returncode == 0, p.stderr
    status, err = _prof_error(table)
    assert status == EXIT_BAD_FORMAT
    assert err == (f"pyprof.prof: error: {table}: {table} is Parquet but holds no pyprof records (no _keys column; "
                   "prof reads the store `python -m pyprof.parse -o X.parquet` writes, not the table prof --parquet "
                   "writes)\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    status, err = _prof_error(empty)  # a folder without Parquet files is no record file, as before
    assert (status, err) == (EXIT_NO_INPUT, f"pyprof.prof: error: cannot read {empty}: Is a directory\n")
    with pytest.raises(PyprofError, match="a folder with no Parquet file in it"):
        pyprof.table(empty)
    p = subprocess.run([sys.executable, "-m", "pyprof.prof"], input=(ddp[1] / "rank=0" / "part-0.parquet").read_bytes(),
                       capture_output=True, env=ENV)
    assert p.returncode == EXIT_BAD_FORMAT
    assert p.stderr.decode() == ("pyprof.prof: error: the input is Parquet: give the record store's path (a folder "
                                 "written by `python -m pyprof.parse -o X.parquet`), not stdin\n")


def test_output_replaces_a_store_never_another_folder(tmp_path):
    lenet = str(ROOT / "examples" / "lenet.sqlite")
    out = tmp_path / "net.parquet"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    p = _run("parse", "-q", lenet, "-o", str(out))
    assert p.returncode == EXIT_OUTPUT
    assert p.stderr.decode() == (f"pyprof.parse: error: {out}: cannot write (a folder that is no Parquet record "
                                 "store is in the way)\n")
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    for _ in range(2):  # the second run replaces the first's store
        p = _run("parse", "-q", lenet, "-o", str(out))
        assert p.returncode == 0, p.stderr
    assert [e.name for e in out.iterdir()] == ["part-0.parquet"]
    assert sorted(e.name for e in tmp_path.iterdir()) == ["net.parquet"]  # no scratch left
    with pytest.raises(PyprofError):
        list(read.records(str(tmp_path / "missing.parquet")))
