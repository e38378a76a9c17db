"""Backward kernels attributed through the sequence payloads of pyprof op ranges and PyTorch's
node ranges alone (pyprof/parse/spans.py; docs/markers.md, "Payload")."""
from __future__ import annotations

import json
from pathlib import Path

from nsys_synth import SynthExport, marker, seq_payload, torch_text
from pyprof.parse import Export, Stats, records

LINEAR = marker("op", mod="torch.nn.functional", op="linear", args=[{"shape": [64, 512], "dtype": "float16"}],
                site="train.py:10", module="enc.fc")
XENT = marker("op", mod="torch.nn.functional", op="cross_entropy", args=[], site="train.py:12")
DROPOUT = marker("op", mod="torch.nn.functional", op="dropout", args=[], site="train.py:11")
MUL = marker("op", mod="torch", op="mul", args=[], site="train.py:13", module="head")
BACKWARD = marker("op", mod="Tensor", op="backward", args=[], site="train.py:14")
# The weight's gradient added into its .grad (gradient accumulation), 256 x 512 fp32.
ACCUMULATE = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
              "std::array<char *, (unsigned long)3>>(int, T2, T3)")


def step(path: Path, *, payloads: bool = True, column: bool = True, backward_call: bool = True,
         aten: bool = False, linear: str = LINEAR) -> str:
    """Forward on the main thread in layer `encoder`: linear (creates nodes 11, 12), dropout
    (none), then code no wrapper saw (nodes 15, 16: the gap), mul (17), cross_entropy (18, 19);
    `backward_call`: a Tensor.backward range (payload 20) closes cross_entropy's span. Backward on
    the autograd thread, node ranges only, one kernel each (correlation ids 6.. in this order):
    NllLoss 19, LogSoftmax 18, Mul 17, Mul 16 (gap), Addmm 12, T 11, AccumulateGrad (an add of the
    weight's 256 x 512 gradient into its .grad). `aten`: an
    emit_nvtx range "aten::addmm, seq = 12" inside linear as well."""
    syn = SynthExport(str(path), int64_value=column)
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)

    def op(start: int, text: str, seq: int, gap: int = 0) -> None:
        syn.push(main, start, start + 1000, text, domain=dom, registered=True,
                 payload=seq_payload(seq, gap) if payloads else None)
        syn.launch_kernel(main, start + 500, "ampere_sgemm_128x64_nn")

    syn.push(main, 500, 20000, "layer:encoder")
    op(1000, linear, 11)
    if aten:
        syn.push(main, 1100, 1900, torch_text("aten::addmm", seq=12, op_id=1))
    op(3000, DROPOUT, 13)
    op(5000, MUL, 17, gap=2)
    op(7000, XENT, 18)
    if backward_call:
        syn.push(main, 9000, 90000, BACKWARD, domain=dom, registered=True,
                 payload=seq_payload(20) if payloads else None)
    t = 10000
    nodes = [("NllLossBackward0", 19), ("LogSoftmaxBackward0", 18), ("MulBackward0", 17), ("MulBackward0", 16),
             ("AddmmBackward0", 12), ("TBackward0", 11)]
    for i, (name, seq) in enumerate(nodes):
        syn.push(grad, t, t + 900, torch_text(name, seq=seq, op_id=i + 1))
        syn.launch_kernel(grad, t + 100, "ampere_sgemm_128x64_nn")
        t += 1000
    syn.push(grad, t, t + 900, torch_text("torch::autograd::AccumulateGrad", op_id=9))
    syn.launch_kernel(grad, t + 100, ACCUMULATE, grid=(128, 1, 1), block=(128, 1, 1))
    return syn.close()


def parsed(path: str) -> list[dict]:
    with Export(path) as exp:
        return list(records(exp, Stats()))


def backward(recs: list[dict]) -> list[dict]:
    return [r for r in recs if r["dir"] == "bprop"]


def test_a_node_takes_the_op_whose_span_holds_its_seq(tmp_path: Path) -> None:
    recs = parsed(step(tmp_path / "s.sqlite"))
    assert [r["dir"] for r in recs] == ["fprop"] * 4 + ["bprop"] * 7
    addmm = backward(recs)[4]
    assert addmm["torchOps"] == [{"name": "AddmmBackward0", "seq": 12, "opId": 5}]
    assert addmm["fwd"] == {"seq": 12, "marker": json.loads(LINEAR), "torchOp": None, "call": 1000}
    assert (addmm["mod"], addmm["op"], addmm["module"], addmm["trace"]) == (
        "torch.nn.functional", "linear", "enc.fc", "train.py:10")
    assert addmm["layer"] == ["encoder"] and addmm["marker"] is None and addmm["seqId"] == 12


def test_two_nodes_of_one_call_share_its_call_and_the_gap_and_empty_span_give_none(tmp_path: Path) -> None:
    nll, logsoftmax, mul, gap, addmm, t, acc = backward(parsed(step(tmp_path / "s.sqlite")))
    assert [(r["op"], (r["fwd"] or {}).get("seq"), (r["fwd"] or {}).get("call")) for r in (nll, logsoftmax, mul, t)] == [
        ("cross_entropy", 19, 7000), ("cross_entropy", 18, 7000), ("mul", 17, 5000), ("linear", 11, 1000)]
    assert mul["module"] == "head" and mul["layer"] == ["encoder"]
    # Node 16 came from code between dropout and mul (g = 2): dropout's span [13, 15) is empty.
    assert (gap["fwd"], gap["mod"], gap["op"], gap["module"], gap["layer"]) == (None, None, "MulBackward0", None, [])
    # AccumulateGrad has no seq: it stores the gradient the node that ran before it produced (T 11).
    assert ((acc["fwd"] or {}).get("seq"), acc["op"], acc["torchOps"][0]["name"]) == (
        11, "linear", "torch::autograd::AccumulateGrad")


def test_the_last_span_stays_pending_for_nodes_that_run_before_the_next_payload(tmp_path: Path) -> None:
    # No Tensor.backward range: cross_entropy's span [18, ...) is still pending when its nodes run.
    nll, logsoftmax, mul, gap, addmm, _, _ = backward(parsed(step(tmp_path / "s.sqlite", backward_call=False)))
    assert [(r["op"], r["fwd"]["call"]) for r in (nll, logsoftmax, mul, addmm)] == [
        ("cross_entropy", 7000), ("cross_entropy", 7000), ("mul", 5000), ("linear", 1000)]
    assert gap["fwd"] is None


def test_an_aten_range_of_the_same_seq_inside_the_call_wins(tmp_path: Path) -> None:
    *_, addmm, t, _ = backward(parsed(step(tmp_path / "s.sqlite", aten=True)))
    assert addmm["fwd"] == {"seq": 12, "marker": json.loads(LINEAR), "torchOp": "aten::addmm", "call": 1000}
    assert t["fwd"] == {"seq": 11, "marker": json.loads(LINEAR), "torchOp": None, "call": 1000}


def test_without_payloads_or_their_column_nothing_changes(tmp_path: Path) -> None:
    none = parsed(step(tmp_path / "none.sqlite", payloads=False))
    no_column = parsed(step(tmp_path / "nocol.sqlite", payloads=False, column=False))
    assert none == no_column
    assert [(r["fwd"], r["op"]) for r in backward(none)] == [
        (None, "NllLossBackward0"), (None, "LogSoftmaxBackward0"), (None, "MulBackward0"), (None, "MulBackward0"),
        (None, "AddmmBackward0"), (None, "TBackward0"), (None, "AccumulateGrad")]
    assert [r["op"] for r in none if r["dir"] == "fprop"] == ["linear", "dropout", "mul", "cross_entropy"]


def test_a_payload_that_is_no_integer_or_negative_is_ignored(tmp_path: Path) -> None:
    import sqlite3
    path = step(tmp_path / "s.sqlite")
    expect = parsed(step(tmp_path / "none.sqlite", payloads=False))
    db = sqlite3.connect(path)
    db.execute("UPDATE NVTX_EVENTS SET int64Value = CASE WHEN int64Value % 2 THEN 'x' ELSE -int64Value END "
               "WHERE int64Value IS NOT NULL")
    db.commit()
    db.close()
    assert parsed(path) == expect


def test_a_node_older_than_a_threads_latest_call_takes_no_pending_span(tmp_path: Path) -> None:
    """A pin-memory thread called one wrapped op (its sequence counter is 0: it made no node)
    and its span stays pending; the main thread's gap node 16 is older than main's latest call
    (Tensor.backward at 20) and must not go to the pin-memory op."""
    path = tmp_path / "s.sqlite"
    step(path)
    import sqlite3
    from nsys_synth import gtid
    db = sqlite3.connect(path)
    pin = marker("op", mod="Tensor", op="pin_memory", args=[], site="loader.py:5")
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId, int64Value) "
               "VALUES (2000, 2100, 59, ?, ?, 1, 0)", (pin, gtid(100, 102)))
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId) "
               "VALUES (2050, 2060, 1, ?, 1000, 1)", (gtid(100, 102),))
    db.commit()
    db.close()
    nll, _, _, gap, addmm, _, _ = backward(parsed(str(path)))
    assert gap["fwd"] is None and (nll["op"], addmm["op"]) == ("cross_entropy", "linear")


def test_prof_prices_kernels_of_span_found_nodes_as_the_ops_backward(tmp_path: Path) -> None:
    """prof reads fwd.marker and fwd.call (not fwd.torchOp, null here): the GEMMs of linear's two
    nodes (Addmm 12, T 11) compute dX and dW, each 2 * 64 * 512 * 256 FLOPs as the forward; the
    weight's gradient accumulated into its .grad (AccumulateGrad after T 11) an add an element."""
    from test_prof_helpers import described, prof_text
    from test_prof_helpers import tensor as t
    lin = json.dumps(described("torch.nn.functional", "linear", t(64, 512), t(256, 512)))
    recs = parsed(step(tmp_path / "s.sqlite", linear=lin))
    out, _ = prof_text(recs, "dir,op,flops")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows[0] == ["fprop", "linear", str(2 * 64 * 512 * 256)]
    assert [r for r in rows if r[1] == "linear" and r[0] == "bprop"] == [
        ["bprop", "linear", str(2 * 64 * 512 * 256)]] * 2 + [["bprop", "linear", str(256 * 512)]]


def linear_backward(path: Path) -> tuple:
    """A linear (node seq 12 its AddmmBackward0) and a backward call on the main thread, then its
    node range on the autograd thread with one kernel in it; returns (export, main thread,
    autograd thread, pyprof domain) for more."""
    syn = SynthExport(str(path))
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.push(main, 1000, 2000, LINEAR, domain=dom, registered=True, payload=seq_payload(11))
    syn.launch_kernel(main, 1500)
    syn.push(main, 3000, 9000, BACKWARD, domain=dom, registered=True, payload=seq_payload(13))
    syn.push(grad, 4000, 4500, torch_text("AddmmBackward0", seq=12, op_id=1))
    syn.launch_kernel(grad, 4100)
    return syn, main, grad, dom


def test_an_engine_launch_between_nodes_works_for_the_node_that_ended_last(tmp_path: Path) -> None:
    """Node ranges only: the engine's launches outside every range on the autograd thread (a
    gradient accumulated between nodes) take the seq of the node range that ended last there,
    not after another range started, nor once a new backward call began (another pass)."""
    syn, main, grad, dom = linear_backward(tmp_path / "e.sqlite")
    syn.launch_kernel(grad, 4600)          # after it: the node's
    syn.push(grad, 5000, 5100, "user range")
    syn.launch_kernel(grad, 5200)          # after another range: none
    syn.push(grad, 6000, 6500, torch_text("AddmmBackward0", seq=12, op_id=2))
    syn.push(main, 10000, 20000, BACKWARD, domain=dom, registered=True, payload=seq_payload(13))
    syn.launch_kernel(grad, 10500)         # the next pass, before its first node: none
    recs = parsed(syn.close())[1:]
    assert [(r["dir"], (r["fwd"] or {}).get("seq"), r["op"], r["torchOps"] != []) for r in recs] == [
        ("bprop", 12, "linear", True), ("bprop", 12, "linear", False), ("bprop", None, None, False),
        ("bprop", None, None, False)]
    assert recs[1]["fwd"] == recs[0]["fwd"] and recs[1]["layer"] == [] and recs[1]["seqId"] is None


def test_accumulate_grad_stores_the_gradient_of_the_node_before_it(tmp_path: Path) -> None:
    """Node ranges only: AccumulateGrad has no seq; the engine runs it right after the node that
    produced its gradient. Two in a row (a linear's weight and bias) both take that node's seq
    (Addmm 12); a launch outside every range after them takes none (DDP's bucket work, as
    before); nor does an AccumulateGrad once a new backward call began (another pass)."""
    syn, main, grad, dom = linear_backward(tmp_path / "a.sqlite")
    for t in (5000, 6000):
        syn.push(grad, t, t + 500, torch_text("torch::autograd::AccumulateGrad", op_id=2))
        syn.launch_kernel(grad, t + 100, ACCUMULATE)
    syn.launch_kernel(grad, 6800)          # outside every range, after them: none
    syn.push(main, 10000, 20000, BACKWARD, domain=dom, registered=True, payload=seq_payload(13))
    syn.push(grad, 10500, 10900, torch_text("torch::autograd::AccumulateGrad", op_id=3))
    syn.launch_kernel(grad, 10600, ACCUMULATE)  # the next pass, before its first node: none
    recs = parsed(syn.close())[1:]
    assert [((r["fwd"] or {}).get("seq"), r["op"]) for r in recs] == [
        (12, "linear"), (12, "linear"), (12, "linear"), (None, None), (None, "AccumulateGrad")]
