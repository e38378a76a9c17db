"""pyprof.records/rows/dataframe/summary: from an SQLite export and from a record file, lazily
loaded (import pyprof imports neither torch nor pandas)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pyprof
from pyprof.errors import PyprofError
from test_views_common import ROOT, prof, trace_records, write_dict

GPT = os.path.join(ROOT, "examples/gpt.sqlite")


def test_import_is_light():
    code = ("import sys, pyprof; pyprof.records; pyprof.rows; pyprof.summary; pyprof.dataframe; "
            "print('torch' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_records_from_sqlite_and_dict(tmp_path):
    recs = list(pyprof.records(GPT))
    assert len(recs) == 139 and recs[0]["kShortName"] == "vectorized_gather_kernel"
    again = list(pyprof.records(write_dict(tmp_path, "gpt")))
    assert again == recs


def unpriced(tmp_path) -> str:
    """The GPT trace plus one kernel prof cannot price (no marker, no PyTorch ranges)."""
    recs = trace_records("gpt")
    return write_dict(tmp_path, "gpt", recs + [dict(recs[0], op="unpriced", marker=None, torchOps=[], kDuration=0, kEnd=recs[0]["kStart"])])


def test_rows_typed_values(tmp_path):
    rows = list(pyprof.rows(GPT, columns="idx,op,kernel,sil,tc,flops,tflops"))
    assert len(rows) == 139
    first = rows[0]
    assert first == {"idx": 0, "op": "embedding", "kernel": "vectorized_gather_kernel", "sil": 2080, "tc": "-",
                     "flops": 0, "tflops": 0.0}
    assert sum(r["sil"] for r in rows) == 509607
    # The step-counter bump (_foreach_add_) carries 0, the _fused_adamw_ kernel the step's work.
    adam = [r for r in rows if r["op"] == "AdamW.step"]
    assert [r["flops"] for r in adam] == [0, 27782144]
    # Tensor.backward's seed: a fill of one fp32 element, priced from its aten::fill_ range.
    assert [r["flops"] for r in rows if r["op"] == "backward"] == [0]
    assert [r["flops"] for r in pyprof.rows(unpriced(tmp_path), columns="flops")][-1] is None  # na -> None
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
    df = pyprof.dataframe(unpriced(tmp_path), columns="op,sil,flops,tc")
    assert list(df.columns) == ["op", "sil", "flops", "tc"] and len(df) == 140
    by_op = df.groupby("op")["sil"].sum().sort_values(ascending=False)
    assert by_op.index[0] == "linear" and by_op.iloc[0] == 262533
    assert list(df[df.op == "AdamW.step"].flops) == [0, 27782144]
    assert pd.isna(df[df.op == "unpriced"].flops).all()  # na -> NaN


def test_summary():
    s = pyprof.summary(GPT, by="op", top=1)
    assert s["header"]["kernels"] == 139 and round(s["header"]["busy_pct"], 2) == 3.47
    assert [r["group"] for r in s["rows"]] == ["linear"]
    with pytest.raises(ValueError):
        pyprof.summary(GPT, by="nope")


def test_api_and_cli_share_the_record_loop(tmp_path, capfd):
    """A record whose kDuration is a string is skipped, with the same line on stderr, by prof's
    --summary and table and by pyprof.summary/rows (summary() used to raise TypeError)."""
    recs = trace_records("lenet")
    recs[3]["kDuration"] = "12"
    path = write_dict(tmp_path, "bad", recs)
    skipped = ("pyprof.prof: line 4: record fields not understood (TypeError: kDuration is str, not an integer); "
               "line skipped\n")
    rc, out, err = prof("--summary", "--json", path)
    assert rc == 0 and err.startswith(skipped) and "1 malformed lines skipped" in err
    capfd.readouterr()
    s = pyprof.summary(path)
    assert capfd.readouterr().err == err
    assert s == json.loads(out) and s["header"]["kernels"] == 43
    rc, out, err = prof("-c", "idx,op,tflops", path)
    rows = list(pyprof.rows(path, columns="idx,op,tflops", typed=False))
    assert capfd.readouterr().err == err and err.startswith(skipped.replace("kDuration is str, not an integer",
                                                                             "unsupported operand type(s) for /: "
                                                                             "'int' and 'str'"))
    assert [" ".join(r.values()) for r in rows] == out.splitlines()[1:] and len(rows) == 43


def test_errors():
    with pytest.raises(PyprofError, match="cannot read"):
        next(pyprof.records("/nonexistent.dict"))
    with pytest.raises(PyprofError):
        next(pyprof.records(os.path.join(ROOT, "README.md")[:-3] + ".sqlite"))
