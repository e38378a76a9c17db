"""docs/tutorial.md pastes what each of its `$ ` commands printed: run again, each prints it still."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEPS = re.findall(r"```\n\$ ([^\n]+)\n(.*?)```", (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8"), re.S)


def test_the_tutorial_has_its_steps():
    assert len(STEPS) == 6 and all(printed for _, printed in STEPS)


@pytest.mark.parametrize("command, printed", STEPS, ids=[f"step{i}" for i in range(len(STEPS))])
def test_each_command_prints_what_the_tutorial_shows(command, printed):
    argv = shlex.split(command)
    if "pandas" in command or "dataframe" in command:
        pytest.importorskip("pandas")
    res = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout == printed
