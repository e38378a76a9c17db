"""Which kernel records the views see: --kernel REGEX, --op, --layer, --module, --window.

Every record is still analysed, in order, before a filter looks at it: which kernel of an op call
carries the op's work depends on the kernels before it (analysis.py), so a filter changes what
is shown, never a kept kernel's numbers. The per-kernel table's `idx` stays the index in the
input. All filters given must hold (and); a record whose field has the wrong type is left out.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Callable

from ..errors import EXIT_USAGE, PyprofError
from .pricing.analysis import Facts

Keep = Callable[[dict], bool]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The filter options, in a group of their own."""
    g = parser.add_argument_group("filters (every view; kernels must match all given)")
    g.add_argument("--kernel", metavar="REGEX", help="kernels whose name (short or demangled) matches REGEX "
                                                     "(Python re, searched: 'gemm|conv')")
    g.add_argument("--op", metavar="OPS", help="kernels of these ops (comma separated: linear,conv2d)")
    g.add_argument("--layer", metavar="NAME", help="kernels inside the layer range NAME (pyprof.annotate, "
                                                   "layer:NAME), at any depth")
    g.add_argument("--module", metavar="PATH", help="kernels of the nn.Module PATH or of a module below it "
                                                    "(blocks.0 takes blocks.0.qkv)")
    g.add_argument("--window", metavar="START:END", help="kernels starting in [START, END), in ns on the Start(ns) "
                                                         "timeline; either side may be left out (START: or :END)")


def _window(spec: str) -> tuple[int | None, int | None]:
    start, sep, end = spec.partition(":")
    try:
        if not sep:
            raise ValueError
        lo = int(start) if start.strip() else None
        hi = int(end) if end.strip() else None
    except ValueError:
        raise PyprofError(f"--window {spec!r}: expected START:END in ns (e.g. 15000000:16000000, or 15000000:)",
                          EXIT_USAGE) from None
    if lo is not None and hi is not None and hi <= lo:
        raise PyprofError(f"--window {spec!r}: END must be after START", EXIT_USAGE)
    return lo, hi


def build(args: argparse.Namespace) -> Keep | None:
    """The filter the command line asks for; None when it asks for none. PyprofError (usage) for
    a bad REGEX or window."""
    tests: list[Keep] = []
    if args.kernel is not None:
        try:
            pattern = re.compile(args.kernel)
        except re.error as err:
            raise PyprofError(f"--kernel {args.kernel!r}: not a regular expression ({err})", EXIT_USAGE) from None
        tests.append(lambda r: any(isinstance(n, str) and pattern.search(n)
                                   for n in (r.get("kShortName"), r.get("kLongName"))))
    if args.op is not None:
        ops = frozenset(o.strip() for o in args.op.split(","))
        tests.append(lambda r: r.get("op") in ops)
    if args.layer is not None:
        tests.append(lambda r: isinstance(r.get("layer"), list) and args.layer in r["layer"])
    if args.module is not None:
        prefix = args.module + "."
        tests.append(lambda r: isinstance(r.get("module"), str)
                     and (r["module"] == args.module or r["module"].startswith(prefix)))
    if args.window is not None:
        lo, hi = _window(args.window)
        tests.append(lambda r: type(r.get("kStart")) is int and (lo is None or r["kStart"] >= lo)
                     and (hi is None or r["kStart"] < hi))
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    return lambda r: all(t(r) for t in tests)


class Filtered:
    """A scan.Sink passing to `sink` only the records `keep` accepts; for the others it calls the
    sink's `skip()`, when it has one (the table counts them, so that idx stays the input's)."""

    def __init__(self, sink, keep: Keep) -> None:
        self.sink = sink
        self.keep = keep
        self.needs_facts = sink.needs_facts
        self._skip = getattr(sink, "skip", None)

    def add(self, rec: dict, facts: Facts) -> None:
        """Pass the record on, or skip it."""
        if self.keep(rec):
            self.sink.add(rec, facts)
        elif self._skip is not None:
            self._skip()


class Census:
    """A scan.Sink beside the filtered views: counts the records `keep` accepts and notes the ops,
    modules and layers seen, so that filters that matched nothing can say why (O(distinct names))."""

    needs_facts = False

    def __init__(self, args: argparse.Namespace, keep: Keep) -> None:
        self.args = args
        self.keep = keep
        self.kept = self.records = 0
        self.seen: dict[str, set] = {"op": set(), "module": set(), "layer": set()}

    def add(self, rec: dict, facts: Facts) -> None:
        """Count one record and note its names."""
        self.records += 1
        if self.keep(rec):
            self.kept += 1
        for key in ("op", "module"):
            if isinstance(rec.get(key), str):
                self.seen[key].add(rec[key])
        if isinstance(rec.get("layer"), list):
            self.seen["layer"].update(v for v in rec["layer"] if isinstance(v, str))

    def why_empty(self) -> str | None:
        """None when a record matched; else why not: each filter given, with the names it may have
        meant (difflib over those seen)."""
        if self.kept or not self.records:
            return None
        a = self.args
        parts = []
        for opt, given, names in (("--op", a.op, "op"), ("--module", a.module, "module"),
                                  ("--layer", a.layer, "layer")):
            if given is None:
                continue
            for want in ([o.strip() for o in given.split(",")] if opt == "--op" else [given]):
                if want in self.seen[names] or (opt == "--module" and any(m.startswith(want + ".")
                                                                         for m in self.seen[names])):
                    continue
                close = difflib.get_close_matches(want, sorted(self.seen[names]), 3)
                parts.append(f"no {names} {want!r}" + (f" (did you mean {' or '.join(close)}?)" if close else
                                                       f" ({len(self.seen[names])} {names}s seen)"))
        given = [f"{opt} {v}" for opt, v in (("--kernel", a.kernel), ("--op", a.op), ("--layer", a.layer),
                                              ("--module", a.module), ("--window", a.window)) if v is not None]
        return (f"no kernel matched {' '.join(given)} (of {self.records} records)"
                + ("; " + "; ".join(parts) if parts else ""))

    def report(self) -> None:
        """The reason on stderr, when no record matched."""
        why = self.why_empty()
        if why:
            print(f"pyprof.prof: warning: {why}", file=sys.stderr)
