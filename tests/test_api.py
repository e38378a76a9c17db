"""pyprof.records/rows/dataframe/summary: from an SQLite export and from a record file, lazily
loaded (import pyprof imports neither torch nor pandas)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pyprof
from pyprof.errors import PyprofError
from test_views_common import ROOT, prof, trace_records, write_dict

GPT = os.path.join(ROOT, "examples/gpt.sqlite")


def test_import_is_light():
    code = ("import sys, pyprof; pyprof.records; pyprof.rows; pyprof.summary; pyprof.dataframe; "
            "pyprof.modules; pyprof.diff; pyprof.overlap; pyprof.stragglers; pyprof.roofline; "
            "print('torch' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_records_from_sqlite_and_dict(tmp_path):
    recs = list(pyprof.records(GPT))
    assert len(recs) == 139 and recs[0]["kShortName"] == "vectorized_gather_kernel"
    again = list(pyprof.records(write_dict(tmp_path, "gpt")))
    assert again == recs


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_reader_dropped_in_a_reference_cycle_is_collected_silently():
    """Records of an export, one read, the reader kept only by a cycle (as a held traceback keeps
    a frame). The collector runs SQLAlchemy's pool callback first, which closes the database, then
    the reader's finally closed its cursors on it: 'Exception ignored in: <generator object
    numbered>' (sqlite3.ProgrammingError: Cannot operate on a closed database), and on Python 3.11
    the traceback printed during an ast.parse made that parse fail ("AST constructor recursion
    depth mismatch")."""
    import gc

    class Holder:
        pass

    holder = Holder()
    holder.reader = pyprof.records(GPT)
    assert next(holder.reader)["kShortName"] == "vectorized_gather_kernel"
    holder.cycle = holder
    del holder
    gc.collect()


def unpriced(tmp_path) -> str:
    """The GPT trace plus one kernel prof cannot price (no marker, no PyTorch ranges)."""
    recs = trace_records("gpt")
    return write_dict(tmp_path, "gpt", recs + [dict(recs[0], op="unpriced", marker=None, torchOps=[], kDuration=0, kEnd=recs[0]["kStart"])])


def test_rows_typed_values(tmp_path):
    rows = list(pyprof.rows(GPT, columns="idx,op,kernel,sil,tc,flops,tflops"))
    assert len(rows) == 139
    first = rows[0]
    assert first == {"idx": 0, "op": "embedding", "kernel": "vectorized_gather_kernel", "sil": 2080, "tc": None,
                     "flops": 0, "tflops": 0.0}
    assert sum(r["sil"] for r in rows) == 509607
    # The step-counter launch (_foreach_add_) carries its 29 adds, the _fused_adamw_ kernel the step's math.
    adam = [r for r in rows if r["op"] == "AdamW.step"]
    assert [r["flops"] for r in adam] == [29, 27782144]
    # Tensor.backward's seed: a fill of one fp32 element, priced by the backward call's own marker.
    assert [r["flops"] for r in rows if r["op"] == "backward"] == [0]
    with pytest.warns(pyprof.ProfWarning, match="no op marker: 1 kernel"):
        assert [r["flops"] for r in pyprof.rows(unpriced(tmp_path), columns="flops")][-1] is None  # na -> None
    arange = next(r for r in pyprof.rows(GPT, columns="op,peak") if r["op"] == "arange")
    assert arange["peak"] is None  # int64 on CUDA cores has no peak: na -> None
    raw = next(pyprof.rows(GPT, columns=["op", "flops"], typed=False))
    assert raw == {"op": "embedding", "flops": "0"}


def test_rows_unknown_column():
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        next(pyprof.rows(GPT, columns="op,nope"))


def test_dataframe_unknown_column():
    pytest.importorskip("pandas")
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        pyprof.dataframe(GPT, columns=["op", "nope"])


def test_dataframe(tmp_path):
    pd = pytest.importorskip("pandas")
    with pytest.warns(pyprof.ProfWarning, match="no op marker: 1 kernel"):
        df = pyprof.dataframe(unpriced(tmp_path), columns="op,sil,flops,tc")
    assert list(df.columns) == ["op", "sil", "flops", "tc"] and len(df) == 140
    by_op = df.groupby("op")["sil"].sum().sort_values(ascending=False)
    assert by_op.index[0] == "linear" and by_op.iloc[0] == 262533
    assert list(df[df.op == "AdamW.step"].flops) == [29, 27782144]
    assert pd.isna(df[df.op == "unpriced"].flops).all()  # na -> NaN


def test_summary():
    s = pyprof.summary(GPT, by="op", top=1)
    assert s["header"]["kernels"] == 139 and round(s["header"]["busy_pct"], 2) == 3.47
    assert [r["group"] for r in s["rows"]] == ["linear"]
    with pytest.raises(ValueError):
        pyprof.summary(GPT, by="nope")


def test_api_and_cli_share_the_record_loop(tmp_path, capfd):
    """A record whose kDuration is a string is skipped by prof's --summary and table and by
    pyprof.summary/rows (summary() used to raise TypeError), with the same words: on stderr from
    the command line, as one ProfWarning (nothing on stderr) from the API."""
    recs = trace_records("lenet")
    recs[3]["kDuration"] = "12"
    path = write_dict(tmp_path, "bad", recs)
    skipped = ("1 malformed line skipped (the first: line 4: record fields not understood (TypeError: kDuration "
               "is str, not an integer))")
    rc, out, err = prof("--summary", "--json", path)
    assert rc == 0 and err == f"pyprof.prof: 44 records; warnings:\n  {skipped}\n"
    capfd.readouterr()
    with pytest.warns(pyprof.ProfWarning) as caught:
        s = pyprof.summary(path)
    assert capfd.readouterr().err == ""
    assert str(caught[0].message) == f"{path}: 44 records; warnings: {skipped}"
    assert s == json.loads(out) and s["header"]["kernels"] == 43
    rc, out, err = prof("-c", "idx,op,tflops", path)
    # The table skips it with the same words too (issue 31: a time is checked in the one loop).
    with pytest.warns(pyprof.ProfWarning, match="kDuration is str, not an integer"):
        rows = list(pyprof.rows(path, columns="idx,op,tflops", typed=False))
    assert capfd.readouterr().err == "" and err == f"pyprof.prof: 44 records; warnings:\n  {skipped}\n"
    assert [" ".join(r.values()) for r in rows] == out.splitlines()[1:] and len(rows) == 43


def test_errors():
    with pytest.raises(PyprofError, match="cannot read"):
        next(pyprof.records("/nonexistent.dict"))
    with pytest.raises(PyprofError):
        next(pyprof.records(os.path.join(ROOT, "README.md")[:-3] + ".sqlite"))


def test_dataframe_is_typed_takes_a_path_and_prints_nothing(tmp_path, capfd):
    pd = pytest.importorskip("pandas")
    import pathlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean trace: no ProfWarning either
        df = pyprof.dataframe(pathlib.Path(write_dict(tmp_path, "gpt")), columns="idx,op,sil,tc,flops,peak,layer,seq")
    assert capfd.readouterr().err == ""
    numeric = {c: str(t) for c, t in df.dtypes.items() if c not in ("op", "layer")}
    assert numeric == {"idx": "int64", "sil": "int64", "tc": "boolean", "flops": "int64", "peak": "float64",
                       "seq": "float64"}  # seq: absent on some kernels, so float with NaN
    assert not pd.api.types.is_numeric_dtype(df.op) and df.op[0] == "embedding"
    assert df.tc.isna().sum() > 0 and df.tc.sum() == 31  # 31 Tensor Core kernels, <NA> where not applicable
    assert df.seq.isna().sum() > 0 and "-" not in set(df.layer)
    assert df.attrs["warnings"] == {}


def test_warnings_come_once_as_a_prof_warning_with_the_tally(tmp_path, capfd):
    pytest.importorskip("pandas")
    recs = trace_records("lenet")
    recs[0]["marker"]["op"] = "frobnicate"
    del recs[0]["torchOps"]  # else the aten level prices the convolution from its ranges
    path = write_dict(tmp_path, "odd", recs)
    with pytest.warns(pyprof.ProfWarning) as caught:
        df = pyprof.dataframe(path, columns="op,flops")
    assert capfd.readouterr().err == "" and len(caught) == 1
    assert str(caught[0].message) == f"{path}: 44 records; warnings: unknown op: 1 kernel: torch.nn.functional.frobnicate (1)"
    assert df.attrs["warnings"] == {"unknown op": {"torch.nn.functional.frobnicate": 1}}


def test_dataframe_name_column_reproduces_summary_by_kernel(tmp_path):
    """The `name` column is --by kernel's key: grouping the DataFrame by it gives the same groups,
    times and counts as --summary --by kernel."""
    pytest.importorskip("pandas")
    path = write_dict(tmp_path, "gpt")
    df = pyprof.dataframe(path, "name,kernel,sil")
    assert list(df.name) == [r["kLongName"] for r in trace_records("gpt")]
    by_name = df.groupby("name").sil.agg(["sum", "count"])
    rows = pyprof.summary(path, by="kernel")["rows"]
    assert len(rows) == len(by_name) == 35
    assert {r["group"]: (r["time_ns"], r["count"]) for r in rows} == \
        {n: (int(t), int(c)) for n, (t, c) in by_name.iterrows()}


def test_modules_as_data():
    rows = pyprof.modules(GPT)["rows"]
    assert len(rows) == 21
    assert rows[0] == {"module": "GPT", "depth": 0, "self_ns": 7296, "total_ns": 408550,
                       "pct_total": pytest.approx(80.169621, abs=1e-5), "self_count": 3, "count": 129}
    assert [(r["module"], r["depth"], r["self_ns"], r["total_ns"]) for r in rows[1:3]] == \
        [("blocks", 1, 0, 348358), ("blocks.0", 2, 32385, 174436)]
    # The CLI prints the same function's result.
    status, out, _ = prof("--modules", "--json", GPT)
    assert status == 0 and json.loads(out) == pyprof.modules(GPT)


def test_diff_as_data():
    d = pyprof.diff(GPT, os.path.join(ROOT, "examples/gpt_compiled.sqlite"), by="op", top=2)
    assert d["total"] == {"base_ns": 509607, "new_ns": 351590, "delta_ns": -158017,
                          "ratio": pytest.approx(351590 / 509607), "base_count": 139, "new_count": 119}
    assert [(r["group"], r["base_ns"], r["new_ns"], r["base_count"], r["new_count"]) for r in d["rows"]] == \
        [("linear", 262533, None, 79, 0), ("mm", None, 65633, 0, 19)]
    with pytest.raises(ValueError, match="nope"):
        pyprof.diff(GPT, GPT, by="nope")


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """Both ranks of the shipped DDP capture, parsed into one record file."""
    from captures import unpacked

    folder = tmp_path_factory.mktemp("ddp")
    for rank in (0, 1):
        unpacked(Path(ROOT) / "tests" / "data" / f"ddp_{rank}.sqlite.xz", folder)
    out = folder / "ddp.dict"
    subprocess.run([sys.executable, "-m", "pyprof.parse", str(folder), "-o", str(out)], check=True, cwd=ROOT,
                   capture_output=True)
    return str(out)


def test_overlap_and_stragglers_as_data(ddp):
    o = pyprof.overlap(ddp)
    assert (o["ranks"], o["nccl_kernels"], o["nccl_ns"]) == ([0, 1], 32, 79901570)
    assert {k: o["steps"][0][k] for k in ("rank", "step", "compute_ns", "comm_ns", "both_ns", "exposed_ns")} == \
        {"rank": 0, "step": 0, "compute_ns": 1022085, "comm_ns": 63724452, "both_ns": 647683, "exposed_ns": 63076769}
    assert [(c["rank"], c["kind"], c["count"], c["time_ns"], c["exposed_ns"]) for c in o["collectives"]] == \
        [(0, "AllReduce", 16, 79333314, 78167322), (1, "AllReduce", 16, 568256, 518240)]
    s = pyprof.stragglers(ddp)
    assert len(s["instances"]) == 16
    first = s["instances"][0]
    assert (first["kind"], first["size"], first["skew_ns"], first["slowest"]) == ("AllReduce", 2099200, 53141632, 1)
    assert [(r["rank"], r["slowest"], r["wait_ns"]) for r in s["by_rank"]] == [("0", 0, 78764010), ("1", 16, 0)]
    status, out, _ = prof("--overlap", "--json", ddp)
    assert status == 0 and json.loads(out) == json.loads(json.dumps(o))


def test_roofline_as_data():
    r = pyprof.roofline(GPT)
    assert (r["gpu"], r["peaks_of"], r["memory_gbps"]) == ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350)
    assert r["roofs"] == [{"path": "fp16_tc", "name": "FP16/BF16 Tensor Cores", "tflops": 989},
                          {"path": "fp32", "name": "FP32 CUDA cores", "tflops": 67}]
    # --plot's counts on stderr; the trivial ones: AdamW's step-counter launch (29 FLOPs) and
    # cross_entropy's nll_loss kernels (512 FLOPs each way); flash attention's D = rowsum(dO * O)
    # kernels are points of their own.
    assert (len(r["points"]), r["skipped"], r["trivial"]) == (75, 61, 3)
    p = r["points"][0]
    assert {k: p[k] for k in ("op", "kernel", "module", "shapes", "flops", "bytes", "dur", "tc", "over")} == \
        {"op": "__add__", "kernel": "elementwise_kernel", "module": "GPT", "shapes": "[4,128,256],[128,256]",
         "flops": 131072, "bytes": 1179648, "dur": 2080, "tc": None, "over": False}
    assert p["ai"] == 131072 / 1179648 and p["tflops"] == pytest.approx(131072 / 2080 * 1e-3)
