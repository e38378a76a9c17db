"""The progress line shared by parse and prof: only for a person at a terminal, never in pipes."""
import io
import sys

import pytest

from pyprof import progress as progress_mod
from pyprof.progress import Progress, on_terminal


class Tty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("err_tty, out_tty, at_end, on", [
    (False, False, False, False),   # both redirected: nobody watches
    (True, True, False, False),     # rows stream to the same terminal: the line would break them
    (True, False, False, True),     # rows go to a file or pipe, a person watches stderr
    (True, True, True, True),       # --summary/--diff print only at the end
])
def test_on_only_where_a_person_watches_and_rows_cannot_be_broken(monkeypatch, err_tty, out_tty, at_end, on):
    monkeypatch.setattr(sys, "stderr", Tty(err_tty))
    monkeypatch.setattr(sys, "stdout", Tty(out_tty))
    assert on_terminal("pyprof.prof", results_at_end=at_end).enabled is on


def test_line_overwrites_itself_at_most_once_a_second_and_is_cleared(monkeypatch):
    err = Tty(True)
    monkeypatch.setattr(sys, "stderr", err)
    clock = [100.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: clock[0])
    p = Progress("pyprof.parse", 200, True)
    p.update(50)                 # within the first second: nothing
    clock[0] = 101.5
    p.update(100)
    clock[0] = 101.9
    p.update(150)                # less than a second after the last line: nothing
    p.finish()
    assert err.getvalue() == "\rpyprof.parse: 100 records (50%)\r\x1b[K"


def test_disabled_line_writes_nothing(monkeypatch):
    err = Tty(True)
    monkeypatch.setattr(sys, "stderr", err)
    clock = [100.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: clock[0])
    p = Progress("pyprof.parse", 200, False)
    clock[0] = 102.0
    p.update(100)
    p.finish()
    assert err.getvalue() == ""
