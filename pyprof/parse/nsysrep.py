"""Reading an .nsys-rep report: have `nsys export` turn it into SQLite first, once.

The export is kept beside the report, hidden and named after the report's size and
modification time (`.net.nsys-rep.SIZE-MTIME.sqlite`), once a parse read it to the end: a second
parse of the same report reads it instead of running nsys again (minutes for a large report),
and a report written again gets a new one (the old is removed). Where the report's folder cannot
be written, the export is a temporary file, removed afterwards.
"""
from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import sys
import tempfile
import time
from typing import Iterator

from pyprof.errors import EXIT_NO_INPUT, EXIT_TOOL, PyprofError
from pyprof.nsys import find_nsys
from pyprof.progress import Progress


def cached_export(path: str) -> str:
    """Where the SQLite export of report `path` is kept: beside it, named after its size and
    modification time."""
    st = os.stat(path)
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.{st.st_size}-{st.st_mtime_ns}.sqlite")


@contextlib.contextmanager
def sqlite_path(path: str, quiet: bool, progress: bool = False) -> Iterator[str]:
    """Yield the SQLite export to read for `path`: the path itself, or the export of a .nsys-rep
    report made with `nsys export --type sqlite` (kept beside it and reused while the report is
    unchanged; else temporary). With `progress`, the seconds nsys has run on stderr."""
    if not path.endswith(".nsys-rep"):
        yield path
        return
    if not os.path.isfile(path):
        raise PyprofError(f"{path}: no such file", EXIT_NO_INPUT)
    cached = cached_export(path)
    if os.path.isfile(cached):
        if not quiet:
            print(f"pyprof.parse: reading {path} from its SQLite export made earlier ({cached})", file=sys.stderr)
        yield cached
        return
    nsys = find_nsys(f"{path}: reading an .nsys-rep report")
    folder = os.path.dirname(cached)
    try:  # in the report's folder, to be renamed into place once complete
        tmp = tempfile.TemporaryDirectory(prefix=".pyprof-export-", dir=folder)
    except OSError:  # a folder that cannot be written: a temporary export only
        tmp, folder = tempfile.TemporaryDirectory(prefix="pyprof-parse-"), None
    with tmp as scratch:
        out = os.path.join(scratch, os.path.basename(path)[: -len(".nsys-rep")] + ".sqlite")
        export(nsys, path, out, quiet, progress)
        yield out
        # Kept once it was read to the end: an export nsys botched is made again next time.
        if folder is not None:
            for old in glob.glob(glob.escape(os.path.join(folder, f".{os.path.basename(path)}.")) + "*-*.sqlite"):
                with contextlib.suppress(OSError):
                    os.unlink(old)  # the export of an earlier version of the report
            os.replace(out, cached)


def export(nsys: str, path: str, out: str, quiet: bool, progress: bool, prog: str = "pyprof.parse") -> None:
    """Export report `path` to SQLite file `out` with `nsys export` (replacing `out`), with the
    NVTX payloads' bytes (--include-blobs: NCCL's message sizes, docs/parse.md); PyprofError
    (EXIT_TOOL) with nsys's last words when it fails. `prog` names the tool in messages."""
    if not quiet:
        print(f"{prog}: exporting {path} to SQLite with {nsys} export --type sqlite", file=sys.stderr)
    # nsys's own chatter must not reach our stdout, which carries records.
    proc = subprocess.Popen([nsys, "export", "--type", "sqlite", "--output", out, "--include-blobs=true",
                             "--force-overwrite=true", path], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    meter = Progress(prog, None, progress and not quiet, unit=f"s: nsys exporting {path}")
    began = time.monotonic()
    try:
        while True:
            try:
                said_out, said_err = proc.communicate(timeout=1)
                break
            except subprocess.TimeoutExpired:
                meter.update(int(time.monotonic() - began))
    except BaseException:  # Ctrl-C, SIGTERM: nsys is not left exporting on its own
        proc.kill()
        proc.communicate()
        raise
    finally:
        meter.finish()
    if proc.returncode != 0 or not os.path.isfile(out):
        said = (said_err.strip() or said_out.strip()).splitlines()
        why = f": {said[-1]}" if said else ""
        raise PyprofError(f"{path}: nsys export failed (exit status {proc.returncode}){why}", EXIT_TOOL)
