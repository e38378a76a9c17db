"""--kernel, --op, --layer, --module, --window: what every view sees; the numbers of a kept kernel
do not change (records are analysed before they are filtered) and idx stays the input's."""
from __future__ import annotations

import json

import pytest

from test_views_common import prof, trace_records, write_dict

ALL = "idx,op,kernel,flops,bytes,sil,start,module,layer"


def rows(path, *args):
    rc, out, err = prof("--json", "-c", ALL, *args, path)
    assert (rc, err) == (0, "")
    return [json.loads(line) for line in out.splitlines()]


def long_name(r):
    return trace_records("gpt")[r["idx"]]["kLongName"]


@pytest.mark.parametrize("args, keep", [
    (["--kernel", "nvjet|cudnn"], lambda r: any(t in r["kernel"] + long_name(r) for t in ("nvjet", "cudnn"))),
    # FillFunctor is in the demangled name only: the seed gradient, cross_entropy's and two embedding zero-fills
    (["--kernel", "FillFunctor"], lambda r: r["idx"] in (51, 52, 133, 135)),
    (["--op", "linear,layer_norm"], lambda r: r["op"] in ("linear", "layer_norm")),
    (["--module", "blocks.0"], lambda r: (r["module"] or "").startswith("blocks.0")),
    (["--module", "blocks.0.q"], lambda r: False),  # a path, not a text prefix
    (["--layer", "train_step"], lambda r: r["layer"] == "train_step"),
    (["--window", "20000000:25000000"], lambda r: 20000000 <= r["start"] < 25000000),
    (["--window", ":16000000"], lambda r: r["start"] < 16000000),
    (["--op", "linear", "--module", "head"], lambda r: r["op"] == "linear" and r["module"] == "head"),
])
def test_filters_keep_exactly_the_matching_rows_unchanged(tmp_path, args, keep):
    path = write_dict(tmp_path, "gpt")
    everything = rows(path)
    assert rows(path, *args) == [r for r in everything if keep(r)]


def test_a_filtered_summary_counts_only_the_kept_kernels(tmp_path):
    path = write_dict(tmp_path, "gpt")
    rc, out, _ = prof("--summary", "--json", "--op", "linear", path)
    s = json.loads(out)
    linear = [r for r in trace_records("gpt") if r["op"] == "linear"]
    assert [r["group"] for r in s["rows"]] == ["linear"] and s["header"]["kernels"] == len(linear) == 79
    assert s["rows"][0]["flops"] == 5637144576  # as unfiltered: the helpers before a GEMM still counted


@pytest.mark.parametrize("args, message", [
    (["--kernel", "("], "--kernel '(': not a regular expression (missing ), unterminated subpattern at position 0)"),
    (["--window", "5"], "--window '5': expected START:END in ns (e.g. 15000000:16000000, or 15000000:)"),
    (["--window", "9:3"], "--window '9:3': END must be after START"),
])
def test_bad_filters_are_usage_errors(args, message):
    rc, out, err = prof(*args, "x.dict")
    assert (rc, out, err) == (2, "", f"pyprof.prof: error: {message}\n")


def test_layer_matches_at_any_depth_and_only_there(tmp_path):
    from test_prof_helpers import described, record

    m = described("torch", "relu", {"shape": [4], "dtype": "float32"})
    layers = [["train_step", "encoder"], ["train_step"], [], ["train_step", "encoder", "attn"], ["decoder"]]
    path = write_dict(tmp_path, "layers", [record(m, layer=ls) for ls in layers])
    for name, kept in (("encoder", [0, 3]), ("train_step", [0, 1, 3]), ("attn", [3]), ("enc", [])):
        rc, out, err = prof("--json", "-c", "idx,layer", "--layer", name, path)
        assert (rc, err) == (0, "") and [json.loads(line)["idx"] for line in out.splitlines()] == kept
