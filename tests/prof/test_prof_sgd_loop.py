"""Each kernel of a for-loop SGD step (`foreach=False`) its own FLOPs and bytes (issue 27), on the
real records of an H100 capture (tests/data/cov_sgd_loop_default.jsonl.xz: benchmarks/
pricing_coverage.py's rnn_packed, its whole SGD.step call cut from pyprof.init()'s records,
unchanged: momentum 0.9, weight decay 1e-4, 10 fp32 parameters). The step's first kernel carried
the whole formula and the 39 others were na before."""
from __future__ import annotations

import io
import json
import lzma
import os

from pyprof.prof.io.reader import records
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
NUMELS = [32768, 65536, 512, 512, 12288, 9216, 96, 96, 960, 10]
# A contiguous fp32 clone: torch.clone(grad) of the step that creates a momentum buffer.
CLONE = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::direct_copy_kernel_cuda("
         "at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()"
         "() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")


def _step() -> list:
    with lzma.open(os.path.join(DATA, "cov_sgd_loop_default.jsonl.xz"), "rt") as s:
        return [json.loads(line) for line in s]


def _priced(recs: list) -> list:
    text = "".join(json.dumps(r) + "\n" for r in recs).encode()
    return [(rec["kLongName"], f.flops, f.bytes) for rec, f, _ in analysed(records(io.BytesIO(text), Tally()), Tally())]


def test_loop_sgd_kernels_carry_their_own_pass():
    """Per parameter of n elements, in the marker's `numels` order: grad.add(param, alpha=wd)
    (2n FLOPs, 3n·4 bytes), buf.mul_(momentum) (n, 2n·4), buf.add_(grad) (alpha 1: n, 3n·4),
    param.add_(buf, alpha=-lr) (2n, 3n·4); the kernels sum to the formula's 6 FLOPs an element."""
    got = [(name.split("<")[1].split(",")[1].strip().split("<")[0], f, b) for name, f, b in _priced(_step())]
    want = []
    for n in NUMELS:
        want += [("at::native::CUDAFunctor_add", 2 * n, 12 * n), ("at::native::AUnaryFunctor", n, 8 * n),
                 ("at::native::CUDAFunctor_add", n, 12 * n), ("at::native::CUDAFunctor_add", 2 * n, 12 * n)]
    assert got == want
    assert sum(f for _, f, _ in got) == 6 * sum(NUMELS) == 731964


def test_loop_sgd_first_step_clones_the_buffer_and_the_adds_stay_with_their_parameter():
    """The step that creates the momentum buffers runs torch.clone(grad) (n read and written, 0
    FLOPs) in place of the buffer's mul and add: each parameter's update add still takes its own
    pass (2n), not the skipped momentum add's, and the next parameter's kernels their own sizes.
    The capture's kernels with each parameter's mul and momentum add replaced by one clone."""
    recs, first = _step(), []
    for i in range(0, len(recs), 4):
        clone = dict(recs[i + 1], kLongName=CLONE)
        first += [recs[i], clone, recs[i + 3]]
    got = [(f, b) for _, f, b in _priced(first)]
    want = []
    for n in NUMELS:
        want += [(2 * n, 12 * n), (0, 8 * n), (2 * n, 12 * n)]
    assert got == want
