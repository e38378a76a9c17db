"""--kernel, --op, --layer, --module, --window: what every view sees; the numbers of a kept kernel
do not change (records are analysed before they are filtered) and idx stays the input's."""
from __future__ import annotations

import json

import pytest

from test_views_common import prof, trace_records, write_dict

ALL = "idx,op,kernel,flops,bytes,sil,start,module,layer"


def rows(path, *args):
    rc, out, err = prof("--json", "-c", ALL, *args, path)
    kept = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and (err == "" if kept else err.startswith("pyprof.prof: warning: no kernel matched"))
    return kept


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
@pytest.mark.slow
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
    # As unfiltered: the helpers before a GEMM still counted, and the bias gradients' adds (eight
    # sums of 512 rows into 256, 768 or 1024, 2,354,688 FLOPs).
    assert s["rows"][0]["flops"] == 5637144576 + 2354688


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
        assert [json.loads(line)["idx"] for line in out.splitlines()] == kept
        assert (rc, err) == (0, "" if kept else "pyprof.prof: warning: no kernel matched --layer enc (of 5 records); "
                                                "no layer 'enc' (did you mean encoder?)\n")


@pytest.mark.parametrize("args, why", [
    (["--op", "lineer"], "no kernel matched --op lineer (of 139 records); no op 'lineer' (did you mean linear?)"),
    (["--module", "blocks.3", "--kernel", "gemm"], "no kernel matched --kernel gemm --module blocks.3 (of 139 "
     "records); no module 'blocks.3' (did you mean blocks.1 or blocks.0 or blocks.1.fc?)"),
    (["--layer", "trainstep"], "no kernel matched --layer trainstep (of 139 records); no layer 'trainstep' (did "
     "you mean train_step?)"),
    (["--op", "linear", "--module", "tok"], "no kernel matched --op linear --module tok (of 139 records)"),
    (["--window", "1:2"], "no kernel matched --window 1:2 (of 139 records)"),
])
@pytest.mark.parametrize("view", [[], ["--summary"], ["--modules"]])
def test_a_filter_that_matches_nothing_says_why(tmp_path, args, why, view):
    rc, out, err = prof(*view, *args, write_dict(tmp_path, "gpt"))
    assert rc == 0 and err == f"pyprof.prof: warning: {why}\n"


def test_a_filter_that_matches_says_nothing(tmp_path):
    rc, out, err = prof("--op", "lineer,linear", write_dict(tmp_path, "gpt"))
    assert rc == 0 and err == "" and len(out.splitlines()) == 80


def test_stragglers_of_one_rank_say_why_the_table_is_empty(tmp_path):
    rc, out, err = prof("--stragglers", write_dict(tmp_path, "gpt"))
    assert rc == 0 and err == ("pyprof.prof: warning: --stragglers: the records hold one rank (0 NCCL kernels): "
                               "nothing to compare; parse the exports of every rank together (python -m "
                               "pyprof.parse trace_*.sqlite -o job.dict)\n")


def test_diff_says_when_the_filters_kept_nothing_of_a_side(tmp_path):
    path = write_dict(tmp_path, "gpt")
    rc, out, err = prof("--diff", path, path, "--op", "lineer")
    assert (rc, out) == (5, "") and err == f"pyprof.prof: error: --diff: {path} holds no kernel records that the " \
                                           "filters keep\n"
