"""Reading an .nsys-rep report: have `nsys export` turn it into SQLite first."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from typing import Iterator

from pyprof.errors import EXIT_NO_INPUT, EXIT_TOOL, PyprofError
from pyprof.nsys import find_nsys


@contextlib.contextmanager
def sqlite_path(path: str, quiet: bool) -> Iterator[str]:
    """Yield the SQLite export to read for `path`: the path itself, or a temporary export of a
    .nsys-rep report made with `nsys export --type sqlite` (removed afterwards)."""
    if not path.endswith(".nsys-rep"):
        yield path
        return
    if not os.path.isfile(path):
        raise PyprofError(f"{path}: no such file", EXIT_NO_INPUT)
    nsys = find_nsys(f"{path}: reading an .nsys-rep report")
    with tempfile.TemporaryDirectory(prefix="pyprof-parse-") as tmp:
        out = os.path.join(tmp, os.path.basename(path)[: -len(".nsys-rep")] + ".sqlite")
        if not quiet:
            print(f"pyprof.parse: exporting {path} to SQLite with {nsys} export --type sqlite", file=sys.stderr)
        # nsys's own chatter must not reach our stdout, which carries records.
        done = subprocess.run([nsys, "export", "--type", "sqlite", "--output", out, path],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
        if done.returncode != 0 or not os.path.isfile(out):
            said = (done.stderr.strip() or done.stdout.strip()).splitlines()
            why = f": {said[-1]}" if said else ""
            raise PyprofError(f"{path}: nsys export failed (exit status {done.returncode}){why}", EXIT_TOOL)
        yield out
