"""Issue 31, item 11: under init(), warnings torch raises inside a wrapped call pointed at
pyprof/nvtx/wrappers.py instead of the user's line, so `filterwarnings(module="__main__")`
stopped matching and the default filter (once per location) merged call sites. They now point
where they point without pyprof (pyprof/nvtx/warnsite.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the wrappers annotate torch calls")
import torch.nn.functional as F  # noqa: E402

import pyprof  # noqa: E402
from pyprof.nvtx import recording  # noqa: E402

HERE = __file__
ROOT = Path(__file__).resolve().parents[2]


def _line() -> int:
    return sys._getframe(1).f_lineno


def _places(markers: bool) -> list[tuple]:
    x = torch.ones(3)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with recording() if markers else warnings.catch_warnings():
            line = _line() + 1
            torch.tensor(x)        # raised in C++ (TORCH_WARN): the innermost Python frame
            F.softmax(x)           # warnings.warn(stacklevel=...) in torch's Python code
            x.new_tensor(x)        # a Tensor method
    return [(m.category, m.filename, m.lineno) for m in got], line


@pytest.mark.parametrize("markers", [False, True])
def test_warnings_of_wrapped_calls_point_at_the_callers_line(markers) -> None:
    expected, line = _places(False)
    assert [(c, f, n - line) for c, f, n in expected] == [(UserWarning, HERE, 0), (UserWarning, HERE, 1),
                                                          (UserWarning, HERE, 2)]
    pyprof.init()
    try:
        got, line_on = _places(markers)
    finally:
        pyprof.restore()
    assert got == expected and line_on == line
    assert not any(f[0] == "always" and f[3] is not None and "pyprof" in f[3].pattern for f in warnings.filters)


SCRIPT = """
import warnings, torch
import pyprof
{init}
{filters}
x = torch.ones(3)
torch.tensor(x)
torch.tensor(x)
for _ in range(2):
    torch.tensor(x)
"""


@pytest.mark.parametrize("filters, shown", [
    ("", [7, 8, 10]),                                              # default: once per line
    ('warnings.filterwarnings("ignore", module="__main__")', []),
    ('warnings.simplefilter("once")', [7]),
    ('warnings.simplefilter("default")', [7, 8, 10]),
    ('warnings.simplefilter("always")', [7, 8, 10, 10]),
    ('warnings.filterwarnings("error", module="__main__")', "error"),
])
def test_filters_see_the_callers_module_and_line(tmp_path, filters, shown) -> None:
    """The same script without pyprof and under init() (markers off: the wrappers' frames are
    there all the same) warns on the same lines; the filters see the user's module."""
    script = tmp_path / "user.py"
    for init in ("pass", "pyprof.init()"):
        script.write_text(SCRIPT.format(filters=filters, init=init))
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        if shown == "error":
            assert proc.returncode == 1 and proc.stderr.splitlines()[-1].startswith("UserWarning: To copy construct")
            assert f'File "{script}", line 7' in proc.stderr
            continue
        assert proc.returncode == 0, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if "UserWarning" in line]
        assert [int(line.split(":")[1]) for line in lines] == shown, proc.stderr
        assert all(line.startswith(f"{script}:") for line in lines)
