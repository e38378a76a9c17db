"""What PyTorch's NVTX ranges for autograd nodes alone look like in a real capture (issue 11's lead).

Two training steps of a small MLP, under `torch.cuda.profiler` start/stop (what nsys -c
cudaProfilerApi captures), with the autograd profiler in NVTX mode limited to
RecordScope.BACKWARD_FUNCTION: the C++ engine pushes one range per node it runs, with no Python
on its thread. Printed on stdout: each forward op's autograd node and its sequence number
(grad_fn._sequence_nr(), what a forward marker would carry); then, given an export
(`--sqlite`), the default domain's ranges by text and thread, to see whether each node range
names the same sequence number.

    bash .devkit/nsys-capture.sh probe -- python3 benchmarks/node_ranges_probe.py
    python3 benchmarks/node_ranges_probe.py --sqlite probe.sqlite
"""
from __future__ import annotations

import argparse
import sqlite3
import sys


def capture() -> None:
    import torch
    from torch._C._autograd import _disable_profiler, _enable_profiler
    from torch._C._profiler import ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
    x = torch.randn(32, 64, device="cuda")
    for step in range(3):
        if step == 1:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            _enable_profiler(ProfilerConfig(ProfilerState.NVTX, False, False, False, False, False,
                                            _ExperimentalConfig()), set(), {RecordScope.BACKWARD_FUNCTION})
        h = x
        for layer in model:
            h = layer(h)
            if step == 1:
                print(f"forward {type(layer).__name__}: node {type(h.grad_fn).__name__} seq {h.grad_fn._sequence_nr()}")
        loss = h.float().pow(2).mean()
        if step == 1:
            print(f"forward loss: node {type(loss.grad_fn).__name__} seq {loss.grad_fn._sequence_nr()}")
        loss.backward()
        if step == 1:
            torch.cuda.synchronize()
            _disable_profiler()
            torch.cuda.profiler.stop()


def show(path: str) -> None:
    con = sqlite3.connect(path)
    cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    text = "COALESCE(e.text, s.value)" if "textId" in cols else "e.text"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in cols else ""
    rows = con.execute(f"SELECT e.globalTid, {text}, e.domainId, COUNT(*) FROM NVTX_EVENTS e {join} "
                       "WHERE e.eventType = 59 GROUP BY 1, 2, 3 ORDER BY MIN(e.start)").fetchall()
    print(f"{len(rows)} distinct push/pop ranges (thread, text, domain, count):")
    for tid, t, dom, n in rows[:60]:
        print(f"  {tid & 0xFFFFFF:>8} dom {dom} x{n} {t}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sqlite", help="print the ranges of this export instead of capturing")
    a = p.parse_args()
    show(a.sqlite) if a.sqlite else capture()
    sys.stdout.flush()
