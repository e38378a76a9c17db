"""The fuzz suite's harness: parse and prof run in-process as their command lines do, and the
promises every run must keep (docs/reliability.md), checked in one place.

`run_tool` calls the tool's `run_cli` with stdin, stdout and stderr replaced, so thousands of
generated cases run in seconds; an exception that escapes `run_cli` is exactly what a user would
see as a traceback, so it is left to fail the test. What Python would print as "Exception ignored
in ..." (a generator or cursor finalized after its database was closed) fails the test too:
tests/conftest.py makes pytest's unraisable-exception warning an error for the fuzz tests (pytest
collects them at the end of each test; a gc.collect() per run would cost more than the run).
Every call is counted: the suite's figure of generated cases (printed at the end of the pytest
run, tests/conftest.py) is that count.

"Nothing from the input is executed" is checked two ways: inputs carry payloads that would create
a canary file if evaluated, and an audit hook looks at every code object executed during a run:
none may hold the canary's path, which every payload names (libraries legitimately run code
they generate themselves, so "no exec at all" would not be a usable test).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from typing import BinaryIO, NamedTuple, Sequence

from hypothesis import HealthCheck, settings

from pyprof.errors import run_cli
from pyprof.parse.__main__ import STATUSES as PARSE_TABLE
from pyprof.prof.__main__ import STATUSES as PROF_TABLE

CANARY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".fuzz-canary")
CANARY = os.path.join(CANARY_DIR, "executed")
# Code that creates the canary when run: eval()ed, exec()ed, or unpickled through os.system.
PAYLOAD_PY = f"__import__('pathlib').Path({CANARY!r}).touch()"
PAYLOADS = (
    PAYLOAD_PY,
    f"exec({PAYLOAD_PY!r})",
    f"__import__('os').system('touch {CANARY}')",
    "{'kShortName': " + PAYLOAD_PY + "}",
    "[x for x in ().__class__.__base__.__subclasses__() if x.__name__ == 'Popen'][0](['touch', " + repr(CANARY) + "])",
)

# Exit statuses each tool documents: the tables its -h prints (docs/parse.md, docs/prof.md say the same).
PARSE_STATUSES = frozenset(PARSE_TABLE)
PROF_STATUSES = frozenset(PROF_TABLE)

CASES = [0]          # CLI runs made by the fuzz suite: the figure reported at the end of the run
_executed: list = []  # code objects run from text, seen by the audit hook during a run
_watching = [False]


def _names_canary(code: object) -> bool:
    for c in getattr(code, "co_consts", ()):
        if (isinstance(c, str) and CANARY_DIR in c) or (hasattr(c, "co_consts") and _names_canary(c)):
            return True
    return False


def _audit(event: str, args: tuple) -> None:
    if _watching[0] and event == "exec" and _names_canary(args[0]):
        _executed.append(getattr(args[0], "co_filename", "?"))


sys.addaudithook(_audit)


class Outcome(NamedTuple):
    """What one run left behind: its exit status, stdout as bytes, stderr as text."""

    status: int
    out: bytes
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def _main(tool: str):
    if tool == "parse":
        from pyprof.parse.__main__ import main
    else:
        from pyprof.prof.__main__ import main
    return main


def run_tool(tool: str, argv: Sequence[str], stdin: bytes = b"", stdout: BinaryIO | None = None) -> Outcome:
    """Run `python -m pyprof.<tool> ARGV` in this process: stdin from `stdin`, stdout kept as
    bytes (UTF-8, strict, as a UTF-8 terminal or file would take it), stderr kept as text.
    With `stdout` (a file opened for appending, a pipe's end), stdout is written there instead,
    and Outcome.out is empty."""
    CASES[0] += 1
    out_buf, err_buf = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(stdout or out_buf, encoding="utf-8", errors="strict", newline="\n")
    err = io.TextIOWrapper(err_buf, encoding="utf-8", errors="backslashreplace", newline="\n")
    inp = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = inp, out, err
    _executed.clear()
    _watching[0] = True
    status = None
    try:
        run_cli(f"pyprof.{tool}", _main(tool), list(argv))
    except SystemExit as done:
        status = done.code
    finally:
        _watching[0] = False
        sys.stdin, sys.stdout, sys.stderr = saved
    out.flush()
    if stdout is not None:
        out.detach()  # the caller's file stays open
    err.flush()
    assert not _executed, f"code from the input was executed: {_executed}"
    assert not os.path.exists(CANARY), "a payload from the input was executed"
    assert isinstance(status, int), f"exit status {status!r}"
    return Outcome(status, out_buf.getvalue(), err_buf.getvalue().decode("utf-8"))


def check_failure(res: Outcome, tool: str) -> None:
    """A failed run: a documented status and one line on stderr, `pyprof.TOOL: error: ...` (for
    prof, after the warnings about what it read before the error, if any)."""
    statuses = PARSE_STATUSES if tool == "parse" else PROF_STATUSES
    assert res.status in statuses, (res.status, res.err)
    assert res.status != 0
    lines = res.err_lines
    assert lines and lines[-1].startswith(f"pyprof.{tool}: error: "), res.err
    if tool == "parse":
        assert len(lines) == 1, res.err
    assert not any(f"pyprof.{tool}: error: " in line or "Traceback" in line for line in lines[:-1]), res.err


def _strict(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def json_lines(data: bytes) -> list[dict]:
    """Every line of `data` decoded as a strict JSON object (no NaN/Infinity); AssertionError
    naming the first line that is not one."""
    recs = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        try:
            rec = json.loads(line, parse_constant=_strict)
        except ValueError as err:
            raise AssertionError(f"line {n} is not JSON ({err}): {line[:200]!r}") from None
        assert isinstance(rec, dict), f"line {n} is not a JSON object"
        recs.append(rec)
    return recs


def check_parse_output(res: Outcome, output: str | None = None) -> list[dict]:
    """The promises of one parse run; returns the records it wrote completely (none on failure).

    Success: every line of the output a JSON object, stderr empty (runs use -q). Failure: one
    line on stderr; on stdout nothing or whole records and a last line that is not JSON; with
    -o, no file at all.
    """
    if output is not None:
        directory = os.path.dirname(output) or "."
        leftovers = [n for n in os.listdir(directory) if n.endswith(".partial")] if os.path.isdir(directory) else []
        assert not leftovers, f"temporary files left behind: {leftovers}"
    if res.status == 0:
        assert res.err == "", res.err
        if output is None:
            return json_lines(res.out)
        assert res.out == b""
        with open(output, "rb") as f:
            return json_lines(f.read())
    check_failure(res, "parse")
    if output is not None:
        assert not os.path.lexists(output), "a failed run left an output file"
        assert res.out == b""
    elif res.out:
        lines = res.out.decode("utf-8").splitlines()
        assert re.fullmatch(r"pyprof\.parse: .* - the (1 record above is|\d+ records above are) incomplete",
                            lines[-1]), lines[-1]
        json_lines("\n".join(lines[:-1]).encode())
    return []


# By default every run draws the same cases (derandomized: a CI failure reproduces anywhere);
# PYPROF_FUZZ=N draws N times as many new random cases, for a deeper search.
_DEEP = int(os.environ.get("PYPROF_FUZZ", "0") or 0)
settings.register_profile("pyprof-fuzz", deadline=None, database=None, derandomize=not _DEEP, print_blob=True,
                          suppress_health_check=list(HealthCheck))
settings.load_profile("pyprof-fuzz")


def examples(n: int) -> settings:
    """Settings for a property run over `n` generated cases (times PYPROF_FUZZ when set)."""
    return settings(max_examples=n * max(1, _DEEP))


def cached_bytes() -> int:
    """What the marker caches of pyprof.init() (pyprof.nvtx.marker.budget's) really hold, in
    bytes, counted here independently of their own accounting: each key (bytes from the C hit
    path, a tuple of parts from the Python one), each text, and each tuple kept for its id with
    its items. Objects that live anyway (types, dtypes, the user's code objects) are not counted."""
    from pyprof.nvtx.marker import budget

    def size(v: object, depth: int = 0) -> int:
        if isinstance(v, (tuple, list)) and depth < 3:
            return sys.getsizeof(v) + sum(size(e, depth + 1) for e in v)
        return sys.getsizeof(v) if isinstance(v, (str, bytes, int, float, complex)) else 0

    return sum(size(k) + size(v) for cache in list(budget.caches.values()) for k, v in list(cache.items()))


class Signalled(NamedTuple):
    """What a parse process signalled mid-way left: its status, stdout (read to its end: EOF
    came), stderr, and its workers still running after `grace` seconds."""

    status: int
    out: bytes
    err: str
    running: list[int]


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone, only not reaped
    except OSError:
        return False


def signal_parse(argv: Sequence[str], sig: int, delay: float, cwd: str, env: dict | None = None,
                 group: bool = False, grace: float = 5.0) -> Signalled:
    """Run `python -m pyprof.parse ARGV` (Linux), wait until its workers have started and then
    `delay` seconds, send `sig` to it (to its whole process group with `group`, as Ctrl-C in a
    terminal does), and read its stdout to the end."""
    import signal
    import subprocess
    import time
    proc = subprocess.Popen([sys.executable, "-m", "pyprof.parse", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=cwd, env=env, start_new_session=True)
    children = f"/proc/{proc.pid}/task/{proc.pid}/children"  # the workers: forked by the main thread
    workers: list[int] = []
    until = time.time() + 120
    while not workers and proc.poll() is None and time.time() < until:
        time.sleep(0.02)
        with open(children) as f:
            workers = [int(p) for p in f.read().split()]
    time.sleep(delay)
    with contextlib.suppress(OSError), open(children) as f:
        workers = sorted(set(workers) | {int(p) for p in f.read().split()})
    (os.killpg if group else os.kill)(proc.pid, sig)
    try:
        out, err = proc.communicate(timeout=60)  # EOF: no worker holds stdout open
    except subprocess.TimeoutExpired:  # a worker holds it: end them all, and say so
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += b"\n(stdout still open 60 s after the signal)"
    until = time.time() + grace
    while any(_running(w) for w in workers) and time.time() < until:
        time.sleep(0.05)
    running = [w for w in workers if _running(w)]
    for w in running:  # stopped here, not left running into the next test
        os.kill(w, signal.SIGKILL)
    return Signalled(proc.returncode, out, err.decode("utf-8", "replace"), running)
