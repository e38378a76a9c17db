"""`--summary --by call`: one row per op call (pyprof/prof/pricing/calls.py), with the call's whole work,
including what beyond_peak withheld from a kernel that could not have done it in its time."""
from __future__ import annotations

import json

import pytest

from pyprof.prof.groups import Groups, by_keys
from pyprof.prof.io.reader import records
from pyprof.prof.scan import analysed
from pyprof.prof.views.summary import collect, report
from pyprof.prof.warnings_tally import Tally
from test_prof_beyond_peak import ADD_BYTES, ADD_FLOPS, BYTES, FLOPS, TF32_PEAK, linear_call
from test_prof_captures import TRUTH_GRU, TRUTH_GRU_BWD, captured
from test_views_common import prof, stream, write_dict

FP32_PEAK = 67.0


def rows(recs: list[dict], by: str) -> dict:
    """{group: row} of the --summary --json object of `recs` grouped `by`."""
    rep = report(collect(records(stream(recs), Tally()), Tally(), by))
    return {r["group"]: r for r in rep["rows"]}


def two_calls() -> list[dict]:
    """The same F.linear called twice: its GEMM 200 ns (above the TF32 peak for its FLOPs),
    then 10 us (within it); each call's bias added by a 2 us kernel."""
    first, second = linear_call(200), linear_call(10_000)
    for r in second:
        r["kStart"] += 50_000
        r["kEnd"] += 50_000
    return first + second


def test_a_call_carries_its_total_where_its_kernel_s_share_is_withheld():
    by_call = rows(two_calls(), "call")
    shapes = "[64,1024],[1024,1024],[1024]"
    assert sorted(by_call) == [f"1 fprop linear net.fc {shapes}", f"2 fprop linear net.fc {shapes}"]
    first = by_call[f"1 fprop linear net.fc {shapes}"]
    assert (first["call"], first["dir"], first["op"], first["module"], first["shape"]) == \
        ("1", "fprop", "linear", "net.fc", shapes)
    assert (first["count"], first["time_ns"], first["flops"], first["flops_na"], first["bytes"], first["bytes_na"]) \
        == (2, 2200, FLOPS + ADD_FLOPS, 0, BYTES + ADD_BYTES, 0)
    # The honest rate: the call's FLOPs over what both kernels could do at their own peaks.
    capacity = 200 * TF32_PEAK * 1e3 + 2000 * FP32_PEAK * 1e3
    assert first["pct_peak"] == pytest.approx((FLOPS + ADD_FLOPS) / capacity * 100) and first["pct_peak"] < 100
    assert first["tflops"] == pytest.approx((FLOPS + ADD_FLOPS) / 2200 * 1e-3)


def test_groupings_that_split_calls_count_the_withheld_kernel_unknown():
    recs = two_calls()
    by_kernel = {r["kernel"]: r for r in rows(recs, "kernel").values()}
    gemm = by_kernel["cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4"]
    assert (gemm["count"], gemm["flops"], gemm["flops_na"], gemm["bytes_na"]) == (2, FLOPS, 1, 1)
    assert gemm["pct_peak"] == pytest.approx(FLOPS / (10_000 * TF32_PEAK * 1e3) * 100)
    linear = rows(recs, "op")["linear"]
    assert (linear["flops"], linear["flops_na"], linear["bytes"]) == (2 * (FLOPS + ADD_FLOPS), 0, 2 * (BYTES + ADD_BYTES))


def test_rolling_a_split_grouping_up_to_a_whole_one_counts_the_withheld_work():
    """The HTML report groups finely (by op and kernel, ...) and rolls up to op."""
    fine, direct = Groups("op,kernel"), Groups("op")
    for rec, f, _ in analysed(records(stream(two_calls()), Tally()), Tally()):
        fine.add(rec, f, rec["kDuration"])
        direct.add(rec, f, rec["kDuration"])
    rolled, same = fine.rolled_up("op").groups["linear"], direct.groups["linear"]
    assert [(g.flops, g.flops_na, g.flops_time, g.capacity, g.bytes, g.bytes_na, g.bytes_time) for g in (rolled, same)] \
        == [(2 * (FLOPS + ADD_FLOPS), 0, 14_200, same.capacity, 2 * (BYTES + ADD_BYTES), 0, 14_200)] * 2


def test_call_brings_its_direction_op_module_and_shapes():
    assert by_keys("call") == ["call", "dir", "op", "module", "shape"]
    assert by_keys("op,call") == ["op", "call", "dir", "module", "shape"]
    assert by_keys("call,kernel") == ["call", "dir", "op", "module", "shape", "kernel"]


def test_cudnn_gru_calls_sum_to_the_formula_on_a_real_capture(tmp_path):
    """truth_gru (nn.GRU(256, 256), one step on an H100): each kernel carries its own work
    (rnn_kernels.py), so nothing is withheld and nothing is na; the backward's two zero fills
    (dh_n's and the flat weight gradient buffer's) are parts, 0 FLOPs and their bytes, its bias
    gradients' sum (GRU_elementWise_bp2), input gradient and three weight gradients their own,
    and each of its 16 split-K reductions its 5 adds an element of the step's 64 x 256 dh (4
    partials' sums and dh's, beta 1). Each call's FLOPs are the formula's, the backward's plus
    those adds, by call and by op alike, and a grouping by kernel rolled up to op agrees. No call
    is above its peak."""
    recs = captured("truth_gru", tmp_path)
    kernels = list(analysed(records(stream(recs), Tally()), Tally()))
    assert [(rec["dir"], rec["op"]) for rec, f, _ in kernels if f.flops is None or f.bytes is None] == []
    sums: dict = {}
    for _rec, f, _ in kernels:
        s = sums.setdefault(str(f.call), [0, 0])
        s[0] += 1
        s[1] += f.whole_work()[0] or 0
    by_call = rows(recs, "call").values()
    assert {r["call"]: [r["count"], r["flops"] or 0] for r in by_call} == sums
    gru = {r["dir"]: r for r in by_call if r["op"] == "gru"}
    count = {d: sum(1 for r in recs if r["op"] == "gru" and r["dir"] == d) for d in ("fprop", "bprop")}
    reductions = 16 * 5 * 64 * 256
    assert {d: (r["flops"], r["flops_na"], r["bytes_na"], r["count"]) for d, r in gru.items()} == {
        "fprop": (TRUTH_GRU, 0, 0, count["fprop"]), "bprop": (TRUTH_GRU_BWD + reductions, 0, 0, count["bprop"])}
    backward = [f for rec, f, _ in kernels if rec["op"] == "gru" and rec["dir"] == "bprop"]
    step, cell = 2 * 64 * 768 * 256, 64 * 256 * 17
    bias_grad = 2 * (1024 - 1) * 768
    gemms = 2 * 1024 * 768 * 256 + 2 * 768 * 256 * (64 + 960 + 1024)  # dX, dW_hh (h0's step and the rest), dW_ih
    assert sum(f.flops for f in backward) == 16 * (step + 2 * cell) + bias_grad + gemms + reductions
    assert [f.call_work for f in backward] == [None] * len(backward)
    fine, direct = Groups("op,kernel"), Groups("op")
    for rec, f, _ in kernels:
        fine.add(rec, f, rec["kDuration"])
        direct.add(rec, f, rec["kDuration"])
    rolled, same = fine.rolled_up("op").groups["gru"], direct.groups["gru"]
    assert [(g.flops, g.flops_na, g.flops_time, g.bytes, g.bytes_na) for g in (rolled, same)] == \
        [(TRUTH_GRU + TRUTH_GRU_BWD + reductions, 0, same.time, same.bytes, 0)] * 2
    assert max(r["pct_peak"] or 0 for r in by_call) < 100


def test_a_foreach_step_split_over_launches_sums_to_its_formula_on_a_real_capture(tmp_path):
    """resnet_default (examples/resnet.py on an H100, default mode: no op ranges' sizes): SGD's
    `_foreach_add` over all parameters runs as two launches whose split is na; the first carries
    the rest of the step's FLOPs for whole-call sums, so the call's FLOPs are the formula's. Its
    bytes stay the known launches' sum (each pass re-reads the parameters the formula counts
    once: 374 MB against the formula's 234 MB)."""
    recs = captured("default_mode/resnet_default", tmp_path)
    kernels = [(rec, f) for rec, f, _ in analysed(records(stream(recs), Tally()), Tally()) if rec["op"] == "SGD.step"]
    own = [f.flops for _rec, f in kernels]
    assert own == [None, None, 11_689_512, 23_379_024, 23_379_024]
    total = kernels[0][1].cost.flops
    assert (total, kernels[0][1].call_work, [f.call_work for _rec, f in kernels[1:]]) == \
        (70_137_072, (total, None), [(0, None)] + [(0, f.bytes) for _rec, f in kernels[2:]])
    row = next(r for r in rows(recs, "call").values() if r["op"] == "SGD.step")
    assert (row["flops"], row["flops_na"], row["bytes"], row["bytes_na"]) == \
        (total, 0, sum(f.bytes for _rec, f in kernels[2:]), 2)
    assert kernels[0][1].cost.bytes < row["bytes"]


def test_the_command_line_prints_one_row_per_call(tmp_path):
    path = write_dict(tmp_path, "calls", two_calls())
    rc, out, err = prof("--summary", "--by", "call", "--json", path)
    rep = json.loads(out)
    assert rc == 0 and rep["by"] == "call,dir,op,module,shape" and len(rep["rows"]) == 2
    assert "FLOPs beyond the GPU's peak in the kernel's time" in err
    rc, out, _ = prof("--summary", "--by", "call", "--csv", path)
    assert out.splitlines()[0].startswith("call,dir,op,module,shape,time_ns,")
    rc, out, _ = prof("-h")
    assert "call: one row per op call" in " ".join(out.split())
