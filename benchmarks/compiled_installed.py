"""Does installing pyprof slow a compiled model's step when no marker is built?

The compiled GPT of benchmarks/overhead.py, one process per state, states interleaved (plain,
installed, forced, plain, ...): `plain` without pyprof; `installed` after pyprof.init() with no
NVTX tool and markers not forced (each wrapped call is one attribute test; module ranges off);
`forced` with markers forced (overhead.py's pyprof mode without profiled()'s tools). Every state
compiles with Inductor's caches off, as pyprof.init() does. Per process: warm-up, then the median
of blocks of steps, ms per step.

    python3 benchmarks/compiled_installed.py [--repeats 3] [--warmup 40] [--blocks 8] [--steps 30]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATES = ("plain", "installed", "forced")


def child(state: str, args: argparse.Namespace) -> None:
    sys.path[:0] = [ROOT, os.path.join(ROOT, "examples"), os.path.join(ROOT, "benchmarks")]
    import torch

    from overhead import block_ms, build, caches_off

    if state == "plain":
        caches_off()
    else:
        import pyprof

        pyprof.init(force=state == "forced")

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    step = build("gpt_compiled", device, smoke=device.type != "cuda")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    blocks = [block_ms(step, sync, args.steps) for _ in range(args.blocks)]
    print(json.dumps({"state": state, "ms": statistics.median(blocks)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", choices=STATES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args)
        return
    got = {s: [] for s in STATES}
    for r in range(args.repeats):
        for state in STATES:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", state] + \
                  [f"--{k}={getattr(args, k)}" for k in ("warmup", "blocks", "steps")]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                print(f"{state}: rc {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            ms = json.loads(done.stdout.strip().splitlines()[-1])["ms"]
            got[state].append(ms)
            print(f"repeat {r} {state}: {ms:.3f} ms", flush=True)
    plain = statistics.median(got["plain"]) if got["plain"] else float("nan")
    for state, values in got.items():
        if values:
            print(f"{state:10s} median {statistics.median(values):.3f} ms ({len(values)} processes), "
                  f"{statistics.median(values) / plain:.2f}x plain")


if __name__ == "__main__":
    main()
