"""Training-step overhead of pyprof's annotation, next to PyTorch's own tools.

Four models: LeNet-5 batch 1 (SGD); ResNet-18 batch 64, fp16 AMP, channels_last (SGD); a 4-layer
GPT (d=512, 8 heads, seq 256, batch 8, bf16 autocast, fused AdamW); the same GPT under
torch.compile. Five modes:

  plain          no annotation
  emit_nvtx      torch.autograd.profiler.emit_nvtx(record_shapes=True)
  pyprof         pyprof.init(): op/module markers, PyTorch's autograd node ranges (backward
                 node hooks without CUDA or where compiled graphs can run), and around each compiled-graph call
                 the numbered range with PyTorch's op ranges inside (pyprof.nvtx.graph_calls):
                 pyprof.profiled()'s default (pyprof.nvtx.profiled.attribution)
  pyprof+emit    pyprof.init() + emit_nvtx(record_shapes=True) (pyprof.profiled(aten=True))
  torch.profiler torch.profiler.profile(record_shapes=True, activities CPU + CUDA)

Every (mode, repeat) runs in its own process, modes interleaved (plain, emit_nvtx, ..., plain,
...), so that no mode inherits another's caches or allocator state and drift hits all alike; the
table gives the median over the repeats of each process's median block time. Each pyprof
process then also times blocks with its markers off and on alternately (`in-process`): the same
process, allocator and kernel choices, so that process-to-process noise is out of that ratio
(markers off leaves one attribute test per wrapped call); over all processes, the on/off ratio
within each round gets a 95% bootstrap interval of its median, and the across-process ratio one
over the processes resampled within each mode; each verdict says whether the run resolves the goal
(`judged`). Every mode compiles with Inductor's caches off, as pyprof.init() leaves them. Without
an NVTX tool attached pyprof's wrappers would skip building markers: the pyprof modes force them
(PYPROF_FORCE=1), and the output says whether the pushes reached a live domain.

`--nsys NSYS` runs every process under `NSYS profile -t cuda,nvtx` (no CPU sampling, capture
limited to the timed blocks through the CUDA profiler API, no export, the report deleted): the
pyprof domain is then live, so each range costs its NVTX calls as well, and every mode pays nsys's
CUDA tracing alike; the ratios are to plain under the same nsys.

    python benchmarks/overhead.py                       # GPU machine
    python benchmarks/overhead.py --smoke               # tiny, CPU, seconds
    python benchmarks/overhead.py --calls               # per-call wrapper cost only
    python benchmarks/overhead.py --nsys "$(command -v nsys)" --modes plain,pyprof
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from typing import Any, Callable, Dict, Iterator, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]

MODES = ("plain", "emit_nvtx", "pyprof", "pyprof+emit", "torch.profiler")
MODELS = ("lenet", "resnet18", "gpt", "gpt_compiled")
GOALS = {"lenet": 1.3, "resnet18": 1.3, "gpt": 1.3, "gpt_compiled": 1.1}  # pyprof / plain
CALL_GOAL_US = 2.0
# nsys profile options for --nsys: CUDA and NVTX tracing, the capture range the child opens around
# its timed blocks, nothing exported (the report is deleted with its temporary folder).
NSYS_OPTIONS = ("-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none", "-c", "cudaProfilerApi",
                "--capture-range-end=stop", "--export", "none", "-f", "true")


def build(name: str, device, smoke: bool, images: tuple = (2, 64)) -> Callable[[], None]:
    """One training step of model `name` on `device` (smoke: tiny shapes; ResNet-18's batch and
    image size then `images`)."""
    import torch
    import torch.nn.functional as F

    cuda = device.type == "cuda"
    if name == "lenet":
        from lenet import LeNet5  # examples/lenet.py

        net = LeNet5().to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        data = torch.randn(1, 1, 32, 32, device=device)
        target = torch.randint(0, 10, (1,), device=device)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(data), target).backward()
            opt.step()

        return step
    if name == "resnet18":
        from resnet import ResNet18  # examples/resnet.py

        batch, size = images if smoke else (64, 224)
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
    from gpt import GPT  # examples/gpt.py

    vocab, seq, d, heads, layers, batch = (512, 32, 64, 8, 4, 2) if smoke else (8192, 256, 512, 8, 4, 8)
    model = GPT(vocab, seq, d, heads, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
    idx = torch.randint(0, vocab, (batch, seq), device=device)
    target = torch.randint(0, vocab, (batch, seq), device=device)
    run = torch.compile(model) if name == "gpt_compiled" else model

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(run(idx).view(-1, vocab), target.view(-1))
        loss.backward()
        opt.step()

    return step


@contextlib.contextmanager
def tool(mode: str, device) -> Iterator[None]:
    """The mode's PyTorch-side tool around the timed steps (pyprof itself is installed at start)."""
    import torch

    if mode == "pyprof" and device.type == "cuda":  # as profiled(), which needs CUDA
        from pyprof.nvtx.profiled import attribution

        with attribution():
            yield
    elif mode in ("emit_nvtx", "pyprof+emit") and device.type == "cuda":
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            yield
    elif mode == "torch.profiler":
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                        if device.type == "cuda" else [])
        with torch.profiler.profile(activities=acts, record_shapes=True):
            yield
    else:
        yield


def block_ms(step: Callable[[], None], sync: Callable[[], None], steps: int) -> float:
    """ms per step over `steps` steps, timed between two synchronizations."""
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t) / steps * 1e3


def bootstrap_interval(stat: Callable[..., float], *samples: List[float],
                       resamples: int = 2000) -> Tuple[float, float]:
    """A 95% percentile-bootstrap interval of `stat(*samples)`, each sample resampled on its own
    (seeded: the same samples give the same interval)."""
    draw = random.Random(0)
    values = sorted(stat(*(draw.choices(s, k=len(s)) for s in samples)) for _ in range(resamples))
    return values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]


def median_interval(values: List[float]) -> Tuple[float, float]:
    """A 95% bootstrap interval of the median of `values`."""
    return bootstrap_interval(statistics.median, values)


def judged(stat: Callable[..., float], goal: float, *samples: List[float], what: str) -> str:
    """Whether `stat(*samples)`, a ratio, resolves the goal `ratio <= goal`: its 95% bootstrap
    interval and the verdict from it ("met", "MISSED" or "not resolved"); not resolved without an
    interval where a sample has fewer than 3 `what`."""
    if min(len(s) for s in samples) < 3:
        return f"not resolved: fewer than 3 {what}"
    low, high = bootstrap_interval(stat, *samples)
    word = "met" if high <= goal else "MISSED" if low > goal else "not resolved: the interval holds the goal"
    return f"95% interval {low:.2f}-{high:.2f}x, {word}"


def caches_off() -> None:
    """Inductor's FX-graph and AOTAutograd caches off, as pyprof.init() turns them (a cached graph's
    kernels are never generated, so never recorded): a process without pyprof then compiles afresh
    as pyprof's processes do, instead of loading graphs an earlier process tuned and stored."""
    from pyprof.nvtx.inductor import cache_switches

    for config, name in cache_switches():
        setattr(config, name, False)


def child(args: argparse.Namespace) -> None:
    """One process, one mode: median ms per step of each model, as one JSON line on stdout."""
    import torch

    mode = args.child
    if mode.startswith("pyprof"):
        import pyprof

        pyprof.init(force=True)
    else:
        caches_off()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(1)
    torch.manual_seed(0)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    out: Dict[str, float] = {}
    if args.nsys_range and device.type == "cuda":
        torch.cuda.profiler.start()  # nsys records from here (its capture range): the models' timed blocks
    for name in args.models.split(","):
        t0 = time.perf_counter()
        step = build(name, device, args.smoke)
        for _ in range(args.warmup):
            step()
        sync()
        print(f"{mode} {name} built and warmed up in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        with tool(mode, device):
            step()  # the tool's own first-use cost stays out of the timed blocks
            blocks = [block_ms(step, sync, args.steps) for _ in range(args.blocks)]
        out[name] = statistics.median(blocks)
        print(f"{mode} {name} {out[name]:.3f} ms", file=sys.stderr, flush=True)
        if mode.startswith("pyprof"):
            if mode == "pyprof":  # first: diagnose's Dynamo counters then cover these blocks too
                out[name + "/ab"] = on_off(args, name, device, step, sync)
            diagnose(mode, name, step)
    if args.nsys_range and device.type == "cuda":
        torch.cuda.profiler.stop()
    from pyprof.nvtx import emit

    out["_live"] = emit.state.live
    print(json.dumps(out), flush=True)


@contextlib.contextmanager
def in_process_state(which: str, compiled: bool, device) -> Iterator[None]:
    """One of on_off()'s states for the body, in a process where pyprof.init(force=True) ran:
    `off`, `on` (the pyprof mode), `markers` (on without profiled()'s tools) or `ranges` (on with
    the graph-call ranges but not the op ranges inside them). `compiled`: the model's code was
    traced by Dynamo, which read the markers' switch then (changing it would recompile), so `off`
    hides the wrapped calls instead, as wrappers.hiding does (the module range of the compiled
    module stays, one per step); otherwise `off` unforces the markers (one attribute test per
    wrapped call)."""
    from pyprof.nvtx import emit, wrappers

    if which == "ranges":
        # The graph-call ranges without PyTorch's op ranges inside them: what those cost.
        from pyprof.nvtx import graph_calls

        ops_on = graph_calls.ops_on
        graph_calls.ops_on = lambda shapes=False: False
        try:
            with tool("pyprof", device):
                yield
        finally:
            graph_calls.ops_on = ops_on
    elif which != "off":
        with tool("pyprof" if which == "on" else "plain", device):
            yield
    elif compiled:
        wrappers.thread_state().depth += 1
        try:
            yield
        finally:
            wrappers.thread_state().depth -= 1
    else:
        emit.configure(force=False)
        emit.state.on = False  # also when a tool made the domain live (under nsys)
        try:
            yield
        finally:
            emit.configure(force=True)


def turns(states: List[str], enter: Callable[[str], Any], step: Callable[[], None],
          sync: Callable[[], None], rounds: int, steps: int) -> Dict[str, List[float]]:
    """ms per step of `rounds` blocks of `steps` steps in each state, a block per state per round,
    each run inside `enter(state)` after one untimed step."""
    times: Dict[str, List[float]] = {s: [] for s in states}
    for i in range(rounds):
        # The order turns each round: no state always follows the same one (a block right after
        # a state change may run faster or slower: clocks, caches, the allocator).
        for which in states[i % len(states):] + states[:i % len(states)]:
            with enter(which):
                step()
                times[which].append(block_ms(step, sync, steps))
    return times


def on_off(args: argparse.Namespace, name: str, device, step: Callable[[], None],
           sync: Callable[[], None]) -> Dict[str, Any]:
    """ms per step in this process with markers `off`, `on` (the pyprof mode) and, for a compiled
    model on CUDA, `markers` (on, without the graph-call ranges and the op ranges inside them) and
    `ranges` (on, with the graph-call ranges but not the op ranges inside them):
    medians of blocks run in turn (off, on, [markers, ranges,] then the same order begun one later,
    ...), each as long as a timed block;
    also on stderr. The states are in_process_state()'s."""
    compiled = name.endswith("compiled")
    states = ["off", "on"] + (["markers", "ranges"] if compiled and device.type == "cuda" else [])
    times = turns(states, lambda which: in_process_state(which, compiled, device), step, sync,
                  args.blocks, args.steps)
    out: Dict[str, Any] = {s: statistics.median(v) for s, v in times.items()}
    # A round's on and off blocks ran close together: their ratio cancels the drifts of the host's
    # speed over a process that the ratio of the medians still carries.
    out["pairs"] = [on / off for on, off in zip(times["on"], times["off"])]
    print(f"{name} in-process " + ", ".join(f"{s} {out[s]:.3f} ms" for s in states) +
          f": on/off {out['on'] / out['off']:.2f}x" +
          (f", markers/off {out['markers'] / out['off']:.2f}x" if "markers" in out else "") +
          (f", ranges/off {out['ranges'] / out['off']:.2f}x" if "ranges" in out else ""), file=sys.stderr, flush=True)
    return out


def diagnose(mode: str, name: str, step: Callable[[], None]) -> None:
    """After the timed blocks: what pyprof did in one more step (ranges pushed, by kind) and,
    for a compiled model, Dynamo's counters (graph breaks, graphs, recompiles), on stderr."""
    from pyprof.nvtx.emit import recording

    with recording() as rec:
        step()
    kinds: Dict[str, int] = {}
    for m in rec.markers:
        kinds[m.get("kind")] = kinds.get(m.get("kind"), 0) + 1
    line = f"{mode} {name}: ranges in one step {len(rec.ranges)} {kinds}"
    if name.endswith("compiled"):
        from torch._dynamo.utils import counters

        line += (f"; graph breaks {sum(counters['graph_break'].values())}, graphs "
                 f"{counters['stats'].get('unique_graphs', 0)}, recompiles {sum(counters['recompiles'].values())}")
    print(line, file=sys.stderr, flush=True)


def per_call(repeat: int = 21, number: int = 5000) -> Tuple[List[tuple], set]:
    """Rows (call, plain us, then pyprof us per hit path of CALL_VARIANTS: Python, C (pyprof.nvtx._hot);
    None where not built) for small calls on the
    CPU, markers forced; process CPU time, best of `repeat` rounds, the variants taking turns within
    each round so that drift on a shared machine hits them alike. Also the values pyprof's
    node-hook switch had while they were timed."""
    import torch
    import torch.nn.functional as F

    import pyprof
    from pyprof.nvtx import emit, memo, wrappers

    torch.set_num_threads(1)
    # One core for the whole table: a shared host's scheduler moving the process between cores
    # shows up as microseconds here. Many short rounds: the best of them is a quiet moment.
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    x, w, b = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8)
    img, k = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    wg = torch.randn(8, 8, requires_grad=True)
    lin = torch.nn.Linear(8, 8)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)  # its stride, padding, dilation: the same tuples each call
    rm, rv = torch.zeros(3), torch.ones(3)
    # A call site 60 lines into a function, as in a real forward() or training loop: reading a
    # frame's line number walks its line table from the start, so lambdas alone understate it.
    code = "def deep(x, y):\n" + "    z = x\n" * 60 + "    return torch.add(x, y)\n"
    scope = {"torch": torch}
    exec(compile(code, os.path.join(ROOT, "benchmarks", "<deep>"), "exec"), scope)
    deep = scope["deep"]
    calls = {
        "torch.add(x, y)": lambda: torch.add(x, w),
        "torch.add, line 62 of a def": lambda: deep(x, w),
        "x + y": lambda: x + w,
        "F.linear(x, w, b)": lambda: F.linear(x, w, b),
        "F.conv2d(x, w, None, 1, 1)": lambda: F.conv2d(img, k, None, 1, 1),
        "F.conv2d, tuples (as nn.Conv2d)": lambda: F.conv2d(img, k, None, conv.stride, conv.padding, conv.dilation, 1),
        "F.batch_norm, eval, 2 floats": lambda: F.batch_norm(img, rm, rv, None, None, False, 0.1, 1e-5),
        # what F.batch_norm calls: its wrapper alone (in the row above it passes through, nested)
        "torch.batch_norm, as F calls it": lambda: torch.batch_norm(img, None, None, rm, rv, False, 0.1, 1e-5, False),
        "x.view(64)": lambda: x.view(64),
        "x[:, 0] (its boolean-mask test)": lambda: x[:, 0],
        "x.sum(dim=1, keepdim=True)": lambda: x.sum(dim=1, keepdim=True),
        "x @ w (w requires grad)": lambda: x @ wg,
        "nn.Identity()(x)": lambda i=torch.nn.Identity(): i(x),  # noqa: B008 (one module, made once)
        "nn.Linear(8, 8)(x)": lambda: lin(x),
    }

    def us(fn: Callable[[], None]) -> float:
        return timeit.timeit(fn, number=number, timer=time.process_time) / number * 1e6

    # variant -> its look-up, or None where not built
    variants = {"python": memo._lookup, "c": memo._hot.lookup if memo._hot is not None else None}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    best: Dict[tuple, float] = {}
    hooks = set()
    for _ in range(repeat):
        for variant in ("plain",) + CALL_VARIANTS:
            if variant != "plain":
                if variants[variant] is None:
                    continue
                wrappers._lookup = variants[variant]
                pyprof.init(force=True)
            try:
                # pyprof's variants with profiled()'s tools, as the step benchmark's pyprof mode.
                with tool("pyprof" if variant != "plain" else "plain", device):
                    if variant != "plain":
                        hooks.add(emit.state.hooks)
                    for name, fn in calls.items():
                        fn()
                        t = us(fn)
                        best[name, variant] = min(best.get((name, variant), t), t)
            finally:
                if variant != "plain":
                    pyprof.restore()
    wrappers._lookup = memo.lookup
    return [(name, best[name, "plain"]) + tuple(best.get((name, v)) for v in CALL_VARIANTS) for name in calls], hooks


# pyprof's hit paths in per_call: Python, C (pyprof.nvtx._hot).
CALL_VARIANTS = ("python", "c")


def print_calls() -> None:
    print("per call, CPU tensors, markers forced, no NVTX tool (process CPU time on one core, best of 21 x 5000; plain and pyprof "
          "with the marker cache's hit path in Python and in C take turns in each round); us added to the plain call:")
    print(f"{'call':32s} {'plain us':>9s} " + " ".join(f"{v:>8s}" for v in CALL_VARIANTS))
    rows, hooks = per_call()
    for name, plain, *timed in rows:
        print(f"{name:32s} {plain:9.2f} " + " ".join(f"{t - plain:8.2f}" if t is not None else "       -" for t in timed))
    how = {frozenset({True}): "pyprof's node hooks (no CUDA: PyTorch's node ranges need it)",
           frozenset({False}): "PyTorch's node ranges, as profiled()"}.get(frozenset(hooks), f"mixed {hooks}")
    print(f"goal: <= {CALL_GOAL_US} us added per wrapped call (F.batch_norm is two: its own and torch.batch_norm's, "
          f"passing through; the module rows add a module range, nn.Linear also its F.linear); c: pyprof.nvtx._hot (- when not built); backward attribution: {how} (with the hooks, "
          "the `x @ w` row adds its node's hook)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny models and few steps (CPU, seconds)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    parser.add_argument("--repeats", type=int, default=3, help="processes per mode (default 3)")
    parser.add_argument("--steps", type=int, help="steps per timed block (default 10, smoke 2)")
    parser.add_argument("--blocks", type=int, help="timed blocks per process (default 5, smoke 2)")
    parser.add_argument("--warmup", type=int, help="warm-up steps per model (default 5, smoke 1)")
    parser.add_argument("--timeout", type=int, default=240, help="seconds per process (default 240)")
    parser.add_argument("--budget", type=int, help="seconds for all processes: a process that would not finish "
                        "within it is not started, and the table covers those that ran")
    parser.add_argument("--calls", action="store_true", help="only the per-call table")
    parser.add_argument("--no-calls", action="store_true", help="leave out the per-call table")
    parser.add_argument("--nsys", metavar="NSYS", help="run each process under this nsys binary (`nsys profile -t "
                        "cuda,nvtx`, capture limited to the timed blocks, report discarded): a live NVTX domain")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--nsys-range", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.steps = args.steps or (2 if args.smoke else 10)
    args.blocks = args.blocks or (2 if args.smoke else 5)
    args.warmup = args.warmup or (1 if args.smoke else 5)
    if args.child:
        child(args)
        return
    if args.calls:
        print_calls()
        return

    import torch

    cuda = torch.cuda.is_available()
    print(f"device: {torch.cuda.get_device_name() if cuda else 'CPU'}; torch {torch.__version__}; "
          f"python {sys.version.split()[0]}")
    if not cuda:
        print("no CUDA: emit_nvtx is left out of the emit_nvtx and pyprof+emit modes")
    if args.nsys:
        print(f"every process under nsys: {args.nsys} profile {' '.join(NSYS_OPTIONS)} (report discarded)")
    print(f"{args.repeats} processes per mode, interleaved; per process {args.warmup} warm-up steps, then the median of "
          f"{args.blocks} blocks of {args.steps} steps; table: median over processes, ms per step", flush=True)
    modes = args.modes.split(",")
    models = args.models.split(",")
    samples: Dict[str, Dict[str, List[float]]] = {m: {n: [] for n in models} for m in modes}
    live = set()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    start = time.monotonic()
    took: Dict[str, List[float]] = {}  # seconds per process, by mode
    inproc: Dict[str, List[Dict[str, float]]] = {}  # model -> on_off() per pyprof process
    for r in range(args.repeats):
        for mode in modes:
            left = args.budget - (time.monotonic() - start) if args.budget else args.timeout
            need = 1.2 * max(took.get(mode, [0]))  # as long as this mode's slowest process so far
            if left <= need:
                print(f"repeat {r} mode {mode}: not started ({left:.0f} s of the budget left, {need:.0f} s needed)",
                      flush=True)
                continue
            t0 = time.monotonic()
            cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--models", args.models,
                   "--steps", str(args.steps), "--blocks", str(args.blocks), "--warmup", str(args.warmup)]
            if args.smoke:
                cmd.append("--smoke")
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    if args.nsys:
                        cmd = [args.nsys, "profile", *NSYS_OPTIONS, "-o", os.path.join(tmp, "run"), *cmd,
                               "--nsys-range"]
                    done = subprocess.run(cmd, capture_output=True, text=True, timeout=min(args.timeout, left), env=env)
                # The child's result is its last JSON line (nsys writes lines of its own after it).
                res = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1]) \
                    if done.returncode == 0 else None
            except (subprocess.TimeoutExpired, ValueError, IndexError):
                done, res = None, None
            took.setdefault(mode, []).append(time.monotonic() - t0)
            if res is None:
                why = "timed out" if done is None else done.stderr.strip().splitlines()[-1:]
                print(f"repeat {r} mode {mode}: failed ({why})", flush=True)
                continue
            if res.pop("_live", False):
                live.add(mode)
            for name in list(res):
                if name.endswith("/ab"):
                    inproc.setdefault(name[:-3], []).append(res.pop(name))
            for name, ms in res.items():
                samples[mode][name].append(ms)
            print(f"repeat {r} {mode}: " + ", ".join(f"{n} {v:.3f}" for n, v in res.items()), flush=True)
            for line in done.stderr.splitlines():
                if "warmed up" in line or "ranges in one step" in line or "in-process" in line:
                    print("  " + line, flush=True)
    print("pyprof modes: markers forced; NVTX pushes " + ("reached a live domain" if live else
                                                          "were no-ops (no tool attached)") + "\n")

    def med(mode: str, name: str) -> float | None:
        v = samples.get(mode, {}).get(name)
        return statistics.median(v) if v else None

    head = f"{'model':13s}" + "".join(f"{m:>15s}" for m in modes)
    print(head + "   (ms per step)")
    print("-" * len(head))
    for name in models:
        print(f"{name:13s}" + "".join(f"{med(m, name):15.3f}" if med(m, name) else f"{'-':>15s}" for m in modes))
    print("\nratio to plain")
    print(head)
    print("-" * len(head))
    verdicts = []
    for name in models:
        base = med("plain", name)
        cells = []
        for m in modes:
            v = med(m, name)
            cells.append(f"{v / base:15.2f}" if v and base else f"{'-':>15s}")
        print(f"{name:13s}" + "".join(cells))
        v = med("pyprof", name)
        if v and base:
            # Processes resampled within each mode: the spread of the host's speed from one
            # process to the next is in the interval.
            why = judged(lambda a, b: statistics.median(a) / statistics.median(b), GOALS[name],
                         samples["pyprof"][name], samples["plain"][name], what="processes per mode")
            verdicts.append(f"{name} {v / base:.2f}x (goal <= {GOALS[name]}x; {why})")
    counts = ", ".join(f"{m} {min(len(v) for v in samples[m].values())}" for m in modes)
    print(f"\nprocesses per mode in these medians: {counts}")
    print("pyprof default vs plain: " + "; ".join(verdicts))
    if inproc:
        print("in-process, markers off/on alternately in each pyprof process (median of the processes' ratios): " +
              "; ".join(f"{n} {statistics.median(d['on'] / d['off'] for d in v):.2f}x (of {len(v)})"
                        for n, v in inproc.items()))
        for n, v in inproc.items():
            pairs = [r for d in v for r in d.get("pairs", [])]
            if pairs:
                why = judged(statistics.median, GOALS[n], pairs, what="rounds")
                print(f"  {n}: on/off within each round, all processes: median {statistics.median(pairs):.2f}x over "
                      f"{len(pairs)} rounds (goal <= {GOALS[n]}x; {why})")
        split = {n: v for n, v in inproc.items() if all("markers" in d for d in v)}
        if split:
            print("  of which without the graph-call ranges and their op ranges (markers/off): " +
                  "; ".join(f"{n} {statistics.median(d['markers'] / d['off'] for d in v):.2f}x" for n, v in split.items()))
    if not args.no_calls:
        print()
        print_calls()


if __name__ == "__main__":
    main()
