"""The helper kernels of an op call: work an op's formula does not count but its call launches;
and the stages of an op PyTorch runs as a sequence of kernels (Cost.stages), taken in turn.

An op's formula (registry.Cost) counts what the op computes; its main kernel carries that. The
call may launch more kernels that move real bytes: under `torch.autocast`, a matrix op (GEMM,
convolution, attention) first casts every floating-point tensor argument that is not in the
autocast dtype (`bfloat16_copy_kernel_cuda`, `float16_copy_kernel_cuda`), and its backward casts
each such argument's gradient back (`direct_copy_kernel_cuda`, a ToCopyBackward node). Each of
those is a `Part`: its kernel family, the elements it touches, its FLOPs and bytes. A call's parts
follow from its marker alone (the arguments' shapes and dtypes, the autocast dtype), so they are
known before its first kernel runs; analysis.Analyzer gives each helper kernel of the call the
part it matches (`CallParts.take`), and a part no kernel took costs nothing (autocast keeps one
cast of a weight per autocast region, so a second use of the weight launches no cast).

Which part a kernel is: the family must match and the part's element count must be one the
kernel's launch could cover. PyTorch's element-wise kernels run one block of `block` threads per
`block x k` elements (k, elements per thread, is 1 to 16), so `(grid - 1) x block < n <= grid x
block x 16`; of the parts that fit, the one nearest `grid x block x k` for the kernel's own k
(its template argument, or PyTorch's default 4) wins, so that an input and a weight of different
sizes go to their own casts whatever the order the kernels run in.

Each kind of op builds its own parts: a matrix product's output and split-K reductions
(gemm_parts.py), cuDNN's convolution helpers (conv_parts.py: its layout conversions are told by
their grid, not by this rule), attention's (attention_parts.py), an RNN's weight buffers
(rnn_parts.py), `[]` indexing's backward fills and copies (index_parts.py), an optimizer step's
tensor lists (multitensor.py); the words they share are
part.py's. This module puts them together for an op call (forward_parts, backward_parts), with
the parts every op may have (autocast's casts, a gradient's zero fill and accumulation), and
tells a kernel's family from its name (family) and which part a kernel takes (CallParts).
"""
from __future__ import annotations

import math
import re
from functools import lru_cache

from .attention_parts import (CAST_DQ, CAST_DQ_KERNEL, DOT_DO_O, DOT_DO_O_KERNEL, MATH_KERNELS, MUL, NEGINF, PHILOX,
                              PHILOX_KERNEL, REDUCE_HEAD, REDUCE_HEAD_KERNEL, SCALAR_MUL, WHERE, cudnn_dropout,
                              efficient_helpers, flash_helpers, math_attention)
from .conv_parts import (BACK, CONVERSIONS, FIRST, INTO, NEXT, PAD, PAD_KERNEL, SCALE, SCALE_KERNEL, SECOND, TO_NCHW,
                         TO_NCHW_KERNEL, TO_NHWC, TO_NHWC_KERNEL, TRANSFORM, TRANSFORM_KERNEL, WGRAD_SUM, WGRAD_SUM_KERNEL,
                         channel_pads, contiguous_grad, marker_layouts, marker_wgrad_sum, scaled_outputs, strided_input)
from .cat_parts import cat_copies
from .cub_init import tile_init
from .index_parts import index_grads
from .gemm_parts import (BETA, BETA_KERNEL, BROADCAST, CUTLASS_SPLIT_K, EPILOGUE, EPILOGUE_KERNEL, SPLIT_K,
                         SPLIT_K_KERNEL, einsum_grad_copies, output_parts, strided_operands)
from .multitensor import Lists, is_launch
from .norm_parts import contiguous_copies
from .op_ranges import template_dtype
from .ops.memory import REVIEWED
from .part import ADD, CONJ, CONTIGUOUS, COPY, FILL, SUM, Part, launch_count
from .registry import ATTN, MATRIX_KINDS, MMA_KINDS, Call, Cost
from .rnn_parts import dropout_states, final_state_grads, flat_weights, time_major_copies
from .values import FLOATING, ITEMSIZE, Tensor, is_floating, reduce_adds

# A multi-tensor launch (multitensor.py).
LAUNCH = "launch"
# PyTorch's copy kernels, which also cast: `bfloat16_copy_kernel_cuda`, `direct_copy_kernel_cuda`.
_COPY_KERNEL = re.compile(r"\w+_copy_kernel_cuda")
# Of those, the one a copy between tensors of one dtype runs (a cast into 16 bits runs its own).
_DIRECT_COPY = re.compile(r"\bdirect_copy_kernel_cuda\b")
# Its copies that cast nothing (CONTIGUOUS): a strided tensor made contiguous in its own dtype. PyTorch
# runs a copy between two dtypes through LoadWithCast/StoreWithCast or gpu_kernel_impl (dynamic
# casting); a vectorized kernel or gpu_kernel_impl_nocast only where the dtypes are the same.
_SAME_DTYPE_COPY = re.compile(
    r"\b(?:gpu_kernel_impl_nocast|vectorized_elementwise_kernel)<[^<>]*?\bdirect_copy_kernel_cuda")
# A complex tensor's conjugate materialised (resolve_conj: a matrix product's backward of a
# complex operand, ᴴ).
_CONJ_KERNEL = re.compile(r"\bconj_kernel_cuda\b")
# PyTorch's sum and mean reductions (a bias gradient, a loss's closing reduction).
_SUM_KERNEL = re.compile(r"\breduce_kernel<.*\b(?:sum_functor|MeanOps)<")
_ADD_KERNEL = re.compile(r"elementwise_kernel<.*\bCUDAFunctor_add<")
_FILL_KERNEL = re.compile(r"\bFillFunctor<")
# The families PyTorch launches by its per-thread rule (TensorIterator element-wise kernels).
_ELEMENTWISE = frozenset((COPY, CONTIGUOUS, CONJ, BROADCAST, ADD, FILL, SCALAR_MUL, MUL, NEGINF, WHERE))
# Elements per thread that a TensorIterator kernel's name states: elementwise_kernel<threads, k>
# and vectorized_elementwise_kernel<vector width, ...>.
_PER_THREAD = re.compile(r"\belementwise_kernel<\(int\)\d+, \(int\)(\d+)|vectorized_elementwise_kernel<\(int\)(\d+)")
_MAX_PER_THREAD = 16
# cuDNN's scaling kernel runs one thread per element.
_ONE_PER_THREAD = frozenset((SCALE,))
_DEFAULT_PER_THREAD = 4  # PyTorch's thread_work_size for the unrolled kernels
# A vectorized kernel's thread handles at least 8 elements, in vectors of its width: relu's
# vectorized<4> on fp32 runs 5 blocks of 128 threads for 4,704 elements (examples/lenet.sqlite).
_VECTOR_PER_THREAD = 8


# The helper families by their kernels' names, the first match winning (a name can hold two).
_FAMILIES = ((CONTIGUOUS, _SAME_DTYPE_COPY), (COPY, _COPY_KERNEL), (CONJ, _CONJ_KERNEL), (TO_NHWC, TO_NHWC_KERNEL), (TO_NCHW, TO_NCHW_KERNEL),
             (FILL, _FILL_KERNEL), (TRANSFORM, TRANSFORM_KERNEL), (SCALE, SCALE_KERNEL), (SPLIT_K, SPLIT_K_KERNEL),
             (SPLIT_K, CUTLASS_SPLIT_K), (WGRAD_SUM, WGRAD_SUM_KERNEL), (PAD, PAD_KERNEL),
             (DOT_DO_O, DOT_DO_O_KERNEL), (CAST_DQ, CAST_DQ_KERNEL), (REDUCE_HEAD, REDUCE_HEAD_KERNEL), (PHILOX, PHILOX_KERNEL),
             (SUM, _SUM_KERNEL), (ADD, _ADD_KERNEL), (BETA, BETA_KERNEL), (EPILOGUE, EPILOGUE_KERNEL)
             ) + MATH_KERNELS


@lru_cache(maxsize=4096)
def family(kernel: str | None) -> str | None:
    """The helper family of a kernel from its demangled name (_FAMILIES; LAUNCH: a multi-tensor
    launch), or None."""
    if not kernel:
        return None
    if is_launch(kernel):
        return LAUNCH
    return next((fam for fam, pattern in _FAMILIES if pattern.search(kernel)), None)


@lru_cache(maxsize=4096)
def _legacy_per_thread(kernel: str | None) -> int | None:
    """k of PyTorch's legacy elementwise_kernel<threads, k> (not the vectorized or unrolled ones,
    whose elements per thread vary with the dtypes), else None."""
    m = _PER_THREAD.search(kernel or "")
    return int(m.group(1)) if m is not None and m.group(1) else None


@lru_cache(maxsize=4096)
def _per_thread(kernel: str) -> int:
    m = _PER_THREAD.search(kernel)
    if m is None:
        return _DEFAULT_PER_THREAD
    return int(m.group(1)) if m.group(1) else max(int(m.group(2)), _VECTOR_PER_THREAD)


def autocast_casts(marker: dict, cost: Cost | None) -> list[tuple[Tensor, str]]:
    """(argument, the dtype autocast casts it to) for each tensor an autocast region may cast
    before the op runs: for the matrix ops it runs in lower precision, every floating-point
    argument not in its dtype; for the others, every argument in its dtype, cast up to float32
    where the op is one autocast runs in float32 (norms, softmax, losses: a cast no kernel
    takes costs nothing where it is not)."""
    low = marker.get("autocast")
    if cost is None or low not in ITEMSIZE:
        return []
    floating = [t for t in _operands(Call(marker)) if t.dtype in FLOATING and t.numel]
    if cost.kind in MATRIX_KINDS:
        return [(t, low) for t in floating if t.dtype != low]
    return [(t, "float32") for t in floating if t.dtype == low]


def _operands(call: Call) -> list[Tensor]:
    """Every tensor argument, those inside a list too (an RNN's weights)."""
    out = []
    for v in (*call.args, *(v for k, v in call.kwargs.items() if k != "out")):
        out += [t for t in v if isinstance(t, Tensor)] if isinstance(v, list) else [v] if isinstance(v, Tensor) else []
    return out


def forward_parts(marker: dict, cost: Cost | None) -> list[Part]:
    """The helper kernels of an op call's forward: autocast's casts (source read, copy written),
    what a matrix op's call does to its output besides computing it (output_parts: a bias added
    apart, one add per output element; the op's own formula counts none for its bias, as
    FlopCounterMode does, so that matrix FLOPs stay its count), cuDNN's layout conversions, its
    scaling of a convolution's output and its channel padding, a strided convolution input made
    contiguous, a layer norm's or softmax's strided input made contiguous, a cat's inputs copied one at a time."""
    return (_inputs(marker, cost) + output_parts(cost) + strided_operands(marker, cost) + marker_layouts(marker, cost, False)
            + scaled_outputs(marker, cost, False) + channel_pads(marker, cost, False) + strided_input(marker, cost)
            + contiguous_copies(marker, cost, False) + cudnn_dropout(marker, cost) + cat_copies(marker, cost))


def _inputs(marker: dict, cost: Cost | None) -> list[Part]:
    """What a forward call does to its inputs before computing: autocast's casts (source read, copy
    written), an RNN's flat weight buffer and batch_first input made time-major, the math attention
    path's kernels."""
    casts = [Part(COPY, t.numel, 0, t.numel * (ITEMSIZE[t.dtype] + ITEMSIZE[to])) for t, to in autocast_casts(marker, cost)]
    return casts + flat_weights(marker, cost) + time_major_copies(marker, cost) + math_attention(marker, cost, False)


def _casts_back(marker: dict, cost: Cost | None) -> list[Part]:
    return [p for p in _inputs(marker, cost) + marker_layouts(marker, cost, True)
            if p.family in (COPY, *INTO, BACK, TRANSFORM, FILL)]


def grad_fill(cost: Cost) -> list[Part]:
    """The zero fill of the gradient a formula declares (Cost.grad_fill), written in the op's
    dtype, as a part; [] where it declares none."""
    size = ITEMSIZE.get(cost.dtype)
    return [Part(FILL, cost.grad_fill, 0, cost.grad_fill * size)] if cost.grad_fill and size else []


def _gradients(marker: dict, cost: Cost | None) -> list[Part]:
    """What a backward may do to an argument's gradient besides computing it, one part per
    floating-point or complex tensor argument that may require grad (the marker's `grad`), of its shape
    and dtype, the kernel's launch picking which
    (CallParts.take): its zero fill before a kernel scatters or accumulates into it (max
    pooling's and mse_loss's dInput; `grad_fill`, written in the op's dtype, where the formula
    declares the one), and the autograd engine's accumulation of it into the gradient an earlier
    node left (an add per element: both read, the sum written)."""
    if cost is None:
        return []
    args = [t for t in _operands(Call(marker)) if is_floating(t.dtype) and t.numel and t.grad is not False]
    fills = grad_fill(cost) or [
        Part(FILL, t.numel, 0, t.numel * ITEMSIZE[t.dtype]) for t in args] + flat_weights(marker, cost, True) \
        + final_state_grads(cost)
    return fills + [Part(ADD, t.numel, t.numel, 3 * t.numel * ITEMSIZE[t.dtype]) for t in args]


def launch_stated(rec: dict, name: str | None) -> tuple | None:
    """(FLOPs, bytes) of a kernel whose launch states its work (cub's tile-status
    initialisation, cuDNN's dropout states), under any op and at every level; None for others."""
    grid, block = rec.get("grid"), rec.get("block")
    return tile_init(name, grid, block) or dropout_states(name, grid, block)


def stage_work(staged: CallParts, kernel: str | None) -> tuple | None:
    """(FLOPs, bytes) of the stage (Cost.stages) `kernel` runs of a call's (CallParts.stage), its
    bytes of every kind summed; None where it runs none or the call has no stages."""
    work = staged.stage(kernel)
    if work is None or work[0] is None and work[1] is None:
        return None
    return work[0], None if work[1] is None else work[1] + sum(work[2:])


def backward_parts(marker: dict, cost: Cost | None) -> list[Part]:
    """The helper kernels of the op's backward: a gradient's zero fill and accumulation (_gradients), the bias
    gradient (the output gradient summed: it read and the bias written, in the dtype the op ran
    in; values.reduce_adds of its E output elements into O bias elements), cuDNN's scaling of the gradients
    (conv_parts.scaled_outputs), a convolution's output gradient or a view's made contiguous
    (conv_parts.contiguous_grad, _view_grad_copy), each cast's gradient cast back (ToCopyBackward) and cuDNN's channel padding
    (channel_pads), a convolution's filter transformed again (conv_parts.filter_transform), a
    batch_first RNN's tensors made time-major (rnn_parts.time_major_copies), a strided convolution
    input made contiguous again for the weight gradient (conv_parts.strided_input), for the
    arguments that need a gradient. Which do is not in the marker; a part that never ran is one no kernel takes."""
    grads = _gradients(marker, cost)
    if cost is None or cost.kind not in MMA_KINDS:
        return grads + _casts_back(marker, cost) + _view_grad_copy(marker) + index_grads(marker) \
            + contiguous_copies(marker, cost, True) + time_major_copies(marker, cost, True)
    size = ITEMSIZE.get(cost.dtype)
    if cost.kind == ATTN:
        c = Call(marker)
        return flash_helpers(c.tensor(0, "query"), c.tensor(1, "key"), c.tensor(2, "value"), size) + \
            efficient_helpers(c.tensor(0, "query"), c.tensor(2, "value"), size) + \
            math_attention(marker, cost, True) + grads + _casts_back(marker, cost)
    bias = [Part(SUM, cost.out_elems, reduce_adds(cost.out_elems, cost.bias_elems),
                 (cost.out_elems + cost.bias_elems) * size)
            ] if cost.bias_elems and cost.out_elems and size else []
    return bias + grads + scaled_outputs(marker, cost, True) + marker_wgrad_sum(marker, cost) \
        + contiguous_grad(cost, size) + _casts_back(marker, cost) + channel_pads(marker, cost, True) \
        + strided_input(marker, cost) + einsum_grad_copies(marker, cost)


def _view_grad_copy(marker: dict) -> list[Part]:
    """A view's backward, the gradient viewed back to the input's shape (memory.REVIEWED), copied
    where it arrives strided (a reshape's): the input's elements read and written in its dtype."""
    if marker.get("mod") not in ("torch", "Tensor") or marker.get("op") not in REVIEWED:
        return []
    x = Call(marker).tensor(0, "input")
    size = None if x is None else ITEMSIZE.get(x.dtype)
    return [Part(CONTIGUOUS, x.numel, 0, 2 * x.numel * size)] if size and x.numel else []


class CallParts:
    """The parts of one op call not yet taken by a kernel, its tensor lists (an optimizer step's
    multi-tensor launches), if any, and the stages (Cost.stages) its kernels have not run yet."""

    __slots__ = ("left", "lists", "stages", "in_order", "into", "converted")

    def __init__(self, parts: list[Part], lists: Lists | None = None, stages: tuple | None = None,
                 in_order: bool = False) -> None:
        self.left = list(parts)
        self.lists = lists
        self.stages = None if stages is None else list(stages)
        self.in_order = in_order  # Cost.stages_in_order
        # The direction (TO_NHWC, TO_NCHW) of the call's conversions into its kernels' layout (its
        # first conversion's), and whether its last conversion was one back (BACK; or an engine
        # ended: engine_ran) or into (FIRST); None before any.
        self.into: str | None = None
        self.converted: str | None = None

    def stage(self, kernel: str | None = None, in_turn: bool = False) -> tuple | None:
        """The stage (Cost.stages) this kernel runs: the call's next one, or where the stages are
        named (each led by a piece of its kernel's name), the first left whose name is in
        `kernel`'s (`in_turn`: the next one, when its name is in `kernel`'s); (None, None) when
        none is (a kernel the op's decomposition does not know); None when the op has no stages."""
        if self.stages is None:
            return None
        if in_turn:
            return self.stages.pop(0)[1:] if self.stages and self.stages[0][0] in (kernel or "") else (None, None)
        if self.stages and isinstance(self.stages[0][0], str):
            at = next((i for i, s in enumerate(self.stages) if s[0] in (kernel or "")), None)
            if at is None:
                return None, None
            taken = self.stages.pop(at)[1:]
            if self.in_order:
                del self.stages[:at]
            return taken
        return self.stages.pop(0) if self.stages else (None, None)

    def _named(self, kernel: str | None) -> bool:
        """Whether a named stage left (Cost.stages) is the one `kernel` runs."""
        return bool(self.stages) and isinstance(self.stages[0][0], str) and any(
            s[0] in (kernel or "") for s in self.stages)

    def launch(self, kernel: str, grid: object, sizes: object = None, index: int = 0) -> tuple | None:
        """(FLOPs, bytes) of a multi-tensor launch of the call, the `index`-th under its PyTorch
        range with `sizes` (the range's, whose first `count` entries are the parameters' shapes);
        (None, None) when its share is not known; None when the call has no tensor lists."""
        if self.lists is None:
            return None
        shapes = sizes[:self.lists.count] if isinstance(sizes, list) else []
        numels = [math.prod(s) for s in shapes] if shapes and all(
            isinstance(s, list) and s and all(type(d) is int for d in s) for s in shapes) else None
        work = self.lists.work(kernel, launch_count(grid), numels, index)
        return (None, None) if work is None else work

    def engine_ran(self) -> None:
        """A matrix kernel of the call's convolution backward ran: the next conversion into its
        kernels' layout is the next engine's first (a dgrad run as a GEMM converts nothing, so
        the wgrad's input is the call's first conversion)."""
        self.converted = BACK

    def _conversion(self, direction: str, grid: object) -> Part | None:
        """The layout conversion a kernel converting in `direction` (TO_NHWC, TO_NCHW) with
        `grid` does: one back if its direction is not the call's first conversion's, else one into
        the kernel's layout in the role what came before it says (conv_parts.conversions: the
        call's first, an engine's first after a conversion back, an engine's second; any role
        where none of that role fits), whose grid is `grid`, kept for the next conversion (a
        tensor may be converted twice). None where none fits, or tensors of different sizes do
        (a backward's input and output gradient, C 16 and 32 both one tile of channels)."""
        if not isinstance(grid, list):
            return None
        self.into = self.into or direction
        role = BACK if direction != self.into else FIRST if self.converted is None else \
            NEXT if self.converted == BACK else SECOND
        self.converted = BACK if role == BACK else FIRST
        shape = tuple(grid)
        fits = [p for p in self.left if p.family == role and p.grid == shape] or \
            [p for p in self.left if role != BACK and p.family in INTO and p.grid == shape]
        return fits[0] if fits and len({p.numel for p in fits}) == 1 else None

    def take(self, kernel: str | None, grid: object, block: object) -> Part | None:
        """The part this kernel does, removed from the call's; None when none fits, or for a fill
        a named stage of the call names (batch norm's semaphores zeroed: that stage, not a
        gradient's zero fill)."""
        fam = family(kernel)
        if fam is None or not self.left or fam == FILL and self._named(kernel):
            return None
        # A gradient's accumulation adds floating-point tensors: an add on integers is an index's
        # arithmetic (a stage of index_put's linear index).
        if fam == ADD and not is_floating(template_dtype(kernel)):
            return None
        if fam in CONVERSIONS:
            return self._conversion(fam, grid)
        # Only the element-wise kernels launch by PyTorch's per-thread rule; the bias gradient's
        # sum is one part a call, a layout conversion is told by its grid.
        g, b = (launch_count(grid), launch_count(block)) if fam in _ELEMENTWISE or fam in _ONE_PER_THREAD \
            else (None, None)
        most = 1 if fam in _ONE_PER_THREAD else _MAX_PER_THREAD
        # PyTorch's legacy elementwise_kernel<threads, k> runs ceil(n / (threads x k)) blocks: exact.
        each = _legacy_per_thread(kernel) if most > 1 else None
        low, high = (each, each) if each else (1, most)
        # A copy in one dtype may be a cast's or a broadcast's; a cast into 16 bits only a cast's;
        # one that casts nothing (CONTIGUOUS) a broadcast's or a strided tensor's, never a cast's.
        fams = (COPY, BROADCAST) if fam == COPY and _DIRECT_COPY.search(kernel or "") else \
            (CONTIGUOUS, BROADCAST) if fam == CONTIGUOUS else (fam,)
        candidates = [p for p in self.left if p.family in fams and (g is None or b is None or
                                                                   (g - 1) * b * low < p.numel <= g * b * high)]
        if not candidates:
            return None
        if g is not None and b is not None:
            k = most if most == 1 else _per_thread(kernel or "")
            guess = g * b * k
            # A part whose launch is this grid exactly first: a 1,728-element weight and a 64-element
            # bias both fit one block of 1,024, but the weight's cast runs two.
            exact = [p for p in candidates if -(-p.numel // (b * k)) == g]
            best = min(exact or candidates, key=lambda p: abs(math.log(p.numel / guess)))
        else:
            best = candidates[0]
        self.left.remove(best)
        size = ITEMSIZE.get(template_dtype(kernel)) if fam == FILL else None
        # A fill writes in the element type its name states (cross_entropy's float dLogProb of
        # bf16 logits under autocast), whatever the argument's dtype.
        return best if size is None else best._replace(bytes=best.numel * size)
