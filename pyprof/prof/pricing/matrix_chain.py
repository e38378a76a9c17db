"""What a matrix kernel leaves for the kernels its library launches after it on the same thread,
and the work those kernels do from it (analysis.Analyzer asks; the formulas are gemm_parts.py's
and conv_parts.py's):

- a split-K reduction or pass sums the partial products of the matrix kernel before it: as many
  as that kernel's grid z (cuBLAS, CUTLASS), its splits over the output's tiles (cuBLASLt's nvjet),
  xmma's segment-K weight gradient's segments, cuDNN's depthwise weight gradient's 32-channel
  blocks;
- Winograd's weight gradient runs its transforms, then the GEMM over their tile sets;
- cuDNN's FFT path transforms the operands, then multiplies their spectra at the frequencies the
  transforms made;
- cuDNN runs a grouped convolution's weight gradient as CUTLASS kernels, one per group, and
  some grouped convolutions whole a group at a time: the same kernel once a group.

The state is per thread (pid, tid), one entry per kind of fact. Which op call a kernel belongs to,
the gradient slots of a convolution's backward and the work of a kernel that carries none of its
call's are the analysis's (CallState, which analysis.Analyzer is).
"""
from __future__ import annotations

from math import prod
from typing import Callable, Protocol

from pyprof.kernel_names import MMA, SIMT

from .conv_parts import (WINOGRAD_GEMM_Z, cutlass_wgrad_splits, depthwise_partials, depthwise_reduce, fft_frequencies,
                         fft_operand, fft_stage, fft_work, one_group_wgrad, ungrouped_wgrad, wgrad_segments,
                         winograd_gemm, winograd_stage, winograd_transform)
from .gemm_parts import grid_z, nvjet_per_image, nvjet_splits, split_k, split_pass_work, split_sum
from .registry import Cost
from .values import ITEMSIZE, is_shape

_UNKNOWN = (None, None)


def _thread(rec: dict) -> tuple:
    return rec.get("pid"), rec.get("tid")


def _same_call(held: list | tuple | None, call: object, node: tuple | None) -> bool:
    """Whether a thread's held state (its op call first) is the current call's: an eager call by
    identity, an aten-level node (range name, op id) by value."""
    return held is not None and (held[0] is call or node is not None and held[0] == node)


class CallState(Protocol):
    """What the chain reads and gives back of the analysis of the record being priced
    (analysis.Analyzer)."""

    def current_call(self, rec: dict) -> object: ...

    def gradient_slot(self, rec: dict, name: str | None, node: tuple | None = None) -> str | None: ...

    def upcoming(self, rec: dict) -> tuple[list, bool]: ...

    def unclaimed(self) -> tuple: ...

    def whole_call(self, work: tuple) -> None: ...


class MatrixChain:
    """The facts matrix kernels left per thread (module docstring), and the work of the kernels
    that read them."""

    def __init__(self, analyzer: CallState) -> None:
        self._analyzer = analyzer
        self._splits: dict = {}   # thread -> the partial products a split-K pass after it sums
        self._gemm: dict = {}     # thread -> (name, grid) of its last matrix kernel
        self._winograd: dict = {}  # thread -> (op call, transform stage) of a weight gradient's transforms
        self._groups: dict = {}   # thread -> [op call, CUTLASS group kernels so far]
        self._group_runs: dict = {}  # thread -> [op call, kernel name, its launches so far, one launch's work]
        self._fft: dict = {}      # thread -> [op call, its transforms' frequencies, results whose FLOPs a kernel carries]

    def _held(self, table: dict, rec: dict, node: tuple | None) -> tuple:
        """(the current op call, the record's thread's state in `table` where it is that call's,
        else None). `node`: as CallState.gradient_slot's."""
        call = self._analyzer.current_call(rec) if node is None else node
        held = table.get(_thread(rec))
        return call, held if _same_call(held, call, node) else None

    def launched(self, rec: dict, name: str | None) -> None:
        """A matrix kernel ran on the record's thread: a split-K reduction after it sums its grid's
        z partial products (an nvjet GEMM's: its grid over the output's tiles)."""
        thread = _thread(rec)
        self._splits[thread] = grid_z(rec.get("grid"))
        self._gemm[thread] = (name, rec.get("grid"))

    def split_k(self, rec: dict, name: str | None, outputs: list, dtype: str | None) -> tuple:
        """(flops, bytes) of a split-K reduction (gemm_parts.split_k) after the thread's last matrix
        kernel, of a GEMM whose output is one of `outputs` ((rows, cols)); na where not known."""
        thread = _thread(rec)
        work = split_k(name or "", rec.get("grid"), self._splits.get(thread), outputs, ITEMSIZE.get(dtype),
                       self._gemm.get(thread))
        return _UNKNOWN if work is None else work

    def split_pass(self, rec: dict, name: str | None, outputs: list, size: int | None) -> tuple:
        """(flops, bytes) of cuBLAS's split-K pass after the thread's last GEMM kernel (gemm_parts.split_pass):
        its grid's z partial products of the output summed, (z - 1) adds an element, the partials
        read in fp32 (the accumulator of every such GEMM's name) and the output written once; na
        where the GEMM split nothing or the output is not one known shape (of `outputs`, those its
        tiles cover: gemm_parts.tiled_outputs)."""
        work = split_pass_work(name, rec.get("grid"), self._splits.get(_thread(rec)), outputs, size)
        return self._analyzer.unclaimed() if work is None else work

    def segmented(self, rec: dict, cost: Cost, name: str | None, size: int | None, weight: object,
                  images: int | None = None) -> tuple | None:
        """(flops, bytes) of xmma's segment-K weight-gradient kernel (conv_parts.wgrad_segments) for a
        weight of shape `weight`, which writes its segments' fp32 partials in place of the
        gradient: the formula's bytes (the gradient's three tensors) less the weight's, plus
        segments x weight x 4 (ncu on ResNet-18's 64x64x3x3 weights: 8,390,912 bytes, these
        8,339,456); the segments kept as the thread's split count for the split-K pass after it
        (wgrad_split). cuBLASLt's nvjet split-K GEMM of a 1x1 convolution's weight gradient
        likewise, its splits' partials (gemm_parts.nvjet_splits over the K x C·taps gradient), and
        cuDNN's depthwise weight gradient its partials over its 32-channel blocks
        (conv_parts.depthwise_partials), CUTLASS's split-K one its grid z's
        (conv_parts.cutlass_wgrad_splits), and an nvjet GEMM that ran one product per image of the
        convolution's `images` a gradient each (gemm_parts.nvjet_per_image). None for any other
        kernel."""
        if not weight or len(weight) < 2:
            return None
        w = prod(weight)
        gemm = (name, rec.get("grid"))
        segments = wgrad_segments(name, rec.get("grid"), weight) or nvjet_splits(gemm, weight[0], prod(weight[1:])) \
            or (images if nvjet_per_image(gemm, weight[0], prod(weight[1:]), images) else None)
        partials = (segments, w) if segments else depthwise_partials(name, rec.get("grid"), list(weight)) or \
            cutlass_wgrad_splits(name, rec.get("grid"), weight, size)
        if partials is None or size is None or cost.elems is None:
            return None
        self._splits[_thread(rec)] = partials[0]
        return cost.flops, (cost.elems - cost.unread - w) * size + partials[0] * partials[1] * 4

    def depthwise_reduce(self, rec: dict, name: str | None, weight: object, size: int | None) -> tuple | None:
        """(flops, bytes) of cuDNN's depthwise weight gradient's reduction after the thread's last
        matrix kernel (conv_parts.depthwise_reduce); None for any other kernel."""
        if not isinstance(weight, (list, tuple)):
            return None
        return depthwise_reduce(name, rec.get("grid"), self._gemm.get(_thread(rec)), list(weight), size)

    def wgrad_split(self, rec: dict, weight: object, size: int | None) -> tuple:
        """(flops, bytes) of the split-K pass after a convolution's segment-K weight gradient
        (segmented) of a weight of shape `weight`: its segments summed (gemm_parts.split_sum; ncu on
        ResNet-18's 64x64x3x3 weights, 13 segments: 2,161,664 bytes, these 1,990,656: its writes
        are 3x the fp16 gradient's, not told apart further); na without a segment count."""
        work = split_sum(self._splits.get(_thread(rec)), prod(weight), size) if is_shape(weight) else None
        return self._analyzer.unclaimed() if work is None else work

    def winograd(self, rec: dict, cost: Cost, name: str | None, verdict: str | None, shapes: Callable[[], tuple],
                 node: tuple | None = None) -> tuple | None:
        """(flops, bytes) of a kernel of a convolution's Winograd path, the convolution's (input,
        weight, output or dY) shapes `shapes()` gives: a transform its own
        (conv_parts.winograd_transform; na where the shapes do not say it); the GEMM (grid z 36)
        after a weight gradient's transforms in the same call what it executes
        (conv_parts.winograd_gemm), the weight gradient's slot (CallState.gradient_slot) taken, and
        the convolution's FLOPs and the GEMM's bytes for whole-call sums (CallState.whole_call): its
        own FLOPs are a quarter of the convolution's, which are above its peak in its time for wide
        ones. None for any other kernel. `node`: as gradient_slot's."""
        thread = _thread(rec)
        stage = winograd_stage(name)
        if stage is None and thread not in self._winograd:
            return None
        analyzer = self._analyzer
        call = analyzer.current_call(rec) if node is None else node
        x, w, y = (shapes() + (None, None, None))[:3]
        if stage is not None:
            if stage[:2] in (("Wgrad", "Data"), ("Wgrad", "Delta")):  # the GEMM's inputs: it comes next
                self._winograd[thread] = (call, stage[2])
            work = winograd_transform(name, x, w, y, rec.get("dir") == "bprop")
            return analyzer.unclaimed() if work is None else work
        held = self._winograd[thread]
        if verdict not in (MMA, SIMT) or not _same_call(held, call, node) \
                or grid_z(rec.get("grid")) != WINOGRAD_GEMM_Z:
            return None
        del self._winograd[thread]
        work = winograd_gemm(x, w, y, held[1])
        if work is None or not analyzer.gradient_slot(rec, "wgrad", node):
            return analyzer.unclaimed()
        analyzer.whole_call((cost.flops, work[1]))
        return work

    def fft(self, rec: dict, cost: Cost, name: str | None, shapes: Callable[[], tuple],
            node: tuple | None = None) -> tuple | None:
        """(flops, bytes) of a kernel of cuDNN's FFT path of a convolution of (input, weight,
        output or dY) shapes `shapes()` gives: each its own (conv_parts.fft_work; the complex GEMM
        at the frequencies of the call's last transform; na where the shapes do not say it). For
        whole-call sums the convolution's FLOPs for each result the path writes (a gradient's
        slot, CallState.gradient_slot, or the forward's output once), on the first inverse
        transform writing it (conv_parts.fft_operand): a gradient may run in rounds, and the
        path's own FLOPs are not the convolution's. None for any other kernel. `node`: as
        gradient_slot's."""
        stage = fft_stage(name)
        if stage is None:
            return None
        analyzer = self._analyzer
        call, held = self._held(self._fft, rec, node)
        if held is None:
            held = self._fft[_thread(rec)] = [call, None, set()]
        if len(stage) == 2:
            held[1] = fft_frequencies(stage)
        x, w, y = (tuple(shapes()) + (None, None, None))[:3]
        work = fft_work(stage, rec.get("grid"), rec.get("block"), x, w, y, held[1])
        if work is None:
            return analyzer.unclaimed()
        result = fft_operand(stage, rec.get("grid"), rec.get("block"), (x, w, y)) if stage[0] == "c2r" else None
        if rec.get("dir") == "bprop":
            first = result in (0, 1) and bool(analyzer.gradient_slot(rec, ("dgrad", "wgrad")[result], node))
        else:
            first = result == 2 and result not in held[2]
            if first:
                held[2].add(result)
        analyzer.whole_call((cost.flops if first else 0, work[1]))
        return work

    def group_launch(self, rec: dict, name: str | None, groups: int, whole: Callable[[], tuple],
                     node: tuple | None = None) -> tuple | None:
        """(flops, bytes) of one launch of a matrix kernel that cuDNN runs once a group for a
        convolution of `groups` groups (StyleGAN2's modulated convolution, groups = batch: each
        sample's fprop, dgrad and wgrad its own launch): a group's share of what `whole()` gives
        the first launch (its gradient's slot, backward). None where the kernel is not one of
        exactly `groups` launches of its name in its call, read ahead (the one kernel of a
        grouped convolution that runs whole). `node`: as CallState.gradient_slot's."""
        if groups < 2:
            return None
        call, held = self._held(self._group_runs, rec, node)
        if held is not None and held[1] == name:
            held[2] += 1
            return held[3] if held[2] <= held[4] else self._analyzer.unclaimed()
        names, ended = self._analyzer.upcoming(rec)
        if not ended or names.count(name) != groups - 1:
            return None
        flops, nbytes = whole()
        share = (None if flops is None else flops // groups, None if nbytes is None else nbytes // groups)
        self._group_runs[_thread(rec)] = [call, name, 1, share, groups]
        return share

    def one_group(self, rec: dict, cost: Cost, name: str | None, shapes: Callable[[], tuple],
                  node: tuple | None = None) -> tuple | None:
        """(flops, bytes) of a CUTLASS weight-gradient kernel cuDNN launches once per group of a
        grouped convolution of (input, weight, dY) shapes `shapes()` gives
        (conv_parts.one_group_wgrad): the first takes the weight gradient's slot
        (CallState.gradient_slot), it and the next groups - 1 a group's share each, any more na.
        None for any other kernel. `node`: as gradient_slot's."""
        if not ungrouped_wgrad(name):
            return None
        x, w, y = (tuple(shapes()) + (None, None, None))[:3]
        work = one_group_wgrad(name, rec.get("grid"), x, w, y, cost.flops, ITEMSIZE.get(cost.dtype))
        if work is None:
            return None
        analyzer = self._analyzer
        call, state = self._held(self._groups, rec, node)
        if state is None:
            if not analyzer.gradient_slot(rec, "wgrad", node):
                return analyzer.unclaimed()
            state = self._groups[_thread(rec)] = [call, 0]
        state[1] += 1
        return work if state[1] <= x[1] // w[1] else analyzer.unclaimed()
