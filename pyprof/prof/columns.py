"""The column table: the single source of every column's name, header, meaning, unit, width
and value function. -h, the docs and the three output forms all read it.

A value function takes (record, Facts, index) and returns a string. `needs_facts` says whether
the column needs the analysis (op cost, attribution, Tensor Cores, peaks) at all, so that
`-c idx,kernel,sil` runs at the speed of JSON decoding. `type` is what a printed value is
(int, float, bool or str): the typed forms (--json, --parquet, pyprof.rows) give it, with None
for `na` and `-`, under the column's name, the key every form uses.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ..formats import (ALT_SEQ_ID, BLOCK, BYTES, COPY_KIND, DEVICE, DIR, DURATION, DYNAMIC_SHARED, GRID, KERNEL, KIND,
                       LAUNCH, LAYER, LONG_NAME, MOD, MODULE, OP, PID, RANK, REGS, SEQ_ID, SHORT_NAME, START,
                       STATIC_SHARED, STREAM, SUB_SEQ_ID, TID, TRACE)
from .pricing.registry import retype

from .comms.collectives import Collective, of_record

NA = "na"      # a value that cannot be known
ABSENT = "-"   # a value that does not apply (no layer, no seq id, tc of an element-wise kernel)


class Column(NamedTuple):
    name: str
    header: str
    meaning: str
    unit: str
    width: int            # columnated output (-w): the column's width; an elastic one's starting width
    needs_facts: bool
    value: Callable
    type: type = str      # int, float or str
    elastic: bool = False  # free text: widens with -w, cut (with an ellipsis) to fit a narrower line
    middle: bool = False   # cut in the middle, not at the end: names whose end tells them apart


def kernel_name(rec: dict) -> str:
    """A kernel's full name: the demangled one (kLongName) as nsys stats shows it, so that template
    instantiations of one kernel stay apart; the short name where there is none; `-` without either.
    The `name` column and --by kernel's key."""
    name = rec.get(LONG_NAME) or rec.get(SHORT_NAME)
    return ABSENT if name is None or name == "" else str(name)


def _get(key: str) -> Callable:
    def value(rec, facts, idx):
        v = rec.get(key)
        return ABSENT if v is None or v == "" else str(v)
    return value


def _dims(key: str) -> Callable:
    def value(rec, facts, idx):
        v = rec.get(key)
        return "(" + ",".join(map(str, v)) + ")" if v else ABSENT
    return value


def _joined(key: str, sep: str) -> Callable:
    def value(rec, facts, idx):
        v = rec.get(key)
        return sep.join(map(str, v)) if v else ABSENT
    return value


def _num(x) -> str:
    return NA if x is None else str(x)


def _rate(num: float | None, den: float | None, scale: float, fmt: str) -> str:
    if num is None or not den:
        return NA
    return format(num / den * scale, fmt)


def _dur(rec) -> int | None:
    return rec.get(DURATION)


def _tflops(rec, f, idx):
    return _rate(f.flops, _dur(rec), 1e-3, ".3f")  # FLOP/ns = GFLOP/s


def _gbps(rec, f, idx):
    return _rate(f.bytes, _dur(rec), 1.0, ".1f")  # B/ns = GB/s


def _ai(rec, f, idx):
    return _rate(f.flops, f.bytes, 1.0, ".2f")


def pct_of_peak(rec: dict, f) -> float | None:
    """The kernel's FLOP rate as % of its math path's peak; None when unknown."""
    peak, dur = f.peak_tflops, _dur(rec)
    if peak is None or f.flops is None or not dur:
        return None
    return f.flops / dur * 1e-3 / peak * 100


def pct_of_bandwidth(rec: dict, f) -> float | None:
    """The kernel's byte rate as % of the GPU's peak memory bandwidth; None when unknown."""
    dur = _dur(rec)
    if f.peaks is None or not f.peaks.gbps or f.bytes is None or not dur:
        return None
    return f.bytes / dur / f.peaks.gbps * 100


def over_roof(rec: dict, f) -> bool:
    """True when the kernel's algorithmic rate is above a roof (%Peak or %BW over 100): the
    model cannot hold it (its data came from cache, or its op's work is counted on it while
    other kernels did part of it; docs/prof.md)."""
    return (pct_of_peak(rec, f) or 0) > 100 or (pct_of_bandwidth(rec, f) or 0) > 100


def _pct(value: float | None) -> str:
    return NA if value is None else format(value, ".1f")


def _pct_peak(rec, f, idx):
    return _pct(pct_of_peak(rec, f))


def _pct_bw(rec, f, idx):
    return _pct(pct_of_bandwidth(rec, f))


def _bound(rec, f, idx):
    return "over" if over_roof(rec, f) else bound(f)


def bound(f) -> str:
    """compute or memory, from the kernel's FLOP/byte against the GPU's ridge point
    (peak FLOP/s of its math path over peak bandwidth); na when either is unknown."""
    if f.flops is None or f.bytes is None or (f.flops == 0 and f.bytes == 0):
        return NA
    if f.flops == 0:
        return "memory"
    peak = f.peak_tflops
    if peak is None or f.peaks is None or not f.peaks.gbps or not f.bytes:
        return NA
    ridge = peak * 1e3 / f.peaks.gbps  # (TFLOP/s * 1e12) / (GB/s * 1e9)
    return "compute" if f.flops / f.bytes >= ridge else "memory"


def tc_text(tc: bool | None) -> str:
    """A Tensor Core verdict as printed: 1, 0, or - (not applicable)."""
    return ABSENT if tc is None else "1" if tc else "0"


def _params(rec, f, idx):
    if rec.get(KIND, KERNEL) != KERNEL:
        return f"bytes={rec.get(BYTES)},kind={rec.get(COPY_KIND, rec.get(KIND))}"
    if f.cost is None:
        return NA
    # The dtype the kernel ran in, when its name said otherwise than the marker (DType's value).
    return retype(f.cost.params, f.dtype) if f.dtype is not None and f.dtype != f.cost.dtype else f.cost.params


def _latency(rec, f, idx):
    launch, start = rec.get(LAUNCH), rec.get(START)
    t = launch.get("start") if isinstance(launch, dict) else None
    return str(start - t) if type(start) is int and type(t) is int else ABSENT


def _smem(rec, f, idx):
    s, d = rec.get(STATIC_SHARED), rec.get(DYNAMIC_SHARED)
    return NA if s is None and d is None else str((s or 0) + (d or 0))


def _coll(rec) -> Collective | None:
    # The five collective columns of one row ask for the same record's collective: worked out once.
    if _last[0] is not rec:
        _last[0], _last[1] = rec, of_record(rec)
    return _last[1]


_last: list = [None, None]


def _coll_value(get: Callable, fmt: str = "") -> Callable:
    def value(rec, f, idx):
        c = _coll(rec)
        if c is None:
            return ABSENT
        v = get(c, rec)
        return NA if v is None else format(v, fmt) if fmt else str(v)
    return value


COLUMNS = [
    Column("idx", "Idx", "index of the record in the input (kernel order)", "", 6, False, lambda r, f, i: str(i), int),
    Column("seq", "SeqId", "PyTorch sequence id of the innermost op range", "", 7, False, _get(SEQ_ID), int),
    Column("altseq", "AltSeqId", "sequence ids of the other enclosing op ranges", "", 10, False,
           _joined(ALT_SEQ_ID, ",")),
    Column("tid", "TId", "thread id of the launch call", "", 8, False, _get(TID), int),
    Column("layer", "Layer", "user layer ranges (layer:NAME, pyprof.annotate), outermost first", "", 16, False,
           _joined(LAYER, ":"), elastic=True, middle=True),
    Column("trace", "Trace", "the user's call site file:line (for bprop: the forward op's)", "", 24, False,
           _get(TRACE), elastic=True, middle=True),
    Column("dir", "Direction", "fprop, bprop, or optim (an optimizer step)", "", 9, False, _get(DIR)),
    Column("sub", "Sub", "n-th kernel of the same innermost op range", "", 4, False, _get(SUB_SEQ_ID), int),
    Column("mod", "Module", "where the op lives: torch, Tensor, torch.nn.functional, ... (aten without a marker)",
           "", 20, False, _get(MOD), elastic=True),
    Column("op", "Op", "the operation (conv2d, __add__, SGD.step, ...)", "", 16, False, _get(OP), elastic=True),
    Column("kernel", "Kernel", "kernel short name", "", 32, False, _get(SHORT_NAME), elastic=True, middle=True),
    Column("name", "Name", "kernel's demangled name with its template arguments (kLongName; the short name where "
           "the trace has none): the key of --summary --by kernel", "", 40, False,
           lambda r, f, i: kernel_name(r), elastic=True, middle=True),
    Column("params", "Params", "the op's shapes and dtype (GEMM: M,N,K; conv: N,C,H,W,K,P,Q,R,S,...)", "", 32,
           True, _params, elastic=True, middle=True),
    Column("sil", "Sil(ns)", "kernel duration on the GPU (silicon time)", "ns", 10, False, _get(DURATION), int),
    Column("tc", "TC", "Tensor Cores: 1 used, 0 a matrix kernel that did not, - not applicable", "", 3, True,
           lambda r, f, i: tc_text(f.tc), bool),
    Column("device", "Device", "CUDA device id", "", 6, False, _get(DEVICE), int),
    Column("stream", "Stream", "CUDA stream id", "", 6, False, _get(STREAM), int),
    Column("grid", "Grid", "grid dimensions (x,y,z)", "", 14, False, _dims(GRID)),
    Column("block", "Block", "block dimensions (x,y,z)", "", 12, False, _dims(BLOCK)),
    Column("flops", "FLOPs", "floating-point operations this kernel carries (FMA = 2)", "FLOP", 14, True,
           lambda r, f, i: _num(f.flops), int),
    Column("bytes", "Bytes", "algorithmic memory traffic this kernel carries (inputs read once, outputs "
           "written once)", "B", 14, True, lambda r, f, i: _num(f.bytes), int),
    Column("tflops", "TFLOP/s", "achieved FLOP rate: flops / sil", "TFLOP/s", 9, True, _tflops, float),
    Column("gbps", "GB/s", "achieved memory rate: bytes / sil", "GB/s", 9, True, _gbps, float),
    Column("ai", "FLOP/B", "arithmetic intensity: flops / bytes", "FLOP/B", 9, True, _ai, float),
    Column("peak", "%Peak", "achieved FLOP rate as % of the GPU's dense peak for the kernel's math path", "%",
           6, True, _pct_peak, float),
    Column("bw", "%BW", "achieved memory rate as % of the GPU's peak memory bandwidth", "%", 6, True, _pct_bw, float),
    Column("bound", "Bound", "compute or memory: arithmetic intensity against the roofline ridge point; over: "
           "the achieved rate is above a roof (%Peak or %BW over 100: cache hits, or work shared with other "
           "kernels)", "", 8, True, _bound),
    Column("path", "MathPath", "peak the kernel is held against: fp16_tc (also bf16), tf32_tc, int8_tc, "
           "fp64_tc, fp32, fp64", "", 8, True, lambda r, f, i: f.path or NA),
    Column("dtype", "DType", "the dtype the op (GEMM/conv/attention: the kernel) computed in", "", 9, True,
           lambda r, f, i: f.dtype or NA),
    Column("level", "Priced", "what priced the kernel: marker (its pyprof op marker), aten (PyTorch's op ranges, "
           "when the marker cannot), compiled (its compiled graph's FX nodes), na (neither)", "", 7, True,
           lambda r, f, i: (f.level or NA) if r.get(KIND, KERNEL) == KERNEL else ABSENT),
    Column("call", "Call", "the op call the kernel belongs to, numbered in launch order (a backward kernel: its "
           "forward call's backward call; --summary --by call has one row per call); - for memcpy/memset", "", 6,
           True, lambda r, f, i: ABSENT if f.call is None else str(f.call), int),
    Column("module", "ModulePath", "qualified name of the innermost nn.Module (for bprop: the forward op's)", "",
           24, False, _get(MODULE), elastic=True, middle=True),
    Column("pid", "PId", "process id", "", 8, False, _get(PID), int),
    Column("start", "Start(ns)", "kernel start on the GPU timeline", "ns", 20, False, _get(START), int),
    Column("latency", "Lat(ns)", "launch latency: kernel start on the GPU minus the start of its launch call "
           "(cudaLaunchKernel, cudaGraphLaunch, ...) on the CPU; - without a launch call", "ns", 9, False, _latency,
           int),
    Column("regs", "Regs", "registers per thread", "", 5, False, _get(REGS), int),
    Column("smem", "SMem(B)", "shared memory per block, static plus dynamic", "B", 8, False, _smem, int),
    Column("rank", "Rank", "rank of the job whose export the record came from", "", 5, False, _get(RANK), int),
    Column("coll", "Coll", "NCCL kernel's collective (AllReduce, AllGather, ReduceScatter, ...); - for other "
           "kernels", "", 13, False, _coll_value(lambda c, r: c.kind)),
    Column("collbytes", "CollBytes", "collective's size S as nccl-tests counts it (all-gather: the gathered "
           "buffer; reduce-scatter: the input)", "B", 12, False, _coll_value(lambda c, r: c.size), int),
    Column("ranks", "Ranks", "collective's group size", "", 5, False, _coll_value(lambda c, r: c.ranks), int),
    Column("algbw", "AlgBW", "collective's algorithm bandwidth: S / sil", "GB/s", 8, False,
           _coll_value(lambda c, r: c.algbw(r.get(DURATION)), ".2f"), float),
    Column("busbw", "BusBW", "collective's bus bandwidth: algbw x nccl-tests' factor (all-reduce 2(n-1)/n, "
           "all-gather, reduce-scatter and all-to-all (n-1)/n, others 1)", "GB/s", 8, False,
           _coll_value(lambda c, r: c.busbw(r.get(DURATION)), ".2f"), float),
]
BY_NAME = {c.name: c for c in COLUMNS}
DEFAULT = "idx,dir,sub,mod,op,kernel,params,sil"


def typed(kind: type, text: str) -> Any:
    """A printed value as `kind` (a column's type): None for `na`, `-` and a value that is not a
    `kind` (a malformed record's); tc's `1`/`0` as True/False."""
    if text == NA or text == ABSENT:
        return None
    if kind is str:
        return text
    if kind is bool:
        return text == "1" if text in ("1", "0") else None
    try:
        return kind(text)
    except ValueError:
        return None


def select(spec: str) -> list:
    """Columns named in a comma-separated spec; raises KeyError naming the first unknown one."""
    cols = []
    for name in spec.split(","):
        name = name.strip().lower()
        if name not in BY_NAME:
            raise KeyError(name)
        cols.append(BY_NAME[name])
    return cols


def help_table() -> str:
    """Every column with its header, meaning and unit, for -h."""
    lines = ["columns (-c, comma separated; default %s):" % DEFAULT]
    for c in COLUMNS:
        unit = f" [{c.unit}]" if c.unit else ""
        lines.append(f"  {c.name:<8} {c.header:<11} {c.meaning}{unit}")
    return "\n".join(lines)
