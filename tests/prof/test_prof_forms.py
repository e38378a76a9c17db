"""The per-kernel table's forms and the options around them: grouping options without a view
that groups, columnated widths and the ellipsis, keys and typed values in CSV/JSON/Parquet, an
nsys export as prof's input, the terminal's width."""
from __future__ import annotations

import argparse
import io
import json

import pytest

from pyprof.prof.columns import COLUMNS
from pyprof.prof.io.output import MIN_ELASTIC, TextColumn, columnated_writer, layout
from pyprof.prof.views import table
from test_views_common import ROOT, prof, trace_text, write_dict

ALL = ",".join(c.name for c in COLUMNS)


@pytest.mark.parametrize("args, message", [
    (["--top", "5"], "--top applies to --summary, --diff and --stragglers only (the per-kernel table has no groups)"),
    (["--sort", "flops"], "--sort applies to --summary only (the per-kernel table has no groups)"),
    (["--by", "kernel"], "--by applies to --summary and --diff only (the per-kernel table has no groups)"),
    (["--plot", "x.png", "--by", "kernel"], "--by applies to --summary and --diff only "
                                            "(the per-kernel table has no groups)"),
])
def test_grouping_options_need_a_view_that_groups(args, message):
    rc, out, err = prof(*args, "x.dict")
    assert (rc, out, err) == (2, "", f"pyprof.prof: error: {message}\n")


def test_layout_widens_elastic_columns_in_proportion_and_keeps_fixed_ones():
    assert layout([6, 16, 32, 10], [False, True, True, False], 6 + 16 + 32 + 10 + 3) == [6, 16, 32, 10]
    wide = layout([6, 16, 32, 10], [False, True, True, False], 200)
    assert wide[0] == 6 and wide[3] == 10 and sum(wide) + 3 == 200
    assert wide[1] > 16 and wide[2] > 32 and abs(wide[2] - 2 * wide[1]) <= 2  # kernel gets twice op's share
    narrow = layout([6, 16, 32, 10], [False, True, True, False], 6 + 10 + 3 + 2 * MIN_ELASTIC)
    assert narrow == [6, MIN_ELASTIC, MIN_ELASTIC, 10]


def test_width_below_the_minimum_is_an_error():
    rc, out, err = prof("-w", "20", "x.dict")
    need = 2 * MIN_ELASTIC + 10 + 2  # what no line leaves out: op and kernel (elastic), sil
    assert (rc, out) == (2, "")
    assert err == f"pyprof.prof: error: -w 20 is narrower than these columns need: at least {need}\n"
    rc, _, err = prof("--summary", "-w", "17", "x.dict")
    need = MIN_ELASTIC + 9 + 1  # the group's name and Time
    assert rc == 2 and f"-w 17 is narrower than these columns need: at least {need}\n" in err


def test_op_column_widens_with_w_and_long_values_end_in_an_ellipsis(tmp_path):
    path = write_dict(tmp_path, "gpt")
    _, out, _ = prof("-w", "200", "-c", "idx,op,kernel", path)
    lines = out.splitlines()
    assert max(map(len, lines)) <= 200
    assert lines[0].index("Kernel") - lines[0].index("Op") > 16  # op is wider than its 16 at -w 200
    sdpa = next(line for line in lines if "scaled_dot_product_attention" in line)
    assert "scaled_dot_product_attention " in sdpa  # whole, not cut at 16
    _, out, _ = prof("-w", "40", "-c", "idx,op,kernel", path)
    sdpa = next(line for line in out.splitlines() if "scaled_dot" in line)
    op = sdpa.split()[1]
    assert len(op) == layout([6, 16, 32], [False, True, True], 40)[1] and op.endswith("\u2026")
    assert op[:-1] == "scaled_dot_product_attention"[:len(op) - 1]


def test_ellipsis_falls_back_to_ascii_where_the_output_cannot_encode_it():
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")
    columnated_writer(out, [TextColumn("Op", 8, True)], 8)(["scaled_dot_product_attention"])
    out.flush()
    assert raw.getvalue().decode().splitlines()[1] == "scaled_~"


def test_csv_is_keyed_by_column_name_and_reads_as_numbers(tmp_path):
    pd = pytest.importorskip("pandas")
    rc, out, _ = prof("--csv", "-c", ALL, write_dict(tmp_path, "gpt"))
    assert rc == 0 and out.splitlines()[0] == ALL
    df = pd.read_csv(io.StringIO(out))
    for c in COLUMNS:
        if c.type is int and c.name not in ("seq",):
            assert df[c.name].dtype.kind in "if", c.name
        elif c.type is float:
            assert df[c.name].dtype.kind == "f", c.name
    assert df.seq.dtype.kind == "f" and df.seq.isna().sum() > 0  # absent seq ids: empty cells, NaN
    assert "na" not in out.split(",") and ",-," not in out


def test_json_lines_are_typed_and_keyed_like_everything_else(tmp_path):
    rc, out, _ = prof("--json", "-c", "idx,op,sil,tc,flops,peak,layer,module", write_dict(tmp_path, "gpt"))
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(rows) == 139
    assert rows[0] == {"idx": 0, "op": "embedding", "sil": 2080, "tc": None, "flops": 0, "peak": 0.0,
                       "layer": "train_step", "module": "tok"}
    linear = next(r for r in rows if r["op"] == "linear" and r["tc"])
    assert linear["tc"] is True and isinstance(linear["peak"], float)
    assert {type(r["tc"]) for r in rows} == {bool, type(None)}


def test_parquet_has_the_typed_columns(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyprof

    target = tmp_path / "gpt.parquet"
    rc, out, err = prof("--parquet", str(target), "-c", ALL, write_dict(tmp_path, "gpt"))
    assert (rc, out, err) == (0, "", "")
    t = pq.read_table(target)
    assert t.column_names == [c.name for c in COLUMNS] and t.num_rows == 139
    kinds = {int: "int64", float: "double", bool: "bool", str: "string"}
    assert [str(f.type) for f in t.schema] == [kinds[c.type] for c in COLUMNS]
    assert t.to_pylist() == list(pyprof.rows(write_dict(tmp_path, "gpt")))


@pytest.mark.parametrize("args, message", [
    (["--parquet", "x.parquet", "--csv"], "--parquet is an output form of its own: no -w, --csv or --json with it"),
    (["--parquet", "x.parquet", "--summary"], "--parquet writes the per-kernel table; it does not apply to --summary"),
])
def test_parquet_usage_errors(args, message):
    rc, _, err = prof(*args, "x.dict")
    assert rc == 2 and err == f"pyprof.prof: error: {message}\n"


@pytest.mark.slow
def test_an_nsys_export_is_parsed_on_the_fly(tmp_path):
    path = write_dict(tmp_path, "gpt")
    for args in (["-c", ALL], ["--summary", "--json"]):
        rc, from_export, err = prof(*args, f"{ROOT}/examples/gpt.sqlite")
        assert (rc, err) == (0, "")
        assert from_export == prof(*args, path)[1]


def test_memcpy_adds_an_export_s_copies_as_the_note_says():
    """The copies note names prof --memcpy: prof parses an export given to it with parse's --memcpy."""
    export = f"{ROOT}/examples/resnet.sqlite"
    rc, out, err = prof("--summary", export)
    assert rc == 0 and "note: host<->device copies not checked: no memcpy/memset records (parsed without " \
                       "--memcpy, or the step made none): `python -m pyprof.parse --memcpy net.sqlite`, or prof " \
                       "given the export with --memcpy, adds them\n" in out
    rc, out, err = prof("--summary", "--memcpy", export)
    assert rc == 0 and "copies         52 memcpy/memset records, 47.7 us (not in the rows)\n" in out
    assert "host<->device copies not checked" not in out


def test_table_fits_the_terminal_it_writes_to(monkeypatch):
    args = argparse.Namespace(columns="idx,op,kernel", width=None, csv=False, json=False, parquet=None)
    monkeypatch.setattr(table, "terminal_width", lambda: 100)
    out = io.StringIO()
    monkeypatch.setattr(table.sys, "stdout", out)
    sink = table.sink(args)
    sink.add({"op": "x" * 300, "kShortName": "k"}, None)
    w_idx, w_op, _ = layout([6, 16, 32], [False, True, True], 100)
    assert out.getvalue().splitlines()[1] == "0".ljust(w_idx) + " " + "x" * (w_op - 1) + "\u2026 k"
    assert w_op > 16
    monkeypatch.setattr(table, "terminal_width", lambda: None)  # a pipe: space separated
    out.seek(0), out.truncate()
    table.sink(args).add({"op": "x" * 300, "kShortName": "k"}, None)
    assert out.getvalue().splitlines()[1] == "0 " + "x" * 300 + " k"


def test_launch_latency_is_kernel_start_minus_launch_call_start(tmp_path):
    import pyprof

    recs = trace_text("lenet").splitlines()
    first = json.loads(recs[0])
    assert first["kStart"] - first["launch"]["start"] == 11850673 - 11798189
    got = [r["latency"] for r in pyprof.rows(write_dict(tmp_path, "lenet"), columns="latency")]
    assert got == [json.loads(line)["kStart"] - json.loads(line)["launch"]["start"] for line in recs]
    assert got[0] == 52484 and min(got) > 0
    orphan = dict(first, launch=None)
    path = write_dict(tmp_path, "orphan", [orphan])
    rc, out, _ = prof("-c", "idx,latency", path)
    assert out.splitlines()[1] == "0 -"


def test_parquet_without_pyarrow_or_a_place_to_write_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow.parquet")
    path = write_dict(tmp_path, "gpt")
    rc, out, err = prof("--parquet", str(tmp_path / "no" / "such" / "dir.parquet"), path)
    # The words of every output that cannot be written (the file is opened by pyprof, not pyarrow).
    assert (rc, out, err) == (10, "", f"pyprof.prof: error: {tmp_path}/no/such/dir.parquet: cannot write (No such "
                                      "file or directory)\n")
    shadow = tmp_path / "shadow" / "pyarrow"  # as test_views_roofline hides matplotlib
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "shadow"))
    rc, out, err = prof("--parquet", str(tmp_path / "x.parquet"), path)
    assert (rc, out, err) == (8, "", "pyprof.prof: error: --parquet needs pyarrow: pip install pyarrow "
                                     "(or pip install 'pyprof-nvtx[parquet]')\n")
    assert not (tmp_path / "x.parquet").exists()
