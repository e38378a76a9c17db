"""Human-readable numbers for the text views (CSV and JSON keep raw values)."""
from __future__ import annotations

import re

from .groups import GROUP_WIDTH
from .io.output import TextColumn


NA = "na"


def duration(ns: float | None) -> str:
    """ns as `850 ns`, `12.3 us`, `4.56 ms` or `1.23 s`."""
    if ns is None:
        return NA
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.1f} us"
    if a < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


def si(x: float | None, unit: str = "") -> str:
    """x with an SI prefix and two decimals: 1.23G, 456.00M, 12.00k; 7 or 7.50 below 1000."""
    if x is None:
        return NA
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{prefix}{unit}"
    return f"{x:.0f}{unit}" if float(x).is_integer() else f"{x:.2f}{unit}"


def pct(x: float | None, digits: int = 1) -> str:
    """A percentage value (already x100) with `digits` decimals, na when unknown."""
    return NA if x is None else f"{x:.{digits}f}"


def rate(x: float | None, digits: int = 2) -> str:
    """A rate (TFLOP/s, GB/s) with `digits` decimals, na when unknown."""
    return NA if x is None else f"{x:.{digits}f}"


_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|<unnamed>|[A-Za-z_]\w*)::")
_RETURN_TYPE = re.compile(r"^(?:void|[A-Za-z_][\w:]*\*?)\s+(?=[A-Za-z_(<])")


def kernel_label(name: str) -> str:
    """A demangled kernel name shortened for a text table, its template arguments kept (they are
    what tells instantiations apart): no return type, no namespaces, no parameter list.
    `void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(T3)` ->
    `reduce_kernel<512, 1, ReduceOp<float>>`."""
    label = _QUALIFIER.sub("", name)
    if label.endswith(")") and "<" in label:  # the parameter list after the template arguments
        depth = 0
        for i in range(len(label) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(label[i], 0)
            if depth == 0:
                label = label[:i]
                break
    return _RETURN_TYPE.sub("", label, count=1).strip()


def group_label(row: dict, keys: list[str]) -> str:
    """A --summary/--diff row's group for a text table: the value of each --by key, a kernel's
    name by kernel_label()."""
    return " ".join(kernel_label(row[k]) if k == "kernel" else row[k] for k in keys)


def group_column(by: str) -> TextColumn:
    """The group name's column of a --summary or --diff text table: never left out; long names
    (kernels, modules, layers, shapes: cut in the middle, where their end tells them apart) get
    40 characters before other columns are left out, the others GROUP_WIDTH."""
    middle = any(k in ("kernel", "module", "layer", "shape") for k in by.split(","))
    return TextColumn(by.replace(",", "+").capitalize(), GROUP_WIDTH, True, None, middle,
                      40 if middle else GROUP_WIDTH)
