"""Shared inputs of the view tests (no tests here): the shipped real traces parsed once."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from functools import lru_cache
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACES = {"lenet": "examples/lenet.sqlite", "gpt": "examples/gpt.sqlite", "resnet": "examples/resnet.sqlite",
          "zoo": "tests/data/tc_zoo.sqlite"}


@lru_cache(maxsize=None)
def trace_text(name: str) -> str:
    """parse's records of a shipped trace, as the text of a .dict file."""
    import pyprof.parse as parse
    from pyprof.parse.export import Export

    with Export(os.path.join(ROOT, TRACES[name])) as exp:
        return "".join(line + "\n" for line in parse.lines(exp, parse.Stats()))


def trace_records(name: str) -> List[dict]:
    return [json.loads(line) for line in trace_text(name).splitlines()]


def write_dict(tmp_path, name: str, recs=None) -> str:
    """A .dict file of `recs` (default: the trace `name`'s records) under tmp_path."""
    path = tmp_path / f"{name}.dict"
    path.write_text(trace_text(name) if recs is None else "".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def prof(*args: str, stdin: bytes = b""):
    """(status, stdout, stderr) of `python -m pyprof.prof ARGS`."""
    p = subprocess.run([sys.executable, "-m", "pyprof.prof", *args], input=stdin, capture_output=True, cwd=ROOT)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def stream(recs) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(r) + "\n" for r in recs).encode())


def numbered(recs):
    """(line number, record) pairs of `recs` as prof reads them from a record file."""
    from pyprof.prof.io.reader import records
    from pyprof.prof.warnings_tally import Tally

    return records(stream(recs), Tally())
