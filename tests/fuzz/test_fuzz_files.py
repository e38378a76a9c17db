"""Fuzz suite, hostile files (docs/reliability.md): what users hand the tools by mistake or that
other programs leave behind. Each case names its expected status and message: WAL databases,
read-only files, directories, FIFOs, locked databases, compressed and random bytes, fake
.nsys-rep reports, 10,000-deep and unclosed ranges, 10 MB and undecodable range texts, outputs
that cannot be written. A subprocess subset checks that the in-process runs tell the truth.
"""
from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz_harness import check_failure, check_parse_output, run_tool
from nsys_synth import SynthExport, marker
from pyprof.parse import parallel

ROOT = Path(__file__).resolve().parents[2]
LENET = ROOT / "examples" / "lenet.sqlite"


def lenet_records() -> list[bytes]:
    res = run_tool("parse", [str(LENET), "-q"])
    assert res.status == 0
    return res.out.splitlines()


def expect(res, tool: str, status: int, message: str) -> None:
    check_failure(res, tool)
    assert (res.status, res.err_lines[-1]) == (status, f"pyprof.{tool}: error: {message}")


# --- the holes of issue 14 --------------------------------------------------------------------

def test_output_in_a_missing_directory(tmp_path):
    out = tmp_path / "nonexistent_dir" / "x.dict"
    expect(run_tool("parse", [str(LENET), "-o", str(out)]), "parse", 10,
           f"{out}: cannot write (No such file or directory)")
    # Several exports (parsed by workers into parts beside the output) say the same.
    expect(run_tool("parse", [str(LENET), str(ROOT / "examples" / "gpt.sqlite"), "-o", str(out)]), "parse", 10,
           f"{out}: cannot write (No such file or directory)")


@pytest.mark.parametrize("empty", ["/dev/null", "blank", "junk", "memcpy only"])
def test_diff_with_an_empty_side(tmp_path, empty):
    before = tmp_path / "before.dict"
    before.write_bytes(b"\n".join(lenet_records()) + b"\n")
    after = Path("/dev/null") if empty == "/dev/null" else tmp_path / "after.dict"
    if empty != "/dev/null":
        after.write_text({"blank": "\n\n", "junk": "not a record\n",
                          "memcpy only": '{"v":1,"kind":"memcpy","kDuration":5,"bytes":4}\n'}[empty])
    # A side of lines none of which is a record is no record file at all (status 4, as for prof
    # alone); a side with no line or no kernel among its records holds no kernels (status 5).
    status, message = ((4, f"{after} holds no pyprof records (line 1: not a JSON record (Expecting value)); prof "
                           "reads what `python -m pyprof.parse` writes, or an nsys export") if empty == "junk" else
                       (5, f"--diff: {after} holds no kernel records"))
    expect(run_tool("prof", ["--diff", str(before), str(after)]), "prof", status, message)
    expect(run_tool("prof", ["--diff", str(after), str(before)]), "prof", status, message)


def test_records_of_a_newer_format_are_read_with_a_warning_naming_both_versions():
    lines = [line.replace(b'"v":1,', b'"v":99,', 1) for line in lenet_records()]
    res = run_tool("prof", ["-c", "idx,op,flops"], stdin=b"\n".join(lines) + b"\n")
    assert res.status == 0 and len(res.out.splitlines()) == len(lines) + 1
    assert ("  records of format v99, newer than this pyprof reads (v1): keys added since are ignored; "
            f"upgrade pyprof: {len(lines)} kernels: v99 ({len(lines)})") in res.err_lines
    older = run_tool("prof", ["-c", "idx,op,flops"], stdin=b"\n".join(lenet_records()) + b"\n")
    assert older.out == res.out and "v99" not in older.err and "newer" not in older.err


# --- parse: files that are not what they seem -----------------------------------------------------

def _small_export(path: Path, text: str | None = None, depth: int = 1) -> Path:
    syn = SynthExport(str(path))
    t = syn.thread(100, 100)
    dom = syn.domain(t, "pyprof")
    for i in range(depth):
        syn.push(t, 1000 + i, 10**9 - i if i % 2 else None, f"layer:L{i}")
    if text is not None:
        syn.push(t, 1500 + depth, 10**8, text)
    syn.push(t, 1600 + depth, 10**8, marker("op", mod="torch", op="mm", args=[]), domain=dom, registered=True)
    for i in range(3):
        syn.launch_kernel(t, 2000 + depth + 100 * i, f"k{i}")
    syn.close()
    return path


def test_wal_database_with_uncheckpointed_rows(tmp_path):
    path = _small_export(tmp_path / "wal.sqlite")
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    writer.commit()
    try:
        assert os.path.getsize(f"{path}-wal") > 0  # the new rows live only in the WAL
        recs = check_parse_output(run_tool("parse", [str(path), "-q"]))
        assert len(recs) == 6
    finally:
        writer.close()


def test_read_only_file(tmp_path):
    path = _small_export(tmp_path / "ro.sqlite")
    path.chmod(0o444)
    assert len(check_parse_output(run_tool("parse", [str(path), "-q"]))) == 3


def test_locked_database(tmp_path):
    path = _small_export(tmp_path / "locked.sqlite")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("DELETE FROM StringIds")
    try:
        res = run_tool("parse", [str(path), "-q"])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    expect(res, "parse", 3, f"{path}: the export is locked by another program (sqlite: database is locked); "
                            "retry when it has finished writing")


@pytest.mark.parametrize("kind,status,message", [
    ("directory", 3, "{p}: a folder with no .sqlite or .nsys-rep export in it"),
    ("gzip", 4, "{p}: gzip-compressed, not a SQLite database: decompress it first"),
    ("random", 4, "{p}: not a SQLite database (expected an Nsight Systems SQLite export)"),
    ("sqlite header and random", 6, None),
    ("empty", 4, "{p}: not an Nsight Systems export (the SQLite database is empty)"),
    ("dict given to parse", 4, "{p}: not a SQLite database (expected an Nsight Systems SQLite export)"),
])
def test_files_that_are_no_export(tmp_path, kind, status, message):
    p = tmp_path / "net.sqlite"
    if kind == "directory":
        p.mkdir()
    elif kind == "gzip":
        p.write_bytes(gzip.compress(LENET.read_bytes()))
    elif kind == "random":
        p.write_bytes(os.urandom(4096))
    elif kind == "sqlite header and random":
        p.write_bytes(LENET.read_bytes()[:100] + bytes(range(256)) * 64)
    elif kind == "empty":
        p.write_bytes(b"")
    else:
        p.write_bytes(b"\n".join(lenet_records()))
    res = run_tool("parse", [str(p), "-q"])
    if message is None:
        check_failure(res, "parse")
        assert res.status in (4, 6)
    else:
        expect(res, "parse", status, message.format(p=p))


def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "net.sqlite"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", str(fifo)], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert (res.returncode, res.stderr) == (3, f"pyprof.parse: error: {fifo}: not a regular file (a FIFO or a "
                                               "device), not an export file\n")


@pytest.mark.parametrize("nsys,status,message", [
    (None, 8, "{rep}: reading an .nsys-rep report needs Nsight Systems' 'nsys': put it on PATH or set NSYS=/path/to/nsys"),
    ("echo 'Wrong event order detected' >&2; exit 3", 8, "{rep}: nsys export failed (exit status 3): Wrong event order detected"),
    ("exit 0", 8, "{rep}: nsys export failed (exit status 0)"),
    ('printf garbage > "$5"', 4, "{out}: not a SQLite database (expected an Nsight Systems SQLite export)"),
])
def test_fake_nsys_rep(tmp_path, monkeypatch, nsys, status, message):
    rep = tmp_path / "net.nsys-rep"
    rep.write_bytes(os.urandom(512))
    if nsys is None:
        monkeypatch.setenv("NSYS", str(tmp_path / "no-nsys"))
    else:
        script = tmp_path / "nsys"
        script.write_text("#!/bin/sh\n" + nsys + "\n")
        script.chmod(0o755)
        monkeypatch.setenv("NSYS", str(script))
    res = run_tool("parse", [str(rep), "-q"])
    check_failure(res, "parse")
    assert res.status == status
    if "{out}" in message:  # the error names the export nsys wrote for the report
        assert res.err_lines[0].endswith(message.split("{out}")[1]) and "net.sqlite" in res.err_lines[0]
    else:
        assert res.err_lines == [f"pyprof.parse: error: {message.format(rep=rep)}"]


# --- parse: ranges at the limits ---------------------------------------------------------------

def test_ten_thousand_deep_and_unclosed_ranges(tmp_path):
    path = _small_export(tmp_path / "deep.sqlite", depth=10000)
    recs = check_parse_output(run_tool("parse", [str(path), "-q"]))
    assert len(recs) == 3
    assert all(r["layer"] == [f"L{i}" for i in range(10000)] and r["op"] == "mm" for r in recs)


def test_ten_megabyte_range_texts(tmp_path):
    huge = "x" * (10 << 20)
    path = _small_export(tmp_path / "long.sqlite", text="layer:" + huge)
    res = run_tool("parse", [str(path), "-q"])
    recs = check_parse_output(res)
    assert [r["layer"][-1] == huge for r in recs] == [True] * 3
    # a pyprof marker of 10 MB (valid JSON) and one nested 100,000 deep (malformed for us)
    syn = SynthExport(str(tmp_path / "marker.sqlite"))
    t = syn.thread(100, 100)
    dom = syn.domain(t, "pyprof")
    syn.push(t, 1000, 9000, marker("op", mod="torch", op="mm", args=[huge]), domain=dom)
    syn.push(t, 1100, 8000, "[" * 100000 + "]" * 100000, domain=dom)
    syn.launch_kernel(t, 2000, "k")
    syn.close()
    res = run_tool("parse", [str(tmp_path / "marker.sqlite")])
    assert res.status == 0 and res.err.endswith("1 malformed pyprof marker\n")
    rec = json.loads(res.out)
    assert rec["op"] == "mm" and rec["marker"]["args"] == [huge]


def test_text_that_is_not_utf8_is_read_leniently(tmp_path):
    """A range pushed with bytes that are not UTF-8, met after records went out: read again, the
    records already written are not written twice."""
    syn = SynthExport(str(tmp_path / "bytes.sqlite"))
    t = syn.thread(100, 100)
    for i in range(50):
        syn.launch_kernel(t, 1000 + 100 * i, f"k{i}")
    syn.push(t, 3990, 4050, "layer:placeholder")
    path = syn.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE NVTX_EVENTS SET text = CAST(? AS TEXT) WHERE text = 'layer:placeholder'", (b"layer:caf\xe9",))
    db.commit()
    db.close()
    res = run_tool("parse", [str(path)])
    assert res.status == 0
    recs = [json.loads(line) for line in res.out.splitlines()]
    assert [r["kShortName"] for r in recs] == [f"k{i}" for i in range(50)]
    assert [r["layer"] for r in recs if r["layer"]] == [["caf\ufffd"]]
    note, summary = res.err_lines
    assert note.startswith(f"pyprof.parse: note: {path}: the export holds text that is not UTF-8 (Could not decode")
    assert note.endswith("; read with U+FFFD in its place") and summary.startswith("pyprof.parse: 50 kernels written")
    out = tmp_path / "bytes.dict"
    assert check_parse_output(run_tool("parse", [str(path), "-q", "-o", str(out)]), str(out)) == recs


def test_read_again_while_merging_tables_loses_no_kernel_and_leaves_stderr_clean(tmp_path):
    """The last kernel's name not UTF-8, met while the kernel, memcpy and memset tables were being
    merged: the first reading stops at that kernel and the second skips what was written. That
    kernel was counted as written and lost; and the first reading's merge, closed after the
    database, made Python print 'Exception ignored in: <generator object merge>' at exit."""
    path = tmp_path / "resnet.sqlite"
    shutil.copy(ROOT / "examples" / "resnet.sqlite", path)
    db = sqlite3.connect(path)
    (sid,) = db.execute("SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC LIMIT 1").fetchone()
    db.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?", (b"\xffname", sid))
    db.commit()
    db.close()
    res = run_tool("parse", [str(path), "--memcpy", "-q"])  # the harness fails on what Python would print
    assert (res.status, res.err) == (0, "")
    clean = run_tool("parse", [str(ROOT / "examples" / "resnet.sqlite"), "--memcpy", "-q"]).out.splitlines()
    got = res.out.splitlines()
    assert len(got) == len(clean) == 311
    changed = [(a, b) for a, b in zip(clean, got) if a != b]
    assert len(changed) == 1
    before, after = map(json.loads, changed[0])
    assert after == dict(before, kShortName="\ufffdname")
    proc = subprocess.run([sys.executable, "-m", "pyprof.parse", str(path), "--memcpy", "-q"], capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, b"", res.out)


# --- outputs that cannot be written ---------------------------------------------------------------

def test_parse_outputs_that_cannot_be_written(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    for out, why in [(tmp_path / "dir", "cannot write (Is a directory)"),
                     (tmp_path / "file" / "x.dict", "cannot write (Not a directory)"),
                     (Path("/proc/pyprof.dict"), "cannot write (No such file or directory)")]:
        expect(run_tool("parse", [str(LENET), "-q", "-o", str(out)]), "parse", 10, f"{out}: {why}")
    assert sorted(os.listdir(tmp_path)) == ["dir", "file"]


ALIASES = {
    # case: argv (a.sqlite, b.sqlite, D/ holding both, r.dict ranked records, and links to a.sqlite),
    # the file that must stay as it was, and the message
    "the export": (["a.sqlite", "-o", "a.sqlite"], "a.sqlite", "a.sqlite: -o names the input a.sqlite"),
    "one of two exports": (["a.sqlite", "b.sqlite", "-o", "a.sqlite"], "a.sqlite",
                           "a.sqlite: -o names the input a.sqlite"),
    "an export of a folder": (["D", "-o", "D/b.sqlite"], "D/b.sqlite", "D/b.sqlite: -o names the input D/b.sqlite"),
    "the export with --rank": (["a.sqlite", "--rank", "-o", "a.sqlite"], "a.sqlite",
                               "a.sqlite: -o names the input a.sqlite"),
    "the export cut into windows": (["a.sqlite", "-j", "2", "-o", "a.sqlite"], "a.sqlite",
                                    "a.sqlite: -o names the input a.sqlite"),
    "a symbolic link to it": (["a.sqlite", "-o", "sym.sqlite"], "a.sqlite",
                              "sym.sqlite: -o names the input a.sqlite"),
    "a hard link to it": (["a.sqlite", "b.sqlite", "-o", "hard.sqlite"], "a.sqlite",
                          "hard.sqlite: -o names the input a.sqlite"),
    "a merged file": (["--merge", "r.dict", "-o", "r.dict"], "r.dict", "r.dict: -o names the input r.dict"),
}


@pytest.mark.parametrize("case", sorted(ALIASES))
def test_output_that_is_an_input_is_refused(tmp_path, monkeypatch, case):
    """However the output names an input (the same path, a folder's file, a link), the input is
    left as it was and the run is refused, whichever way parse would have gone (one process,
    ranks, windows, --merge)."""
    argv, kept, message = ALIASES[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(parallel, "MIN_WINDOW", 10)  # -j 2 cuts LeNet's 44 kernels into windows
    (tmp_path / "D").mkdir()
    for name in ("a.sqlite", "b.sqlite", "D/a.sqlite", "D/b.sqlite"):
        shutil.copy(LENET, tmp_path / name)
    os.symlink("a.sqlite", tmp_path / "sym.sqlite")
    os.link(tmp_path / "a.sqlite", tmp_path / "hard.sqlite")
    assert run_tool("parse", ["a.sqlite", "--rank", "-q", "-o", "r.dict"]).status == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    expect(run_tool("parse", argv), "parse", 2, f"{message}; give another file name")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_stdout_redirected_into_an_input_is_refused(tmp_path):
    """`parse a.sqlite b.sqlite >> b.sqlite` would append records to the export being read."""
    for name in ("a.sqlite", "b.sqlite"):
        shutil.copy(LENET, tmp_path / name)
    with open(tmp_path / "b.sqlite", "ab") as stdout:
        res = run_tool("parse", [str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")], stdout=stdout)
    expect(res, "parse", 2, f"stdout is redirected into the input {tmp_path / 'b.sqlite'}; write the output to "
                            "another file")
    assert (tmp_path / "b.sqlite").read_bytes() == LENET.read_bytes()


def test_prof_outputs_that_name_an_input_are_refused(tmp_path):
    """Issue 31, item 3: `prof --parquet in.dict in.dict` replaced its input. Every output of
    prof (-o, --plot, --parquet) naming an input, by its path or through a symbolic or hard link,
    is a usage error before anything is read or written."""
    records = tmp_path / "in.dict"
    records.write_bytes(b"\n".join(lenet_records()) + b"\n")
    export = tmp_path / "net.sqlite"
    shutil.copy(LENET, export)
    (tmp_path / "sym.dict").symlink_to(records)
    os.link(records, tmp_path / "hard.dict")
    costs = tmp_path / "costs.py"  # prof --costs FILE reads a Python file of the user's
    costs.write_text("# no formulas\n")
    kept = {p: p.read_bytes() for p in (records, export, costs)}
    for argv, out, flag, named in [
            (["--parquet", records, records], records, "--parquet", records),
            (["--parquet", export, export], export, "--parquet", export),
            (["-o", tmp_path / "sym.dict", records], tmp_path / "sym.dict", "-o", records),
            (["--summary", "-o", tmp_path / "hard.dict", records], tmp_path / "hard.dict", "-o", records),
            (["--plot", export, export], export, "--plot", export),
            (["--diff", records, export, "--output", tmp_path / "hard.dict"], tmp_path / "hard.dict", "-o", records),
            (["--costs", costs, "-o", costs, records], costs, "-o", costs)]:
        expect(run_tool("prof", [str(a) for a in argv]), "prof", 2,
               f"{out}: {flag} names the input {named}; give another file name")
    assert {p: p.read_bytes() for p in kept} == kept
    assert sorted(os.listdir(tmp_path)) == ["costs.py", "hard.dict", "in.dict", "net.sqlite", "sym.dict"]


def test_prof_output_option_writes_every_form_exactly_as_named(tmp_path):
    """Issue 30, item 6: -o FILE was no option of prof (`--summary --csv -o out.csv x.dict` took
    out.csv for the input). -o writes what stdout would get, to exactly that name, and only
    when the run succeeded."""
    records = tmp_path / "in.dict"
    records.write_bytes(b"\n".join(lenet_records()) + b"\n")
    for argv in (["--csv"], ["--json"], ["-w", "120"], [], ["--summary"], ["--summary", "--json"],
                 ["--modules", "--csv"], ["--diff", str(records)]):
        plain = run_tool("prof", argv + [str(records)])
        out = tmp_path / "out"
        res = run_tool("prof", argv + [str(records), "-o", str(out)])
        assert (res.status, res.out, res.err) == (0, b"", plain.err) and plain.status == 0
        assert out.read_bytes() == plain.out, argv
        out.unlink()
    assert sorted(os.listdir(tmp_path)) == ["in.dict"]
    # A failed run (under --strict, at the first bad line) leaves no file, not even a temporary one.
    (tmp_path / "bad.dict").write_bytes(records.read_bytes() + b"oops\n")
    expect(run_tool("prof", ["--strict", "--csv", "-o", str(tmp_path / "out.csv"), str(tmp_path / "bad.dict")]),
           "prof", 7, "line 45: not a JSON record (Expecting value)")
    assert sorted(os.listdir(tmp_path)) == ["bad.dict", "in.dict"]


@pytest.mark.parametrize("form", ["-o", "--plot", "--parquet"])
def test_prof_outputs_that_cannot_be_written(tmp_path, form):
    """Issue 31, item 10: `--plot roof`, `--plot DIR/`, `--plot /dev/full` wrote roof.png,
    DIR/.png and /dev/full.png, and reported the name given with status 0."""
    if form == "--plot":
        pytest.importorskip("matplotlib")
    if form == "--parquet":
        pytest.importorskip("pyarrow")
    (tmp_path / "dir").mkdir()
    small = tmp_path / "in.dict"
    small.write_bytes(b"\n".join(lenet_records()) + b"\n")
    for out, why in [(f"{tmp_path}/dir", "Is a directory"), (f"{tmp_path}/dir/", "Is a directory"),
                     (f"{tmp_path}/new/", "Is a directory"), ("/dev/full", "No space left on device"),
                     (f"{tmp_path}/no/x", "No such file or directory")]:
        expect(run_tool("prof", [form, out, str(small)]), "prof", 10, f"{out}: cannot write ({why})")
    assert sorted(os.listdir(tmp_path)) == ["dir", "in.dict"] and os.listdir(tmp_path / "dir") == []


def test_plot_is_written_to_exactly_the_name_given(tmp_path):
    """The image format comes from the extension (PNG for none or an unknown one); the name is
    never changed."""
    pytest.importorskip("matplotlib")
    small = tmp_path / "in.dict"
    small.write_bytes(b"\n".join(lenet_records()) + b"\n")
    for name, head in [("roof", b"\x89PNG"), ("roof.svg", b"<?xml"), ("roof.pdf", b"%PDF"), ("roof.x", b"\x89PNG")]:
        res = run_tool("prof", ["--plot", str(tmp_path / name), str(small)])
        assert res.status == 0 and res.err_lines[-1] == f"pyprof.prof: roofline of 19 kernels written to {tmp_path / name}"
        assert (tmp_path / name).read_bytes().startswith(head)
    assert sorted(os.listdir(tmp_path)) == ["in.dict", "roof", "roof.pdf", "roof.svg", "roof.x"]


def test_output_to_special_files_writes_through_them(tmp_path):
    """-o onto a FIFO (as onto /dev/stdout or /dev/null) writes through it instead of replacing it
    with a file; -o onto a symbolic link writes the file it points to."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    res = run_tool("parse", [str(LENET), "-q", "-o", str(fifo)])
    got = reader.communicate(timeout=60)[0]
    assert res.status == 0 and len(got.splitlines()) == 44 and fifo.is_fifo()
    link = tmp_path / "link.dict"
    target = tmp_path / "target.dict"
    target.write_text("old")
    link.symlink_to(target)
    assert run_tool("parse", [str(LENET), "-q", "-o", str(link)]).status == 0
    assert link.is_symlink() and len(target.read_text().splitlines()) == 44


def _limited(size: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return limit


@pytest.mark.parametrize("tool", ["parse -o", "parse >", "prof >"])
def test_disk_full_is_one_line(tmp_path, tool):
    """A file-size limit stands in for a full disk: the write fails mid-way (EFBIG)."""
    out = tmp_path / "out.txt"
    dict_file = tmp_path / "in.dict"
    dict_file.write_bytes(b"\n".join(lenet_records() * 50) + b"\n")
    argv = {"parse -o": ["pyprof.parse", str(LENET), "-q", "-o", str(out)],
            "parse >": ["pyprof.parse", str(LENET), "-q"],
            "prof >": ["pyprof.prof", "-c", "idx,op,kernel,params", str(dict_file)]}[tool]
    with open(out if ">" in tool else os.devnull, "wb") as stdout:
        res = subprocess.run([sys.executable, "-m", *argv], stdout=stdout, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_limited(16384), timeout=120, cwd=ROOT)
    prog = argv[0]
    if tool == "parse -o":
        assert res.stderr == f"{prog}: error: {out}: cannot write (File too large)\n"
        assert os.listdir(tmp_path) == ["in.dict"]
    else:
        assert res.stderr == f"{prog}: error: cannot write the output: File too large\n"
    assert res.returncode == 10


# --- prof: inputs that are no record file ---------------------------------------------------------

def test_prof_inputs_that_are_no_record_file(tmp_path):
    gz = tmp_path / "net.dict.gz"
    gz.write_bytes(gzip.compress(b"\n".join(lenet_records())))
    expect(run_tool("prof", [str(gz)]), "prof", 4,
           f"{gz} is gzip-compressed: decompress it first (gunzip -k {gz}, then give prof what it wrote)")
    expect(run_tool("prof", [str(tmp_path)]), "prof", 3, f"cannot read {tmp_path}: Is a directory")
    expect(run_tool("prof", [], stdin=LENET.read_bytes()), "prof", 4,
           "the input is an nsys SQLite export: give its path (prof parses it) or run `python -m pyprof.parse` on "
           "it and give prof its output")
    readme = run_tool("prof", [str(ROOT / "README.md")])
    expect(readme, "prof", 4, f"{ROOT / 'README.md'} holds no pyprof records (line 1: not a JSON record (Expecting "
                              "value)); prof reads what `python -m pyprof.parse` writes, or an nsys export")
    assert readme.out == b"" and len(readme.err_lines) == 1
    expect(run_tool("prof", ["--plot", str(tmp_path / "no" / "r.png")], stdin=b"\n".join(lenet_records())),
           "prof", 10, f"{tmp_path / 'no' / 'r.png'}: cannot write (No such file or directory)")


def test_prof_reads_a_fifo(tmp_path):
    fifo = tmp_path / "net.dict"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat > {fifo}"], stdin=subprocess.PIPE)
    res = subprocess.Popen([sys.executable, "-m", "pyprof.prof", "-c", "idx", str(fifo)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, cwd=ROOT)
    writer.communicate(b"\n".join(lenet_records()) + b"\n", timeout=60)
    out, err = res.communicate(timeout=60)
    assert res.returncode == 0 and err == b"" and len(out.splitlines()) == 45


# --- the subprocess subset: what the in-process runs stand for ------------------------------------

@pytest.mark.parametrize("argv,stdin,status", [
    (["pyprof.parse", "examples/gpt.sqlite", "-o", "/nonexistent_dir/x.dict"], b"", 10),
    (["pyprof.parse"], b"", 2),
    (["pyprof.parse", "examples/lenet.sqlite", "--memcpy=3"], b"", 2),
    (["pyprof.prof", "-w", "wide"], b"", 2),
    (["pyprof.prof", "--diff", "examples/lenet.sqlite"], b"", 2),
    (["pyprof.prof", "--diff", "-", "/dev/null"], b'{"kind":"kernel","kDuration":5}\n', 5),
    (["pyprof.prof", "--strict"], b"{\n", 7),
    (["pyprof.prof"], b"pyprof.parse: error: x - the 0 records above are incomplete\n", 9),
    (["pyprof.prof", "-c", "kernel"], b'{"kShortName":"\\ud800 caf\\u00e9"}\n', 0),
])
def test_subprocess_subset(argv, stdin, status):
    res = subprocess.run([sys.executable, "-m", *argv], input=stdin, capture_output=True, timeout=120, cwd=ROOT)
    err = res.stderr.decode()
    assert res.returncode == status, err
    assert "Traceback" not in err
    if status:
        assert len(err.splitlines()) == 1 and err.startswith(f"{argv[0]}: error: ")
    else:
        assert res.stdout.decode().splitlines() == ["Kernel", "\\ud800_café"]


# --- prof: names from the trace that hold line breaks --------------------------------------------

@pytest.mark.parametrize("view", [["--summary"], ["--modules"], ["--overlap"], ["--diff", "SELF"], ["-c", "kernel,sil"],
                                  ["--csv"], ["--json"], ["--parquet", "OUT"], ["--plot", "OUT"]])
@pytest.mark.parametrize("duration, why", [(-int("9" * 400), "ValueError: kDuration is outside the signed 64-bit range"),
                                           (2**63, "ValueError: kDuration is outside the signed 64-bit range"),
                                           (float("nan"), "TypeError: kDuration is float, not an integer")])
def test_times_beyond_64_bits_are_a_skipped_record(tmp_path, view, duration, why):
    """A time of 400 digits overflowed float conversion in the summary's statistics and units
    (a traceback, found by test_summary after the merge). Issue 31, item 9: 2^63 ended --parquet
    in a traceback and the table printed it while --summary skipped it; a NaN ended --plot in one.
    Every view, and every form of the table, now skips the record as one whose fields are not
    understood, like a time of the wrong type."""
    if "--plot" in view:
        pytest.importorskip("matplotlib")
    if "--parquet" in view:
        pytest.importorskip("pyarrow")
    recs = [json.loads(line) for line in lenet_records()]
    recs[1]["kDuration"] = duration
    path = tmp_path / "big.dict"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "out"
    argv = [str(path) if a == "SELF" else str(out) if a == "OUT" else a for a in view]
    argv += [] if "--diff" in view else [str(path)]
    if "--diff" in view:
        argv.append(str(path))
    res = run_tool("prof", argv)
    assert res.status == 0, res.err
    skipped = f"1 malformed line skipped (the first: line 2: record fields not understood ({why}))"
    assert f"  {skipped}" in res.err_lines
    if "kernel,sil" in view:
        assert len(res.out.splitlines()) == len(recs)  # the header and every other record
    if "--parquet" in view:
        assert pytest.importorskip("pyarrow.parquet").read_table(out).num_rows == len(recs) - 1


def test_names_parquet_and_the_plot_cannot_encode_are_written_escaped(tmp_path):
    """Issue 31, item 9: a lone surrogate (a JSON escape) in a kernel or op name ended --parquet
    and --plot in a traceback. They are written as stdout writes them, `\\udcff`."""
    pytest.importorskip("matplotlib")
    pq = pytest.importorskip("pyarrow.parquet")
    recs = [json.loads(line) for line in lenet_records()]
    for r in recs:
        r.update(kShortName="k\udcff", op="o\ud800p")
    path = tmp_path / "odd.dict"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = run_tool("prof", ["--parquet", str(tmp_path / "out.parquet"), "-c", "kernel,op", str(path)])
    assert (res.status, res.err) == (0, "")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("kernel").to_pylist() == ["k\\udcff"] * len(recs)
    assert table.column("op").to_pylist()[0] == "o\\ud800p"
    res = run_tool("prof", ["--plot", str(tmp_path / "roof.png"), str(path)])
    assert (res.status, res.err_lines[-1]) == (0, f"pyprof.prof: roofline of 19 kernels written to {tmp_path / 'roof.png'}")


def test_names_with_line_breaks_keep_each_row_on_its_line():
    rec = json.loads(lenet_records()[0])  # conv1's implicit_convolve_sgemm
    rec.update(kShortName="sgemm\nnext\rline\u2028x", mod="my\nmod", op="x\x85y")
    rec["marker"].update(mod="my\nmod", op="x\x85y")
    data = (json.dumps(rec) + "\n").encode()
    res = run_tool("prof", ["-c", "idx,kernel,op,flops"], stdin=data)
    assert res.out.decode().split("\n") == ["Idx Kernel Op FLOPs", "0 sgemm_next_line_x x_y na", ""]
    assert res.err_lines == ["pyprof.prof: 1 record; warnings:", "  unknown op: 1 kernel: my\\nmod.x\\x85y (1)"]
    res = run_tool("prof", ["-c", "idx,kernel,op", "-w", "60"], stdin=data)
    header, row, end = res.out.decode().split("\n")
    assert (row[:header.index("Kernel")].strip(), row[header.index("Kernel"):header.index("Op")].strip(),
            row[header.index("Op"):], end) == ("0", "sgemm next line x", "x y", "")
    res = run_tool("prof", ["--summary", "--by", "op"], stdin=data)
    lines = res.out.decode().split("\n")
    row = lines[lines.index("") + 2]  # the header block, a blank line, the table's header, its row
    assert row.startswith("x y   ") and row.split()[:6] == ["x", "y", "3.5", "us", "100.0", "1"]
    assert lines[lines.index("advice:") + 1].startswith(
        "- fp32 matmul/conv on CUDA cores: 1 kernel, 3.5 us = 100.0% of GPU time (x y 3.5 us)")
    assert all(line.isprintable() for line in lines)


# --- issue 31: what an outside fuzz review found ---------------------------------------------------

def test_a_long_original_pyprof_line_is_refused_unread(tmp_path):
    """Issue 31, item 8: every line starting with `{` that is no JSON went to ast.literal_eval,
    whatever its length: a 10 MB line took 31 s and 4.8 GB. A line longer than any the old tool
    wrote is skipped with its reason, unread."""
    path = tmp_path / "big.dict"
    path.write_bytes(lenet_records()[0] + b"\n{'kShortName': [" + b"1," * 5_000_000 + b"]}\n")
    res = run_tool("prof", ["-c", "kernel", str(path)])
    assert (res.status, len(res.out.splitlines())) == (0, 2)
    assert res.err_lines[-1] == ("  1 malformed line skipped (the first: line 2: not a JSON record, and at 10,000,018 "
                                 "characters too long for an original-PyProf line (at most 65,536))")


@pytest.mark.parametrize("tool, redirect, status, line", [
    ("prof", ">&-", 10, "cannot write the output: stdout is closed"),
    ("prof", "<&-", 3, "cannot read stdin: it is closed (give a record file)"),
    ("prof", "2>&- >&-", 10, None),
    ("prof", "2>&-", 3, None),
    ("parse", ">&-", 10, "cannot write the output: stdout is closed"),
    ("parse", "2>&- >&-", 10, None),
    ("parse", "2>&-", 3, None),
])
def test_closed_standard_streams(tmp_path, tool, redirect, status, line):
    """Issue 31, item 13: a tool started with stdout, stdin or stderr closed ended in an
    AttributeError traceback, or exited 1 in silence. Now the documented status, and one line
    where there is a stderr; a file opened meanwhile never takes the closed descriptor."""
    records = tmp_path / "in.dict"
    records.write_bytes(b"\n".join(lenet_records()) + b"\n")
    given = {"prof": str(records), "parse": str(LENET)}[tool]
    if redirect == "<&-":
        given = ""
    elif redirect == "2>&-":
        given = str(tmp_path / "missing")
    proc = subprocess.run(["bash", "-c", f'exec {redirect}; exec "$@"', "-", sys.executable, "-m", f"pyprof.{tool}"]
                          + ([given] if given else []), capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert (proc.returncode, proc.stderr.decode()) == (status, f"pyprof.{tool}: error: {line}\n" if line else "")
    # With -o, a closed stdout is no matter.
    if redirect == ">&-":
        out = tmp_path / "out"
        proc = subprocess.run(["bash", "-c", f'exec {redirect}; exec "$@"', "-", sys.executable, "-m", f"pyprof.{tool}",
                               given, "-q" if tool == "parse" else "--csv", "-o", str(out)],
                              capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert (proc.returncode, proc.stderr) == (0, b"") and len(out.read_bytes().splitlines()) in (44, 45)
@pytest.mark.parametrize("text, malformed, mod", [
    ('{"v":1,"kind":"op","mod":"torch","op":"mm","args":[1e400]}', 1, None),      # past float: not JSON out
    ('{"v":1,"kind":"op","mod":"torch","op":"mm","args":[-1e400,2]}', 1, None),
    ('{"v":1,"kind":"op","mod":[1],"op":"mm","args":[]}', 0, [1]),                  # a mod that hashes not
    ('{"v":1,"kind":"op","mod":{},"op":"backward","args":[]}', 0, {}),
    ('{"v":1,"kind":"bwd","node":"MmBackward0","fwd":{"kind":"op","mod":{"a":1},"op":"mm"}}', 0, {"a": 1}),
])
def test_markers_with_values_no_marker_holds(tmp_path, text, malformed, mod):
    """A pyprof marker with a number past float's range or a `mod` that is a list or an object:
    a malformed marker (counted) or a marker written as it is; never a traceback, in parse or in
    prof given the export."""
    path = _small_export(tmp_path / "m.sqlite")
    db = sqlite3.connect(path)
    db.execute("UPDATE NVTX_EVENTS SET text = ?, textId = NULL WHERE domainId != 0 AND eventType = 59", (text,))
    db.commit()
    db.close()
    recs = check_parse_output(run_tool("parse", [str(path), "-q"]))
    assert len(recs) == 3 and all(r["mod"] == mod for r in recs)
    res = run_tool("parse", [str(path)])
    assert res.err.endswith(f"{malformed} malformed pyprof marker{'s' if malformed != 1 else ''}\n"), res.err
    res = run_tool("prof", ["-c", "idx,op", str(path)])
    assert res.status == 0 and len(res.out.splitlines()) == 4, res.err


def test_schema_text_that_is_not_utf8_is_one_line(tmp_path):
    """A byte of the schema's SQL flipped to one that is not UTF-8: SQLite quotes it in its
    error message, which Python cannot decode."""
    path = tmp_path / "schema.sqlite"
    shutil.copy(LENET, path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA writable_schema = ON")
    db.execute("UPDATE sqlite_master SET sql = CAST(? AS TEXT) WHERE name = 'DIAGNOSTIC_EVENT'",
               (b"CREATE \xffTABLE DIAGNOSTIC_EVENT (a INTEGER)",))
    db.commit()
    db.close()
    for argv in ([str(path)], [str(path), str(path), "-j", "2"]):
        expect(run_tool("parse", argv), "parse", 6, f"{path}: the export is truncated or corrupted (sqlite: malformed "
                                                    'database schema (DIAGNOSTIC_EVENT) - near "\\xffTABLE": syntax '
                                                    "error)")


def _without_dac_override() -> None:
    # Root writes into read-only folders: drop the capabilities that let it, for the program run.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, from the bounding set (PR_CAPBSET_DROP)
        libc.prctl(24, cap, 0, 0, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux capabilities")
def test_wal_export_without_its_shm_in_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = _small_export(folder / "wal.sqlite")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    db.close()  # the last connection removes -wal and -shm
    assert sorted(os.listdir(folder)) == ["wal.sqlite"]
    folder.chmod(0o555)
    try:
        res = subprocess.run([sys.executable, "-m", "pyprof.parse", str(path)], capture_output=True, text=True,
                             cwd=ROOT, timeout=120, preexec_fn=_without_dac_override)
    finally:
        folder.chmod(0o755)
    assert (res.returncode, res.stdout) == (3, "")
    assert res.stderr == (f"pyprof.parse: error: {path}: cannot be opened read-only: a WAL-mode database needs a -shm "
                          "file beside it, which is missing and cannot be created there (a read-only folder); copy the "
                          "export to a writable folder, or turn WAL off where it can be written (sqlite3 FILE "
                          "'PRAGMA journal_mode=DELETE')\n")


MERGE_HOLES = {
    "a 5000-digit rank": (lambda rec: rec.replace(b'"rank":0', b'"rank":' + b"1" * 5000),
                          "not a pyprof.parse record (Exceeds the limit (4300 digits) for integer string conversion)"),
    "a 5000-digit v": (lambda rec: rec.replace(b'"v":1', b'"v":' + b"1" * 5000),
                       "not a pyprof.parse record (Exceeds the limit (4300 digits) for integer string conversion)"),
    "garbage after the prefix": (lambda rec: b'{"v":1,"rank":0,garbage}\n',
                                 "not a pyprof.parse record (Expecting property name enclosed in double quotes)"),
    "garbage after the record": (lambda rec: rec[:-1] + b"]]\n", "not a pyprof.parse record (Extra data)"),
    "rank given again, as text": (lambda rec: rec[:-2] + b',"rank":"0"}\n',
                                  "not a pyprof.parse record (its v and rank are no counts)"),
}


@pytest.mark.parametrize("case", sorted(MERGE_HOLES))
def test_merge_takes_only_whole_records(tmp_path, case):
    """--merge copies records as bytes: a line that only starts like a ranked record must not be
    copied as one, and a number of thousands of digits is no traceback."""
    mutate, why = MERGE_HOLES[case]
    good = tmp_path / "good.dict"
    assert run_tool("parse", [str(LENET), "--rank", "-q", "-o", str(good)]).status == 0
    lines = good.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.dict"
    bad.write_bytes(b"".join(lines[:2]) + mutate(lines[2]) + b"".join(lines[3:]))
    out = tmp_path / "out.dict"
    expect(run_tool("parse", ["--merge", str(bad), "-o", str(out)]), "parse", 4, f"{bad}: line 3: {why}")
    assert not out.exists()
