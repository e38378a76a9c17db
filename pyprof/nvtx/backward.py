"""Backward attribution without emit_nvtx: autograd node hooks that open a `bwd` range.

While markers are built, the outermost wrapped call registers one pre-hook on the autograd node
of its output (`out.grad_fn`). When the engine runs that node, the hook pushes a range in the
pyprof domain whose marker embeds the forward op's marker (docs/markers.md, `kind: "bwd"`), so
parse gives every kernel launched in it the forward op, module, call site and arguments, with no
PyTorch op ranges at all.

One hook per node, not a pre-hook and a post-hook: the range stays open until the next hooked
node starts on the same thread (the hook pops it first). It therefore also covers what the
engine does after the node (adding gradients that meet, as PyTorch's own
`autograd::engine::evaluate_function` range does) and the op's inner nodes that run right after
it (`cross_entropy`'s LogSoftmaxBackward after NllLossBackward). The last range of a backward
pass stays open on the engine's device thread until the next backward pass, where nothing else
is launched; on the calling thread (CPU autograd) the engine closes it at the end of the pass
(a callback queued by the pass's first hook there), and so does the backward call's wrapper.

The hook goes in as a hook of the output tensor, the way `Tensor.register_hook` does it (the
tensor's `_backward_hooks` dict, given to its node by one C call): it runs when the node starts,
as a node pre-hook would, without the OrderedDict and RemovableHandle that `register_prehook`
builds in Python for every node and that are freed with it (about 2.4 us of the 4 us a hooked
call cost on the development VM). A later `register_hook` of the user's lands in the same dict
and runs after ours; an in-place op gives the tensor a new node and torch a fresh dict, as
without pyprof. A tensor that already has a dict (not ours to fill) gets a node pre-hook.
"""
from __future__ import annotations

import functools
import threading
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Sequence

import torch

from ..formats import BWD_MARKER_VERSION
from .emit import state as _state

_Tensor = torch.Tensor
_queue_callback = torch.autograd.Variable._execution_engine.queue_callback
_CACHE_LIMIT = 8192


class _Open(threading.local):
    open = False  # a bwd range pushed by a hook on this thread is still open


_tl = _Open()
# (node class, or a leaf's node name, forward marker text) -> the pre-hook pushing its bwd marker.
_hooks: dict = {}
# Our entry in a tensor's hook dict: not an int, so no RemovableHandle id of the user's meets it.
_KEY = "pyprof"


class _Hooks(dict):
    """A tensor's `_backward_hooks`: a dict that RemovableHandle (the user's later hooks) can
    refer to weakly, cheaper to make than the OrderedDict torch makes."""

    __slots__ = ("__weakref__",)


def bwd_marker(node: str, fwd: str) -> str:
    """The marker of autograd node `node` (`AddmmBackward0`) created by the op whose marker is `fwd`."""
    return '{"v":' + str(BWD_MARKER_VERSION) + ',"kind":"bwd","node":' + _quote(node) + ',"fwd":' + fwd + "}"


def _enter(text: str, grad_outputs: Any) -> None:
    tl = _tl
    if tl.open:
        _state.pop()
    else:
        _close_at_the_end()
    _state.push(text)
    tl.open = True


def _close_at_the_end() -> None:
    """Have the engine close this thread's bwd range when the backward pass ends, if it ends on
    this thread (CPU autograd): the call that started the pass may not be a wrapper that closes
    it (pyprof.restore(), or torch.jit.script's unpatched() on another thread, between the forward
    pass that hooked the nodes and the backward call)."""
    ident = threading.get_ident()

    def done() -> None:
        if threading.get_ident() == ident:
            close()

    try:
        _queue_callback(done)
    except RuntimeError:  # not inside a backward pass (a hook run by hand)
        pass


def close() -> None:
    """Pop the bwd range a hook left open on this thread, if any (after a backward call)."""
    tl = _tl
    if tl.open:
        tl.open = False
        _state.pop()


def _new_hook(key: tuple, node: str, fwd: str) -> Any:
    """The hook pushing the bwd marker of node class `node` created by the op of marker `fwd`,
    made and kept under `key` (the look-up stays inline where it is hot: _hook)."""
    if len(_hooks) >= _CACHE_LIMIT:
        _hooks.clear()
    h = _hooks[key] = functools.partial(_enter, bwd_marker(node, fwd))
    h.__torch_unserializable__ = True  # saving a hooked tensor need not warn about it
    return h


def hook_leaf(t: Any, fwd: str) -> None:
    """Open a bwd range for node `AccumulateGrad` with forward marker `fwd` whenever the engine
    stores leaf `t`'s gradient: a hook in `t`'s hook dict, which AccumulateGrad runs first (a dict
    of the user's gets ours after theirs). unhook_leaf() takes it out."""
    key = ("AccumulateGrad", fwd)
    h = _hooks.get(key) or _new_hook(key, "AccumulateGrad", fwd)
    d = t._backward_hooks
    if d is None:
        d = t._backward_hooks = _Hooks()
    d[_KEY] = h


def unhook_leaf(t: Any) -> None:
    """Take hook_leaf()'s hook out of leaf `t`'s hook dict; the dict too where it was ours alone."""
    d = t._backward_hooks
    if d is not None and d.pop(_KEY, None) is not None and not d and type(d) is _Hooks:
        t._backward_hooks = None


def _hook(t: Any, node: Any, fwd: str) -> None:
    cls = type(node)
    h = _hooks.get((cls, fwd))
    if h is None:
        h = _new_hook((cls, fwd), cls.__name__, fwd)
    if t._backward_hooks is None:
        d = t._backward_hooks = _Hooks()
        d[_KEY] = h
        node._register_hook_dict(t)
    else:
        node.register_prehook(h)


def attach(out: Any, args: Sequence[Any], fwd: str, since: int, end: int) -> None:
    """Hook the autograd node(s) that a wrapped call gave its output `out` with its marker `fwd`.

    A node is the call's when its sequence number is one the call's thread handed out during the
    call, `since` <= seq < `end`: an in-place op's (`add_`, `F.leaky_relu(x, 0.1, True)`, any
    spelling) gives its argument a node of its own; an output with an older node (`x.contiguous()`
    of a contiguous x returns x) keeps the node of the op that made it and hooked it. An in-place
    op on a view also gives the view's base a node (CopySlices), which runs the op's backward:
    hooked too. A call that returns nothing but made nodes (`x[i] = v`) gave them to its tensor
    arguments (`args`): theirs are hooked. Never raises.
    """
    try:
        if type(out) is _Tensor:
            node = out.grad_fn
            if node is not None:
                if since <= node._sequence_nr() < end:
                    _hook(out, node, fwd)
                if end - since > 1:  # more than one node made: perhaps an in-place op on a view
                    _hook_base(out, fwd, since, end, [node])
        elif type(out) is tuple or type(out) is list:
            _hook_all(out, fwd, since, end)
        elif out is None and end > since:
            _hook_all(args, fwd, since, end)
    except Exception:
        pass


def _hook_all(tensors: Sequence[Any], fwd: str, since: int, end: int) -> None:
    """Hook each distinct node among `tensors`' (and their bases') that the call made."""
    seen: list = []
    for t in tensors:
        if type(t) is _Tensor:
            node = t.grad_fn
            if node is not None and node not in seen:
                seen.append(node)
                if since <= node._sequence_nr() < end:
                    _hook(t, node, fwd)
                if end - since > 1:
                    _hook_base(t, fwd, since, end, seen)


def _hook_base(view: Any, fwd: str, since: int, end: int, seen: list) -> None:
    """Hook the node of `view`'s base if the call made it (CopySlices, of an in-place op on the view)."""
    base = view._base
    if base is not None:
        node = base.grad_fn
        if node is not None and node not in seen and since <= node._sequence_nr() < end:
            seen.append(node)
            _hook(base, node, fwd)
