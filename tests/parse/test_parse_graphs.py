"""CUDA graphs captured by hand (torch.cuda.graph, make_graphed_callables): replayed kernels are
attributed to the ranges open when their nodes were captured (synthetic exports with
CUDA_GRAPH_NODE_EVENTS, as nsys --cuda-graph-trace=node writes them)."""
from __future__ import annotations

from pathlib import Path

from nsys_synth import SynthExport, marker, torch_text
from pyprof.parse import Export, Stats, records

GRAPH_LAUNCH = "cudaGraphLaunch_v10000"


def linear(site: str) -> str:
    return marker("op", mod="torch.nn.functional", op="linear", args=[{"shape": [8, 4], "dtype": "float32"}],
                  site=site, module="fc")


def capture_and_replay(path: Path, ranges_at_capture: bool = True, instantiated: bool = True) -> None:
    """Two kernel nodes captured on the main thread (inside the op ranges of a linear and a relu,
    or, before the trace, with no range open), instantiated, and the graph replayed twice under a
    `replay` range."""
    syn = SynthExport(str(path))
    main = syn.thread(100, 100, "python3")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    if ranges_at_capture:
        syn.push(main, 1000, 2000, linear("net.py:3"), domain=dom, registered=True)
        syn.push(main, 1100, 1900, torch_text("aten::addmm", op_id=1, sizes=[[4], [8, 4], [4, 4]]))
        syn.push(main, 2100, 2900, marker("op", mod="torch.nn.functional", op="relu", args=[], site="net.py:4",
                                          module="act"), domain=dom, registered=True)
    # Capture: cudaLaunchKernel calls during stream capture create nodes and launch nothing.
    syn.graph_node(main, 1500, 10)
    syn.graph_node(main, 2500, 11)
    if instantiated:
        syn.graph_node(main, 3000, 20, original=10)
        syn.graph_node(main, 3001, 21, original=11)
    syn.push(main, 4000, 20000, "replay")
    for i in range(2):
        corr = syn.launch(main, 5000 + 5000 * i, api=GRAPH_LAUNCH)
        syn.kernel(100, corr, 6000 + 5000 * i, 7000 + 5000 * i, "void gemm_kernel<float>(float*)", graph_node=20)
        syn.kernel(100, corr, 7500 + 5000 * i, 8000 + 5000 * i, "void relu_kernel<float>(float*)", graph_node=21)
    syn.close()


def parsed(path: Path) -> tuple[list[dict], Stats]:
    stats = Stats()
    with Export(str(path)) as exp:
        return list(records(exp, stats)), stats


def test_replays_explained_by_the_capture(tmp_path: Path) -> None:
    capture_and_replay(tmp_path / "g.sqlite")
    recs, stats = parsed(tmp_path / "g.sqlite")
    assert [(r["kShortName"], r["op"], r["module"], r["trace"], r["graphNode"], r["launch"]["api"]) for r in recs] == [
        ("gemm_kernel", "linear", "fc", "net.py:3", 20, GRAPH_LAUNCH),
        ("relu_kernel", "relu", "act", "net.py:4", 21, GRAPH_LAUNCH),
    ] * 2
    assert recs[0]["torchOps"] == [{"name": "aten::addmm", "opId": 1, "sizes": [[4], [8, 4], [4, 4]]}]
    assert [r["kStart"] for r in recs] == [6000, 7500, 11000, 12500]  # replay order, not capture order
    assert stats.kernels == 4 and stats.with_op == 4


def test_graph_captured_before_the_trace_keeps_its_replay_ranges(tmp_path: Path) -> None:
    """No range was open at capture (torch.compile's CUDA graph trees record during warm-up,
    before the profiled step): the replay's own ranges are what is known."""
    capture_and_replay(tmp_path / "g.sqlite", ranges_at_capture=False)
    recs, stats = parsed(tmp_path / "g.sqlite")
    assert {(r["op"], r["module"], tuple(r["ranges"])) for r in recs} == {(None, None, ("replay",))}
    assert stats.with_op == 0


def test_kernel_node_without_its_instantiation_keeps_its_replay_ranges(tmp_path: Path) -> None:
    capture_and_replay(tmp_path / "g.sqlite", instantiated=False)
    recs, _ = parsed(tmp_path / "g.sqlite")
    assert [(r["op"], r["graphNode"]) for r in recs] == [(None, 20), (None, 21)] * 2


def forward_and_backward_captured(path: Path) -> list[int]:
    """A linear's forward captured on the main thread and its backward on the autograd thread,
    then the graph replayed twice; returns cut points that put the forward capture, the backward
    capture and the replays in windows of their own."""
    syn = SynthExport(str(path))
    main, grad = syn.thread(100, 100, "python3"), syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.push(main, 1000, 2000, linear("net.py:3"), domain=dom, registered=True)
    syn.push(main, 1100, 1900, torch_text("aten::linear", seq=5, op_id=1, sizes=[[8, 4], [4, 4], [4]]))
    syn.launch(main, 1500)  # the capturing launch call: recorded, no kernel
    syn.graph_node(main, 1500, 10)
    syn.push(grad, 3000, 4000, torch_text("AddmmBackward0", seq=5, op_id=2))
    syn.launch(grad, 3500)
    syn.graph_node(grad, 3500, 11)
    syn.graph_node(main, 5000, 20, original=10)
    syn.graph_node(main, 5001, 21, original=11)
    for i in range(2):
        corr = syn.launch(main, 6000 + 5000 * i, api=GRAPH_LAUNCH)
        syn.kernel(100, corr, 7000 + 5000 * i, 7500 + 5000 * i, "void gemm_kernel<float>(float*)", graph_node=20)
        syn.kernel(100, corr, 8000 + 5000 * i, 8500 + 5000 * i, "void gemm_bw_kernel<float>(float*)", graph_node=21)
    syn.close()
    return [2500, 5500]


def test_windows_carry_the_captured_nodes(tmp_path: Path) -> None:
    """Cut between the captures and the replays (parallel.py): the same bytes as one sweep. The
    backward node's attribution needs the forward op from the window before it, so it is exact
    only once that window is parsed again seeded; the replays' window is parsed again after it,
    once: windows are settled in order, so its seed already holds the exact captured nodes."""
    from pyprof.parse import lines, parallel
    from pyprof.parse.window import Window

    path = tmp_path / "g.sqlite"
    edges = forward_and_backward_captured(path)
    with Export(str(path)) as exp:
        expect = "".join(line + "\n" for line in lines(exp, Stats()))
    recs, _ = parsed(path)
    assert [(r["dir"], r["op"], (r["fwd"] or {}).get("seq")) for r in recs] == [
        ("fprop", "linear", None), ("bprop", "linear", 5)] * 2
    parts = [parallel.Part(i, str(path), 0, "", False, False, None, Window(a, b))
             for i, (a, b) in enumerate(zip([None, *edges], [*edges, None]))]
    out = tmp_path / "w.dict"
    result = parallel.run([parts], str(out), 2)
    assert out.read_text() == expect
    assert (result.windows, result.reparsed) == (3, 2)  # backward capture, replays
