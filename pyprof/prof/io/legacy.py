"""Records of the original PyProf (a Python dict per line, NVIDIA/PyProf, pyprof2), turned into
this tool's record shape so that old `.dict` files still print. Only literals are read
(ast.literal_eval); their markers are Python dict literals too.

Old keys: kShortName, kLongName, kDuration, layer, trace, marker (list of marker strings),
seqId, subSeqId, altSeqId, dir, mod and op (lists: the first entry is the op), tid, device,
stream, grid, block. Old marker args: `{'name': '', 'type': 'tensor', 'shape': (..), 'dtype': ..}`,
`{'name': 'stride', 'type': 'tuple', 'value': (2, 2)}`; a non-empty name is a keyword argument.
"""
from __future__ import annotations

import ast
from typing import Any

from ...formats import MARKER_VERSION


def _first(v: Any) -> Any:
    return (v[0] if v else None) if isinstance(v, (list, tuple)) else v


def _arg(a: Any) -> Any:
    if not isinstance(a, dict):
        return a
    if a.get("type") == "tensor":
        return {"shape": list(a.get("shape", ())), "dtype": a.get("dtype")}
    v = a.get("value")
    return list(v) if isinstance(v, tuple) else v


def _marker(texts: Any) -> dict | None:
    """The first old pyprof marker that parses, in the new schema (docs/markers.md)."""
    for text in texts if isinstance(texts, (list, tuple)) else ():
        try:
            m = ast.literal_eval(text) if isinstance(text, str) else text
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(m, dict) and "op" in m:
            args, kwargs = [], {}
            for a in m.get("args", ()):
                name = a.get("name") if isinstance(a, dict) else ""
                if name:
                    kwargs[name] = _arg(a)
                else:
                    args.append(_arg(a))
            return {"v": MARKER_VERSION, "kind": "op", "mod": m.get("mod"), "op": m.get("op"), "args": args, "kwargs": kwargs}
    return None


def from_legacy(d: dict) -> dict:
    """A record (docs/records.md keys) from an original-PyProf dict; unknown keys are dropped."""
    seq = _first(d.get("seqId"))
    rec = {
        "v": 0, "kind": "kernel",
        "kShortName": d.get("kShortName"), "kLongName": d.get("kLongName"),
        "kDuration": d.get("kDuration"), "kStart": d.get("kStartTime"),
        "device": d.get("device"), "stream": d.get("stream"),
        "grid": list(d["grid"]) if d.get("grid") else None,
        "block": list(d["block"]) if d.get("block") else None,
        "tid": d.get("tid"), "pid": d.get("pid"),
        "dir": d.get("dir"), "mod": _first(d.get("mod")), "op": _first(d.get("op")),
        "seqId": seq, "subSeqId": d.get("subSeqId"),
        "altSeqId": list(d.get("altSeqId") or []),
        "layer": list(d.get("layer") or []),
        "trace": _first(list(reversed(d["trace"]))) if isinstance(d.get("trace"), (list, tuple)) else d.get("trace"),
        "marker": _marker(d.get("marker")),
    }
    if rec["dir"] == "bprop":  # the old tool kept the forward op's marker on the bprop kernel itself
        rec["fwd"] = {"seq": seq, "marker": rec["marker"]}
    return rec
