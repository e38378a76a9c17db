"""What a sampling decoder's step runs (benchmarks/pricing_coverage.py's llm_decode, captured on an
H200 at stop 51 before any change for it: 80.4% of its GPU time known with pyprof's markers, 88.0%
from PyTorch's ranges; 100.0% in every mode after): a KV cache written by index_copy_ and
torch.multinomial's draw, with markers and from ranges. Every number derived by hand."""
from __future__ import annotations

from pyprof.prof.pricing.op_ranges import AtenCall, template_dtype
from pyprof.prof.pricing.registry import Call, lookup, lookup_aten
from test_prof_helpers import analyse, record

INDEX_COPY = ("void at::native::index_elementwise_kernel<(int)128, (int)4, void at::native::index_copy_kernel_impl"
              "<at::native::OpaqueType<(int)2>>(at::TensorIterator &, long, long, long)::[lambda(int) (instance 1)]>"
              "(long, T3)")
# The decoder's cache update: 64 new positions of [8, 8, 64, 64] fp16 keys into an [8, 8, 88, 64] cache.
CACHE, NEW, POSITIONS = [8, 8, 88, 64], [8, 8, 64, 64], [64]


def _marker(op: str, args: list, mod: str = "Tensor", **kwargs) -> dict:
    return {"v": 1, "kind": "op", "mod": mod, "op": op, "args": args, "kwargs": kwargs}


def test_a_kv_cache_update_writes_the_new_positions_alone():
    """cache.index_copy_(2, positions, k): the 64 int64 positions and the 262,144 new fp16
    elements read, as many written; the cache's other positions untouched. Out of place, the
    cache copied first, a kernel of its own (the named stages add up to the op)."""
    n = 8 * 8 * 64 * 64
    args = [{"shape": CACHE, "dtype": "float16"}, 2, {"shape": POSITIONS, "dtype": "int64"}, {"shape": NEW, "dtype": "float16"}]
    inplace = lookup("Tensor", "index_copy_")(Call(_marker("index_copy_", args)))
    assert (inplace.flops, inplace.bytes, inplace.stages) == (0, 64 * 8 + 2 * n * 2, None)
    out = lookup("torch", "index_copy")(Call(_marker("index_copy", args, "torch")))
    whole = 8 * 8 * 88 * 64
    assert out.stages == (("direct_copy_kernel_cuda", 0, 2 * whole * 2), ("index_copy_kernel", 0, 2 * n * 2, 64 * 8))
    assert out.bytes == sum(sum(s[2:]) for s in out.stages)


def test_a_kv_cache_update_from_pytorchs_range():
    """The same from aten::index_copy_'s range, whose sizes carry no dtype and whose kernel names
    only the elements' size (OpaqueType<2>): the same bytes."""
    c = lookup_aten("aten::index_copy_")(AtenCall("aten::index_copy_", [CACHE, [], POSITIONS, NEW], template_dtype(INDEX_COPY),
                                                  INDEX_COPY))
    assert (c.flops, c.bytes) == (0, 64 * 8 + 2 * 8 * 8 * 64 * 64 * 2)


def test_one_multinomial_draw_kernel_by_kernel():
    """torch.multinomial(p, 1) over [8, 50] fp32 probabilities (a top-50 sampler) runs 14 kernels:
    min and max of all (399 comparisons each, p read, one element written), their two checks
    (one element read, a bool written), their and, the assert (a bool read), the rows' sums (392
    adds), == 0 (8), any() (7), not, the assert, the exponential noise (400 written), p / q (400
    divides), argmax per row (392 comparisons, 8 int64 written). Each kernel its stage, named, as
    the H200 capture ran them; more draws: na."""
    p = {"shape": [8, 50], "dtype": "float32"}
    cost = lookup("torch", "multinomial")(Call(_marker("multinomial", [p, 1], "torch")))
    assert [s[0] for s in cost.stages] == [
        "MinNanFunctor", "MaxNanFunctor", "compare_scalar_kernel", "compare_scalar_kernel", "BitwiseAndFunctor",
        "_assert_async_cuda_kernel", "sum_functor", "CompareEqFunctor", "or_kernel_cuda", "bitwise_not_kernel_cuda",
        "_assert_async_cuda_kernel", "distribution_elementwise", "DivFunctor", "ArgMaxOps"]
    assert [(s[1], sum(s[2:])) for s in cost.stages] == [
        (399, 1604), (399, 1604), (1, 5), (1, 5), (1, 3), (0, 1), (392, 1632), (8, 40), (7, 9), (1, 2), (0, 1),
        (0, 1600), (400, 4800), (392, 1664)]
    assert cost.flops == sum(s[1] for s in cost.stages) == 2001
    assert lookup("torch", "multinomial")(Call(_marker("multinomial", [p, 4], "torch"))) is None


ASSERT = "void at::native::_assert_async_cuda_kernel<bool>(const T1 *, at::native::Msg)"
NOT = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::bitwise_not_kernel_cuda(at::TensorIteratorBase &)"
       "::[lambda(bool) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")
ARGMAX = "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, " \
         "unsigned int, long, (int)4, (int)4>>(T3)"


def test_multinomials_parts_from_pytorchs_ranges():
    """Without markers multinomial's sub-ops are ranges of their own: the assert reads its bool,
    the not of a 0-dim bool (the functor lambda's parameter type names it) reads and writes one,
    argmax's out= overload gives its output's shape (its last input: 8 rows, 392 comparisons,
    p read, 8 int64 written)."""
    assert template_dtype(NOT) == "bool"
    assert template_dtype("void f<(bool)1>(int)") is None  # a cast, not a type
    got = [(name, lookup_aten(name)(AtenCall(name, sizes, template_dtype(k), k)))
           for name, sizes, k in [("aten::_assert_async", [[], []], ASSERT), ("aten::bitwise_not", [[]], NOT),
                                  ("aten::argmax", [[8, 50], [], [], [8, 1]], ARGMAX)]]
    assert [(n, c.flops, c.bytes) for n, c in got] == [("aten::_assert_async", 0, 1), ("aten::bitwise_not", 1, 2),
                                                        ("aten::argmax", 392, 8 * 50 * 4 + 8 * 8)]


def test_arange_from_pytorchs_range_takes_its_length_from_a_consumer():
    """torch.arange(pos, pos + 64) for the cache positions: every argument a scalar the range
    does not carry; the index_copy_ that reads it says it is 64 long: 64 int64 written. With no
    consumer, the range around is asked (na here: there is none)."""
    kernel = ("void <unnamed>::elementwise_kernel_with_index<int, at::native::arange_cuda_out(...)::[lambda() (instance 1)]"
              "::operator ()() const::[lambda(long) (instance 1)]>(T1, T2, function_traits<T2>::result_type *)")
    arange = {"name": "aten::arange", "opId": 10, "sizes": [[], [], [], [0]], "inputOpIds": [[0, -1]] * 4}
    copy = {"name": "aten::index_copy_", "opId": 11, "sizes": [CACHE, [], POSITIONS, NEW],
            "inputOpIds": [[5, 0], [0, -1], [10, 0], [6, 0]]}
    facts, _ = analyse([record(None, kernel, torchOps=[arange]), record(None, INDEX_COPY, torchOps=[copy])])
    assert (facts[0].flops, facts[0].bytes, facts[0].level) == (0, 64 * 8, "aten")
    alone, _ = analyse([record(None, kernel, torchOps=[arange])])
    assert alone[0].bytes is None
