"""Fuzz: every command-line flag of parse and prof with good and bad values, in any order, with
inputs that are missing, directories, empty or real, one or several (the ranks of a job, --merge),
and outputs that cannot be written
(docs/reliability.md). Properties: a documented exit status; a failure is one line on stderr;
a failed run creates no output file.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from fuzz_harness import check_failure, examples, json_lines, run_tool, signal_parse
from nsys_synth import rank_export, workload
from pyprof.parse import parallel
from pyprof.prof.columns import COLUMNS
from pyprof.prof.groups import KEYS, SORTS

ROOT = Path(__file__).resolve().parents[2]
LENET = str(ROOT / "examples" / "lenet.sqlite")


@functools.lru_cache(maxsize=None)
def places(base: str) -> dict:
    """Paths of every kind, made once in `base`."""
    b = Path(base)
    (b / "dir").mkdir(exist_ok=True)
    records = run_tool("parse", [LENET, "-q"]).out.splitlines()
    (b / "small.dict").write_bytes(b"\n".join(records[:6]) + b"\n")
    (b / "empty.dict").write_bytes(b"")
    (b / "junk.dict").write_bytes(os.urandom(300))
    return {"export": LENET, "small": str(b / "small.dict"), "empty": str(b / "empty.dict"),
            "junk": str(b / "junk.dict"), "dir": str(b / "dir"), "missing": str(b / "missing"),
            "missing dir": str(b / "no" / "such"), "devnull": "/dev/null", "dash": "-", "blank": "",
            "weird": str(b / "a b?c#%\udcff"), "rep": str(b / "missing.nsys-rep")}


PATH_KINDS = ["export", "small", "empty", "junk", "dir", "missing", "missing dir", "devnull", "dash", "blank",
              "weird", "rep"]
OUT_KINDS = ["fresh", "dir", "missing dir", "blank", "dash", "weird"]
junk = st.one_of(st.sampled_from(["--", "-", "-x", "--nope", "--memcpy=1", "-qq", "--quiet=no", "-o", "=", "-c",
                                  "--width", "-w=3", "--top", "--by=", "--sort", "-h"]),
                 st.text(max_size=8))
numbers = st.one_of(st.integers(-5, 500).map(str), st.sampled_from(["0", "-1", "1e3", "abc", "", " 7", "99999999999999999999",
                                                                     "nan", "0x10", "٣"]))
column_names = [c.name for c in COLUMNS]
columns = st.one_of(st.lists(st.sampled_from(column_names + ["nope", "", "IDX", " idx"]), max_size=6).map(",".join),
                    st.sampled_from([",", ",,idx", "idx,", "all"]), st.text(max_size=10))


@st.composite
def parse_argv(draw, where: dict) -> tuple[list[str], str | None]:
    argv: list[str] = []
    out = None
    if draw(st.integers(0, 9)):
        argv.append(where[draw(st.sampled_from(PATH_KINDS))])
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["-o", "--memcpy", "-q", "--quiet", "junk", "input", "-j", "--rank", "--merge",
                                     "--version"]))
        if kind == "-j":
            # -j 1: several inputs still go through the worker pool, but one fork is enough.
            argv += [draw(st.sampled_from(["-j", "--jobs"])), draw(st.one_of(st.just("1"), numbers))]
        elif kind == "-o":
            o = draw(st.sampled_from(OUT_KINDS))
            out = os.path.join(where["dir"], "..", "out.dict") if o == "fresh" else where[o] if o != "fresh" else None
            argv += [draw(st.sampled_from(["-o", "--output"])), out]
        elif kind == "junk":
            argv.append(draw(junk))
        elif kind == "input":
            argv.append(where[draw(st.sampled_from(PATH_KINDS))])
        else:
            argv.append(kind)
    return argv, out


@st.composite
def prof_argv(draw, where: dict) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["-c", "-w", "--csv", "--json", "--strict", "--summary", "--by", "--top", "--sort",
                                     "--diff", "file", "junk", "--plot", "--overlap", "--stragglers", "--modules",
                                     "--parquet", "filter", "--window", "--version", "-o"]))
        if kind == "-c":
            argv += [draw(st.sampled_from(["-c", "--columns"])), draw(columns)]
        elif kind in ("-w", "--top"):
            argv += [kind, draw(numbers)]
        elif kind == "--by":
            keys = draw(st.lists(st.sampled_from(list(KEYS) + ["nope", "", " op"]), min_size=1, max_size=3))
            argv += [kind, ",".join(keys)]
        elif kind == "filter":  # regexes that do not compile, names of nothing, text of any kind
            argv += [draw(st.sampled_from(["--kernel", "--op", "--layer", "--module"])),
                     draw(st.one_of(st.sampled_from(["(", "[a-", "*", "sgemm", "conv2d,linear", "", "conv1", "a" * 500,
                                                     "(a+)+$", "\\", "\n"]), st.text(max_size=8)))]
        elif kind == "--window":
            argv += [kind, draw(st.one_of(st.sampled_from([":", "0:", ":5", "5:1", "1:1", "a:b", "-5:-1", "1e3:2e3",
                                                           "0:" + "9" * 30, "nan:inf", "0:10:20", ""]),
                                          st.text(max_size=6)))]
        elif kind == "--parquet":
            # Writing Parquet takes a while: mostly paths that cannot be written.
            argv += [kind, draw(st.sampled_from([where["missing dir"] + ".parquet", where["dir"], where["blank"],
                                                 where["dir"] + "/../out.parquet"]))]
        elif kind == "-o":
            argv += [draw(st.sampled_from(["-o", "--output"])),
                     draw(st.sampled_from([where["dir"] + "/../out.txt", where["dir"], where["dir"] + "/",
                                           where["missing dir"], where["blank"], "/dev/full"]))]
        elif kind == "--sort":
            argv += [kind, draw(st.sampled_from(list(SORTS) + ["nope"]))]
        elif kind == "--diff":
            argv += [kind] + [where[draw(st.sampled_from(PATH_KINDS))] for _ in range(draw(st.integers(0, 3)))]
        elif kind == "file":
            argv.append(where[draw(st.sampled_from(PATH_KINDS))])
        elif kind == "junk":
            argv.append(draw(junk))
        elif kind == "--plot":
            # Drawing a plot takes a third of a second: only paths that cannot be written, rarely.
            if draw(st.integers(0, 15)) == 0:
                argv += [kind, draw(st.sampled_from([where["missing dir"] + ".png", where["dir"],
                                                     where["dir"] + "/x.unknownformat"]))]
        else:
            argv.append(kind)
    return argv


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    return places(str(tmp_path_factory.mktemp("fuzz-cli")))


def _check(res, tool: str) -> None:
    event(f"{tool} status {res.status}")
    if res.status != 0:
        check_failure(res, tool)


@examples(600)  # several inputs go through parse's worker pool: a fork per run
@given(data=st.data())
def test_parse_flags(where, data):
    argv, out = data.draw(parse_argv(where))
    before = set(os.listdir(os.path.dirname(where["dir"])))
    res = run_tool("parse", argv)
    _check(res, "parse")
    if res.status != 0:
        assert set(os.listdir(os.path.dirname(where["dir"]))) == before, "a failed run left a file"
        assert not any(n.endswith(".partial") for n in os.listdir(where["dir"]))
    elif out and os.path.isfile(out):
        os.unlink(out)


@examples(1200)
@given(data=st.data())
def test_prof_flags(where, data):
    argv = data.draw(prof_argv(where))
    stdin = data.draw(st.sampled_from([b"", Path(where["small"]).read_bytes(), b"{oops\n"]))
    before = set(os.listdir(where["dir"]))
    parent = set(os.listdir(Path(where["dir"]).parent))
    small = Path(where["small"]).read_bytes()
    res = run_tool("prof", argv, stdin=stdin)
    _check(res, "prof")
    assert Path(where["small"]).read_bytes() == small, "an input was overwritten"
    parquet = Path(where["dir"]).parent / "out.parquet"
    if parquet.exists():  # a failed run's file, if any, is no Parquet file a reader takes as complete
        pq = pytest.importorskip("pyarrow.parquet")
        try:
            pq.read_table(parquet)
            assert res.status == 0, f"a failed run (status {res.status}) left a readable {parquet}"
        except (OSError, ValueError):  # pyarrow.ArrowInvalid (a ValueError): no footer
            assert res.status != 0, "a successful run wrote an unreadable Parquet file"
        parquet.unlink()
    if res.status != 0:
        assert set(os.listdir(where["dir"])) == before, "a failed run left a file"
        assert set(os.listdir(Path(where["dir"]).parent)) == parent, "a failed run left a file"
    with contextlib.suppress(FileNotFoundError):
        (Path(where["dir"]).parent / "out.txt").unlink()


@pytest.fixture(scope="module")
def aliases(tmp_path_factory) -> dict:
    """An input of each kind and names of it: itself, spelt otherwise, a symbolic and a hard link."""
    b = tmp_path_factory.mktemp("aliases")
    records = run_tool("parse", [LENET, "-q"]).out.splitlines()
    (b / "in.dict").write_bytes(b"\n".join(records[:6]) + b"\n")
    shutil.copy(LENET, b / "net.sqlite")
    names = {}
    for name in ("in.dict", "net.sqlite"):
        (b / f"sym-{name}").symlink_to(b / name)
        os.link(b / name, b / f"hard-{name}")
        names[str(b / name)] = [str(b / name), f"{b}/./{name}", str(b / f"sym-{name}"), str(b / f"hard-{name}")]
    return names


@examples(150)
@given(data=st.data())
def test_prof_outputs_never_overwrite_an_input(aliases, data):
    """Issue 31, item 3, as a class: whatever else the command line says, an output of prof (-o,
    --plot, --parquet) that names an input (through any spelling or link) fails with a usage error
    and leaves every input as it was."""
    names = aliases
    inputs = sorted(names)
    kept = {p: Path(p).read_bytes() for p in inputs}
    victim = data.draw(st.sampled_from(inputs))
    flag = data.draw(st.sampled_from(["-o", "--output", "--parquet", "--plot"]))
    argv = [flag, data.draw(st.sampled_from(names[victim]))]
    argv += data.draw(st.lists(st.sampled_from(["--csv", "--json", "--summary", "--strict", "--modules", "-w=90"]),
                               max_size=3))
    argv += data.draw(st.sampled_from([[victim], ["--diff", victim, data.draw(st.sampled_from(inputs))],
                                       ["--diff", data.draw(st.sampled_from(inputs)), victim]]))
    res = run_tool("prof", argv)
    _check(res, "prof")
    assert res.status == 2, res.err
    assert {p: Path(p).read_bytes() for p in inputs} == kept


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Three ranks of a job and one export that -j cuts into windows (with MIN_WINDOW lowered)."""
    base = tmp_path_factory.mktemp("outputs")
    ranks = [rank_export(str(base / f"trace_{r}.sqlite"), r, 3, steps=1) for r in range(3)]
    return ranks, workload(str(base / "w.sqlite"), 3000)


def _through_pipe(argv: list[str]) -> tuple[int, bytes, str]:
    read, write = os.pipe()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(os.fdopen(read, "rb").read()))
    reader.start()
    with os.fdopen(write, "wb") as pipe:
        res = run_tool("parse", argv, stdout=pipe)
    reader.join(60)
    return res.status, got[0], res.err


@examples(30)  # each case forks two worker pools
@given(data=st.data())
def test_every_kind_of_output_gets_the_bytes_of_o(exports, tmp_path_factory, monkeypatch, data):
    """Ranks or windows, any number of workers: stdout as a file opened for appending, a pipe or
    a plain file holds exactly what -o writes (after what was in it before)."""
    ranks, windowed = exports
    monkeypatch.setattr(parallel, "MIN_WINDOW", 300)
    inputs = data.draw(st.one_of(st.lists(st.sampled_from(ranks), min_size=1, max_size=3, unique=True),
                                 st.just([windowed])))
    argv = [*inputs, "-q", "-j", str(data.draw(st.integers(1, 4)))] + data.draw(st.sampled_from([[], ["--rank"]]))
    kind = data.draw(st.sampled_from(["appended", "pipe", "file"]))
    tmp = tmp_path_factory.mktemp("o")
    assert run_tool("parse", [*argv, "-o", str(tmp / "o.dict")]).status == 0
    expected = (tmp / "o.dict").read_bytes()
    event(f"{kind}, {len(inputs)} export(s)")
    if kind == "pipe":
        status, got, err = _through_pipe(argv)
    else:
        before = b"before\n" if kind == "appended" else b""
        (tmp / "out").write_bytes(before)
        with open(tmp / "out", "ab" if kind == "appended" else "wb") as out:
            res = run_tool("parse", argv, stdout=out)
        status, got, err = res.status, (tmp / "out").read_bytes(), res.err
        assert got.startswith(before)
        got = got[len(before):]
    assert (status, err) == (0, "")
    assert got == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@examples(6)  # each case is a process parsing for seconds
@given(sig=st.sampled_from(["SIGKILL", "SIGTERM", "Ctrl-C"]), delay=st.floats(0, 2.5), to_file=st.booleans(),
       jobs=st.integers(2, 3))
def test_signals_to_a_parse_with_workers(exports, tmp_path_factory, sig, delay, to_file, jobs):
    """A signal at any moment of a parse with workers: no worker left running, stdout's reader
    sees its end, no part or .partial file left; the output is complete (the run ended first),
    or absent (-o), or whole records and the line that says they are incomplete; SIGTERM and
    Ctrl-C end in one line and status 130."""
    ranks, windowed = exports
    tmp = tmp_path_factory.mktemp("signal")
    (tmp / "tmp").mkdir()
    (tmp / "out").mkdir()
    inputs = [shutil.copy(windowed, tmp / f"w_{r}.sqlite") for r in range(2)]
    argv = [*map(str, inputs), "-j", str(jobs), "-q"] + (["-o", str(tmp / "out" / "job.dict")] if to_file else [])
    env = {**os.environ, "TMPDIR": str(tmp / "tmp"), "PYTHONPATH": str(ROOT)}
    number = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "Ctrl-C": signal.SIGINT}[sig]
    res = signal_parse(argv, number, delay, str(ROOT), env, group=sig == "Ctrl-C")
    event(f"{sig}: status {res.status}")
    assert res.running == [] and os.listdir(tmp / "tmp") == []
    if to_file:  # the file is there when complete (SIGKILL may come between its rename and the exit)
        made = os.listdir(tmp / "out")
        assert made == (["job.dict"] if res.status == 0 else made and ["job.dict"])
        if made:
            with sqlite3.connect(windowed) as db:
                kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
            assert len(json_lines((tmp / "out" / "job.dict").read_bytes())) == 2 * kernels
    if res.status == 0:
        return
    lines = res.out.splitlines(keepends=True)
    if sig == "SIGKILL":  # nothing can mark it: a record may be cut short
        if lines and not lines[-1].endswith(b"\n"):
            lines.pop()
    else:
        word = "terminated" if sig == "SIGTERM" else "interrupted"
        assert (res.status, res.err) == (130, f"pyprof.parse: {word}\n")
        if lines:
            last = lines.pop()
            assert last == f"pyprof.parse: {word} - the {len(lines)} records above are incomplete\n".encode()
    json_lines(b"".join(lines))
