"""Open an Nsight Systems SQLite export read-only and learn which of its tables and columns exist.

Everything that can go wrong with the file itself (missing, not SQLite, not an export, truncated)
is turned into a PyprofError here, so the rest of parse never sees a raw database exception.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import urllib.parse
from typing import Any, Callable, Iterator, Sequence, TypeVar

import sqlalchemy
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from pyprof.errors import EXIT_BAD_FORMAT, EXIT_CORRUPT, EXIT_NO_INPUT, EXIT_NO_KERNELS, PyprofError
from pyprof.magic import file_compression

T = TypeVar("T")

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
STRINGS = "StringIds"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GPU = "TARGET_INFO_GPU"
CUDA_DEVICE = "TARGET_INFO_CUDA_DEVICE"
SESSION_START = "TARGET_INFO_SESSION_START_TIME"
MEMCPY_ENUM = "ENUM_CUDA_MEMCPY_OPER"
GRAPH_NODES = "CUDA_GRAPH_NODE_EVENTS"
META = "META_DATA_EXPORT"


def _sqlite_uri(path: str) -> str:
    # A SQLite URI must percent-encode '?', '#' and '%' in the path, or a file named
    # 'run?1.sqlite' would be read as 'run' with a query string.
    return "file:" + urllib.parse.quote(os.path.abspath(path), safe="/") + "?mode=ro"


class NotUtf8(PyprofError):
    """Text in the export that is not UTF-8: parse reads the export again with Export(lenient=True).
    `written`: records parse had already written to stdout."""

    written = 0


def database_error(err: BaseException, path: str) -> PyprofError:
    """Translate an SQLite error met while reading `path` into the user-facing fatal error.

    Misuse of the API (sqlite3.ProgrammingError, InterfaceError: a bug of ours, not a bad file)
    is raised again as it is.
    """
    orig = getattr(err, "orig", None) or err
    if isinstance(orig, (sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        raise err
    if isinstance(orig, UnicodeDecodeError):  # SQLite's message quotes bytes of the file that are not UTF-8
        said = orig.object.decode("utf-8", "backslashreplace") if isinstance(orig.object, bytes) else str(orig)
        return PyprofError(f"{path}: the export is truncated or corrupted (sqlite: {said})", EXIT_CORRUPT)
    msg = (str(orig).splitlines() or ["unknown error"])[0]
    if "file is not a database" in msg:
        packed = file_compression(path)
        if packed:
            return PyprofError(f"{path}: {packed}-compressed, not a SQLite database: decompress it first", EXIT_BAD_FORMAT)
        return PyprofError(f"{path}: not a SQLite database (expected an Nsight Systems SQLite export)", EXIT_BAD_FORMAT)
    if msg.startswith("Could not decode to UTF-8"):
        return NotUtf8(f"{path}: the export holds text that is not UTF-8 ({msg[:120]})", EXIT_CORRUPT)
    if "database is locked" in msg:
        return PyprofError(f"{path}: the export is locked by another program (sqlite: {msg}); retry when it has "
                           "finished writing", EXIT_NO_INPUT)
    if "attempt to write a readonly database" in msg:  # only opened read-only: SQLite wanted to create its -shm
        return PyprofError(f"{path}: cannot be opened read-only: a WAL-mode database needs a -shm file beside it, "
                           "which is missing and cannot be created there (a read-only folder); copy the export to a "
                           "writable folder, or turn WAL off where it can be written (sqlite3 FILE "
                           "'PRAGMA journal_mode=DELETE')", EXIT_NO_INPUT)
    if "unable to open database file" in msg:
        return PyprofError(f"{path}: cannot open the export (sqlite: {msg})", EXIT_NO_INPUT)
    return PyprofError(f"{path}: the export is truncated or corrupted (sqlite: {msg})", EXIT_CORRUPT)


# Storage classes nsys writes in the columns parse computes with (times, ids, names). A value of
# another class (text in a time, a real in an id) surfaces as a TypeError or ValueError in the
# sweep; only then are these checked, to name the column: checking every row up front would
# cost a tenth of parse's time, for files nsys never writes.
_INT, _INT_NULL, _TEXT_NULL = ("integer",), ("integer", "null"), ("text", "null")
STORAGE: dict[str, dict[str, tuple[str, ...]]] = {
    KERNEL: {"start": _INT, "end": _INT, "globalPid": _INT_NULL, "shortName": ("integer", "text", "null"),
             "demangledName": ("integer", "text", "null")},
    MEMCPY: {"start": _INT, "end": _INT, "globalPid": _INT_NULL},
    MEMSET: {"start": _INT, "end": _INT, "globalPid": _INT_NULL},
    RUNTIME: {"start": _INT, "end": _INT, "globalTid": _INT_NULL},
    NVTX: {"start": _INT, "end": _INT_NULL, "globalTid": _INT_NULL, "text": _TEXT_NULL},
    STRINGS: {"value": _TEXT_NULL},
    GPU: {"name": _TEXT_NULL, "memoryBandwidth": _INT_NULL, "smCount": _INT_NULL, "clockRate": _INT_NULL},
    CUDA_DEVICE: {"pid": _INT_NULL},
    MEMCPY_ENUM: {"name": _TEXT_NULL},
}
# What a value of a wrong class raises in the sweep (an int & a str, a str <= an int, ...).
_VALUE_ERRORS = (TypeError, ValueError, AttributeError, OverflowError)


# Errors raised while reading; database_error() tells a bad file from a bug of ours. sqlite3
# raises UnicodeDecodeError instead of its error when SQLite's message is not UTF-8 (a damaged
# schema quoted in it).
DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.DatabaseError, sqlalchemy.exc.DBAPIError, UnicodeDecodeError)


class Export:
    """A read-only connection to one export plus what it contains.

    `all_tables` is the set of its table names; has() and columns() tell which columns a table has.
    Parse names in SQL only tables of its own (the constants here and in queries.py) after has()
    found them, and a table's columns are read with the table name bound as a parameter, so
    nothing from the trace becomes SQL text.
    """

    def __init__(self, path: str, lenient: bool = False) -> None:
        self.path = path
        if not os.path.exists(path):
            raise PyprofError(f"{path}: no such file", EXIT_NO_INPUT)
        if os.path.isdir(path):
            raise PyprofError(f"{path}: is a directory, not an export file", EXIT_NO_INPUT)
        if not os.path.isfile(path):  # SQLite would wait forever on a FIFO
            raise PyprofError(f"{path}: not a regular file (a FIFO or a device), not an export file", EXIT_NO_INPUT)
        if not os.access(path, os.R_OK):
            raise PyprofError(f"{path}: permission denied", EXIT_NO_INPUT)
        uri = _sqlite_uri(path)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(uri, uri=True)
            if lenient:  # text that is not UTF-8 read with U+FFFD in its place (7% slower: only when needed)
                conn.text_factory = functools.partial(str, encoding="utf-8", errors="replace")
            return conn

        self.engine: Engine = sqlalchemy.create_engine("sqlite://", creator=connect, poolclass=NullPool)
        self.conn: Connection = self.engine.connect()
        try:
            names = [r[0] for r in self.conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")]
        except DB_ERRORS as err:
            self.close()
            raise database_error(err, path) from None
        self.all_tables = frozenset(names)
        self._columns: dict[str, frozenset[str]] = {}
        self._once: dict[Callable[["Export"], Any], Any] = {}

    def is_open(self) -> bool:
        """Whether the database is still open. A reader dropped inside a reference cycle is
        collected together with SQLAlchemy's pool record, and the collector runs the record's
        weak-reference callback, which closes the database, before the reader's `finally`: its
        cursors are closed with it then, and closing them again raises."""
        try:
            self.conn.connection.driver_connection.in_transaction  # noqa: B018 (raises once closed)
        except (sqlite3.ProgrammingError, sqlalchemy.exc.SQLAlchemyError, AttributeError):
            return False
        return True

    def close(self) -> None:
        """Release the connection."""
        if self.is_open():
            self.conn.close()
        self.engine.dispose()

    def __enter__(self) -> "Export":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Turn SQLite errors raised inside the block into PyprofError, and errors raised by
        values of the wrong storage class (STORAGE) into one naming the column."""
        try:
            yield
        except DB_ERRORS as err:
            raise database_error(err, self.path) from None
        except _VALUE_ERRORS:
            why = self.wrong_storage()
            if why is None:
                raise  # not the file's fault: a bug of ours
            raise PyprofError(f"{self.path}: the export is corrupted: {why}", EXIT_CORRUPT) from None

    def wrong_storage(self) -> str | None:
        """The first column parse reads that holds a value of a class nsys never writes there."""
        for table, columns in STORAGE.items():
            for column, classes in columns.items():
                if self.has(table, column):
                    # `table` and `column` are our own constants, present per PRAGMA table_info.
                    found = self.scalar(f'SELECT typeof("{column}") FROM {table} WHERE typeof("{column}") NOT IN '
                                        f"({', '.join('?' * len(classes))}) LIMIT 1", classes)
                    if found is not None:
                        return f"{table}.{column} holds {found} values (nsys writes {' or '.join(classes)})"
        return None

    def columns(self, table: str) -> frozenset[str] | None:
        """The column names of `table`, None when the export has no such table."""
        cols = self._columns.get(table)
        if cols is None and table in self.all_tables:
            # Read on first ask: only the tables parse reads are looked at.
            cur = self.rows("SELECT name FROM pragma_table_info(?)", (table,))
            with self.errors():
                cols = self._columns[table] = frozenset(r[0] for r in cur)
            cur.close()
        return cols

    def has(self, table: str, *columns: str) -> bool:
        """Whether `table` exists and has every one of `columns`."""
        cols = self.columns(table)
        return cols is not None and all(c in cols for c in columns)

    def col(self, table: str, alias: str, column: str) -> str:
        """`alias.column` when the column exists, else SQL NULL: optional columns degrade to null."""
        return f"{alias}.{column}" if self.has(table, column) else "NULL"

    def once(self, read: Callable[["Export"], T]) -> T:
        """read(self), made once per connection: what several readers need from one scan."""
        if read not in self._once:
            self._once[read] = read(self)
        return self._once[read]

    def know(self, read: Callable[["Export"], T], value: T) -> None:
        """Make once(read) return `value`: what was read elsewhere from the same export."""
        self._once[read] = value

    def rows(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Execute one query and return its cursor: an iterator of plain tuples that SQLite steps
        lazily, so the result is never held whole. Close it when done.

        Goes through SQLAlchemy's connection to the DBAPI cursor: a Row object per row would cost
        more than the rest of the per-kernel work. Iterating may raise DB_ERRORS (a corrupted page
        is only met when read): wrap consumers in errors().
        """
        cur = self.conn.connection.driver_connection.cursor()
        try:
            return cur.execute(sql, tuple(params))
        except DB_ERRORS as err:
            cur.close()
            raise database_error(err, self.path) from None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """First column of the first row, or None."""
        cur = self.rows(sql, params)
        with self.errors():
            row = cur.fetchone()
        cur.close()
        return None if row is None else row[0]

    def meta(self, name: str) -> str | None:
        """A value of META_DATA_EXPORT (e.g. EXPORT_PRODUCT_VERSION), when the table has it."""
        if not self.has(META, "name", "value"):
            return None
        return self.scalar(f"SELECT value FROM {META} WHERE name = ?", (name,))


def check_export(exp: Export, memcpy: bool = False) -> None:
    """Refuse, with the reason a user can act on, a file that holds no kernels to parse."""
    tables = exp.all_tables
    if not tables:
        raise PyprofError(f"{exp.path}: not an Nsight Systems export (the SQLite database is empty)", EXIT_BAD_FORMAT)
    if "StringTable" in tables and KERNEL in tables and STRINGS not in tables:
        raise PyprofError(
            f"{exp.path}: this is an nvprof database; pyprof.parse reads Nsight Systems exports "
            "(nsys profile --export sqlite)", EXIT_BAD_FORMAT)
    looks_nsys = META in tables or STRINGS in tables or NVTX in tables or any(
        t.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_")) for t in tables)
    if not looks_nsys:
        raise PyprofError(f"{exp.path}: not an Nsight Systems export (none of its tables are nsys tables)", EXIT_BAD_FORMAT)
    version = exp.meta("EXPORT_PRODUCT_VERSION")
    made_by = f" (nsys {version})" if version else ""
    if not exp.has(KERNEL):
        raise PyprofError(
            f"{exp.path}: the export has no CUDA kernel table{made_by}: the capture had no CUDA trace "
            "(nsys profile without '-t cuda'), or this nsys is too old for the CUDA driver", EXIT_NO_KERNELS)
    missing = [c for c in ("start", "end", "correlationId") if not exp.has(KERNEL, c)]
    if missing:
        raise PyprofError(f"{exp.path}: {KERNEL} lacks column(s) {', '.join(missing)}: unknown export schema", EXIT_BAD_FORMAT)
    sources = [KERNEL] + ([MEMCPY, MEMSET] if memcpy else [])
    if not any(exp.has(t) and exp.scalar(f"SELECT 1 FROM {t} LIMIT 1") for t in sources):
        raise PyprofError(
            f"{exp.path}: the capture range is empty: the export has no kernels{made_by} "
            "(did the program reach the profiled region, e.g. torch.cuda.profiler.start()?)", EXIT_NO_KERNELS)
