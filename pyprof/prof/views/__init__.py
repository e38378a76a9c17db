"""The ways prof shows records, one module each: table.py (one row per kernel, the default),
summary.py (`--summary`, with advice.py's rules), roofline.py (`--plot`), diff.py (`--diff`),
overlap.py (`--overlap`), stragglers.py (`--stragglers`).

A view with a flag is found here by its module alone, so adding one is adding its file. It defines

    FLAG                 its option ("--summary"); messages about the views name it
    ORDER                its place among the views in -h
    JSON                 whether it writes --json
    add_arguments(group) its options, into -h's views group
    wanted(args)         whether the command line asks for it
    check(args, chosen)  usage errors, before any input is read (`chosen`: the views asked for)

and either `sink(args)` (a scan.Sink) and `write(sink, args)`: it looks at the one input, and all
such views share one pass over it (scan.feed); or `main(args) -> int`: it reads its own inputs
(--diff) and runs alone. What a view shows is data first: `report(sink, ...)` (diff.compare for
--diff) returns the JSON-able object that --json writes and pyprof/api.py returns; `write` only
prints it. The filters (filters.py) stand between the records and every view.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import pkgutil
from types import ModuleType
from typing import Iterable

from ...progress import on_terminal
from .. import filters
from ..io.reader import numbered
from ...store import read as store
from ..scan import feed
from ..warnings_tally import Tally
from . import table


def _views() -> list[ModuleType]:
    mods = (importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__))
    return sorted((m for m in mods if hasattr(m, "FLAG")), key=lambda m: m.ORDER)


VIEWS = _views()


def either(views: Iterable[ModuleType]) -> str:
    """The views' flags as prose: `--summary, --plot or --diff`."""
    flags = [v.FLAG for v in views]
    return flags[0] if len(flags) == 1 else ", ".join(flags[:-1]) + " or " + flags[-1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every view's options, in a group of their own."""
    group = parser.add_argument_group("views (docs/prof.md: Where the time goes)")
    for view in VIEWS:
        view.add_arguments(group)
    filters.add_arguments(parser)


def chosen(args: argparse.Namespace) -> list[ModuleType]:
    """The views the command line asks for, checked; the per-kernel table when it names none."""
    asked = [v for v in VIEWS if v.wanted(args)] or [table]
    for view in [table] + VIEWS:
        view.check(args, asked)
    filters.build(args)  # a bad REGEX or window is a usage error before anything is read
    return asked


def run(args: argparse.Namespace, views: list[ModuleType]) -> int:
    """Run `views` (from chosen()); returns the exit status."""
    if len(views) == 1 and hasattr(views[0], "main"):
        return views[0].main(args)
    with contextlib.ExitStack() as files:
        # A sink writing a file of its own is a context manager: a failed run removes the file.
        sinks = [v.sink(args) for v in views]
        for s in sinks:
            if hasattr(s, "__exit__"):
                files.enter_context(s)
        keep = filters.build(args)
        census = None if keep is None else filters.Census(args, keep)
        fed = sinks if census is None else [filters.Filtered(s, keep) for s in sinks] + [census]
        tally = Tally()
        fast = _fast_summary(args, views)
        if fast is not None:
            sinks, tally = [fast[0]], fast[1]
        else:
            # Only the table writes while it reads: a progress line would break into its rows.
            progress = on_terminal("pyprof.prof", results_at_end=table not in views)
            feed(numbered(args.file, tally, args.strict, args.memcpy), tally, fed, args.strict, progress)
        for view, sink in zip(views, sinks):
            view.write(sink, args)
    if census is not None:
        census.report()
    tally.report()
    return 0


def _fast_summary(args: argparse.Namespace, views: list[ModuleType]) -> tuple | None:
    """--summary on a record store, from its columns (fast_summary.py: (Profile, Tally)); None
    where it does not apply, or where numpy, which it needs and prof does not, is missing."""
    if args.file == "-" or not store.is_store(args.file):
        return None
    try:
        from .. import fast_summary
    except ImportError:
        return None
    return fast_summary.profile(args, views)
