"""Known fixes the profile points at, each with its evidence (docs/prof.md, "Advice").

`Evidence` watches every record as it streams by (O(1) memory, plus a few bounded tallies);
`advise()` turns what it saw, with the timeline totals, into Advice items. Each rule fires only
above a documented threshold, so a healthy profile prints no advice.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ...text import count
from ..pricing.analysis import Facts
from ..columns import over_roof, pct_of_bandwidth, pct_of_peak
from ..pricing.registry import CONV, GEMM
from ..units import duration, si

# Thresholds (documented in docs/prof.md).
FP32_MIN_PCT = 5.0        # fp32 matrix kernels on CUDA cores: % of GPU time
ALIGN = 8                 # fp16/bf16 GEMM/conv dims should be multiples of this
ALIGN_MIN_PCT = 1.0       # misaligned 16-bit matrix kernels: % of GPU time
TINY_NS = 10_000          # a "tiny" kernel runs shorter than this (ns)
LAUNCH_BUSY_PCT = 50.0    # launch-bound: GPU busy below this %
LAUNCH_TINY_PCT = 50.0    # ... and at least this % of kernels tiny
LAYOUT_MIN_PCT = 1.0      # layout conversion kernels: % of GPU time
LAYOUT_TOKENS = ("nchwtonhwc", "nhwctonchw")
HOST_COPIES = ("HtoD", "DtoH")
_EXAMPLES = 64            # distinct (op, dims) examples kept for the alignment rule


class Advice(NamedTuple):
    """One finding: `kind` (a stable key), `text` (one line: evidence -> fix), `evidence`
    (the numbers behind it, for --json)."""

    kind: str
    text: str
    evidence: dict


def _dims(params: str) -> dict[str, int]:
    """Integer `KEY=value` pairs of a params string (M=..,N=..,K=.. or N=..,C=..,...,g=..)."""
    out = {}
    for part in params.split(","):
        k, _, v = part.partition("=")
        if v.isdigit():
            out[k] = int(v)
    return out


def misaligned(f: Facts) -> str | None:
    """`M=..,N=..,K=..` (the dims at fault) when a 16-bit GEMM/conv matrix kernel has a dimension
    that is not a multiple of ALIGN; None otherwise or when the dims are unknown."""
    cost = f.cost
    if cost is None or f.tc is None or f.dtype not in ("float16", "bfloat16"):
        return None
    d = _dims(cost.params)
    if cost.kind == GEMM:
        names = ("M", "N", "K")
    elif cost.kind == CONV and d.get("g", 1) == 1:
        names = ("C", "K")  # input and output channels: the GEMM's K and N
    else:
        return None
    if not all(n in d for n in names):
        return None
    bad = [n for n in names if d[n] % ALIGN]
    return ",".join(f"{n}={d[n]}" for n in names) if bad else None


class Evidence:
    """Tallies for the advice rules, fed one record at a time."""

    def __init__(self) -> None:
        self.fp32_time = self.fp32_count = 0
        self.fp32_ops: Counter = Counter()
        self.align_time = self.align_count = 0
        self.align_examples: Counter = Counter()  # "op dims" -> time
        self.tiny = 0
        self.compiled = 0           # kernels of torch.compile'd graphs (joined to their table)
        self.graphed = 0            # kernels replayed from CUDA graphs
        self.layout_time = self.layout_count = 0
        self.layout_ops: Counter = Counter()
        self.copy_records = 0       # memcpy and memset records of any kind
        self.host_count = self.host_bytes = self.host_time = 0
        self.host_kinds: Counter = Counter()
        self.over_count = 0         # kernels above a roof (columns.over_roof)
        self.over_max: tuple = (0.0, "")  # the highest %Peak/%BW among them, and its op

    def kernel(self, rec: dict, f: Facts, dur: int) -> None:
        """Look at one kernel record."""
        over = over_roof(rec, f)
        self.kernels(rec, f, 1, dur, int(dur < TINY_NS), int(over),
                     max(pct_of_peak(rec, f) or 0, pct_of_bandwidth(rec, f) or 0) if over else None)

    def kernels(self, rec: dict, f: Facts, n: int, time: int, tiny: int, over: int, highest: float | None) -> None:
        """Look at `n` kernel records of the content of `rec` and facts `f` at once (memo.py),
        `time` ns in all: `tiny` of them below TINY_NS, `over` above a roof, the highest of those
        at `highest` % (None: none over)."""
        op = rec.get("op") or "-"
        if over:
            self.over_count += over
            self.over_max = max(self.over_max, (highest, op))
        self.tiny += tiny
        if rec.get("compiled") is not None:
            self.compiled += n
        if rec.get("graphNode") is not None:
            self.graphed += n
        if f.tc is False and f.dtype == "float32":
            self.fp32_time += time
            self.fp32_count += n
            self.fp32_ops[op] += time
        dims = misaligned(f)
        if dims is not None:
            self.align_time += time
            self.align_count += n
            key = f"{op} {dims} {f.dtype}"
            if key in self.align_examples or len(self.align_examples) < _EXAMPLES:
                self.align_examples[key] += time
        name = (rec.get("kShortName") or "").lower()
        if any(t in name for t in LAYOUT_TOKENS):
            self.layout_time += time
            self.layout_count += n
            self.layout_ops[op] += time

    def copy(self, rec: dict, dur: int) -> None:
        """Look at one memcpy/memset record."""
        self.copies(rec, 1, dur)

    def copies(self, rec: dict, n: int, time: int) -> None:
        """Look at `n` memcpy/memset records of the content of `rec` at once, `time` ns in all."""
        self.copy_records += n
        kind = rec.get("copyKind")
        if rec.get("kind") == "memcpy" and kind in HOST_COPIES:
            self.host_count += n
            self.host_bytes += (rec.get("bytes") or 0) * n
            self.host_time += time
            self.host_kinds[kind] += n


def _top(c: Counter, n: int = 3) -> str:
    return ", ".join(f"{k} {duration(v)}" for k, v in c.most_common(n))


def _share(part: float, whole: float) -> float:
    return part / whole * 100 if whole else 0.0


def _evidence(kernels: int, time: int, pct: float, **more: dict) -> dict:
    """The numbers behind a rule on a share of GPU time, for --json."""
    return {"kernels": kernels, "time_ns": time, "pct_gpu_time": round(pct, 2), **more}


def _launch_fix(ev: Evidence, kernels: int) -> str:
    """The fix for a launch-bound step, given what the program already does."""
    if ev.graphed:
        return (f"{ev.graphed} of the {kernels} kernels already replay from CUDA graphs; the time between them "
                "is spent outside the graphs: bring the rest of the step into them (compile the loss and the "
                "optimizer step, remove graph breaks and host syncs), or a larger batch")
    if ev.compiled:
        return (f"{ev.compiled} of the {kernels} kernels come from torch.compile'd graphs, launched one by one: "
                "torch.compile(mode='reduce-overhead') replays them as CUDA graphs; compile the loss and the "
                "optimizer step too; or a larger batch")
    return ("larger batch, CUDA graphs (torch.cuda.graphs), torch.compile (mode='reduce-overhead') to fuse "
            "and batch launches")


def advise(ev: Evidence, kernels: int, gpu_time: int, busy_pct: float | None) -> list[Advice]:
    """The advice that `ev` supports, most time at stake first; `gpu_time` is the summed kernel
    time (ns), `busy_pct` the GPU busy % (None when unknown)."""
    out = []
    p = _share(ev.fp32_time, gpu_time)
    if ev.fp32_count and p >= FP32_MIN_PCT:
        out.append((ev.fp32_time, Advice(
            "fp32-matmul",
            f"fp32 matmul/conv on CUDA cores: {count(ev.fp32_count, 'kernel')}, {duration(ev.fp32_time)} = {p:.1f}% of "
            f"GPU time ({_top(ev.fp32_ops)}) -> let them use Tensor Cores: "
            "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')), "
            "torch.backends.cudnn.allow_tf32 = True, or AMP (torch.autocast)",
            _evidence(ev.fp32_count, ev.fp32_time, p, top_ops=dict(ev.fp32_ops.most_common(3))))))
    p = _share(ev.align_time, gpu_time)
    if ev.align_count and p >= ALIGN_MIN_PCT:
        ex = "; ".join(f"{k} {duration(v)}" for k, v in ev.align_examples.most_common(3))
        out.append((ev.align_time, Advice(
            "alignment",
            f"fp16/bf16 GEMM/conv dims not multiples of {ALIGN}: {count(ev.align_count, 'kernel')}, "
            f"{duration(ev.align_time)} = {p:.1f}% of GPU time ({ex}) -> pad sizes (hidden, vocab, "
            f"channels, batch x seq) to multiples of {ALIGN} (64 is better) so Tensor Cores run full tiles",
            _evidence(ev.align_count, ev.align_time, p, examples=dict(ev.align_examples.most_common(3))))))
    tiny_pct = _share(ev.tiny, kernels)
    if kernels and busy_pct is not None and busy_pct < LAUNCH_BUSY_PCT and tiny_pct >= LAUNCH_TINY_PCT:
        out.append((gpu_time, Advice(
            "launch-bound",
            f"launch-bound: GPU busy {busy_pct:.1f}%, {ev.tiny} of {count(kernels, 'kernel')} ({tiny_pct:.0f}%) shorter "
            f"than {duration(TINY_NS)}, mean {duration(gpu_time / kernels)} -> the CPU cannot feed the GPU: "
            + _launch_fix(ev, kernels),
            {"busy_pct": round(busy_pct, 2), "kernels": kernels, "tiny_kernels": ev.tiny,
             "tiny_ns": TINY_NS, "mean_kernel_ns": round(gpu_time / kernels, 1),
             "compiled_kernels": ev.compiled, "graph_kernels": ev.graphed})))
    p = _share(ev.layout_time, gpu_time)
    if ev.layout_count and p >= LAYOUT_MIN_PCT:
        out.append((ev.layout_time, Advice(
            "layout",
            f"layout conversions (nchwToNhwc/nhwcToNchw): {count(ev.layout_count, 'kernel')}, "
            f"{duration(ev.layout_time)} = {p:.1f}% of GPU time ({_top(ev.layout_ops)}) -> keep activations "
            "NHWC: model.to(memory_format=torch.channels_last) and inputs .to(memory_format=torch.channels_last)",
            _evidence(ev.layout_count, ev.layout_time, p, top_ops=dict(ev.layout_ops.most_common(3))))))
    if ev.host_count:
        kinds = ", ".join(f"{k} {c}" for k, c in sorted(ev.host_kinds.items()))
        out.append((ev.host_time, Advice(
            "host-copies",
            f"host<->device copies inside the step: {ev.host_count} ({kinds}), {si(ev.host_bytes, 'B')}, "
            f"{duration(ev.host_time)} -> keep data on the GPU; load with pin_memory=True and "
            ".to(device, non_blocking=True); avoid .item()/.cpu()/print of GPU tensors in the step",
            {"copies": ev.host_count, "bytes": ev.host_bytes, "time_ns": ev.host_time,
             "kinds": dict(ev.host_kinds)})))
    out.sort(key=lambda t: -t[0])
    return [a for _, a in out]


def notes(ev: Evidence) -> list[str]:
    """What the advice could not check, and why; what the numbers cannot mean."""
    out = []
    if ev.over_count:
        pct, op = ev.over_max
        out.append(f"{count(ev.over_count, 'kernel')} above a roof (%BW or %Peak over 100; highest {pct:.1f}%, "
                   f"{op}; Bound says over): algorithmic bytes and FLOPs are not what the hardware moved: inputs "
                   "read from L2 cache rather than DRAM, or an op's work counted on its first kernel while others "
                   "shared it (foreach optimizer steps); the op's row is its honest rate (docs/prof.md)")
    if ev.copy_records == 0:
        out.append("host<->device copies not checked: no memcpy/memset records (parsed without --memcpy, "
                   "or the step made none): `python -m pyprof.parse --memcpy net.sqlite`, or prof given the export "
                   "with --memcpy, adds them")
    return out
