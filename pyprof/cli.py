"""The command line the tools share: the name they were run by, `--version`, and usage errors.

argparse reports a bad command line as its whole usage block followed by the message; the tools
report every other fatal problem as one line (errors.run_cli). Usage errors are raised as
PyprofError instead, so they come out the same way: `pyprof.prof: error: MESSAGE (-h for help)`
with status EXIT_USAGE (a value holding a line break is shown escaped by run_cli). Every tool's
-h lists its exit statuses (errors.py's table) through exit_statuses(), each once.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import Any, Mapping, NoReturn

from pyprof import __version__
from pyprof.errors import EXIT_USAGE, PyprofError


def invoked_as(tool: str) -> str:
    """How the user ran `tool` ("pyprof.prof"): `pyprof-prof` through the console script,
    otherwise `python -m pyprof.prof`; usage lines and examples show that spelling."""
    script = "pyprof-" + tool.rsplit(".", 1)[-1]
    return script if os.path.basename(sys.argv[0]) == script else f"python -m {tool}"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser for `tool` with `--version` and one-line usage errors."""

    def __init__(self, tool: str, **kwargs: Any) -> None:
        kwargs.setdefault("prog", invoked_as(tool))
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)
        self.add_argument("--version", action="version", version=f"{tool} {__version__}",
                          help="print the version and exit")

    def error(self, message: str) -> NoReturn:
        """Raise instead of printing the usage block: run_cli prints one line and exits EXIT_USAGE."""
        raise PyprofError(f"{message} (-h for help)", EXIT_USAGE)


def exit_statuses(tool: str, meanings: Mapping[int, str]) -> str:
    """The exit-status block of `tool`'s -h: each status of errors.py's table the tool can end
    with, once, in order, with what it means for this tool."""
    lines = ["exit status:"]
    for status, meaning in sorted(meanings.items()):
        lines += textwrap.wrap(meaning, 100, initial_indent=f"  {status:<5}", subsequent_indent=" " * 7)
    lines.append(f"A failure is one line on stderr, `{tool}: error: ...`.")
    return "\n".join(lines)
