"""The annotation's copy of prof's op table (pyprof/nvtx/priced.py) is prof's registry, name for
name: `pyprof.init()` decides from it which calls hide the calls inside them (docs/annotation.md),
without importing prof. After adding or removing an op formula, regenerate it:

    python tests/prof/test_prof_priced.py

and commit the table with the formula (docs/maintaining.md, "(a) An op formula").
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parents[2] / "pyprof" / "nvtx" / "priced.py"


def prof_names() -> list[str]:
    """The names prof's op table registers, in a fresh interpreter: here, other tests have added
    users' formulas (pyprof.register_cost) to the table."""
    code = "from pyprof.prof.pricing.ops import registered; print(*registered(), sep=chr(10))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def table_text() -> str:
    """pyprof/nvtx/priced.py as the registry makes it: one qualified name a line, sorted."""
    names = "\n".join(prof_names())
    return f'''"""The qualified names (`mod.op`) prof's op table prices, for `pyprof.init()`: a wrapped call of
one of them hides the wrapped calls inside it (docs/annotation.md). Generated from
pyprof/prof/pricing/registry.py by `python tests/prof/test_prof_priced.py`; tests/prof/test_prof_priced.py
fails while it differs from the registry. A copy rather than an import, so that what a capture
holds does not depend on the analysis code installed beside it (docs/maintaining.md)."""
PRICED = frozenset("""
{names}
""".split())
'''


def test_the_annotations_table_is_prof_registry():
    assert TABLE.read_text() == table_text(), "run: python tests/prof/test_prof_priced.py"


def test_the_table_holds_what_init_asks_about():
    from pyprof.nvtx.priced import PRICED

    assert PRICED == frozenset(prof_names())
    assert {"torch.nn.functional.conv2d", "Tensor.__add__", "torch.matmul"} <= PRICED
    assert "torch.nn.functional.multi_head_attention_forward" not in PRICED  # docs/annotation.md's example


if __name__ == "__main__":
    TABLE.write_text(table_text())
    sys.stdout.write(f"wrote {TABLE} ({len(prof_names())} names)\n")
