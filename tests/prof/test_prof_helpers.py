"""Shared builders for prof's tests: markers, records shaped like docs/records.md, and prof run
in-process. Nothing here needs torch: prof is tested where traces are analysed, without it.

Markers come two ways. `described()` builds one from arguments written as the marker describes
them (`tensor(4, 5, dtype="float16")`, `dtype("float32")`, JSON scalars and lists): no torch.
`marker()` runs real torch arguments through the annotation's own encoder, for the tests that
compare with torch itself. test_nvtx_markers checks the encoder's output against tensor()'s
descriptions, call by call."""
from __future__ import annotations

import io
import json
from typing import Any, List, Optional

from pyprof.prof.__main__ import main
from pyprof.prof.pricing.analysis import Analyzer
from pyprof.prof.columns import select
from pyprof.prof.io.reader import records as read_records
from pyprof.prof.scan import feed
from pyprof.prof.views.table import Table
from pyprof.prof.warnings_tally import Tally

H100 = {"name": "NVIDIA H100 80GB HBM3", "memoryBandwidth": 3352320000000, "smCount": 132, "clockRate": 1980000000}


SITE, MODULE = "net.py:7", "net.fc"


def tensor(*shape: int, dtype: str = "float32", **layout: Any) -> dict:
    """A tensor argument as its marker describes it: shape, dtype, `strides` or `format` when it
    is not contiguous, `grad=True` when it requires grad (docs/markers.md)."""
    return {"shape": list(shape), "dtype": dtype, **layout}


def dtype(name: str) -> dict:
    """A torch.dtype argument as its marker describes it (`dtype=torch.float32`)."""
    return {"dtype": name}


def described(mod: str, op: str, *args: Any, **kwargs: Any) -> dict:
    """The decoded marker pyprof pushes for `mod.op(*args, **kwargs)`, the arguments given as the
    marker describes them (tensor(), dtype(), scalars, lists; tuples become lists)."""
    m: dict = {"v": 1, "kind": "op", "mod": mod, "op": op, "args": list(args)}
    if kwargs:
        m["kwargs"] = kwargs
    m.update(site=SITE, module=MODULE)
    return json.loads(json.dumps(m, allow_nan=False))


def marker(mod: str, op: str, *args: Any, **kwargs: Any) -> dict:
    """The decoded marker pyprof pushes for `mod.op(*args, **kwargs)`, real torch arguments in."""
    # Imported here: the encoder needs torch, and only the tests that hold real tensors call this.
    from pyprof.nvtx.marker import op_marker
    return json.loads(op_marker(mod, op, args, kwargs or None, site=SITE, module=MODULE))


def record(m: Optional[dict], kernel: str = "elementwise_kernel", direction: str = "fprop",
           dur: int = 1000, gpu: Optional[dict] = H100, **extra: Any) -> dict:
    """A kernel record as parse writes it; a bprop record carries `m` as the forward op's marker."""
    rec = {
        "v": 1, "kind": "kernel", "kShortName": kernel.split("<")[0].split("(")[0], "kLongName": kernel,
        "kDuration": dur, "kStart": 1000, "kEnd": 1000 + dur, "device": 0, "stream": 7,
        "grid": [4, 1, 1], "block": [128, 1, 1], "regs": 32, "staticShared": 0, "dynamicShared": 0,
        "pid": 11, "tid": 12, "correlationId": 1, "launch": None, "graphNode": None, "gpu": gpu,
        "dir": direction, "mod": m and m["mod"], "op": m and m["op"],
        "marker": m if direction == "fprop" else None,
        "fwd": {"seq": 5, "marker": m, "torchOp": None} if direction == "bprop" else None,
        "torchOps": [], "seqId": None, "altSeqId": [], "subSeqId": 0, "layer": [],
        "module": m and m.get("module"), "trace": m and m.get("site"), "ranges": [],
    }
    rec.update(extra)
    return rec


def kernels(m: Optional[dict], names: List[str], direction: str = "fprop", **extra: Any) -> List[dict]:
    """Records of one op call that launched `names` in order (sub-sequence 0, 1, ...)."""
    return [record(m, n, direction, subSeqId=i, **extra) for i, n in enumerate(names)]


def analyse(records: List[dict]) -> tuple:
    """(list of Facts, Tally) for records fed in order through one Analyzer, read ahead as prof
    reads them (scan.analysed)."""
    summary = Tally()
    a = Analyzer(summary)
    return [a.facts(r) for _, r in a.flow.ahead(enumerate(records, 1))], summary


def total_flops(records: List[dict]) -> Optional[int]:
    """The kernels' FLOPs as a sum over whole op calls counts them (Facts.whole_work: a kernel whose
    own share is na adds what its call's total leaves to it); None where one is unknown even so."""
    facts, _ = analyse(records)
    vals = [f.whole_work()[0] for f in facts]
    return None if None in vals else sum(vals)


def prof_text(records: List[Any], columns: str, width: Optional[int] = None, as_csv: bool = False,
              strict: bool = False) -> tuple:
    """prof's stdout and stderr for `records` (dicts, or raw lines as str)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    stream = io.BytesIO(("\n".join(lines) + "\n").encode())
    out, err = io.StringIO(), io.StringIO()
    tally = Tally()
    feed(read_records(stream, tally, strict), tally, [Table(out, select(columns), width, as_csv)], strict)
    tally.report(err)
    return out.getvalue(), err.getvalue()


__all__ = ["H100", "tensor", "dtype", "described", "marker", "record", "kernels", "analyse", "total_flops", "prof_text",
           "main"]
