"""The command line the tools share: the name they were run by, `--version`, and usage errors.

argparse reports a bad command line as its whole usage block followed by the message; the tools
report every other fatal problem as one line (errors.run_cli). Usage errors are raised as
PyprofError instead, so they come out the same way: `pyprof.prof: error: MESSAGE (-h for help)`
with status EXIT_USAGE.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

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
