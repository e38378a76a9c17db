"""Writing records: JSON Lines to stdout or to a file that appears only when complete."""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import tempfile
import threading
from typing import IO, Iterable, Iterator, TextIO

from pyprof.errors import PyprofError, Terminated, cannot_write
from pyprof.progress import Progress
from pyprof.text import count


@contextlib.contextmanager
def open_output(path: str | None, binary: bool = False, scratch: str | None = None) -> Iterator[IO]:
    """Yield stdout, or a temporary file beside `path` (or in folder `scratch`, on the same file
    system) that is renamed to `path` only on success (text, UTF-8; `binary`: bytes, for an image
    or a Parquet file).

    On any failure the temporary file is removed, so a file at `path` is always complete. A
    `path` that exists and is no regular file (/dev/stdout, /dev/null, a FIFO) is written as it
    is: renaming onto it would replace the device or pipe itself. A symbolic link is followed.
    Raises PyprofError (EXIT_OUTPUT, errors.cannot_write) when the output cannot be written: a
    missing folder, a directory in the way or named with a trailing slash, a full disk.
    """
    if path is None:
        yield sys.stdout.buffer if binary else sys.stdout
        return
    target = os.path.realpath(path)
    if path.endswith(os.sep) or os.path.isdir(target):
        raise cannot_write(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    mode, encoding = ("wb", None) if binary else ("w", "utf-8")
    try:
        if os.path.exists(target) and not os.path.isfile(target):
            with open(target, mode, encoding=encoding) as out:
                yield out
            return
        fd, tmp = tempfile.mkstemp(dir=scratch or os.path.dirname(target), prefix=f".{os.path.basename(target)}.",
                                   suffix=".partial")
    except OSError as err:
        raise cannot_write(path, err) from None
    try:
        with os.fdopen(fd, mode, encoding=encoding) as out:
            yield out
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would surprise whoever reads the output next
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):  # a full disk, a file-size limit
            raise cannot_write(path, err) from None
        raise


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[list[KeyboardInterrupt]]:
    """While writing, Ctrl-C and SIGTERM only add the exception they raise (KeyboardInterrupt,
    errors.Terminated) to the list yielded, which the writer checks between records and raises:
    the output never ends in half a record (then the interrupted-marker line would not stand alone)."""
    caught: list[KeyboardInterrupt] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught  # signals reach the main thread only; nothing to defer
        return

    def catch(signum: int, frame: object) -> None:
        caught.append(Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())

    previous = {sig: signal.signal(sig, catch) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def write_lines(lines: Iterable[str], out: TextIO, progress: Progress) -> int:
    """Write each record line; return how many were written. Raises KeyboardInterrupt between
    records on Ctrl-C."""
    write = out.write
    n = 0
    with deferred_interrupt() as interrupted:
        for line in lines:
            write(line + "\n")
            n += 1
            if interrupted:
                raise interrupted[0]
            if progress.enabled and not n & 0x3FFF:
                progress.update(n)
    progress.finish()
    return n


def mark_incomplete(out: TextIO, err: BaseException, records: int) -> None:
    """End stdout after the `records` records written before `err` stopped the run with a line
    that is not JSON, so that prof (status 9) and --merge see the records above are not all.
    Nothing when no record went out, or when `err` is the output's own failure (OSError: a full
    disk, a reader gone), which the line could not pass either."""
    if not records or isinstance(err, OSError):
        return
    if isinstance(err, PyprofError):
        why = f"error: {err}"
    elif isinstance(err, KeyboardInterrupt):
        why = "terminated" if isinstance(err, Terminated) else "interrupted"
    else:  # a bug of ours: its traceback follows on stderr
        why = f"error: {type(err).__name__}: {err}"
    verb = "is" if records == 1 else "are"
    out.write(f"pyprof.parse: {why} - the {count(records, 'record')} above {verb} incomplete\n")
