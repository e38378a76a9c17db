"""The annotation against the stage contract (pyprof/formats.py): it imports no analysis code, so
what a capture holds does not depend on the prof installed beside it, and every marker it pushes
is one of formats' marker kinds with its keys and version."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the annotation wraps torch: needs torch")

import pyprof  # noqa: E402
from pyprof import formats  # noqa: E402
from pyprof.nvtx import recording  # noqa: E402
from test_formats import marker_errors  # noqa: E402

# Every module of pyprof/nvtx imported, then init() and an annotated call: what was loaded?
_IMPORTS = """
import pkgutil, sys, importlib
import torch, pyprof, pyprof.nvtx
for m in pkgutil.iter_modules(pyprof.nvtx.__path__):
    importlib.import_module("pyprof.nvtx." + m.name)
pyprof.init()
x = torch.ones(2, 3)
with pyprof.nvtx.recording() as rec:
    torch.nn.functional.layer_norm(x, (3,))  # priced: hides torch.layer_norm inside it
assert [r.marker["op"] for r in rec.ranges] == ["layer_norm"], rec.ranges
print(" ".join(sorted(m for m in sys.modules if m.startswith("pyprof"))))
"""


def test_annotation_imports_neither_prof_nor_parse():
    out = subprocess.run([sys.executable, "-c", _IMPORTS], capture_output=True, text=True, check=True).stdout.split()
    assert {"pyprof.nvtx.patch", "pyprof.nvtx.priced", "pyprof.formats"} <= set(out)
    assert [m for m in out if m.startswith(("pyprof.prof", "pyprof.parse"))] == []


def test_every_marker_the_annotation_pushes_is_formats_marker():
    pyprof.init()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with recording() as rec, pyprof.annotate("step"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(torch.randn(2, 4))
        y.float().sum().backward()
        opt.step()
    markers = [json.loads(r.text) for r in rec.ranges]
    assert {m["kind"] for m in markers} == {"layer", "module", "op", "bwd"}
    assert {"autocast", "module", "site"} <= {k for m in markers if m["kind"] == "op" for k in m}
    assert [e for m in markers for e in marker_errors(m)] == []
    assert all(r.text.startswith(formats.op_marker_head(m["mod"])) for r, m in zip(rec.ranges, markers) if m["kind"] == "op")
