"""No kernel is shown above its compute peak because of how its op's work was attributed.

An op's cost is priced per call and put on the kernels of the call (analysis.py, parts.py); where
the split between them cannot be known, the main kernel carries the rest: a cuDNN RNN's whole
cost on one short step GEMM, a fused optimizer's on its first chunk. When the FLOPs so given to
one kernel are more than its GPU could execute in the kernel's time at the peak of its math path
(peaks.py: datasheet figures at boost clock, which no kernel exceeds), they cannot be that
kernel's alone: its FLOPs are `na` with a warning, and so are its bytes (the same share of the
op's cost). What was withheld stays in Facts (`call_work`), so the groups that
keep an op call whole (groups.WHOLE_CALL: by op, module, call, ...) still add up to the op's
total, and `--summary --by call` gives the call's honest rate.

Bytes alone are not held to the memory bandwidth: algorithmic bytes count every input as read
from memory, and an input still in L2 makes a kernel with exact bytes run faster than DRAM
allows (up to 1.8x the H100's on the benchmarks/kernel_truth.py captures, with bytes equal to
what Nsight Compute counted), so a rate above it does not show a wrong share (docs/prof.md,
"Above a roof").
"""
from __future__ import annotations

from typing import Protocol

from ..warnings_tally import Tally


class Priced(Protocol):
    """What the guard reads and changes of a kernel's facts (analysis.Facts)."""

    flops: int | None
    bytes: int | None
    call_work: tuple | None

    @property
    def peak_tflops(self) -> float | None: ...

# The warning's kind (the tally groups kernels by it and names their ops).
REASON = ("FLOPs beyond the GPU's peak in the kernel's time (the op's work is shared with other kernels of "
          "its call in a way not known: FLOPs and bytes na; --summary --by call has the call's rate)")


def guard(rec: dict, f: Priced, tally: Tally) -> None:
    """Withhold the FLOPs and bytes of kernel record `rec` (priced as `f`) when its FLOPs exceed
    what its math path's peak allows in its duration, counting one warning under REASON."""
    peak, dur = f.peak_tflops, rec.get("kDuration")
    if not f.flops or not peak or type(dur) is not int or dur <= 0:
        return
    if f.flops <= dur * peak * 1e3:  # TFLOP/s = 1e3 FLOP/ns
        return
    if f.call_work is None:
        f.call_work = (f.flops, f.bytes)
    f.flops = f.bytes = None
    tally.warn(REASON, op_name(rec))


def op_name(rec: dict) -> str:
    """The name the warning gives a kernel record's op."""
    return ".".join(str(x) for x in (rec.get("mod"), rec.get("op")) if x) or "?"

