"""The launches of a multi-tensor op (PyTorch's `multi_tensor_apply_kernel`): what one launch of
a foreach op or a fused optimizer step reads, writes and computes.

One foreach op (`torch._foreach_mul_`, one line of a foreach optimizer step) walks D tensor lists
of the same length; PyTorch packs the tensors, in order, into launches of at most
`max_tensors(D)` tensors and 320 blocks of 65,536 elements (a tensor split across two launches
goes on in the second). The kernel's demangled name says the rest:
- `TensorListMetadata<D>` (or `TensorListScalarListMetadata<T, D>`, `FusedOptimizerTensorList
  Metadata<D>`): the D lists;
- a foreach functor `XFunctor<T, D, R, res>` reads R lists and writes one (in place: list 0; out of
  place: list `res`): R + 1 lists moved per element, each element of T; FLOPs per element from
  its operation (`std::plus` 1, `LerpFunctor` 3, a pointwise `std::multiplies` is addcmul 2, ...);
- a fused optimizer's `FusedAdamMathFunctor<T, D, ...>` (`FusedSgdMathFunctor`, ...) reads all D
  lists (parameter, gradient, states) and writes all but the gradient: 2D - 1 lists; its FLOPs
  per element are the optimizer formula's.

The elements of one launch: the whole list's when every tensor fits one launch (the count within
max_tensors(D) and fewer than 320 blocks); else, where the op's PyTorch range gives each tensor's
size, the launch's own (launch_elements replays the packing); else the launch's share of the
list's chunks, its grid over the chunks of a launch that held the whole list earlier in the same
call (a foreach step's first, one-list op), and unknown (na) when no launch did.

An optimizer step's or GradScaler's unscale's marker names its lists (tensor_lists); the op call
holds them (parts.CallParts.launch) for its launches. In an optimizer step a pointwise multiply
(addcmul) squares a list, its two factors one list read once: torch.optim's foreach steps call it
so alone (Adam's and AdamW's exp_avg_sq.addcmul_(grad, grad), RMSprop's, Adagrad's, Adadelta's).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from .registry import Cost
from .values import ITEMSIZE

CHUNK = 65536  # kChunkSize: elements one block walks
MAX_BLOCKS = 320
# depth_to_max_tensors and depth_to_max_tensors_scalarlist of ATen's MultiTensorApply.cuh.
_MAX_TENSORS = (110, 64, 48, 36, 30)
_MAX_TENSORS_SCALARLIST = (96, 64, 48, 36, 30)

# Read from the name lower-cased: the aten level's formulas see it so (aten.AtenCall).
_KERNEL = re.compile(r"\bmulti_tensor_apply_kernel<", re.IGNORECASE)
_METADATA = re.compile(r"\b(tensorlist|tensorlistscalarlist|fusedoptimizertensorlist)metadata<(?:[^,<>]+, )?"
                       r"\(int\)(\d+)>")
# A foreach norm's functor: one list read, 2 FLOPs an element (square, add), partials per block.
_NORM = re.compile(r"\blpnormfunctor<([\w:]+(?: [\w:]+)?), ")
_NORM_FLOPS = 2
_FUNCTOR = re.compile(r"\b(\w+functor)<([\w:]+(?: [\w:]+)?), \(int\)(\d+)(?:, \(int\)(\d+), \(int\)(\d+))?")
# The element type as the functor spells it.
_TYPES = {"float": "float32", "double": "float64", "c10::half": "float16", "c10::bfloat16": "bfloat16",
          "at::half": "float16", "at::bfloat16": "bfloat16"}
# A foreach functor's operation after its template arguments: 1 FLOP per element, lerp the
# element-wise table's; a pointwise functor's (addcmul, addcdiv) and an alpha functor's (add or
# sub with alpha: a multiply and an add) 2.
_OPERATION = re.compile(r"(std::(?:plus|minus|multiplies|divides)|lerpfunctor|sqrt|exp|reciprocal|neg|abs|sigmoid|"
                        r"tanh|log|rsqrt|sign)")
_TWO_OPS = 2


class Launch(NamedTuple):
    """What one multi-tensor launch does per element of one list: lists moved, FLOPs (None for a
    fused optimizer's math, the formula's, or an operation not known), element size; how many
    tensors a launch holds; whether it is a pointwise multiply (addcmul)."""

    lists: int
    flops: int | None
    size: int
    fused: bool
    max_tensors: int
    product: bool = False


def is_launch(kernel: str | None) -> bool:
    """True for a `multi_tensor_apply_kernel` (foreach ops, fused optimizer steps)."""
    return bool(kernel) and _KERNEL.search(kernel) is not None


@lru_cache(maxsize=1024)
def launch(kernel: str) -> Launch | None:
    """The launch's anatomy from its demangled name; None when the name does not say it."""
    kernel = kernel.lower()
    meta, fun, norm = _METADATA.search(kernel), _FUNCTOR.search(kernel), _NORM.search(kernel)
    if meta is None or fun is None and norm is None:
        return None
    depth = int(meta.group(2))
    size = ITEMSIZE.get(_TYPES.get((norm or fun).group(1 if norm else 2), ""))
    if size is None or not 1 <= depth <= len(_MAX_TENSORS):
        return None
    limit = (_MAX_TENSORS_SCALARLIST if meta.group(1) == "tensorlistscalarlist" else _MAX_TENSORS)[depth - 1]
    if norm is not None:
        return Launch(1, _NORM_FLOPS, size, False, limit)
    if meta.group(1) == "fusedoptimizertensorlist":
        return Launch(2 * depth - 1, None, size, True, limit)
    if fun.group(4) is None:
        return None
    from .ops.elementwise import FLOPS_PER_ELEMENT  # here: the op table imports this module

    reads = int(fun.group(4))
    op = _OPERATION.search(kernel, fun.end())
    name = fun.group(1)
    if name.startswith("pointwise") or "alpha" in name:
        flops = _TWO_OPS
    elif op is None:
        flops = None  # an operation not in the list: its lists still say the bytes
    else:
        flops = FLOPS_PER_ELEMENT["lerp"] if op.group(1) == "lerpfunctor" else 1
    product = name.startswith("pointwise") and op is not None and op.group(1) == "std::multiplies"
    return Launch(reads + 1, flops, size, False, limit, product)


def launch_elements(numels: list[int], max_tensors: int) -> list[int]:
    """Elements of each launch ATen's multi_tensor_apply makes of a list of tensors of `numels`
    elements (empty tensors skipped): a launch ends when it holds `max_tensors` whole tensors or
    320 blocks, a tensor cut there going on in the next."""
    return [elems for elems, _ in launch_chunks(numels, max_tensors)]


def launch_chunks(numels: list[int], max_tensors: int) -> list[tuple[int, int]]:
    """(elements, blocks) of each launch of launch_elements."""
    out: list[tuple[int, int]] = []
    tensors = blocks = elems = 0
    for n in numels:
        if n <= 0:
            continue
        tensors += 1
        chunks = -(-n // CHUNK)
        for c in range(chunks):
            blocks += 1
            elems += min(CHUNK, n - c * CHUNK)
            if (tensors == max_tensors and c == chunks - 1) or blocks == MAX_BLOCKS:
                out.append((elems, blocks))
                blocks = elems = 0
                tensors = 0 if c == chunks - 1 else 1
    if blocks:
        out.append((elems, blocks))
    return out


class Lists:
    """The tensor lists of one multi-tensor call (an optimizer step over `count` parameters of
    `numel` elements, GradScaler's unscale of their gradients), launch by launch. `flops_per`: the
    FLOPs per element of a call that is one op over its lists (a fused step's math, the unscale),
    else None; `fused`: the step's other launches walk its 1-element step counters; `numels`:
    each tensor's elements, in order, where the marker lists them (one parameter group)."""

    __slots__ = ("numel", "count", "flops_per", "fused", "chunks", "numels", "_next", "_packings")

    def __init__(self, numel: int, count: int, flops_per: int | None, fused: bool,
                 numels: list[int] | None = None) -> None:
        self.numel, self.count, self.flops_per, self.fused = numel, count, flops_per, fused
        self.chunks: int | None = None  # blocks of a launch that held the whole list
        self.numels = numels
        self._next: dict = {}  # kernel name -> the place of its next launch in its op's packing
        self._packings: dict = {}  # max tensors a launch -> launch_chunks of `numels`

    def work(self, kernel: str, blocks: int | None, numels: list[int] | None = None, index: int = 0) -> tuple | None:
        """(FLOPs, bytes) of this launch of `blocks` blocks; None when not known. `numels`: the
        list's tensor sizes where the trace has them (the op's PyTorch range) and `index` the
        launch's place among the op's launches: its elements exactly (launch_elements). Else,
        with the marker's `numels`, the launches of one kernel name are its ops' packings in turn
        (an op's launches run back to back; each op of the step packs the same list), each
        checked against its grid."""
        spec = launch(kernel)
        if spec is None or blocks is None:
            return None
        if self.fused and not spec.fused:
            # A fused step's counters: one 1-element tensor per block.
            return None if spec.flops is None else blocks * spec.flops, blocks * spec.lists * spec.size
        # One launch holds the whole list only where its blocks can hold every element: a list
        # that filled a first launch's 320 blocks ends in a launch of fewer (R3D-18's 62
        # gradients: 320 blocks, then 236).
        whole = self.count <= spec.max_tensors and blocks < MAX_BLOCKS and self.numel <= blocks * CHUNK
        exact = launch_elements(numels, spec.max_tensors) if numels else []
        if whole:
            self.chunks = blocks
            elems = self.numel
        elif index < len(exact):
            elems = exact[index]
        elif self.numels:
            elems = self._packed(kernel, spec.max_tensors, blocks)
        elif self.chunks:
            elems = self.numel * blocks // self.chunks
        else:
            return None
        if elems is None:
            return None
        # The name's operation where it tells one, else the call's per element (a functor whose
        # lambda the name does not spell: GradScaler's unscale).
        per = self.flops_per if spec.fused or spec.flops is None else spec.flops
        return (None if per is None else elems * per), elems * (spec.lists - spec.product) * spec.size

    def _packed(self, kernel: str, max_tensors: int, blocks: int) -> int | None:
        """The elements of this launch of `kernel` from the marker's `numels`: the next launch of
        the packing (launch_elements) its op makes, None when its blocks are not that launch's."""
        launches = self._packings.get(max_tensors)
        if launches is None:  # every op of one depth packs the same list: replayed once
            launches = self._packings[max_tensors] = launch_chunks(self.numels or [], max_tensors)
        at = self._next.get(kernel, 0) % len(launches)
        self._next[kernel] = at + 1
        elems, chunks = launches[at]
        return elems if chunks == blocks else None


def tensor_lists(marker: dict, cost: Cost | None) -> Lists | None:
    """The tensor lists of an optimizer step's marker (`kwargs.params`: count and numel) for its
    multi-tensor launches (Lists.work), of GradScaler's unscale (the gradients), or of a
    `torch._foreach_<op>` call (its first list's tensors); None for any other call."""
    from .ops.foreach import first_list, is_foreach  # here: the op table imports this module

    if cost is not None and cost.flops is not None and is_foreach(marker):
        sizes = [t.numel for t in first_list(marker)]
        numel = sum(sizes)
        return Lists(numel, len(sizes), cost.flops // numel, False, sizes) if numel else None
    params = (marker.get("kwargs") or {}).get("params")
    if cost is None or not isinstance(params, dict):
        return None
    numel, count = params.get("numel"), params.get("count")
    if type(numel) is not int or type(count) is not int or numel <= 0 or count <= 0:
        return None
    fused = bool((marker.get("kwargs") or {}).get("fused"))
    # One op over the lists (a fused step, GradScaler's unscale), not a sequence of foreach ops:
    # every launch does the formula's FLOPs per element.
    per = cost.flops // numel if not cost.composite and cost.flops is not None else None
    sizes = params.get("numels")
    ok = isinstance(sizes, list) and len(sizes) == count and all(type(n) is int and n >= 0 for n in sizes) \
        and sum(sizes) == numel
    return Lists(numel, count, per, fused, sizes if ok else None)
