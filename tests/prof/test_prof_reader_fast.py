"""orjson (optional) and the json fallback read record files to the same records and the same
verdicts on odd lines: orjson only speeds up lines it can decode, json decides everything else."""
from __future__ import annotations

import io
import json

import pytest

from pyprof.prof.io import reader
from pyprof.prof.warnings_tally import Tally
from test_views_common import trace_text

ODD = [
    b'{"v": 1, "x": NaN}\n',                       # json reads NaN, orjson refuses it
    b'{"v": 1, "s": "\\ud800"}\n',                 # a lone surrogate escape
    b"\n",                                         # blank: skipped silently
    b"null\n",                                     # JSON, but not an object
    b'{"v": 1, "bad": \xff}\n',                    # not UTF-8
    b"{'kShortName': 'k', 'op': ['relu'], 'dir': 'fprop'}\n",  # an original-PyProf line
    b'{"v": 1, "kind": "kernel"}\n',
]


def read(data: bytes):
    summary, err = Tally(), io.StringIO()
    summary.bad_line = lambda lineno, reason, err=err: err.write(f"{lineno}: {reason}\n")
    recs = list(reader.records(io.BytesIO(data), summary))
    return recs, err.getvalue(), summary.records


def test_orjson_and_json_read_the_same(monkeypatch):
    pytest.importorskip("orjson")
    data = trace_text("gpt").encode() + b"".join(ODD)
    fast = read(data)
    monkeypatch.setattr(reader, "_fast_loads", None)
    slow = read(data)
    assert repr(fast) == repr(slow)  # repr: NaN != NaN
    recs, err, n = slow
    assert n == 139 + 4 and len(recs) == n
    assert recs[0][1] == json.loads(trace_text("gpt").splitlines()[0])
    assert err == "143: not a JSON object\n144: not UTF-8 text\n"
    assert recs[-3][1]["s"] == "\ud800" and repr(recs[-4][1]["x"]) == "nan"
    assert recs[-2][1]["op"] == "relu" and recs[-2][1]["v"] == 0  # the legacy line, converted
