"""prof's output on the shipped GPT trace, byte for byte: the --summary --json object and the
CSV of every column, as committed under tests/data/golden/ (made before the views/ refactor).

A change that moves a number on purpose (a new op formula, a new column) regenerates them:

    python -m pyprof.parse examples/gpt.sqlite > /tmp/gpt.dict
    python -m pyprof.prof --summary --json /tmp/gpt.dict > tests/data/golden/gpt.summary.json
    python -m pyprof.prof --csv -c "$(python -c 'from pyprof.prof.columns import COLUMNS; \\
        print(",".join(c.name for c in COLUMNS))')" /tmp/gpt.dict > tests/data/golden/gpt.columns.csv

and the diff of the golden files shows what moved.
"""
from __future__ import annotations

import os

import pytest

from pyprof.prof.columns import COLUMNS
from test_views_common import ROOT, prof, write_dict

GOLDEN = os.path.join(ROOT, "tests", "data", "golden")


@pytest.mark.parametrize("args,golden", [
    (["--summary", "--json"], "gpt.summary.json"),
    (["--csv", "-c", ",".join(c.name for c in COLUMNS)], "gpt.columns.csv"),
])
def test_gpt_output_is_golden(tmp_path, args, golden):
    rc, out, err = prof(*args, write_dict(tmp_path, "gpt"))
    with open(os.path.join(GOLDEN, golden), encoding="utf-8", newline="") as f:
        want = f.read()
    # Every kernel priced (Tensor.backward's seed fill by the call's own marker): no warnings.
    assert rc == 0 and err == ""
    assert out == want
