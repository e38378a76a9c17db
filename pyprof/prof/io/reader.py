"""Records in, one at a time: JSON Lines from pyprof.parse (docs/records.md), or the original
PyProf's Python-dict lines, read with ast.literal_eval (never eval: nothing read is executed);
an nsys export given instead is parsed on the fly with pyprof.parse."""
from __future__ import annotations

import ast
import contextlib
import json
import os
from typing import BinaryIO, Iterator

from ...errors import EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_INCOMPLETE, PyprofError, open_input
from ...formats import V, VERSION
from ...magic import PARQUET, SQLITE, compression, foreign_text
from ...store import read as store
from .legacy import from_legacy
from ..warnings_tally import Tally

# Optional (pip install 'pyprof-nvtx[fast]'): prof takes 0.72x the CPU time with it
# (benchmarks/results/prof_orjson_100k_cpu.txt). Records are the same but for integers beyond
# 64 bits, which orjson reads as floats (parse never writes one).
try:
    from orjson import loads as _fast_loads
except ImportError:
    _fast_loads = None

_UNDECODED = object()
# The longest original-PyProf line read. ast.literal_eval takes about 3 s and 480 MB per MB of
# text (a 10 MB line: 31 s, 4.8 GB); the old tool's lines, marker and stack trace included, are
# a few KB.
MAX_LEGACY_LINE = 1 << 16
_PARSE_FAILED = b"pyprof.parse: "  # the line parse writes after its records when it fails midway


def numbered(path: str | os.PathLike, tally: Tally, strict: bool = False,
             memcpy: bool = False, fresh: bool = False) -> Iterator[tuple[int, dict]]:
    """(number, record) pairs of `path` (`-`: stdin), counted in `tally`: line numbers of a
    record file, record numbers of an nsys export (a `.sqlite` or `.nsys-rep` name, or a file
    that is SQLite; parsed now, as `pyprof.parse [--memcpy]` would; `strict` is for record lines;
    a Parquet record store's records share equal nested objects unless `fresh`: store.read.records)."""
    path = os.fspath(path)
    if path != "-" and path.endswith((".sqlite", ".nsys-rep")):
        yield from _parsed(path, tally, memcpy)
        return
    if store.is_store(path):  # parse -o X.parquet's record store: a folder, or one of its files
        for n, rec in enumerate(store.records(path, shared=not fresh), 1):
            newer(rec, tally)
            tally.records += 1
            yield n, rec
        return
    with open_input(path) as stream:
        # Peeked, not read: a FIFO of records must lose no byte to the look.
        if path != "-" and stream.peek(len(SQLITE))[:len(SQLITE)] == SQLITE:
            yield from _parsed(path, tally, memcpy)
            return
        yield from records(stream, tally, strict, "stdin" if path == "-" else path)


def _parsed(path: str, tally: Tally, memcpy: bool) -> Iterator[tuple[int, dict]]:
    from ...parse import Export, Stats
    from ...parse import records as parse_records
    from ...parse.export import check_export
    from ...parse.nsysrep import sqlite_path

    with sqlite_path(path, True) as db, Export(db) as exp:
        check_export(exp, memcpy)
        with contextlib.closing(parse_records(exp, Stats(), memcpy)) as recs:
            for n, rec in enumerate(recs, 1):
                tally.records += 1
                yield n, rec


def records(stream: BinaryIO, tally: Tally, strict: bool = False, name: str = "stdin") -> Iterator[tuple[int, dict]]:
    """Yield (line number, record) for each record of `stream` (`name` in messages). A malformed
    line is counted in `tally` and skipped, or, with `strict`, raises PyprofError (EXIT_BAD_LINE).
    A stream with lines but not one record (a text file, another tool's output) is not pyprof's:
    PyprofError (EXIT_BAD_FORMAT) at its end, rather than an empty table."""
    decode = json.JSONDecoder().decode  # on str: skips json.loads' per-call encoding detection
    head = b""  # the first bytes, to say what a file of no records is
    first_bad = None
    kept = 0
    for lineno, line in enumerate(stream, 1):
        if lineno == 1:
            if line.startswith(SQLITE):
                raise PyprofError("the input is an nsys SQLite export: give its path (prof parses it) or run "
                                  "`python -m pyprof.parse` on it and give prof its output", EXIT_BAD_FORMAT)
            if line.startswith(PARQUET):
                raise PyprofError("the input is Parquet: give the record store's path (a folder written by "
                                  "`python -m pyprof.parse -o X.parquet`), not stdin", EXIT_BAD_FORMAT)
            packed = compression(line)
            if packed:
                raise PyprofError(f"{name} is {packed}-compressed: decompress it first ({_unpack_hint(packed, name)})",
                                  EXIT_BAD_FORMAT)
            if line.lstrip()[:1] == b"{" and b'"traceEvents"' in line:  # a whole trace on one line
                raise PyprofError(_no_records(name, "line 1: not a record", foreign_text(line[:_HEAD])),
                                  EXIT_BAD_FORMAT)
        if len(head) < _HEAD:
            head += line[:_HEAD - len(head)]
        rec, reason = _UNDECODED, None
        if _fast_loads is not None:
            try:
                rec = _fast_loads(line)
            except ValueError:
                pass  # json decides below, with its message (and reads NaN, lone surrogates, blank lines)
        if rec is _UNDECODED:
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
        if not isinstance(rec, dict):
            reason = reason or "not a JSON object"
            first_bad = first_bad or f"line {lineno}: {reason}"
            bad_record(tally, strict, lineno, reason)
            continue
        newer(rec, tally)
        tally.records += 1
        kept += 1
        yield lineno, rec
    if first_bad is not None and not kept:
        raise PyprofError(_no_records(name, first_bad, foreign_text(head)), EXIT_BAD_FORMAT)


def newer(rec: dict, tally: Tally) -> None:
    """Warn (once per version, in `tally`) for a record of a format newer than this pyprof's."""
    v = rec.get(V)
    if type(v) is int and v > VERSION:
        # Read as far as this pyprof knows the format (versions add keys); said, never silent.
        tally.warn(f"records of format v{v}, newer than this pyprof reads (v{VERSION}): keys added since "
                   "are ignored; upgrade pyprof", f"v{v}")


_HEAD = 4096  # bytes of the input kept to say what it is


def _no_records(name: str, first_bad: str, looks: str | None) -> str:
    """The refusal of an input without records: the first line that is none, and what the input
    looks like where another tool's file is recognised (magic.foreign_text)."""
    seen = f"; it looks like {looks}, which pyprof does not read: capture with nsys (python -m pyprof.capture)" \
        if looks else ""
    return (f"{name} holds no pyprof records ({first_bad}{seen}); prof reads what `python -m pyprof.parse` writes, "
            "or an nsys export")


def _unpack_hint(packed: str, name: str) -> str:
    """How to decompress a `packed` input: its tool, to a file (an export is read from a path only)."""
    tool = {"gzip": "gunzip -k", "xz": "unxz -k", "zstd": "unzstd", "bzip2": "bunzip2 -k", "zip": "unzip"}[packed]
    return f"{tool} {'FILE' if name == 'stdin' else name}, then give prof what it wrote"


def _legacy(line: bytes) -> dict | str | None:
    """An original-PyProf line (a Python dict literal) converted to a record; else None, or the
    reason a dict literal cannot be used."""
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        return None
    if len(text) > MAX_LEGACY_LINE:
        return (f"not a JSON record, and at {len(text):,} characters too long for an original-PyProf line "
                f"(at most {MAX_LEGACY_LINE:,})")
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
