"""Records in, one at a time: JSON Lines from pyprof.parse (docs/records.md), or the original
PyProf's Python-dict lines, read with ast.literal_eval (never eval: nothing read is executed)."""
from __future__ import annotations

import ast
import json
import sys
from typing import BinaryIO, Iterator

from ..errors import EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_INCOMPLETE, EXIT_NO_INPUT, PyprofError
from ..magic import SQLITE, compression
from ..record_format import VERSION
from .legacy import from_legacy
from .warnings_tally import Tally

_PARSE_FAILED = b"pyprof.parse: "  # the line parse writes after its records when it fails midway


def open_input(path: str) -> BinaryIO:
    """The record file at `path` (stdin for `-`), binary; PyprofError when it cannot be read."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as err:
        raise PyprofError(f"cannot read {path}: {err.strerror}", EXIT_NO_INPUT) from None


def records(stream: BinaryIO, tally: Tally, strict: bool = False) -> Iterator[tuple[int, dict]]:
    """Yield (line number, record) for each record of `stream`. A malformed line is reported with
    its number and skipped, or, with `strict`, raises PyprofError (EXIT_BAD_LINE)."""
    decode = json.JSONDecoder().decode  # on str: skips json.loads' per-call encoding detection
    for lineno, line in enumerate(stream, 1):
        if lineno == 1:
            if line.startswith(SQLITE):
                raise PyprofError("the input is an nsys SQLite export: run `python -m pyprof.parse` on it "
                                  "and give prof its output", EXIT_BAD_FORMAT)
            packed = compression(line)
            if packed:
                raise PyprofError(f"the input is {packed}-compressed: decompress it first (e.g. zcat net.dict.gz | "
                                  "python -m pyprof.prof)", EXIT_BAD_FORMAT)
        try:
            rec = decode(line.decode())
        except (ValueError, RecursionError) as err:  # RecursionError: absurdly deep nesting
            if not line.strip():
                continue
            if line.startswith(_PARSE_FAILED):
                said = line.decode("utf-8", "replace").strip()
                raise PyprofError(f"line {lineno}: the input is incomplete, parse failed while writing it "
                                  f"({said})", EXIT_INCOMPLETE) from None
            rec = _legacy(line)
            if not isinstance(rec, dict):
                reason = rec or ("not UTF-8 text" if isinstance(err, UnicodeDecodeError) else
                                 f"not a JSON record ({getattr(err, 'msg', err)})")
                bad_record(tally, strict, lineno, reason)
                continue
        if not isinstance(rec, dict):
            bad_record(tally, strict, lineno, "not a JSON object")
            continue
        v = rec.get("v")
        if type(v) is int and v > VERSION:
            # Read as far as this pyprof knows the format (versions add keys); said, never silent.
            tally.warn(f"records of format v{v}, newer than this pyprof reads (v{VERSION}): keys added since "
                         "are ignored; upgrade pyprof", f"v{v}")
        tally.records += 1
        yield lineno, rec


def _legacy(line: bytes) -> dict | str | None:
    """An original-PyProf line (a Python dict literal) converted to a record; else None, or the
    reason a dict literal cannot be used."""
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    try:
        return from_legacy(value)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError) as err:
        return f"original-PyProf fields not understood ({type(err).__name__}: {err})"


def bad_record(tally: Tally, strict: bool, lineno: int, reason: str) -> None:
    """Report a line that is not a usable record: skipped, or fatal under `strict`."""
    if strict:
        raise PyprofError(f"line {lineno}: {reason}", EXIT_BAD_LINE)
    tally.bad_line(lineno, reason)
