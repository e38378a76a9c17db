"""Training-step overhead of pyprof's annotation, next to PyTorch's own emit_nvtx.

Three models (LeNet-5 batch 1; ResNet-18 batch 64, fp16 AMP, channels_last, SGD; a 4-layer GPT,
d=512, 8 heads, seq 256, batch 8, bf16 autocast, fused AdamW, scaled_dot_product_attention), each
in three modes, interleaved in one process:

  plain      no annotation
  emit_nvtx  torch.autograd.profiler.emit_nvtx(record_shapes=True)
  pyprof     pyprof.init() + emit_nvtx(record_shapes=True); restore() afterwards

Prints the median step time of each mode and the ratio pyprof / emit_nvtx (goal <= 1.25), then the
per-call cost of a few wrapped calls. Without an NVTX tool attached, pyprof's wrappers would skip
building markers; the pyprof mode therefore runs with markers forced (init(force=True)) unless
--no-force, and the output says which was measured. Under nsys the domain is live and the
pushes are real as well.

    python benchmarks/overhead.py                # GPU machine
    python benchmarks/overhead.py --smoke        # tiny, CPU, seconds
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import timeit
from typing import Callable, Dict, Iterator, List, Tuple

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples"), os.path.dirname(os.path.abspath(__file__))]

import pyprof  # noqa: E402
from pyprof.nvtx import emit  # noqa: E402
from gpt import GPT  # noqa: E402  (examples/gpt.py)
from lenet import LeNet5  # noqa: E402  (examples/lenet.py)
from resnet import ResNet18  # noqa: E402  (examples/resnet.py)

MODES = ("plain", "emit_nvtx", "pyprof")
GOAL = 1.25  # pyprof + emit_nvtx over emit_nvtx alone


def lenet(device: torch.device, smoke: bool) -> Callable[[], None]:
    """One SGD step of LeNet-5 on a 1x1x32x32 input (the same in --smoke)."""
    net = LeNet5().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    data = torch.randn(1, 1, 32, 32, device=device)
    target = torch.randint(0, 10, (1,), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(data), target).backward()
        opt.step()

    return step


def resnet18(device: torch.device, smoke: bool) -> Callable[[], None]:
    """One SGD step of ResNet-18, batch 64 at 224x224 (smoke: 2 at 64x64), channels_last, AMP."""
    batch, size = (2, 64) if smoke else (64, 224)
    cuda = device.type == "cuda"
    net = ResNet18().to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    data = torch.randn(batch, 3, size, size, device=device).to(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (batch,), device=device)
    amp = torch.float16 if cuda else torch.bfloat16  # CPU autocast has no fp16 convolutions

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp):
            loss = F.cross_entropy(net(data), target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def gpt(device: torch.device, smoke: bool) -> Callable[[], None]:
    """One fused-AdamW step of a 4-layer GPT under bf16 autocast (smoke: d=64, seq 32, batch 2)."""
    vocab, seq, d, heads, layers, batch = (512, 32, 64, 8, 4, 2) if smoke else (8192, 256, 512, 8, 4, 8)
    model = GPT(vocab, seq, d, heads, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    idx = torch.randint(0, vocab, (batch, seq), device=device)
    target = torch.randint(0, vocab, (batch, seq), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(idx).view(-1, vocab), target.view(-1))
        loss.backward()
        opt.step()

    return step


MODELS = {"lenet": lenet, "resnet18": resnet18, "gpt": gpt}


@contextlib.contextmanager
def mode(name: str, device: torch.device, force: bool) -> Iterator[None]:
    """Run the block in one of MODES; pyprof is installed only for the block."""
    if name == "plain":
        yield
        return
    if name == "pyprof":
        pyprof.init(force=force)
    try:
        # emit_nvtx refuses a CPU-only build: in --smoke on a CPU it is left out of both modes.
        ranges = (torch.autograd.profiler.emit_nvtx(record_shapes=True) if device.type == "cuda"
                  else contextlib.nullcontext())
        with ranges:
            yield
    finally:
        if name == "pyprof":
            pyprof.restore()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(step: Callable[[], None], steps: int, device: torch.device) -> float:
    """Seconds per step over `steps` steps, the device synchronized at both ends."""
    sync(device)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - t) / steps


def measure(step: Callable[[], None], device: torch.device, args: argparse.Namespace) -> Dict[str, float]:
    """Median seconds per step in each mode; the modes take turns so that drift hits all alike."""
    for m in MODES:
        with mode(m, device, not args.no_force):
            timed(step, args.warmup, device)
    samples: Dict[str, List[float]] = {m: [] for m in MODES}
    for _ in range(args.repeats):
        for m in MODES:
            with mode(m, device, not args.no_force):
                samples[m].append(timed(step, args.steps, device))
    return {m: statistics.median(v) for m, v in samples.items()}


def per_call(device: torch.device, force: bool) -> List[Tuple[str, float, float]]:
    """Microseconds per call without and with pyprof for a few small calls (no emit_nvtx)."""
    x = torch.randn(8, 8, device=device)
    w = torch.randn(8, 8, device=device)
    img = torch.randn(1, 3, 8, 8, device=device)
    k = torch.randn(4, 3, 3, 3, device=device)
    lin = torch.nn.Linear(8, 8).to(device)
    calls = {
        "torch.add(x, y)": lambda: torch.add(x, w),
        "x + y": lambda: x + w,
        "F.linear(x, w)": lambda: F.linear(x, w),
        "F.conv2d(x, w, None, 1, 1)": lambda: F.conv2d(img, k, None, 1, 1),
        "x.view(64)": lambda: x.view(64),
        "nn.Linear module call": lambda: lin(x),
    }
    n = 2000

    def us(fn: Callable[[], None]) -> float:
        fn()
        sync(device)
        return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6

    plain = {name: us(fn) for name, fn in calls.items()}
    pyprof.init(force=force)
    try:
        with_pyprof = {name: us(fn) for name, fn in calls.items()}
    finally:
        pyprof.restore()
    return [(name, plain[name], with_pyprof[name]) for name in calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny models and few steps (CPU, seconds)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    parser.add_argument("--steps", type=int, help="steps per timed block (default 20, smoke 2)")
    parser.add_argument("--repeats", type=int, help="timed blocks per mode (default 7, smoke 2)")
    parser.add_argument("--warmup", type=int, help="warm-up steps per mode (default 5, smoke 1)")
    parser.add_argument("--no-force", action="store_true",
                        help="do not force marker building (then markers are built only under an NVTX tool)")
    args = parser.parse_args()
    args.steps = args.steps or (2 if args.smoke else 20)
    args.repeats = args.repeats or (2 if args.smoke else 7)
    args.warmup = args.warmup or (1 if args.smoke else 5)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(1)  # tiny CPU ops: thread hand-offs would dominate and add noise
    torch.manual_seed(0)
    pyprof.init(force=not args.no_force)  # reads the NVTX domain once: live under a tool
    live = emit.state.live
    pyprof.restore()
    what = ("markers built and pushed to a live NVTX domain (a tool is attached)" if live else
            "markers built (forced), NVTX pushes are no-ops (no tool attached)" if not args.no_force else
            "no tool attached and markers not forced: the pyprof mode measures the wrappers' off path")
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}; torch {torch.__version__}; "
          f"python {sys.version.split()[0]}")
    print(f"pyprof mode: {what}")
    if device.type != "cuda":
        print("emit_nvtx needs CUDA: left out of the emit_nvtx and pyprof modes on this machine")
    print(f"{args.steps} steps per block, median of {args.repeats} blocks, {args.warmup} warm-up steps per mode\n")

    header = f"{'model':10s} {'plain ms':>10s} {'emit_nvtx ms':>13s} {'pyprof ms':>10s} {'pyprof/emit_nvtx':>17s} {'pyprof/plain':>13s}"
    print(header)
    print("-" * len(header))
    ratios = {}
    for name in args.models.split(","):
        step = MODELS[name](device, args.smoke)
        t = measure(step, device, args)
        ratios[name] = t["pyprof"] / t["emit_nvtx"]
        print(f"{name:10s} {t['plain'] * 1e3:10.3f} {t['emit_nvtx'] * 1e3:13.3f} {t['pyprof'] * 1e3:10.3f} "
              f"{ratios[name]:17.2f} {t['pyprof'] / t['plain']:13.2f}", flush=True)
    over = [n for n, r in ratios.items() if r > GOAL]
    print(f"goal pyprof/emit_nvtx <= {GOAL}: " + ("met by all" if not over else "missed by " + ", ".join(over)))

    print("\nper call (no emit_nvtx), microseconds, best of 7 x 2000 calls:")
    print(f"{'call':28s} {'plain':>8s} {'pyprof':>8s} {'added':>8s}")
    for call, plain, with_pyprof in per_call(device, not args.no_force):
        print(f"{call:28s} {plain:8.2f} {with_pyprof:8.2f} {with_pyprof - plain:8.2f}")


if __name__ == "__main__":
    main()
