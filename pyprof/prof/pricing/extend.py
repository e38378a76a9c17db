"""Pricing your own ops: `pyprof.register_cost`, and `prof --costs FILE` that loads such formulas.

One formula prices an op at every level that can see it: its pyprof marker (`pyprof.wrap(fn,
"mylib")` markers say `mod` "mylib", `op` fn's name), the FX nodes of compiled graphs that call it
(`mylib.fused_gelu.default`: a `torch.library` custom op) and PyTorch's op ranges of traces made
with emit_nvtx or `nsys --pytorch` (`mylib::fused_gelu`). The formula gets a `Call`: `c.tensor(pos,
name)` (shape, dtype, numel, nbytes) and `c.get(pos, name)` for other arguments; from op ranges only
tensor shapes are known (other arguments are None, the dtype is the kernel's). It returns a
`Cost` (pyprof.prof.pricing.registry) or `(flops, bytes)`, either of them None where unknown.

    # mycosts.py
    import pyprof

    @pyprof.register_cost("mylib.fused_gelu")
    def fused_gelu(c):
        x = c.tensor(0, "x")
        return 8 * x.numel, 2 * x.nbytes            # 8 FLOPs an element; x read, y written

    python -m pyprof.prof --costs mycosts.py net.dict
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable

from ...errors import EXIT_USAGE, PyprofError
from .registry import SIMT, Call, Cost, call, fmt_params, register, register_aten

UserFormula = Callable[[Call], Any]


def register_cost(*names: str) -> Callable[[UserFormula], UserFormula]:
    """Register `formula` for each qualified op name (`mylib.fused_gelu`): for markers and
    compiled graphs under that name, and for PyTorch's op ranges as `mylib::fused_gelu` (where
    the namespace is one word, as torch.library's are). A name prof already prices is refused
    (RuntimeError): the formula would silently change what every user of that op sees."""

    def deco(formula: UserFormula) -> UserFormula:
        priced = _as_cost(formula)
        for name in names:
            register(name)(priced)
            ns, _, op = name.rpartition(".")
            if ns and "." not in ns:
                register_aten(f"{ns}::{op}")(_from_range(priced))
        return formula

    return deco


def _as_cost(formula: UserFormula) -> Callable[[Call], Cost | None]:
    """The user's formula returning a Cost: a `(flops, bytes)` pair becomes one in the dtype of
    the first tensor argument."""

    def priced(c: Call) -> Cost | None:
        out = formula(c)
        if out is None or isinstance(out, Cost):
            return out
        flops, nbytes = out
        dtype = next((t.dtype for t in c.tensors()), None)
        return Cost(flops, nbytes, fmt_params(dtype), dtype, SIMT)

    priced.__doc__ = formula.__doc__
    return priced


def _from_range(priced: Callable[[Call], Cost | None]) -> Callable[[Any], Cost | None]:
    """The formula over a PyTorch op range (aten.AtenCall): each input a tensor of its shape in
    the kernel's dtype, or None (a scalar, or a 0-dim tensor: ranges do not tell them apart)."""

    def from_range(a: Any) -> Cost | None:
        return priced(call(*[a.tensor(i) for i in range(len(a.sizes))]))

    return from_range


def load_costs(path: str) -> None:
    """Import the user's cost file `path` (it calls register_cost); a file that is missing or
    fails to import is a usage error naming it. The file is the user's own code, named on the
    command line: nothing read from a trace is ever executed."""
    if not os.path.isfile(path):
        raise PyprofError(f"--costs {path}: no such file", EXIT_USAGE)
    name = "pyprof_costs_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PyprofError(f"--costs {path}: not a Python file", EXIT_USAGE)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file: its error, named, on one line
        raise PyprofError(f"--costs {path}: {type(e).__name__}: {e}", EXIT_USAGE) from None
    sys.modules[name] = module
