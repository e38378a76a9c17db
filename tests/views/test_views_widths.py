"""Every default table and view fits the line: at 80, 120 and 200 characters no line of the
per-kernel table, --summary (each --by), --modules, --longest, --diff, --overlap and --stragglers is
longer; columns that do not fit are left out (and said on stderr), names are cut in the middle
and stay distinct."""
from __future__ import annotations

import io
import json
import lzma
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from pyprof.prof.__main__ import main
from pyprof.prof.groups import KEYS
from pyprof.prof.io.output import TextColumn, columnated_writer, distinct, fit
from pyprof.prof.units import group_label
from test_views_common import ROOT, write_dict

WIDTHS = (80, 120, 200)
DATA = Path(ROOT) / "tests" / "data"


def run(*argv: str) -> tuple[int, str, str]:
    """(status, stdout, stderr) of prof in this process (stdout is no terminal: -w decides)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return write_dict(tmp_path_factory.mktemp("gpt"), "gpt")


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """The two-rank DDP capture of tests/data, parsed side by side."""
    folder = tmp_path_factory.mktemp("ddp")
    for rank in (0, 1):
        (folder / f"ddp_{rank}.sqlite").write_bytes(
            lzma.decompress((DATA / f"ddp_{rank}.sqlite.xz").read_bytes()))
    out = folder / "ddp.dict"
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", str(folder), "-o", str(out)], capture_output=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return str(out)


def first_column(table: str) -> list[str]:
    """The name cells of a columnated table (its header's second word starts the next column)."""
    lines = table.splitlines()
    second = lines[0].index(lines[0].split()[1], len(lines[0].split()[0]))
    return [line[:second].rstrip() for line in lines[1:] if not line.startswith("...")]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_default_table_fits_and_says_what_it_left_out(gpt, width):
    rc, out, err = run("-w", str(width), gpt)
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 140 and max(map(len, lines)) <= width
    header = lines[0].split()
    assert {"Op", "Kernel", "Sil(ns)"} <= set(header)
    if width == 80:  # 133 characters at the columns' starting widths: the least useful ones go
        assert header == ["Idx", "Direction", "Op", "Kernel", "Params", "Sil(ns)"]
        assert err == "pyprof.prof: to fit 80 characters, left out Sub, Module; -w 86 shows all\n"
    else:
        assert header == ["Idx", "Direction", "Sub", "Module", "Op", "Kernel", "Params", "Sil(ns)"] and err == ""


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("by", list(KEYS))
def test_summary_fits_with_every_by_and_keeps_names_distinct(gpt, width, by):
    rc, out, err = run("--summary", "--by", by, "--json", gpt)
    rep = json.loads(out)
    rows = rep["rows"]
    labels = [group_label(r, rep["by"].split(",")) for r in rows]  # `call` brings dir, op, module, shape
    rc, out, err = run("--summary", "--by", by, "-w", str(width), gpt)
    assert rc == 0 and max(map(len, (out + err).splitlines())) <= width
    table = out.split("\n\n")[1]
    names = first_column(table)
    assert len(names) == len(rows) and len(set(names)) == len(set(labels))  # cut, never merged
    assert all(n == label or "\u2026" in n or n.endswith(("~2", "~3")) for n, label in zip(names, labels))


def test_summary_by_kernel_at_120_shows_different_kernels_apart(gpt):
    """The issue: cut to 24 characters at the end, vectorized_elementwise_kernel<...> rows all read
    `vectorized_elementwise_…`; cut in the middle, they keep the functor that tells them apart."""
    rc, out, err = run("--summary", "--by", "kernel", "-w", "120", gpt)
    names = first_column(out.split("\n\n")[1])
    assert len(names) == len(set(names)) == 35  # 35 different demangled names
    assert "unrolled_elemen\u2026<direct_copy_kernel_cuda(Tenso" in names
    assert "unrolled_elemen\u2026<CUDAFunctor_add<float>, array" in names
    assert not any(n.startswith("vectorized_elementwise_\u2026") for n in names)
    assert err == "pyprof.prof: to fit 120 characters, left out Med, Min, Max, StdDev, Bytes; -w 160 shows all\n"


@pytest.mark.parametrize("width", WIDTHS)
def test_modules_longest_and_diff_fit(gpt, width):
    for argv in (["--modules", gpt], ["--longest", "20", gpt], ["--diff", gpt, gpt, "--by", "kernel"],
                 ["--diff", gpt, gpt]):
        rc, out, err = run(*argv, "-w", str(width))
        assert rc == 0 and max(map(len, out.splitlines())) <= width, argv
        assert len(set(first_column(out))) == len(set(first_column(run(*argv)[1]))), argv  # as many as uncut


@pytest.mark.parametrize("width", WIDTHS)
def test_overlap_and_stragglers_fit(ddp, width):
    for view in ("--overlap", "--stragglers"):
        rc, out, err = run(view, "-w", str(width), ddp)
        assert rc == 0 and max(map(len, out.splitlines())) <= width and out.count("\n") > 5, view
    rc, out, err = run("--stragglers", "-w", "80", ddp)
    assert out.splitlines()[0].split() == ["Collective", "#", "Size", "Skew", "Slowest", "Transfer", "BusBW"]
    assert err == "pyprof.prof: to fit 80 characters, left out Group, Ranks; -w 89 shows all\n"


def test_into_a_pipe_nothing_is_cut_or_left_out(gpt):
    rc, out, err = run("--summary", "--by", "kernel", gpt)
    table = out.split("\n\n")[1]
    assert rc == 0 and err == "" and "\u2026" not in out and table.splitlines()[0].split()[-1] == "%TC"


def test_middle_cut_and_distinct_names():
    assert fit("vectorized_elementwise_kernel<4, GeluFunctor>", 20, middle=True) == "vectorize\u2026luFunctor>"
    assert fit("scaled_dot_product_attention", 11) == "scaled_dot\u2026"
    names = ["vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, Array<char*, 3>>",
             "vectorized_elementwise_kernel<4, GeluFunctor<float>, Array<char*, 3>>",
             "vectorized_elementwise_kernel<4, MulFunctor<float>, Array<char*, 3>>"]
    cut = distinct(names, 24)
    assert len(set(cut.values())) == 3 and all(len(v) == 24 for v in cut.values())
    assert cut[names[1]] == "vectori\u2026 GeluFunctor<flo"
    same = ["a" * 30 + "x" + "b" * 30, "a" * 30 + "y" + "b" * 30]  # differ only where no cut can show both
    assert len(set(distinct(same, 10).values())) == 2


def test_a_column_left_out_still_takes_its_value_from_each_row():
    out = io.StringIO()
    err = io.StringIO()
    with redirect_stderr(err):
        row = columnated_writer(out, [TextColumn("Name", 10, True), TextColumn("Extra", 30, priority=1),
                                      TextColumn("Time", 6)], 20)
    row(["linear", "dropped", "1.0 us"])
    assert out.getvalue().splitlines() == ["Name          Time", "linear        1.0 us"]
    # The note is broken to the line too (at 40 characters at the least).
    assert err.getvalue() == "pyprof.prof: to fit 20 characters, left\n  out Extra; -w 46 shows all\n"


def test_a_terminal_too_narrow_for_a_table_wraps_it_rather_than_failing(monkeypatch, gpt):
    """-w narrower than what a table never leaves out is a usage error; a terminal that narrow
    (a split pane) gets the narrowest table, wrapped, and status 0."""
    from pyprof.prof.io import output
    from pyprof.prof.views import summary, table

    for mod in (output, summary):
        monkeypatch.setattr(mod, "terminal_width", lambda out=None: 20)
    monkeypatch.setattr(table, "terminal_width", lambda: 20)
    rc, out, err = run(gpt)
    assert rc == 0 and out.splitlines()[0] == "Op       Kernel   Sil(ns)"  # op and kernel at 8, sil
    rc, out, err = run("--summary", gpt)
    assert rc == 0 and out.split("\n\n")[1].splitlines()[0] == "Op         Time"  # the name takes 20 - Time
    rc, out, err = run("--overlap", gpt)
    assert rc == 0 and out.splitlines()[2].split() == ["Rank", "Step", "Span", "Compute", "Comm", "Both", "Exposed",
                                                       "%Hidden"]
