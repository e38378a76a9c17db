"""H100 captures of examples/lenet.py and gpt.py in profiled()'s default mode, each with the marker
cache's hit path in C (pyprof/nvtx/_hot.c, `*_c`, one device call), in C with an ATen tensor
reader since removed (pyprof/nvtx/_aten.cpp, `*_aten`, a later call), with the C key as bytes (`*_bytes`, a later
session) and in Python (the modules removed, `*_py`):
the same op marker on every kernel, the same forward op for every backward one, the same FLOPs and
bytes. Only the forward call's start time (`fwd.call`) differs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import pyprof
from captures import unpacked

DATA = Path(__file__).resolve().parents[1] / "data" / "hot_path"
COLUMNS = ["kernel", "dir", "mod", "op", "module", "trace", "flops", "bytes", "tc"]


def _unpacked(tmp_path: Path, name: str) -> str:
    return os.fspath(unpacked(DATA / f"{name}.xz", tmp_path))


def _attribution(path: str) -> list:
    out = []
    for r in pyprof.records(path):
        fwd = r["fwd"]
        out.append((r["kShortName"], r["dir"], json.dumps(r["marker"], sort_keys=True),
                    None if fwd is None else (fwd["seq"], json.dumps(fwd["marker"], sort_keys=True))))
    return out


@pytest.mark.parametrize("example, kernels, bprop", [("lenet", 44, 25), ("gpt", 139, 85)])
@pytest.mark.parametrize("path", ["c", "aten", "bytes"])
def test_the_c_and_python_hit_paths_give_the_same_trace_attribution(tmp_path: Path, example: str, kernels: int,
                                                                    bprop: int, path: str) -> None:
    c, py = (_unpacked(tmp_path, f"{example}_{v}.sqlite") for v in (path, "py"))
    got = _attribution(c)
    assert got == _attribution(py)
    assert len(got) == kernels and sum(1 for g in got if g[3] is not None) == bprop
    assert all(g[2] != "null" or g[3] is not None for g in got)  # an op marker or a forward op for each
    assert list(pyprof.rows(c, COLUMNS)) == list(pyprof.rows(py, COLUMNS))
