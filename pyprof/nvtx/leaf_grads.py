"""The gradients a compiled program stores into its leaves, each in a range of its own.

A compiled program's backward is one autograd node per graph (CompiledFunctionBackward), which
pyprof's node hooks do not see (pyprof.nvtx.backward hooks the nodes of eager calls). After it,
the engine stores each leaf's gradient (AccumulateGrad): it keeps the tensor as it is, or copies
it into the leaf's layout where Inductor wrote it in another (a channels_last convolution's
weight gradient), or adds it to the gradient an earlier pass left (gradient accumulation). Those
copies and adds are kernels outside every graph's range, inside whatever bwd range was open last
on the autograd thread: on an H200, wide_resnet50_2's layout copies (4.5% of its compiled step)
were the loss's backward there, their work unknown.

So while profiled() captures, each leaf that requires grad among the inputs of a graph compiled
for training gets a hook in its hook dict (pyprof.nvtx.backward.hook_leaf), which AccumulateGrad
runs before it stores the gradient: it opens a bwd range for node `AccumulateGrad` whose forward
marker describes the leaf, op `AccumulateGrad` of `torch._C._functions` (the node's own class),
with the leaf as its one argument and, where the leaf is a parameter of the module that called the
graph, that module's path and the parameter's name (docs/markers.md). Like every node hook's, the
range stays open until the next hooked node starts on the thread. The hooks go when the capture
ends: outside it a backward makes no Python call per leaf.
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Sequence

from torch import Tensor
from torch.nn import Module

from .backward import hook_leaf, unhook_leaf
from .marker import op_marker

MOD, OP = "torch._C._functions", "AccumulateGrad"


def leaf_marker(t: Tensor, name: Optional[str] = None) -> str:
    """The forward marker of leaf `t`'s gradient storage; `name`: its qualified parameter name
    (`layer1.0.conv1.weight`), whose module part becomes the marker's `module`."""
    if name is None:
        return op_marker(MOD, OP, [t])
    module, _, attr = name.rpartition(".")
    return op_marker(MOD, OP, [t], {"param": attr}, module=module or None)


# The attribute a compiled graph keeps its inputs' leaf positions in, found at its first call.
_POSITIONS = "_pyprof_leaves"


class LeafHooks:
    """The leaves hooked during one capture, found among the inputs of each training graph's
    calls: a graph's leaf positions are found at its first call, and each call then checks only
    those (one graph may run for several modules' parameters after a graph break)."""

    def __init__(self) -> None:
        self._hooked: Dict[int, weakref.ref] = {}  # id(leaf) -> the leaf, weakly (a freed one's id is reused)
        # id(graph) -> the leaves its last call took, by position: a call with the same ones (a
        # training step's parameters) is checked by identity alone, on every graph call.
        self._last: Dict[int, tuple] = {}

    def take(self, graph: Any, inputs: List[Any], owner: Optional[Module], path: Optional[str]) -> None:
        """Hook the leaves among the `inputs` of a call of a training graph's forward (no other
        graph's leaves get gradients: inductor.trains) not hooked yet; `owner`: the module whose
        code called it, at `path` (graph_calls.caller_path), whose parameters' names the markers
        carry. Never raises: the graph call must run whatever a leaf is."""
        try:
            self._take(graph, inputs, owner, path)
        except Exception:
            pass

    def _take(self, graph: Any, inputs: List[Any], owner: Optional[Module], path: Optional[str]) -> None:
        positions: Optional[Sequence[int]] = getattr(graph, _POSITIONS, None)
        if positions is None:
            positions = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad and t.grad_fn is None]
            setattr(graph, _POSITIONS, positions)
        last = self._last.get(id(graph))
        if last is not None and all(inputs[i] is t for i, t in zip(positions, last)):
            return
        names = None
        hooked = self._hooked
        for i in positions:
            t = inputs[i]
            ref = hooked.get(id(t))
            if ref is not None and ref() is t or not isinstance(t, Tensor) or not t.requires_grad \
                    or t.grad_fn is not None:
                continue
            if names is None:
                names = _parameter_names(owner, path)
            hook_leaf(t, leaf_marker(t, names.get(id(t))))
            hooked[id(t)] = weakref.ref(t)
        self._last[id(graph)] = tuple(inputs[i] for i in positions)

    def remove(self) -> None:
        """Take every hook out again (the capture ended)."""
        for ref in self._hooked.values():
            t = ref()
            if t is not None:
                try:
                    unhook_leaf(t)
                except Exception:  # a tensor refusing its hook dict: ending the capture must not fail
                    pass
        self._hooked.clear()
        self._last.clear()


def _parameter_names(owner: Optional[Module], path: Optional[str]) -> Dict[int, str]:
    """id(parameter) -> its qualified name: `owner`'s path, then its own name in `owner`."""
    if owner is None or path is None:
        return {}
    return {id(p): ".".join(s for s in (path, n) if s) for n, p in owner.named_parameters()}
