"""`python -m pyprof.parse` as users run it: output, summary, exit codes and bad input."""
from __future__ import annotations

import json
import os
import pty
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsys_synth import SynthExport, marker, torch_text, workload
from pyprof.parse.parallel import _work as _WORK

ROOT = Path(__file__).resolve().parents[2]


def run_parse(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyprof.parse", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=300)


def small_export(path: Path) -> Path:
    syn = SynthExport(str(path))
    t = syn.thread(100, 100)
    dom = syn.domain(t, "pyprof")
    syn.push(t, 1000, 9000, marker("op", mod="torch", op="matmul", args=[], site="x.py:3"), domain=dom, registered=True)
    syn.push(t, 1100, 8000, torch_text("aten::matmul", seq=1, op_id=1))
    syn.launch_kernel(t, 2000, "gemm")
    syn.push(t, 10000, 12000, '{"kind": ', domain=dom)
    syn.launch_kernel(t, 11000, "orphan_op")
    syn.kernel(100, 777, 50000, 51000, "no_launch")
    syn.close()
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(workload(str(tmp_path_factory.mktemp("big") / "w.sqlite"), 20000))


def test_records_go_to_stdout_and_the_summary_to_stderr(tmp_path: Path) -> None:
    res = run_parse(small_export(tmp_path / "s.sqlite"))
    assert res.returncode == 0
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["kShortName"], r["op"]) for r in recs] == [("gemm", "matmul"), ("orphan_op", None), ("no_launch", None)]
    assert res.stderr == ("pyprof.parse: 3 kernels written; 33.3% with an op attributed; 1 without a launch call; "
                          "0 ranges not understood; 1 malformed pyprof marker\n")


def test_quiet_and_output_file(tmp_path: Path) -> None:
    src = small_export(tmp_path / "s.sqlite")
    out = tmp_path / "out" / "net.dict"
    out.parent.mkdir()
    res = run_parse(src, "-o", out, "--quiet")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert len(out.read_text().splitlines()) == 3
    assert os.listdir(out.parent) == ["net.dict"]
    assert stat.S_IMODE(out.stat().st_mode) & 0o044 == 0o044  # readable like any file the user creates


def test_parse_never_imports_torch(tmp_path: Path) -> None:
    # A torch that leaves a trace when imported and then fails, first on the path.
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    flag = tmp_path / "torch-was-imported"
    (fake / "__init__.py").write_text(f"open({str(flag)!r}, 'w').close()\nraise ImportError('no torch here')\n")
    env = dict(os.environ, PYTHONPATH=f"{fake.parent}{os.pathsep}{ROOT}")
    res = run_parse(small_export(tmp_path / "s.sqlite"), env=env)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 3
    assert not flag.exists(), "pyprof.parse imported torch"


def test_help_is_the_manual() -> None:
    res = run_parse("--help")
    assert res.returncode == 0
    assert "exit status:" in res.stdout and "--memcpy" in res.stdout and "docs/records.md" in res.stdout
    bad = run_parse("--no-such-option", "x.sqlite")
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr


def expect_error(res: subprocess.CompletedProcess, status: int, message: str) -> None:
    assert res.returncode == status, res.stderr
    assert res.stderr == f"pyprof.parse: error: {message}\n"
    assert "Traceback" not in res.stderr


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.sqlite"
    expect_error(run_parse(path), 3, f"{path}: no such file")


def test_directory_without_exports(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    expect_error(run_parse(tmp_path), 3, f"{tmp_path}: a folder with no .sqlite or .nsys-rep export in it")


def test_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "net.dict"
    path.write_text('{"v":1,"kind":"kernel"}\n' * 100)
    expect_error(run_parse(path), 4, f"{path}: not a SQLite database (expected an Nsight Systems SQLite export)")


def test_sqlite_that_is_not_an_export(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    db.commit()
    db.close()
    expect_error(run_parse(path), 4, f"{path}: not an Nsight Systems export (none of its tables are nsys tables)")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    expect_error(run_parse(empty), 4, f"{empty}: not an Nsight Systems export (the SQLite database is empty)")


def test_nvprof_database(tmp_path: Path) -> None:
    path = tmp_path / "net.nvvp"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringTable (_id_ INTEGER PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (_id_ INTEGER PRIMARY KEY, start INT, end INT, name INT)")
    db.commit()
    db.close()
    expect_error(run_parse(path), 4, f"{path}: this is an nvprof database; pyprof.parse reads Nsight Systems exports "
                                     "(nsys profile --export sqlite)")


def test_export_without_cuda_trace(tmp_path: Path) -> None:
    # What nsys 2022.4 wrote on a CUDA 13 driver: NVTX and one runtime call, no kernel table.
    syn = SynthExport(str(tmp_path / "old.sqlite"), version="2022.4.2.1")
    t = syn.thread(100, 100)
    syn.push(t, 1000, 2000, "layer:x")
    syn.launch(t, 1500, api="cudaGetDeviceCount_v2000")
    path = syn.close()
    expect_error(run_parse(path), 5, f"{path}: the export has no CUDA kernel table (nsys 2022.4.2.1): the capture had "
                                     "no CUDA trace (nsys profile without '-t cuda'), or this nsys is too old for "
                                     "the CUDA driver")


def test_empty_capture_range(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "empty.sqlite"))
    syn.thread(100, 100)
    syn.empty_table("CUPTI_ACTIVITY_KIND_KERNEL")
    path = syn.close()
    expect_error(run_parse(path), 5, f"{path}: the capture range is empty: the export has no kernels (nsys 2025.3.1.90) "
                                     "(did the program reach the profiled region, e.g. torch.cuda.profiler.start()?)")


@pytest.mark.slow
def test_truncated_export(tmp_path: Path, big: Path) -> None:
    data = big.read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 2])
    res = run_parse(cut)
    assert res.returncode == 6 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"pyprof.parse: error: {cut}: the export is truncated or corrupted (sqlite: ")
    assert len(res.stderr.splitlines()) == 1
    # Whatever reached stdout must not pass as complete: nothing, or records and a non-JSON last line.
    if res.stdout:
        assert "incomplete" in res.stdout.splitlines()[-1]
    out = tmp_path / "o" / "net.dict"
    out.parent.mkdir()
    res = run_parse(cut, "-o", out)
    assert res.returncode == 6 and os.listdir(out.parent) == []


def test_interrupted_output_ends_with_a_line_that_is_not_a_record(big: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "pyprof.parse", str(big)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert json.loads(first)["kind"] == "kernel"
    time.sleep(0.2)  # the pipe is full: parse is blocked mid-stream
    proc.send_signal(signal.SIGINT)
    # Read on through the same buffered file: communicate() would read the pipe underneath it
    # and skip what readline() had buffered.
    rest = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout=60)
    lines = rest.splitlines()
    assert proc.returncode == 130 and err == "pyprof.parse: interrupted\n"
    assert lines[-1] == f"pyprof.parse: interrupted - the {len(lines)} records above are incomplete"
    for line in lines[:-1]:
        json.loads(line)


def test_a_failure_after_one_record_says_so_in_the_singular(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import pyprof.parse as parse
    from pyprof.errors import PyprofError

    def one_then_fail(exp, stats, memcpy):
        stats.records += 1
        yield "{}"
        raise PyprofError("database disk image is malformed", 6)

    monkeypatch.setattr(parse, "lines", one_then_fail)
    with pytest.raises(PyprofError):
        parse.parse(str(small_export(tmp_path / "s.sqlite")), quiet=True)
    assert capsys.readouterr().out.splitlines()[-1] == (
        "pyprof.parse: error: database disk image is malformed - the 1 record above is incomplete")


def _second_fails(part):
    """parallel._work with a bug in the second part's worker (at module level: it is pickled)."""
    if part.index == 1:
        time.sleep(0.5)  # the first export is written by then
        raise TypeError("a bug in a worker")
    return _WORK(part)


def test_a_bug_after_records_still_ends_stdout_with_the_incomplete_line(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever stops parse after records went out, one process or workers, a last line that is
    not JSON says so (prof stops there with status 9): here a bug of ours, not a PyprofError."""
    import pyprof.parse as parse
    from pyprof.parse import parallel

    def two_then_fail(exp, stats, memcpy):
        stats.records += 2
        yield "{}"
        yield "{}"
        raise TypeError("a bug")

    monkeypatch.setattr(parse, "lines", two_then_fail)
    with pytest.raises(TypeError):
        parse.parse(str(small_export(tmp_path / "s.sqlite")), quiet=True)
    assert capsys.readouterr().out.splitlines()[-1] == (
        "pyprof.parse: error: TypeError: a bug - the 2 records above are incomplete")

    monkeypatch.setattr(parallel, "_work", _second_fails)
    small_export(tmp_path / "t.sqlite")
    groups = parallel.plan([str(tmp_path / "s.sqlite"), str(tmp_path / "t.sqlite")], 2, False, True)
    with pytest.raises(TypeError):
        parallel.run(groups, None, 2)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and [json.loads(x)["rank"] for x in out[:3]] == [0, 0, 0]
    assert out[3] == "pyprof.parse: error: TypeError: a bug in a worker - the 3 records above are incomplete"


@pytest.mark.parametrize("how", [["-m", "pyprof.parse"], ["-c", "from pyprof.parse.__main__ import cli; cli()"]])
def test_ctrl_c_while_the_modules_load_is_one_line(how: list[str], tmp_path: Path) -> None:
    """Ctrl-C in the half second the modules load (`python -m pyprof.parse`, and the console
    script's import of __main__): a SQLAlchemy that waits stands in for a slow one. It waits in
    short sleeps: a Ctrl-C that lands after the touch but before one long sleep begins would be
    seen only when that sleep ends (Python checks for signals between calls, not before a sleep)."""
    fake = tmp_path / "slow" / "sqlalchemy"
    fake.mkdir(parents=True)
    loading = tmp_path / "loading"
    (fake / "__init__.py").write_text(f"import pathlib, time\npathlib.Path({str(loading)!r}).touch()\n"
                                      "for _ in range(1200):\n    time.sleep(0.05)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'slow'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen([sys.executable, *how, "x.sqlite"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    until = time.time() + 60
    while not loading.exists() and time.time() < until:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err, out) == (130, b"pyprof.parse: interrupted\n", b"")


def test_reader_going_away_is_not_an_error(big: Path) -> None:
    cmd = f"{sys.executable} -m pyprof.parse {big} | head -n 1"
    res = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "" and len(res.stdout.splitlines()) == 1


def fake_nsys(bindir: Path, body: str) -> dict[str, str]:
    bindir.mkdir()
    script = bindir / "nsys"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return {k: v for k, v in os.environ.items() if k != "NSYS"} | {"PATH": f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin"}


def test_nsys_rep_is_exported_first(tmp_path: Path) -> None:
    export = small_export(tmp_path / "real.sqlite")
    rep = tmp_path / "net.nsys-rep"
    rep.write_bytes(b"not read by us")
    # Like nsys: `nsys export --type sqlite --output OUT ... REP` writes OUT (and chatters on stdout);
    # asked for the NVTX payloads' bytes (NCCL's message sizes), replacing OUT.
    env = fake_nsys(tmp_path / "bin", f'echo "Processing events..."\n[ "$1 $2 $3" = "export --type sqlite" ] || exit 9\n'
                                      f'[ "$6 $7 $8" = "--include-blobs=true --force-overwrite=true {rep}" ] || exit 9\n'
                                      f'cp {export} "$5"\n')
    res = run_parse(rep, env=env)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 3 and "Processing" not in res.stdout
    assert res.stderr.startswith(f"pyprof.parse: exporting {rep} to SQLite with {tmp_path / 'bin' / 'nsys'} export --type sqlite\n")


@pytest.mark.slow
def test_nsys_rep_export_is_kept_and_reused_while_the_report_is_unchanged(tmp_path: Path) -> None:
    export = small_export(tmp_path / "real.sqlite")
    rep = tmp_path / "net.nsys-rep"
    rep.write_bytes(b"version 1")
    calls = tmp_path / "calls"
    env = fake_nsys(tmp_path / "bin", f'echo x >> {calls}\ncp {export} "$5"\n')
    runs = [run_parse(rep, env=env) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0] and runs[0].stdout == runs[1].stdout
    assert calls.read_text() == "x\n"  # nsys ran once
    cached = tmp_path / f".net.nsys-rep.{rep.stat().st_size}-{rep.stat().st_mtime_ns}.sqlite"
    assert runs[1].stderr.startswith(f"pyprof.parse: reading {rep} from its SQLite export made earlier ({cached})\n")
    (tmp_path / "bin" / "nsys").write_text(f'#!/bin/sh\necho x >> {calls}\nprintf garbage > "$5"\n')
    rep.write_bytes(b"version 2, longer")  # the report written again: exported again, the old export gone
    assert run_parse(rep, "-q", env=env).returncode == 4  # a botched export is not kept ...
    assert calls.read_text() == "x\nx\n" and cached.exists()
    (tmp_path / "bin" / "nsys").write_text(f'#!/bin/sh\necho x >> {calls}\ncp {export} "$5"\n')
    assert run_parse(rep, "-q", env=env).returncode == 0 and calls.read_text() == "x\nx\nx\n"  # ... made again
    new = f".net.nsys-rep.{rep.stat().st_size}-{rep.stat().st_mtime_ns}.sqlite"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([new, "bin", "calls", "net.nsys-rep", "real.sqlite"])


@pytest.mark.slow
def test_nsys_rep_export_shows_its_seconds_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import pyprof.parse as parse

    export = small_export(tmp_path / "real.sqlite")
    rep = tmp_path / "net.nsys-rep"
    rep.write_bytes(b"x")
    for key, value in fake_nsys(tmp_path / "bin", f'sleep 2.5\ncp {export} "$5"\n').items():
        monkeypatch.setenv(key, value)
    parse.parse(str(rep), str(tmp_path / "out.dict"), progress=True)
    err = capsys.readouterr().err
    assert f"\rpyprof.parse: 1 s: nsys exporting {rep}" in err and "\r\033[K" in err


def test_nsys_rep_without_nsys(tmp_path: Path) -> None:
    rep = tmp_path / "net.nsys-rep"
    rep.write_bytes(b"x")
    env = {k: v for k, v in os.environ.items() if k != "NSYS"} | {"PATH": str(tmp_path)}
    expect_error(run_parse(rep, env=env), 8, f"{rep}: reading an .nsys-rep report needs Nsight Systems' 'nsys': "
                                             "put it on PATH or set NSYS=/path/to/nsys")


def test_nsys_rep_export_failure(tmp_path: Path) -> None:
    rep = tmp_path / "net.nsys-rep"
    rep.write_bytes(b"x")
    env = fake_nsys(tmp_path / "bin", 'echo "Importer error: unsupported report version" >&2\nexit 1\n')
    res = run_parse(rep, "-q", env=env)
    expect_error(res, 8, f"{rep}: nsys export failed (exit status 1): Importer error: unsupported report version")


def test_path_with_uri_characters(tmp_path: Path) -> None:
    d = tmp_path / "a dir?x=1#y%20"
    d.mkdir()
    res = run_parse(small_export(d / "net?.sqlite"), "-q")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 3


@pytest.mark.slow
def test_progress_only_when_stderr_is_a_terminal(tmp_path: Path) -> None:
    src = small_export(tmp_path / "s.sqlite")
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pyprof.parse", str(src)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=follower)
    os.close(follower)
    out, _ = proc.communicate(timeout=60)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.returncode == 0 and len(out.splitlines()) == 3
    # the progress line is cleared before the summary; nothing of it reaches a pipe
    assert seen.startswith(b"\r\x1b[K") and b"3 kernels written" in seen
    piped = run_parse(src)
    assert "\r" not in piped.stderr and "\x1b" not in piped.stderr
