"""The command line: columns, output forms, stdin, malformed lines, --strict, exit codes, old
PyProf `.dict` lines, and the closing warning summary."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from pyprof.errors import EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_INCOMPLETE, EXIT_NO_INPUT, EXIT_USAGE
from pyprof.prof.columns import COLUMNS, DEFAULT
from test_prof_helpers import described, kernels, prof_text, record, tensor

ORIGINAL_HEADERS = ["Idx", "SeqId", "AltSeqId", "TId", "Layer", "Trace", "Direction", "Sub", "Module", "Op",
                    "Kernel", "Params", "Sil(ns)", "TC", "Device", "Stream", "Grid", "Block", "FLOPs", "Bytes"]
ORIGINAL = "idx,seq,altseq,tid,layer,trace,dir,sub,mod,op,kernel,params,sil,tc,device,stream,grid,block,flops,bytes"


def prof(args, stdin=b""):
    p = subprocess.run([sys.executable, "-m", "pyprof.prof", *args], input=stdin, capture_output=True)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def lines_of(recs):
    return ("\n".join(json.dumps(r) for r in recs) + "\n").encode()


@pytest.fixture
def recs():
    x, w = tensor(64, 512, dtype="float16"), tensor(256, 512, dtype="float16")
    m = described("torch.nn.functional", "linear", x, w)
    out = kernels(m, ["ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn"],
                  layer=["encoder", "block 1"], seqId=45, altSeqId=[44, 43], torchOps=[])
    out += kernels(described("Tensor", "__add__", tensor(4, 4), 1.0), ["void at::native::vectorized_elementwise_kernel<4>(...)"])
    return out


def test_original_columns_and_headers(recs):
    out, _ = prof_text(recs, ORIGINAL)
    head, row, _ = out.split("\n", 2)
    assert head.split() == ORIGINAL_HEADERS
    v = dict(zip(ORIGINAL.split(","), row.split()))
    assert v["layer"] == "encoder:block_1"  # no spaces inside a field
    assert v["seq"] == "45" and v["altseq"] == "44,43" and v["tc"] == "1" and v["grid"] == "(4,1,1)"
    assert v["params"] == "M=64,N=256,K=512,type=fp16" and v["flops"] == str(2 * 64 * 256 * 512)
    assert v["mod"] == "torch.nn.functional" and v["trace"] == "net.py:7"


def test_default_columns(recs):
    rc, out, err = prof([], lines_of(recs))
    assert rc == 0 and err == ""
    assert out.splitlines()[0].split() == ["Idx", "Direction", "Sub", "Module", "Op", "Kernel", "Params", "Sil(ns)"]
    assert DEFAULT == "idx,dir,sub,mod,op,kernel,params,sil"


def test_csv_is_quoted_by_the_csv_module(recs):
    out, _ = prof_text(recs, "idx,kernel,params,layer", as_csv=True)
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["idx", "kernel", "params", "layer"]  # keys, as the summary CSV and --json
    assert rows[1][2] == "M=64,N=256,K=512,type=fp16" and rows[1][3] == "encoder:block 1"


def test_columnated_width(recs):
    out, _ = prof_text(recs, "idx,dir,op,kernel,params,sil", width=80)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines) and lines[0].startswith("Idx    Direction")


def test_file_and_stdin_and_dash_agree(tmp_path, recs):
    f = tmp_path / "net.dict"
    f.write_bytes(lines_of(recs))
    a = prof([str(f)])[1]
    assert a == prof([], lines_of(recs))[1] == prof(["-"], lines_of(recs))[1]


def test_help_lists_every_column_with_unit():
    rc, out, _ = prof(["-h"])
    assert rc == 0
    for c in COLUMNS:
        assert f"  {c.name} " in out and c.header in out
    assert "[TFLOP/s]" in out and "exit status" in out


def test_unknown_column_is_a_usage_error():
    rc, _, err = prof(["-c", "idx,nope"])
    assert rc == EXIT_USAGE and "unknown column 'nope'" in err


def test_missing_file():
    rc, _, err = prof(["/nonexistent/net.dict"])
    assert rc == EXIT_NO_INPUT and err.startswith("pyprof.prof: error: cannot read")


def test_broken_sqlite_export_is_parse_s_one_line_error(tmp_path):
    f = tmp_path / "net.sqlite"
    f.write_bytes(b"SQLite format 3\x00" + bytes(100))
    rc, _, err = prof([str(f)])
    assert rc == EXIT_BAD_FORMAT
    assert err == f"pyprof.prof: error: {f}: not a SQLite database (expected an Nsight Systems SQLite export)\n"


def test_sqlite_export_on_stdin_is_refused(tmp_path):
    rc, _, err = prof([], (b"SQLite format 3\x00" + bytes(100)))
    assert rc == EXIT_BAD_FORMAT and "give its path (prof parses it)" in err


def test_malformed_lines_are_reported_and_skipped(recs):
    data = lines_of(recs[:1]) + b"{not json\n[1,2]\n\n" + lines_of(recs[1:])
    rc, out, err = prof(["-c", "idx,op"], data)
    assert rc == 0 and len(out.splitlines()) == 3
    # Counted in the closing block with the first one's number and reason: never a line per bad line.
    assert err == ("pyprof.prof: 2 records; warnings:\n  2 malformed lines skipped (the first: line 2: not a JSON "
                   "record (Expecting property name enclosed in double quotes))\n")


def test_a_file_without_one_record_is_one_line(tmp_path):
    """A text file given by mistake: one line naming it, status 4, nothing on stdout (no header)."""
    text = tmp_path / "README.md"
    text.write_text("# pyprof\n\nProfile PyTorch.\n")
    rc, out, err = prof([str(text)])
    assert (rc, out) == (EXIT_BAD_FORMAT, "")
    assert err == (f"pyprof.prof: error: {text} holds no pyprof records (line 1: not a JSON record (Expecting "
                   "value)); prof reads what `python -m pyprof.parse` writes, or an nsys export\n")
    rc, out, err = prof(["--summary"], b"[1, 2]\nnull\n")
    assert (rc, out) == (EXIT_BAD_FORMAT, "")
    assert err == ("pyprof.prof: error: stdin holds no pyprof records (line 1: not a JSON object); prof reads "
                   "what `python -m pyprof.parse` writes, or an nsys export\n")


def test_an_empty_input_is_an_empty_table():
    assert prof(["-c", "idx,op"], b"") == (0, "Idx Op\n", "")


def test_strict_stops_at_the_first_malformed_line(recs):
    rc, out, err = prof(["--strict", "-c", "idx"], lines_of(recs[:1]) + b"{oops\n")
    assert rc == EXIT_BAD_LINE and "line 2" in err and out.splitlines()[1] == "0"


def test_summary_counts_unknown_ops_and_keeps_going():
    recs = kernels({"v": 1, "kind": "op", "mod": "torch", "op": "frobnicate", "args": []}, ["k1", "k2"])
    recs.append(record(None, "k3", mod="aten", op="addmm"))
    out, err = prof_text(recs, "op,flops,bytes,params")
    assert [line.split()[1:] for line in out.splitlines()[1:]] == [["na", "na", "na"]] * 3
    assert "unknown op: 2 kernels: torch.frobnicate (2)" in err and "no op marker: 1 kernel: aten.addmm (1)" in err


def test_memcpy_record():
    rec = {"v": 1, "kind": "memcpy", "kShortName": "memcpy HtoD", "kDuration": 1000, "bytes": 4096,
           "copyKind": "HtoD", "dir": "fprop", "gpu": None}
    out, err = prof_text([rec], "kernel,flops,bytes,gbps,tc,params")
    assert out.splitlines()[1].split() == ["memcpy_HtoD", "0", "4096", "4.1", "-", "bytes=4096,kind=HtoD"]
    assert err == ""


def test_old_pyprof_dict_lines_are_read_without_eval():
    old = {"kShortName": "volta_sgemm_128x64_nn", "kDuration": 5000, "layer": [], "trace": ["net.py:3"],
           "reprMarkers": [], "seqMarker": [], "seqId": [7], "subSeqId": 0, "altSeqId": [], "dir": "fprop",
           "mod": ["torch.nn.functional"], "op": ["linear"], "tid": 1, "device": 0, "stream": 7,
           "grid": (1, 1, 1), "block": (256, 1, 1), "kLongName": "volta_sgemm_128x64_nn",
           "marker": [str({"mod": "torch.nn.functional", "op": "linear", "args": [
               {"name": "", "type": "tensor", "shape": (32, 64), "dtype": "float32"},
               {"name": "", "type": "tensor", "shape": (16, 64), "dtype": "float32"},
               {"name": "bias", "type": "tensor", "shape": (16,), "dtype": "float32"}]})]}
    evil = "{'kShortName': __import__('os').system('touch /tmp/pyprof_pwned')}"
    out, err = prof_text([repr(old), evil], "seq,op,kernel,params,flops,tc,trace")
    rows = out.splitlines()
    assert rows[1].split() == ["7", "linear", "volta_sgemm_128x64_nn", "M=32,N=16,K=64,type=fp32",
                               str(2 * 32 * 16 * 64), "0", "net.py:3"]
    assert len(rows) == 2 and "1 malformed line skipped" in err


def test_broken_pipe_is_quiet(recs):
    p = subprocess.run(f"{sys.executable} -m pyprof.prof -c idx | head -1", shell=True, capture_output=True,
                       input=lines_of(recs * 5000))
    assert p.returncode == 0 and p.stderr == b"" and p.stdout == b"Idx\n"


def test_docs_describe_every_column():
    import pathlib
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "prof.md").read_text()
    for c in COLUMNS:
        assert f"| {c.name} | {c.header} |" in doc, c.name


@pytest.mark.parametrize("bad,skipped", [
    ({"kind": "kernel", "grid": 5, "kDuration": 1}, True),
    ({"kind": "kernel", "gpu": "H100", "kDuration": 1}, True),
    ({"kind": "kernel", "torchOps": {"name": "aten::mm"}, "kLongName": "ampere_sgemm_32x32_nn",
      "marker": {"kind": "op", "mod": "torch", "op": "mm",
                 "args": [{"shape": [2, 3], "dtype": "float32"}, {"shape": [3, 4], "dtype": "float32"}]}}, True),
    ({"kind": "kernel", "fwd": [], "dir": "bprop"}, False),  # no forward marker: a row of na
    ({"kind": "kernel", "marker": {"kind": "op", "mod": "torch", "op": "mm", "args": 3}}, False),
])
def test_wrong_field_types_skip_the_record_not_the_run(bad, skipped, recs):
    """Valid JSON with fields of the wrong type: that line is reported and skipped (fatal under
    --strict); what the analysis cannot use prints na."""
    cols = ",".join(c.name for c in COLUMNS)
    rc, out, err = prof(["-c", cols], lines_of([recs[0], bad, recs[1]]))
    assert rc == 0 and len(out.splitlines()) == (3 if skipped else 4)
    assert ("line 2: record fields not understood" in err) == skipped
    rc, _, _ = prof(["--strict", "-c", cols], lines_of([recs[0], bad, recs[1]]))
    assert rc == (EXIT_BAD_LINE if skipped else 0)


def test_marker_nested_too_deep_is_na_not_a_traceback(recs):
    """Marker args nested deeper than prof's decoder recurses (still valid JSON): the op's work
    is na and counted, the run goes on, no traceback."""
    deep = {"kind": "kernel", "kShortName": "k", "kDuration": 1, "dir": "fprop",
            "marker": {"kind": "op", "mod": "torch", "op": "relu", "args": json.loads("[" * 900 + "]" * 900)}}
    rc, out, err = prof(["-c", "idx,op,flops"], lines_of([recs[0], deep, recs[1]]))
    assert rc == 0 and "Traceback" not in err
    # decode() takes two frames per nesting level before Python 3.12 and one since (comprehensions
    # are inlined): there 900 levels fit, and the marker is priced as any other.
    if sys.version_info < (3, 12):
        assert out.splitlines()[2].split() == ["1", "-", "na"]
        assert "op arguments not understood: 1 kernel: torch.relu (1)" in err
    else:
        assert out.splitlines()[2].split() == ["1", "-", "1"]


def test_input_cut_short_by_a_failed_parse_is_an_error(recs, tmp_path):
    """What `parse broken.sqlite | prof` receives: records, then parse's own failure line. prof
    prints the rows it got, then says the input is incomplete and exits non-zero."""
    failed = b"pyprof.parse: error: database disk image is malformed - the 2 records above are incomplete\n"
    status, out, err = prof(["-c", "idx,op"], lines_of(recs[:2]) + failed)
    assert status == EXIT_INCOMPLETE
    assert out.splitlines()[1:] == ["0 linear", "1 __add__"]
    assert err.splitlines()[-1] == (
        "pyprof.prof: error: line 3: the input is incomplete, parse failed while writing it (pyprof.parse: error: "
        "database disk image is malformed - the 2 records above are incomplete)")


TORCH_TRACE = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
               "traceEvents": [{"ph": "X", "cat": "kernel", "name": "ampere_sgemm", "ts": 10, "dur": 4}]}
LOOKS = ("; it looks like {}, which pyprof does not read: capture with nsys (python -m pyprof.capture)); prof reads "
         "what `python -m pyprof.parse` writes, or an nsys export\n")


@pytest.mark.parametrize("text, first_bad, looks", [
    # torch.profiler's export_chrome_trace on one line: a JSON object, once read as a junk record (exit 0)
    (json.dumps(TORCH_TRACE) + "\n", "line 1: not a record",
     "a torch.profiler / Chrome trace (JSON with traceEvents, what HTA reads)"),
    (json.dumps(TORCH_TRACE, indent=2) + "\n", "line 1: not a JSON record (Expecting property name enclosed in "
                                                "double quotes)",
     "a torch.profiler / Chrome trace (JSON with traceEvents, what HTA reads)"),
    ("idx,op,sil\n0,linear,5\n", "line 1: not a JSON record (Expecting value)",
     "a CSV table (prof's --csv, nsys stats' or HTA's)"),
])
def test_another_tool_s_file_is_refused_saying_what_it_looks_like(tmp_path, text, first_bad, looks):
    path = tmp_path / "trace.json"
    path.write_text(text)
    for args, stdin, name in (([str(path)], b"", str(path)), ([], text.encode(), "stdin"),
                              (["--summary", str(path)], b"", str(path))):
        rc, out, err = prof(args, stdin)
        assert (rc, out) == (EXIT_BAD_FORMAT, "")
        assert err == f"pyprof.prof: error: {name} holds no pyprof records ({first_bad}" + LOOKS.format(looks)


def test_a_compressed_input_names_its_own_tool(tmp_path):
    import lzma

    path = tmp_path / "net.dict.xz"
    path.write_bytes(lzma.compress(b'{"v":1,"kind":"kernel"}\n'))
    rc, out, err = prof([str(path)])
    assert (rc, out) == (EXIT_BAD_FORMAT, "")
    assert err == (f"pyprof.prof: error: {path} is xz-compressed: decompress it first (unxz -k {path}, then give "
                   "prof what it wrote)\n")
    rc, _, err = prof([], path.read_bytes())
    assert err == ("pyprof.prof: error: stdin is xz-compressed: decompress it first (unxz -k FILE, then give prof "
                   "what it wrote)\n")


def test_no_argument_on_a_terminal_prints_the_usage_instead_of_waiting(monkeypatch, capsys):
    from pyprof.errors import PyprofError
    from pyprof.prof.__main__ import main

    class Keyboard(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Keyboard())
    with pytest.raises(PyprofError) as err:
        main([])
    assert err.value.status == EXIT_USAGE and str(err.value) == (
        "no input: give a record file or an nsys export, or pipe records in (python -m pyprof.parse net.sqlite | "
        "python -m pyprof.prof); -h for the manual")
    assert capsys.readouterr().err.startswith("usage: python -m pyprof.prof [-h]")
    assert prof([], b"") == (0, "Idx Direction Sub Module Op Kernel Params Sil(ns)\n", "")  # a pipe: read


def test_no_argument_on_a_real_terminal_exits_at_once(tmp_path):
    """Under a pseudo-terminal (script(1)) as a user types it: usage and status 2, not a wait."""
    import shutil

    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    res = subprocess.run(["script", "-qec", f"{sys.executable} -m pyprof.prof", "/dev/null"],
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=60, text=True)
    assert res.returncode == EXIT_USAGE and "usage: python -m pyprof.prof" in res.stdout
