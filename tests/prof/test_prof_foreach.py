"""Foreach ops called outside an optimizer step (gradient clipping's clip_grad_norm_: torch.
_foreach_norm then torch._foreach_mul_), priced from their markers kernel by kernel: each
multi-tensor launch its packed elements (multitensor.py), _foreach_norm's zero fill and cleanup
their stages (ops/foreach.py). Kernel names as an H200 capture spells them (lm_checkpointed)."""
from __future__ import annotations

from pyprof.prof.pricing.analysis import Analyzer
from pyprof.prof.pricing.ops import Call, lookup
from pyprof.prof.warnings_tally import Tally

FILL = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, " \
       "(unsigned long)1>>(int, T2, T3)"
NORM = "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)1>, " \
       "at::native::LpNormFunctor<float, (at::native::NormType)1, float, (int)1, (int)1, (int)0>, float *, int>" \
       "(T1, T2, T3...)"
CLEANUP = "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, (bool)1, float>(const T5 *, " \
          "at::native::TensorListAddresses, int)"
MUL = "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)1>, " \
      "at::native::<unnamed>::BinaryOpScalarTensorFunctor<float, (int)1, (int)1, (int)0>, std::multiplies<float>, " \
      "float *>(T1, T2, T3...)"
# 30 gradients of 700,000 fp32 elements (11 chunks of 65,536 each): a first launch of 320 blocks
# (29 tensors and the 30th's first chunk), then one of 10 blocks (the rest of the 30th).
N, COUNT = 700_000, 30
FIRST = 29 * N + 65536
SECOND = N - 65536
GRADS = [{"shape": [N], "dtype": "float32"}] * 16 + [{"more": COUNT - 16, "numels": [N] * (COUNT - 16),
                                                       "dtype": "float32"}]


def _record(name: str, grid: int, marker: dict) -> dict:
    return {"kind": "kernel", "kLongName": name, "kShortName": name.split("<")[0].split("::")[-1],
            "grid": [grid, 1, 1], "block": [512, 1, 1], "dir": "fprop", "mod": marker["mod"], "op": marker["op"],
            "marker": marker, "torchOps": [], "pid": 1, "tid": 1}


def test_a_foreach_norms_kernels_each_carry_their_own_work():
    """The partials zeroed (30 tensors x 11 chunks, fp32), the two launches (2 FLOPs an element,
    the gradients read once), lpnorm_cleanup (each tensor's 11 partials summed and rooted: 300
    adds and 30 roots; the partials read, the 30 norms written). They add up to the formula."""
    marker = {"v": 1, "kind": "op", "mod": "torch", "op": "_foreach_norm", "args": [GRADS, 2]}
    an = Analyzer(Tally())
    got = [an.facts(_record(name, grid, marker)) for name, grid in ((FILL, 1), (NORM, 320), (NORM, 10),
                                                                     (CLEANUP, COUNT))]
    partials = COUNT * 11 * 4
    assert [(f.flops, f.bytes) for f in got] == [
        (0, partials), (2 * FIRST, FIRST * 4), (2 * SECOND, SECOND * 4), (300 + 30, partials + 30 * 4)]
    cost = lookup("torch", "_foreach_norm")(Call(marker))
    assert cost.flops == sum(f.flops for f in got) == 2 * COUNT * N + 330


def test_a_foreach_multiply_by_a_tensor_shares_its_launches_by_their_elements():
    """clip_grad_norm_'s _foreach_mul_(grads, clip_coef): 1 FLOP an element, each gradient read
    and written (the 0-dim coefficient's 4 bytes in the formula's total)."""
    marker = {"v": 1, "kind": "op", "mod": "torch", "op": "_foreach_mul_",
              "args": [GRADS, {"shape": [], "dtype": "float32"}]}
    an = Analyzer(Tally())
    got = [an.facts(_record(MUL, grid, marker)) for grid in (320, 10)]
    assert [(f.flops, f.bytes) for f in got] == [(FIRST, FIRST * 8), (SECOND, SECOND * 8)]
    assert lookup("torch", "_foreach_mul_")(Call(marker)).flops == COUNT * N


def test_a_list_cut_without_its_sizes_leaves_the_op_unknown():
    """A marker whose list past 16 tensors says only how many (an older pyprof's, or tensors of
    several dtypes): the op's total is not known, nor any launch's."""
    marker = {"v": 1, "kind": "op", "mod": "torch", "op": "_foreach_mul_",
              "args": [GRADS[:16] + [{"more": 14}], 0.5]}
    assert lookup("torch", "_foreach_mul_")(Call(marker)) is None
    f = Analyzer(Tally()).facts(_record(MUL, 320, marker))
    assert (f.flops, f.bytes) == (None, None)
