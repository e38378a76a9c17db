"""`--html report.html`: one self-contained page to look at (report/: data.py gathers, figures.py
draws with plotly, html.py assembles); `--compare BASE` adds what changed from a base run."""
from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from ...errors import EXIT_NO_KERNELS, EXIT_USAGE, PyprofError
from ...parse.output import open_output
from ...progress import on_terminal
from ..io.reader import numbered
from ..scan import feed
from ..warnings_tally import Tally

FLAG = "--html"
ORDER = 6
JSON = False


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--html FILE, --compare BASE."""
    group.add_argument("--html", metavar="FILE",
                       help="write one self-contained HTML report (opens offline; needs plotly): the three answers "
                            "(costliest module, kernels furthest below their roof, where the GPU idles), header and "
                            "advice, sortable tables, module tree, roofline, timeline, overlap per rank")
    group.add_argument("--compare", metavar="BASE",
                       help="--html: also compare with the run BASE (records or an export): what got faster and "
                            "slower by op, module and kernel")


def wanted(args: argparse.Namespace) -> bool:
    """--html given."""
    return bool(args.html)


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """--compare goes with --html; plotly is there; the page is a file."""
    if args.compare is not None and not wanted(args):
        raise PyprofError("--compare applies to --html only (--diff BASE NEW compares in text)", EXIT_USAGE)
    if wanted(args):
        if args.html == "-":
            raise PyprofError("--html needs a file name", EXIT_USAGE)
        from ..report.html import require_plotly
        require_plotly()


# report/ builds on the views' data (summary, modules, diff): imported when used, not with this
# module, which views/__init__.py imports with every view.
def sink(args: argparse.Namespace):
    """What the page needs (report.data.Collector), gathered in the shared pass."""
    from ..report.data import Collector
    return Collector()


def base_of(path: str, strict: bool = False) -> dict:
    """The base run's groups for the comparison (diff.Totals by op, module, kernel)."""
    from ..report.data import base_sinks
    tally = Tally()
    sinks = base_sinks()
    feed(numbered(path, tally, strict), tally, list(sinks.values()), strict, on_terminal("pyprof.prof", True))
    if tally.bad_lines or tally.warnings:
        print(f"pyprof.prof: {path}:", file=sys.stderr)
        tally.report()
    if not sinks["op"].groups:
        raise PyprofError(f"--compare: {path} holds no kernel records", EXIT_NO_KERNELS)
    return sinks


def write_page(collector, path: str, title: str, base: dict | None = None) -> dict:
    """Write the page of a report.data.Collector to `path`; returns its data (report/data.py)."""
    from ..report.data import report
    from ..report.html import render
    rep = report(collector, base)
    page = render(rep, title)
    with open_output(path) as f:  # a temporary file renamed when complete (parse/output.py)
        f.write(page)
    return rep


def write(collector, args: argparse.Namespace) -> None:
    """Write the page; say where on stderr."""
    base = base_of(args.compare, args.strict) if args.compare else None
    title = "stdin" if args.file == "-" else os.path.basename(args.file)
    if base:
        title += f" compared with {os.path.basename(args.compare)}"
    write_page(collector, args.html, title, base)
    print(f"pyprof.prof: report written to {args.html} ({os.path.getsize(args.html) / 1e6:.1f} MB)", file=sys.stderr)
