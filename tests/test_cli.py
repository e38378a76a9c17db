"""What the three commands share: --version, -h exiting 0, one-line usage errors with status 2,
the console scripts pyproject.toml declares, and the plural of the counts they print."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import pyprof
from pyprof.text import count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = {"pyprof.parse": "pyprof.parse.__main__", "pyprof.prof": "pyprof.prof.__main__",
         "pyprof.capture": "pyprof.capture"}


def run(tool: str, *args: str, script: bool = False) -> subprocess.CompletedProcess:
    """`python -m tool ARGS`, or the console script's entry point run as `pyprof-x` (argv[0])."""
    if script:
        name = "pyprof-" + tool.split(".")[1]
        code = f"import sys; sys.argv[0] = {name!r}; from {TOOLS[tool]} import cli; cli()"
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [sys.executable, "-m", tool, *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_version(tool):
    done = run(tool, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{tool} {pyprof.__version__}\n", "")


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_help_exits_0_and_names_the_way_it_was_run(tool):
    done = run(tool, "--help")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(f"usage: python -m {tool} ") and "--version" in done.stdout
    script = run(tool, "-h", script=True)
    assert script.returncode == 0 and script.stdout.startswith(f"usage: pyprof-{tool.split('.')[1]} ")


@pytest.mark.parametrize("tool, args, message", [
    ("pyprof.parse", ["--no-such-option", "x.sqlite"], "unrecognized arguments: --no-such-option"),
    ("pyprof.parse", [], "the following arguments are required: input"),
    ("pyprof.prof", ["--by", "nope"], "argument --by: invalid --by 'nope': one of op, kernel, shape, layer, "
                                      "module, dir, tc, level, stream, rank, coll, call, or several joined by commas (op,shape), each once"),
    ("pyprof.prof", ["-w", "wide"], "argument -w/--width: invalid int value: 'wide'"),
    ("pyprof.capture", ["-o"], "argument -o/--output: expected one argument"),
    ("pyprof.capture", ["-o", "x"], "put the program to profile after '--': python -m pyprof.capture -- "
                                    "python train.py"),
    ("pyprof.capture", ["--"], "no program after '--'"),
])
def test_usage_errors_are_one_line_with_status_2(tool, args, message):
    done = run(tool, *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{tool}: error: {message} (-h for help)\n"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_help_lists_each_exit_status_once_from_the_shared_table(tool):
    """-h's exit-status block is the tool's STATUSES, each once, in order, every one a status of
    pyprof/errors.py's table (the fuzz harness checks every generated run against STATUSES)."""
    import re

    from pyprof import errors

    statuses = importlib.import_module(TOOLS[tool]).STATUSES
    table = {v for k, v in vars(errors).items() if k.startswith("EXIT_")} | {0}
    assert set(statuses) <= table and {errors.EXIT_USAGE, errors.EXIT_INTERRUPTED} <= set(statuses)
    out = run(tool, "-h").stdout
    block = out[out.index("exit status:\n"):].splitlines()
    listed = [int(m.group(1)) for line in block[1:] if (m := re.match(r"  (\d+) +\S", line))]
    assert listed == sorted(statuses)
    assert f"A failure is one line on stderr, `{tool}: error: ...`." in block


@pytest.mark.slow
def test_output_that_cannot_be_written_is_status_10_with_the_same_words(tmp_path):
    """parse -o, prof --plot and capture's NAME share errors.cannot_write (and --parquet, in
    test_prof_forms.py)."""
    where = tmp_path / "no" / "such"
    lenet = os.path.join(ROOT, "examples", "lenet.sqlite")
    res = run("pyprof.parse", lenet, "-o", f"{where}.dict")
    assert (res.returncode, res.stderr) == (10, f"pyprof.parse: error: {where}.dict: cannot write (No such file "
                                                "or directory)\n")
    records = run("pyprof.parse", lenet).stdout
    pytest.importorskip("matplotlib")
    res = subprocess.run([sys.executable, "-m", "pyprof.prof", "--plot", f"{where}.png"], input=records,
                         capture_output=True, text=True, cwd=ROOT)
    assert (res.returncode, res.stderr) == (10, f"pyprof.prof: error: {where}.png: cannot write (No such file "
                                                "or directory)\n")


def test_pyproject_declares_the_console_scripts_and_reads_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    scripts = project["project"]["scripts"]
    assert sorted(scripts) == ["pyprof-capture", "pyprof-parse", "pyprof-prof"]
    for name, target in scripts.items():
        module, func = target.split(":")
        assert module == TOOLS["pyprof." + name.split("-")[1]]
        assert callable(getattr(importlib.import_module(module), func))
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pyprof.__version__"}
    assert project["project"]["license"] == "BSD-3-Clause"
    assert open(os.path.join(ROOT, "LICENSE")).readline().strip() == "BSD 3-Clause License"


@pytest.mark.parametrize("n, noun, text", [
    (0, "kernel", "0 kernels"), (1, "kernel", "1 kernel"), (2, "kernel", "2 kernels"),
    (1, "malformed pyprof marker", "1 malformed pyprof marker"), (3, "range", "3 ranges"),
])
def test_count_says_the_noun_in_the_right_number(n, noun, text):
    assert count(n, noun) == text
