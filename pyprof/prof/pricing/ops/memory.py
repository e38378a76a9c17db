"""Data movement: copies and dtype casts, views, cat/stack, splits, gather/scatter/index_select,
`[]` indexing, tensor creation. No FLOPs (scatter_add and index_add: one add per source element);
bytes as everywhere: read once, write once.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil, prod
from typing import Any

from ..cub_sort import num_bits, radix_sort_pairs
from ..registry import SIMT, Call, Cost, dims, fmt_params, names, register, stage_totals
from ..values import ITEMSIZE, Tensor, Unknown, broadcast, is_floating, is_truncated, promote, reduce_adds, short
from .elementwise import nonzero_cost, reduce_cost


def copy_cost(src: Tensor, out_dtype: str | None) -> Cost | None:
    """Read `src`, write it again as `out_dtype`."""
    size = ITEMSIZE.get(out_dtype)
    if src.nbytes is None or size is None:
        return None
    return Cost(0, src.nbytes + src.numel * size, fmt_params(src.dtype, shape=dims(src.shape), to=short(out_dtype)),
                src.dtype, SIMT)


@register("Tensor.to")
def to(c: Call) -> Cost | None:
    """Tensor.to(dtype) / to(device, dtype) / to(other): the target dtype is the first dtype
    argument, or the other tensor's; a device-only move is a memcpy record, not a kernel."""
    x = c.args[0]
    target = c.get(None, "dtype")
    for a in c.args[1:]:
        if target is None and isinstance(a, str) and a in ITEMSIZE:
            target = a
        elif target is None and isinstance(a, Tensor):
            target = a.dtype
    return copy_cost(x, target or x.dtype)


_CASTS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
          "int": "int32", "long": "int64", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool"}
for _name, _dt in _CASTS.items():
    register(f"Tensor.{_name}")(lambda c, _dt=_dt: copy_cost(c.args[0], _dt))


@register(*names(["clone", "contiguous"]), "Tensor.cpu", "Tensor.cuda")
def clone(c: Call) -> Cost | None:
    x = c.get(0, "input")
    return copy_cost(x, x.dtype)


@register("Tensor.copy_")
def copy_(c: Call) -> Cost | None:
    """dst.copy_(src): src read (broadcast to dst), dst written in its own dtype."""
    dst, src = c.args[0], c.get(1, "src")
    if src.nbytes is None or dst.nbytes is None:
        return None
    return Cost(0, src.nbytes + dst.nbytes, fmt_params(src.dtype, shape=dims(dst.shape), to=short(dst.dtype)), src.dtype, SIMT)


# torch's concatenations, all run as cat (cat_parts.py reads the same names).
CATS = ("cat", "concat", "concatenate", "stack", "hstack", "vstack")


@register(*names(CATS, ("torch",)))
def cat(c: Call) -> Cost | None:
    """Every input read once, the result (their sum) written once. More than 16 inputs: the
    marker keeps 16 and carries the rest run by run (docs/markers.md), so all are known; a marker
    that does not (more than 16 runs, or of a pyprof before it did) leaves the bytes na, but no
    FLOPs are done and the 16 it keeps are known: their gradients' accumulations are parts of the
    backward (parts.py; densenet's dense blocks' cats)."""
    ts = c.get(0, "tensors")
    if not isinstance(ts, list):
        return None
    known = [t for t in ts if isinstance(t, Tensor)]
    if is_truncated(ts) and known and len(known) == len(ts) - 1:
        dtype = promote(t.dtype for t in known)
        return Cost(0, None, fmt_params(dtype, n=f"{len(known)}+", numel="na"), dtype, SIMT)
    if len(known) != len(ts):
        return None
    dtype = promote(t.dtype for t in ts)
    size = ITEMSIZE.get(dtype)
    parts = [t.nbytes for t in ts]
    if size is None or None in parts:
        return None
    n = sum(t.numel for t in ts)
    return Cost(0, sum(parts) + n * size, fmt_params(dtype, n=len(ts), numel=n), dtype, SIMT)


def _indexed(src_rows: int, index: Tensor, dtype: str | None, adds: bool, base: Tensor | None = None,
             filled: bool = False, source: int | None = None, dest: int | None = None, elem: int | None = None,
             index_stored: int | None = None, **fields) -> Cost | None:
    """`src_rows` elements read through `index` and written; `base`: an out-of-place op first
    copies its whole input. `adds`: one add done per element into the destination (of `dest`
    elements), each of whose elements is read and written once however often the index repeats
    it (atomic in L2, as scatter_reduce.reduction_stage). `filled`: the source is one scalar value,
    not read per element. `source`: the elements of the tensor read through the index, each read
    once however often the index repeats it (Nsight Compute on an H200, 200,000 rows of 64 fp32
    gathered from 20,000: 58,419,968 bytes; counted once a row taken, 104,000,000). `elem`: the
    element size where the dtype is unknown (a kernel moving opaque N-byte elements).
    `index_stored`: the elements the index holds where it is a broadcast (stride 0), read once."""
    size = ITEMSIZE.get(dtype) if elem is None else elem
    index_bytes = index.nbytes if index_stored is None or index.itemsize is None else index_stored * index.itemsize
    if size is None or index_bytes is None:
        return None
    reads = src_rows if source is None else min(src_rows, source)
    touched = src_rows if dest is None else min(src_rows, dest)
    nbytes = index_bytes + ((2 * touched if adds else src_rows) + (0 if filled else reads)) * size
    if base is not None:
        nbytes += 2 * base.numel * size
    return Cost(src_rows if adds else 0, nbytes, fmt_params(dtype, **fields), dtype, SIMT)


def take_along_cost(x: Tensor, index: Tensor, elem: int | None = None, index_stored: int | None = None) -> Cost | None:
    """torch.gather: one element of x taken for each index element (x's elements read once
    however often the index repeats them), written in the index's shape; `elem`: the element size
    where x's dtype is unknown; `index_stored`: _indexed's. Forward only."""
    return _indexed(index.numel, index, x.dtype, False, source=x.numel, elem=elem, index_stored=index_stored,
                    shape=dims(x.shape), idx=dims(index.shape))


@register(*names(["gather"]))
def gather(c: Call) -> Cost | None:
    x, index = c.get(0, "input"), c.get(2, "index")
    return _index_backward(take_along_cost(x, index), x, index, index.numel)


def scatter_cost(x: Tensor, index: Tensor, adds: bool, copies: bool, filled: bool = False,
                 elem: int | None = None, index_stored: int | None = None) -> Cost | None:
    """A source's elements, one per index element, written into `x` through `index` (`adds`: added
    to what is there, x's elements read and written once); `copies`: an out-of-place scatter, x
    copied first; `filled`: the source is a scalar value (scatter_(dim, index, value): PyTorch's
    scatter_fill kernel reads none); `elem`: the element size where x's dtype is unknown;
    `index_stored`: _indexed's."""
    return _indexed(index.numel, index, x.dtype, adds, x if copies else None, filled, dest=x.numel, elem=elem,
                    index_stored=index_stored, shape=dims(x.shape), idx=dims(index.shape))


def _scatter(inplace: bool, adds: bool):
    def formula(c: Call) -> Cost | None:
        src = c.get(3, "src", c.get(None, "value"))
        return scatter_cost(c.get(0, "input"), c.get(2, "index"), adds or c.get(None, "reduce") is not None,
                            not inplace, not isinstance(src, Tensor))
    return formula


register(*names(["scatter"]))(_scatter(False, False))
register("Tensor.scatter_")(_scatter(True, False))
register(*names(["scatter_add"]))(_scatter(False, True))
register("Tensor.scatter_add_")(_scatter(True, True))


def index_select_cost(x: Tensor, dim: int, index: Tensor) -> Cost | None:
    """x's slices along `dim` picked by `index`: the index read, each element taken read and
    written; backward, _index_backward's adds."""
    rows = x.numel // max(x.shape[dim], 1) * index.numel if x.shape else index.numel
    return _index_backward(_indexed(rows, index, x.dtype, False, source=x.numel, shape=dims(x.shape),
                                    idx=dims(index.shape)), x, index, rows)


@register(*names(["index_select"]))
def index_select(c: Call) -> Cost | None:
    return index_select_cost(c.get(0, "input"), c.get(1, "dim"), c.get(2, "index"))


@register(*names(["repeat_interleave"]))
def repeat_interleave(c: Call) -> Cost | None:
    """repeat_interleave(x, repeats, dim): with an int, x's elements each `repeats` times along
    dim (x flattened without one), one copy of x broadcast into the output (x read, the output
    written); with a tensor of repeats, repeats_cost and, given x, index_select_cost of x through
    the result; torch.repeat_interleave(repeats) alone, repeats_cost. The count, from the call's
    out mark."""
    x, repeats, dim = c.get(0, "input"), c.get(1, "repeats"), c.get(2, "dim")
    if isinstance(repeats, int) and isinstance(x, Tensor) and x.nbytes is not None:
        return Cost(0, x.nbytes * (1 + repeats), fmt_params(x.dtype, shape=dims(x.shape), repeats=repeats), x.dtype, SIMT)
    found = c.outputs()
    if not found or not found[0].shape or not isinstance(x, Tensor):
        return None
    if not isinstance(repeats, Tensor):  # torch.repeat_interleave(repeats): the indices alone
        return repeats_cost(x, found[0].shape[0])
    axis = 0 if dim is None else dim % len(x.shape)
    total = found[0].shape[axis]
    counts = repeats_cost(repeats, total)
    picked = index_select_cost(x if dim is not None else Tensor((x.numel,), x.dtype), axis, Tensor((total,), "int64"))
    if counts is None or picked is None or picked.bytes is None:
        return None
    stages = counts.stages + tuple((k, 0, 0, picked.bytes) for k in _SELECT_KERNELS)
    return replace(picked, flops=counts.flops, bytes=counts.bytes + picked.bytes, stages=stages,
                   params=fmt_params(x.dtype, shape=dims(x.shape), repeats=dims(repeats.shape), out=total))


# The kernels PyTorch's index_select runs, by layout and size: the gather's of a 1-D input, its own.
_SELECT_KERNELS = ("_scatter_gather_elementwise_kernel", "indexSelect", "vectorized_gather_kernel")


def repeats_cost(repeats: Tensor, total: int) -> Cost | None:
    """The indices of repeat_interleave with a tensor of n repeats adding up to `total`, as
    PyTorch's CUDA kernels make them: their cumsum (cub's scan: read, written; one add each; its
    tile init is priced by its launch, cub_init.py), the check that none is negative (a
    comparison, n bools written, then their all(): read, n - 1 ands), then compute_cuda_kernel writes each
    index its count of times (repeats and cumsum read, `total` int64 written)."""
    n, size = repeats.numel, repeats.itemsize
    if size is None:
        return None
    stages = (("DeviceScanKernel", n, 0, 2 * n * size), ("compare_scalar_kernel", n, 0, n * (size + 1)),
              ("and_kernel_cuda", reduce_adds(n, 1), 0, n + 1), ("compute_cuda_kernel", 0, 0, 2 * n * size + total * 8))
    return Cost(*stage_totals(stages), fmt_params(repeats.dtype, shape=dims(repeats.shape),
                out=total), "int64", SIMT, stages=stages)


def index_add_cost(x: Tensor, index: Tensor, src: Tensor, inplace: bool) -> Cost | None:
    """index_add(x, dim, index, source): source's elements added into x's slices (the index and
    source read, an add an element; each of x's slices it adds into read and written once, at
    most as many as x has however often the index repeats one: the adds are atomic in L2. Nsight
    Compute on an H200, 200,000 rows of 64 fp32 added into 20,000: 57,941,504 bytes, these
    63,040,000); out of place, x copied first. Backward: x's gradient is dY itself (no kernel);
    source's, where it needs one, dY's slices gathered (index_select: the index read, as many
    elements read and written as source has)."""
    size = ITEMSIZE.get(x.dtype)
    if size is None or index.nbytes is None or not index.numel or not src.numel:
        return None
    per = src.numel // index.numel  # a slice's elements
    touched = min(index.numel, x.numel // per if per else 0) * per
    nbytes = index.nbytes + (src.numel + 2 * touched + (0 if inplace else 2 * x.numel)) * size
    cost = Cost(src.numel, nbytes, fmt_params(x.dtype, shape=dims(x.shape), idx=dims(index.shape)), x.dtype, SIMT)
    if src.grad is False:
        return replace(cost, bwd_flops=0, bwd_bytes=0)
    return replace(cost, bwd_flops=0, bwd_bytes=index.nbytes + (src.numel + min(src.numel, x.numel)) * size)


def _into(cost: Any, inplace: bool):
    """The formula of an op writing source's slices into input's at an index (index_add,
    index_copy: input, dim, index, source), in place or not, by its cost function."""
    def formula(c: Call) -> Cost | None:
        return cost(c.get(0, "input"), c.get(2, "index"), c.get(3, "source"), inplace)
    return formula


register(*names(["index_add"]))(_into(index_add_cost, False))
register("Tensor.index_add_")(_into(index_add_cost, True))


def index_copy_cost(x: Tensor, index: Tensor, src: Tensor, inplace: bool, elem: int | None = None) -> Cost | None:
    """index_copy(x, dim, index, source): source's slices written into x's at the index (a KV
    cache's update): the index and source read, as many elements written, no FLOPs; out of place,
    x copied first (a kernel of its own: named stages). Elements of x's dtype, else of `elem`
    bytes (the opaque size a kernel names). Backward: not modelled (na)."""
    size = ITEMSIZE.get(x.dtype) or elem
    if size is None or index.nbytes is None or src.numel is None:
        return None
    copied = index.nbytes + 2 * src.numel * size
    params = fmt_params(x.dtype, shape=dims(x.shape), idx=dims(index.shape))
    if inplace:
        return Cost(0, copied, params, x.dtype, SIMT)
    stages = (("direct_copy_kernel_cuda", 0, 2 * x.numel * size), ("index_copy_kernel", 0, 2 * src.numel * size, index.nbytes))
    return Cost(0, copied + 2 * x.numel * size, params, x.dtype, SIMT, stages=stages)


register(*names(["index_copy"]))(_into(index_copy_cost, False))
register("Tensor.index_copy_")(_into(index_copy_cost, True))


@register(*names(["split", "chunk", "unbind", "split_with_sizes", "tensor_split"]))
def split(c: Call) -> Cost | None:
    """Views: no forward kernel. Backward concatenates the pieces' gradients: the input's size
    read and written."""
    x = c.get(0, "input")
    if x.nbytes is None:
        return None
    return Cost(0, 0, fmt_params(x.dtype, shape=dims(x.shape)), x.dtype, SIMT, bwd_flops=0, bwd_bytes=2 * x.nbytes)


@register("torch.arange")
def arange(c: Call) -> Cost | None:
    """Writes ceil((end - start) / step) elements (int64 for integer bounds, else float32, unless
    `dtype` says otherwise)."""
    nums = [a for a in c.args[:3] if isinstance(a, (int, float))]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (*nums[:2], nums[2] if len(nums) > 2 else 1)
    start, end, step = c.get(None, "start", start), c.get(None, "end", end), c.get(None, "step", step)
    n = max(0, -(-(end - start) // step)) if all(isinstance(v, int) for v in (start, end, step)) \
        else max(0, ceil((end - start) / step))
    dtype = c.get(None, "dtype") or ("int64" if all(isinstance(v, int) for v in (start, end, step)) else "float32")
    size = ITEMSIZE.get(dtype)
    return None if size is None else Cost(0, n * size, fmt_params(dtype, n=n), dtype, SIMT)


def _fill(c: Call) -> Cost | None:
    """zero_/fill_ and *_like (random ones too: a generator counts no FLOPs): the result written once."""
    x = c.get(0, "input")
    dtype = c.get(None, "dtype") or x.dtype
    size = ITEMSIZE.get(dtype)
    return None if size is None else Cost(0, x.numel * size, fmt_params(dtype, shape=dims(x.shape)), dtype, SIMT)


register("Tensor.zero_", "Tensor.fill_",
         *names(["zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like"], ("torch",)))(_fill)


def _size_arg(c: Call) -> tuple | None:
    """The size of torch.zeros(2, 3) / torch.zeros((2, 3)) / torch.zeros(size=[2, 3])."""
    size = c.get(None, "size")
    if size is None:
        lists = [a for a in c.args if isinstance(a, list)]
        # full(size, value) and randint(low, high, size) pass the size as the list argument
        size = lists[0] if lists else [a for a in c.args if isinstance(a, int) and not isinstance(a, bool)]
    return tuple(size) if all(isinstance(d, int) for d in size) else None


def _creation(default_dtype: str):
    def formula(c: Call) -> Cost | None:
        """The new tensor written once (random generators count no FLOPs)."""
        shape = _size_arg(c)
        dtype = c.get(None, "dtype") or default_dtype
        size = ITEMSIZE.get(dtype)
        if shape is None or size is None:
            return None
        n = prod(shape)
        return Cost(0, n * size, fmt_params(dtype, shape=dims(shape)), dtype, SIMT)
    return formula


register(*names(["zeros", "ones", "full", "rand", "randn"], ("torch",)))(_creation("float32"))
register("torch.randint")(_creation("int64"))
register(*names(["uniform_", "normal_", "bernoulli_", "exponential_", "random_"], ("Tensor",)))(_fill)


@register("Tensor.new_zeros", "Tensor.new_ones", "Tensor.new_full")
def new_filled(c: Call) -> Cost | None:
    """x.new_zeros(size) / new_ones / new_full(size, value) (new_zeros(2, 3) too): a tensor of
    `size` filled by one kernel, in x's dtype unless `dtype` says otherwise: written once."""
    x, size = c.get(0, "self"), c.get(1, "size")
    if type(size) is int:  # new_zeros(2, 3)
        size = [a for a in c.args[1:] if type(a) is int]
    dtype = c.get(None, "dtype") or (x.dtype if isinstance(x, Tensor) else None)
    nbytes = ITEMSIZE.get(dtype)
    if not isinstance(size, list) or not all(type(d) is int for d in size) or nbytes is None:
        return None
    n = prod(size)
    return Cost(0, n * nbytes, fmt_params(dtype, shape=dims(tuple(size))), dtype, SIMT)


VIEWS = ["view", "reshape", "flatten", "unflatten", "permute", "transpose", "t", "expand", "expand_as",
         "squeeze", "unsqueeze", "narrow", "select", "movedim", "view_as", "reshape_as", "detach",
         "unfold", "swapaxes", "diagonal"]


# The views whose backward is the gradient viewed back to the input's shape: no kernel, or, where
# it arrives strided, its materialising copy (parts.py); narrow's, select's... scatter it into zeros.
REVIEWED = frozenset(("view", "reshape", "flatten", "unflatten", "permute", "transpose", "t", "squeeze",
                      "unsqueeze", "movedim", "view_as", "reshape_as", "swapaxes"))


def _view(c: Call) -> Cost | None:
    """Views launch no kernel; a kernel under one is a materialising copy (reshape of a
    non-contiguous tensor): the input read and written once. An expand that gets copied writes
    more than it reads: na rather than a guess at the result size."""
    x = c.get(0, "input")
    return copy_cost(x, x.dtype)


register(*names([v for v in VIEWS if not v.startswith("expand")]))(_view)


def expanded_shape(shape: tuple, sizes: object) -> tuple | None:
    """The shape `expand(*sizes)` gives a tensor of `shape`: sizes right-aligned against it, -1
    keeping its dim (not allowed on a new leading one); None where the sizes are not ints."""
    if not isinstance(sizes, (list, tuple)) or len(sizes) < len(shape) or not all(type(s) is int for s in sizes):
        return None
    lead = len(sizes) - len(shape)
    if any(s == -1 for s in sizes[:lead]):
        return None
    return tuple(shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))


@register("Tensor.expand", "Tensor.expand_as", *names(["broadcast_to"]))
def expand(c: Call) -> Cost | None:
    """expand(*sizes), expand(sizes), expand_as(other), broadcast_to(shape): a view, no kernel
    forward (one under it would materialise the result: x read, the result written). Its
    backward sums the gradient, the expanded shape, back to x's (autograd's sum_to_size, a
    reduce kernel): reduce_cost's sum of the result to x's elements."""
    x, arg = c.get(0, "input"), c.get(1, "size", c.get(1, "other", c.get(1, "shape")))
    if not isinstance(x, Tensor) or x.nbytes is None:
        return None
    sizes = arg.shape if isinstance(arg, Tensor) else arg if isinstance(arg, list) else c.args[1:]
    out = expanded_shape(x.shape, sizes)
    if out is None:
        return None
    grad = Tensor(out, x.dtype)
    back = reduce_cost("sum", grad, x.numel, None, "?", False)
    return Cost(0, x.nbytes + grad.nbytes, fmt_params(x.dtype, shape=dims(x.shape), to=dims(out)), x.dtype, SIMT,
                bwd_flops=back.flops, bwd_bytes=back.bytes)


@register("torch.broadcast_tensors")
def broadcast_tensors(c: Call) -> Cost | None:
    """torch.broadcast_tensors(*tensors) (torch.distributions' broadcast_all): views, no kernel
    forward (bytes na: a kernel under it did something this does not know). Backward: the
    gradient of each input expanded and taking one summed back to its shape (expand's), each a
    reduce kernel, in the inputs' order."""
    tensors = c.args[0] if len(c.args) == 1 and isinstance(c.args[0], list) else c.args
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        return None
    out = broadcast(*(t.shape for t in tensors))
    backs = [reduce_cost("sum", Tensor(out, t.dtype), t.numel, None, "?", False) for t in tensors
             if t.grad is not False and t.shape != out and is_floating(t.dtype)]
    if any(b.flops is None or b.bytes is None for b in backs):
        return None
    stages = tuple(("reduce_kernel", b.flops, b.bytes) for b in backs)
    return Cost(0, None, fmt_params(tensors[0].dtype, shape=dims(out), inputs=len(tensors)), tensors[0].dtype, SIMT,
                bwd_flops=sum(b.flops for b in backs), bwd_bytes=sum(b.bytes for b in backs), bwd_stages=stages)


def basic_index_steps(shape: tuple, index) -> tuple | None:
    """(result shape, steps) of x[index] for ints, slices, None and Ellipsis; None for advanced
    indexing. The steps: each select (an int) and each slice that is not its whole dimension,
    as (its input's elements, its output's elements), in the order PyTorch applies them (a whole
    slice, None and Ellipsis are views of no step)."""
    items = list(index) if isinstance(index, list) else [index]
    if any(isinstance(i, (Tensor, list, Unknown, bool)) for i in items):
        return None
    n_ell = sum(1 for i in items if isinstance(i, dict) and i.get("ellipsis"))
    used = sum(1 for i in items if not (i is None or (isinstance(i, dict) and i.get("ellipsis"))))
    out, dim, steps = [], 0, []
    for i in items:
        before = prod(out) * prod(shape[dim:])
        if isinstance(i, dict) and i.get("ellipsis"):
            take = len(shape) - used
            out.extend(shape[dim:dim + take])
            dim += take
        elif i is None:
            out.append(1)
        elif isinstance(i, int):
            dim += 1
            steps.append((before, prod(out) * prod(shape[dim:])))
        elif isinstance(i, dict) and "slice" in i:
            kept = range(*slice(*i["slice"]).indices(shape[dim]))
            out.append(len(kept))
            dim += 1
            if kept.step != 1 or len(kept) != shape[dim - 1]:
                steps.append((before, prod(out) * prod(shape[dim:])))
        else:
            return None
    if n_ell > 1:
        return None
    return tuple(out) + tuple(shape[dim:]), steps


@register("Tensor.__getitem__")
def getitem(c: Call) -> Cost | None:
    """Basic indexing is a view (no kernel; its backward's kernels are parts: index_parts.py).
    Advanced indexing by one integer tensor on the first dimension gathers whole rows: the index,
    the rows read and written; backward, PyTorch's index_put with accumulate (_index_put_stages).
    Several integer tensors on the leading dimensions gather elements (a top-k router's
    weights[rows, slot]): index_elements. A boolean mask over the leading dims: boolean_index_cost,
    as many positions as its out mark says (patch.py marks such calls). Mixed forms are not
    modelled: na."""
    x, index = c.args[0], c.args[1]
    if basic_index_steps(x.shape, index) is not None:
        return Cost(0, 0, fmt_params(x.dtype, shape=dims(x.shape)), x.dtype, SIMT)
    if isinstance(index, Tensor) and index.dtype in ("int64", "int32"):
        return index_rows(x, index)
    if isinstance(index, list) and index and all(isinstance(t, Tensor) and t.dtype in ("int64", "int32")
                                                 for t in index):
        return index_elements(x, index)
    mask = index[0] if isinstance(index, list) and len(index) == 1 else index
    found = c.outputs()
    if isinstance(mask, Tensor) and mask.dtype == "bool" and found and found[0].shape:
        return boolean_index_cost(x, mask, found[0].shape[0])
    return None


def boolean_index_cost(x: Tensor, mask: Tensor, found: int) -> Cost | None:
    """x[mask], a boolean mask over x's leading dims (masked_select: the two broadcast) of which
    `found` elements were true (the call's out mark), as PyTorch runs it: nonzero of the mask
    (elementwise.nonzero_cost, its kernels in turn), then the gather of the found positions (one
    int64 index a mask dim): index_elements' kernel, or for a mask over the first dim alone
    index_rows' row gather (either kernel may run it: named side by side)."""
    k = len(mask.shape)
    if not k or tuple(mask.shape) != tuple(x.shape[:k]):
        return None
    positions = nonzero_cost(mask, [Tensor((found, k), "int64")])
    index = [Tensor((found,), "int64")] * k
    gather = index_rows(x, index[0]) if k == 1 else index_elements(x, index)
    if gather is None or positions.flops is None or positions.bytes is None or gather.bytes is None:
        return None
    kernels = ("vectorized_gather_kernel", "index_elementwise_kernel") if k == 1 else ("index_elementwise_kernel",)
    return Cost(positions.flops, positions.bytes + gather.bytes,
                fmt_params(x.dtype, shape=dims(x.shape), mask=dims(mask.shape), found=found), x.dtype, SIMT,
                stages=positions.stages + tuple((kernel, 0, 0, gather.bytes) for kernel in kernels))


@register(*names(["masked_select"]))
def masked_select(c: Call) -> Cost | None:
    """masked_select(x, mask): boolean_index_cost of the two broadcast together (x expanded: its
    elements read through the positions), `found` from the call's out mark."""
    x, mask, found = c.get(0, "input"), c.get(1, "mask"), c.outputs()
    if not isinstance(x, Tensor) or not isinstance(mask, Tensor) or not found or not found[0].shape:
        return None
    shape = broadcast(x.shape, mask.shape)
    return boolean_index_cost(Tensor(shape, x.dtype), Tensor(shape, "bool"), found[0].shape[0])


def index_elements(x: Tensor, index: list) -> Cost | None:
    """x[i0, i1, ...] for integer tensors on x's leading dimensions, broadcast together: one
    gather kernel (PyTorch's index_elementwise_kernel) reads the indices and each element it takes
    and writes it. Backward: index_put with accumulate, kernel by kernel (_index_put_stages)."""
    shape = broadcast(*(t.shape for t in index)) if len(index) <= len(x.shape) else None
    if shape is None or not x.numel:
        return None
    cost = gather_cost(x, index, prod(shape) * prod(x.shape[len(index):]), idx=",".join(dims(t.shape) for t in index))
    if cost is None:
        return None
    stages = _index_put_stages(x, index, prod(shape))
    return replace(cost, bwd_flops=sum(s[1] for s in stages), bwd_bytes=x.nbytes + sum(s[3] for s in stages),
                   bwd_stages=stages)


def gather_cost(x: Tensor, index: list, elements: int, **fields) -> Cost | None:
    """A gather of `elements` of x through the integer tensors `index` (advanced indexing): the
    indices read, each element taken read and written once; no FLOPs."""
    if x.itemsize is None or any(t.nbytes is None for t in index):
        return None
    return Cost(0, sum(t.nbytes for t in index) + 2 * elements * x.itemsize,
                fmt_params(x.dtype, shape=dims(x.shape), **fields), x.dtype, SIMT)


def index_rows(x: Tensor, index: Tensor) -> Cost | None:
    """x[index] for one integer index tensor on x's first dimension (getitem, aten::index): the
    rows gathered; backward, their index_put with accumulate kernel by kernel (_index_put_stages)."""
    if not x.shape or not x.numel:
        return None
    rows = index.numel * (x.numel // x.shape[0])
    cost = _index_backward(_indexed(rows, index, x.dtype, False, source=x.numel, shape=dims(x.shape),
                                    idx=dims(index.shape)),
                           x, index, rows)
    if cost is None:
        return None
    stages = _index_put_stages(x, [index], index.numel)
    return replace(cost, bwd_flops=sum(s[1] for s in stages), bwd_stages=stages)


def _index_put_stages(x: Tensor, index: list[Tensor], n: int) -> tuple:
    """The kernels of x[index]'s backward (index_put_ with accumulate into dX, PyTorch's
    index_put_with_sort_kernel), k integer tensors, broadcast to `n` positions, indexing x's
    leading dims (R rows of S elements: the indexed dims' product and the rest's), named: an int32
    index cast to int64 (read, written); the rows' linear index: each index's remainder by its
    dim, times its stride, the products summed, then divided by S (n int64 read and written each;
    the sums two read); their positions (arange: n written); cub's sort of the linear index with
    them (cub_sort.py: on the bits of R - 1); then indexing_backward_kernel adds dY's n·S
    elements into dX's rows (n·S FLOPs; both index arrays and dY read, each row of dX it touches
    read and written: min(n, R) of them, the most). The linear index's arithmetic counts one
    operation an element, as element-wise ops on integers do (aten::remainder's). dX's zero fill
    and dY made contiguous where it arrives strided: parts (index_parts.py)."""
    rows = prod(x.shape[:len(index)])
    per_row = x.numel // rows
    cast = tuple(("copy_kernel_cuda", 0, 0, t.numel * (t.itemsize + 8)) for t in index if t.dtype == "int32")
    linear = tuple(stage for i in range(len(index))
                   for stage in (("remainder_kernel_cuda", n, 0, 2 * n * 8), ("MulFunctor", n, 0, 2 * n * 8))
                   + ((("CUDAFunctor_add", n, 0, 3 * n * 8),) if i else ()))
    return cast + linear + (("div_trunc_kernel_cuda", n, 0, 2 * n * 8), ("arange_cuda_out", 0, 0, n * 8)) \
        + radix_sort_pairs(n, 8, 8, num_bits(rows - 1)) + (
        ("indexing_backward_kernel", n * per_row, (n + 2 * min(n, rows)) * per_row * x.itemsize, 2 * n * 8),)


@register("Tensor.__setitem__")
def setitem(c: Call) -> Cost | None:
    """x[basic index] = value: the region written once, a tensor value read once (broadcast to it)."""
    x, index, value = c.args[0], c.args[1], c.args[2]
    steps = basic_index_steps(x.shape, index)
    size = x.itemsize
    if steps is None or size is None:
        return None
    region = steps[0]
    n = prod(region)
    read = value.nbytes if isinstance(value, Tensor) else 0
    if read is None:
        return None
    return Cost(0, n * size + read, fmt_params(x.dtype, shape=dims(x.shape), region=dims(region)), x.dtype, SIMT)


@register("torch.nn.functional.pad")
def pad(c: Call) -> Cost | None:
    """F.pad(input, pad, mode, value): `pad` lists (left, right) pairs from the last dim back.
    The input read, the padded output written; no FLOPs. Backward: constant and circular padding
    copy dY's inner region back (read it, write dX); reflect and replicate add every dY element
    into dX (one add each; dY read, dX written)."""
    x, widths = c.get(0, "input"), c.get(1, "pad")
    mode = c.get(2, "mode", "constant")
    if x.nbytes is None or not isinstance(widths, list) or len(widths) % 2 or len(widths) // 2 > len(x.shape):
        return None
    shape = list(x.shape)
    for i in range(len(widths) // 2):
        shape[-1 - i] += widths[2 * i] + widths[2 * i + 1]
    out = prod(shape) * x.itemsize
    adds = mode in ("reflect", "replicate")
    return Cost(0, x.nbytes + out, fmt_params(x.dtype, shape=dims(x.shape), out=dims(tuple(shape)), mode=mode),
                x.dtype, SIMT, bwd_flops=prod(shape) if adds else 0,
                bwd_bytes=out + x.nbytes if adds else 2 * x.nbytes)


@register(*names(["flip", "fliplr", "flipud", "rot90", "tril", "triu", "tril_", "triu_"]),
          *names(["pixel_shuffle", "pixel_unshuffle", "channel_shuffle"], ("torch", "torch.nn.functional")))
def reorder(c: Call) -> Cost | None:
    """A permuted copy, or a masked one (tril/triu keep one triangle, zero the other; pixel and
    channel shuffles: a reshape of a permuted view, copied): the input read and written once;
    backward the same on dY."""
    x = c.get(0, "input")
    cost = copy_cost(x, x.dtype)
    return None if cost is None else Cost(0, cost.bytes, cost.params, x.dtype, SIMT, bwd_flops=0, bwd_bytes=cost.bytes)


@register(*names(["select_scatter", "slice_scatter", "diagonal_scatter", "as_strided_scatter"]))
def embed_scatter(c: Call) -> Cost | None:
    """input with `src` written into one of its views, out of place: the input's other elements
    and src read (the input's size together), the whole result written; backward dY read twice,
    the input's gradient (dY with the view zeroed) and src's (the view of dY) written."""
    x, src = c.get(0, "input"), c.get(1, "src")
    if not isinstance(src, Tensor) or x.nbytes is None or src.nbytes is None:
        return None
    return Cost(0, 2 * x.nbytes, fmt_params(x.dtype, shape=dims(x.shape), src=dims(src.shape)), x.dtype, SIMT,
                bwd_flops=0, bwd_bytes=2 * x.nbytes + 2 * src.nbytes)


@register(*names(["roll"]))
def roll(c: Call) -> Cost | None:
    """A gather of the whole tensor per rolled dimension: PyTorch's roll kernel moves one dimension,
    so a roll over k dims runs k of them in turn (roll_common: the first dim, then the rest on its
    result; Cost.stages), each the input read and written once; dims None rolls the flattened
    tensor in one. Backward: dY rolled back over the same dims, as many kernels."""
    x, shifts, dims_ = c.get(0, "input"), c.get(1, "shifts"), c.get(2, "dims")
    cost = copy_cost(x, x.dtype)
    if cost is None:
        return None
    k = len(dims_) if isinstance(dims_, list) else 1
    if isinstance(shifts, list) and len(shifts) != k and dims_ is not None:
        return None
    stages = ((0, cost.bytes),) * k if k > 1 else None
    return Cost(0, k * cost.bytes, fmt_params(x.dtype, shape=dims(x.shape), rolls=k), x.dtype, SIMT,
                bwd_flops=0, bwd_bytes=k * cost.bytes, stages=stages, bwd_stages=stages)


def _index_backward(cost: Cost | None, x: Tensor, index: Tensor, rows: int) -> Cost | None:
    """gather/index_select's backward: dY's `rows` elements added through the index into a dX of
    x's size (its zero fill included): one add each; index and dY read, dX written."""
    if cost is None or x.nbytes is None or index.nbytes is None:
        return cost
    return Cost(cost.flops, cost.bytes, cost.params, cost.dtype, SIMT, bwd_flops=rows,
                bwd_bytes=index.nbytes + rows * x.itemsize + x.nbytes)
