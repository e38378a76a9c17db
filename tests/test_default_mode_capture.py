"""The GPT example captured on an H100 twice in one run: pyprof.profiled()'s default (markers and
backward node hooks, no emit_nvtx) and with aten=True (emit_nvtx): every kernel gets the same
direction, op, module and call site (benchmarks/attribution_compare.py compares FLOPs as well)."""
from __future__ import annotations

import lzma
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))

import attribution_compare  # noqa: E402


def _unpacked(tmp_path: Path, name: str) -> str:
    out = tmp_path / name
    with lzma.open(HERE / "data" / "default_mode" / f"{name}.xz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return os.fspath(out)


def test_gpt_default_mode_attributes_every_kernel_as_emit_nvtx_does(tmp_path: Path) -> None:
    default = attribution_compare.kernels(_unpacked(tmp_path, "gpt_default.sqlite"))
    aten = attribution_compare.kernels(_unpacked(tmp_path, "gpt_aten.sqlite"))
    assert len(default) == len(aten) == 139
    assert [r["kernel"] for r in default] == [r["kernel"] for r in aten]
    keys = attribution_compare.KEY
    assert [tuple(r[k] for k in keys) for r in default] == [tuple(r[k] for k in keys) for r in aten]
    bprop = [r for r in default if r["dir"] == "bprop"]
    assert len(bprop) > 50 and all(r["op"] not in (None, "na", "-") for r in bprop)
