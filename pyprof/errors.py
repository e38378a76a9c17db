"""Fatal errors of the command-line tools and the one place that turns them into exit codes.

Every tool reports a fatal problem as one line on stderr and a documented exit status, never a
traceback: users pipe these tools into each other and read the first line that went wrong.
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import stat
import sys
import threading
from typing import BinaryIO, Callable, Iterable, Iterator, NoReturn, Sequence

# Exit statuses shared by the tools (each tool's --help lists its own; docs/parse.md, docs/prof.md).
EXIT_USAGE = 2          # bad command line (argparse's own status)
EXIT_NO_INPUT = 3       # input file missing or unreadable
EXIT_BAD_FORMAT = 4     # not an nsys SQLite export / not a record file
EXIT_NO_KERNELS = 5     # export without a CUDA trace or with an empty capture range
EXIT_CORRUPT = 6        # truncated or corrupted database
EXIT_BAD_LINE = 7       # malformed record line under --strict
EXIT_TOOL = 8           # an external tool the input needs (nsys, to read .nsys-rep) is missing or failed
EXIT_INCOMPLETE = 9     # records cut short: pyprof.parse failed while writing them
EXIT_OUTPUT = 10        # the output cannot be written (no such directory, a directory in the way, disk full)
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt: the same cleanup, one line and
    EXIT_INTERRUPTED (`kill`, a job scheduler's time limit, `timeout`)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


class PyprofError(Exception):
    """A fatal, user-facing problem: `message` is printed as one line, `status` is the exit code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def cannot_write(path: str, err: Exception) -> PyprofError:
    """The error for an output file (-o, --plot, --parquet) that cannot be written: `path` and
    why, status EXIT_OUTPUT, the same from every tool."""
    return PyprofError(f"{path}: cannot write ({getattr(err, 'strerror', None) or err})", EXIT_OUTPUT)


def input_named_by(output: str | None, inputs: Iterable[str]) -> str | None:
    """The first of `inputs` that the output file `output` is: the same path, a symbolic or a hard
    link to it (same device and inode); with `output` None, the file stdout is redirected into
    (`>> input`). None when it is none of them. Only a regular file can be destroyed by writing an
    output over it: a device, a FIFO or a terminal (/dev/stdout, a pipe) is never an input's file,
    nor is `-` (stdin)."""
    try:
        target = os.stat(output) if output is not None else os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no such file yet; stdout without a descriptor
        return None
    if not stat.S_ISREG(target.st_mode):
        return None
    for path in inputs:
        try:
            found = os.stat(path)
        except (OSError, ValueError):  # an input that does not exist is reported when it is read
            continue
        if path != "-" and (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
            return path
    return None


def refuse_output_onto_input(output: str | None, inputs: Iterable[str], option: str = "-o") -> None:
    """Raise PyprofError (EXIT_USAGE) when writing the output (`output`, given with `option`; None:
    stdout) would replace or write into one of `inputs` (input_named_by)."""
    named = input_named_by(output, inputs)
    if named is None:
        return
    if output is None:
        raise PyprofError(f"stdout is redirected into the input {named}; write the output to another file", EXIT_USAGE)
    raise PyprofError(f"{output}: {option} names the input {named}; give another file name", EXIT_USAGE)


@contextlib.contextmanager
def interrupted_while_loading(prog: str) -> Iterator[None]:
    """Around a tool's imports (its __main__'s): Ctrl-C while they load (half a second with
    SQLAlchemy) ends the program as during its run, one line and EXIT_INTERRUPTED, not a
    traceback from the import machinery."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def run_cli(prog: str, main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> NoReturn:
    """Run `main(argv)` and exit with its status, turning PyprofError into `prog: error: msg`."""
    closed_streams()
    # Names from a trace may hold what the terminal's encoding cannot show (a lone surrogate
    # from a JSON escape, any non-Latin-1 text under a Latin-1 locale): shown escaped, not fatal.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")
    # Signals reach the main thread only; elsewhere (a notebook's worker thread) SIGTERM stays as it was.
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if on_main else None
    try:
        status = main(argv)
        sys.stdout.flush()  # a full disk shows here, as one line, not at the interpreter's exit
    except PyprofError as err:
        print(f"{prog}: error: {one_line(str(err))}", file=sys.stderr)
        status = err.status
    except KeyboardInterrupt as err:
        print(f"{prog}: {'terminated' if isinstance(err, Terminated) else 'interrupted'}", file=sys.stderr)
        status = EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader (head, less) went away: not an error of ours. Point stdout at devnull so
        # the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    except OSError as err:
        # Inputs are opened (and their errors reported) by the tools themselves; what is left
        # is writing the results: a full disk, a file-size limit, an I/O error.
        print(f"{prog}: error: cannot write the output: {err.strerror or err}", file=sys.stderr)
        _drop_stdout()
        status = EXIT_OUTPUT
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
    sys.exit(status)


class ClosedStdout(io.TextIOBase):
    """sys.stdout of a process started with its stdout closed (`>&-`): writing to it fails as a
    full disk does (run_cli: status EXIT_OUTPUT, one line), rather than the text vanishing."""

    def write(self, text: str) -> int:
        """Refuse: there is no stdout."""
        raise OSError(errno.EBADF, "stdout is closed")


def closed_streams() -> None:
    """Make a process started with stdin, stdout or stderr closed (`<&-`, `>&-`, `2>&-`; Python
    sets sys.stdin/stdout/stderr to None) fail in the documented way: its descriptor is taken by
    /dev/null, so that no file the tool opens gets it (a library writing to descriptor 1 would
    write into it); a closed stdout refuses writes (ClosedStdout), a closed stderr is /dev/null
    (the status still tells), a closed stdin stays None (open_input: status 3)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if name == "stdout":
            sys.stdout = ClosedStdout()
        elif name == "stderr":
            sys.stderr = open(os.devnull, "w")


def one_line(text: str) -> str:
    """`text` with line breaks and other unprintable characters escaped (`\\n`, `\\x85`): a file
    name holding a newline must not split an error message over two lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _drop_stdout() -> None:
    # What is still buffered cannot be written either: discard it, so that the interpreter's
    # final flush does not fail a second time with a traceback.
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (in-process callers)
        pass


def open_input(path: str) -> BinaryIO:
    """The record file at `path` (stdin for `-`), binary; PyprofError when it cannot be read."""
    if path == "-":
        if sys.stdin is None:  # started with stdin closed (`<&-`)
            raise PyprofError("cannot read stdin: it is closed (give a record file)", EXIT_NO_INPUT)
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as err:
        raise PyprofError(f"cannot read {path}: {err.strerror}", EXIT_NO_INPUT) from None
