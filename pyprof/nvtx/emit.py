"""Pushing and popping pyprof's NVTX ranges, the test recorder and user layer ranges.

This module does not import torch: `pyprof.annotate` and `pyprof.nvtx.recording` work in any
program, and `import pyprof` must stay torch-free for parse and prof.

Every range goes to the NVTX domain "pyprof". When no NVTX tool (Nsight Systems) is attached,
`nvtx.get_domain` hands back a dummy domain whose calls do nothing; the wrappers then skip
building markers altogether (`state.on` is False) unless a recorder is active or markers are
forced (`pyprof.init(force=True)` or PYPROF_FORCE=1), which is how the overhead benchmark measures
the real marker cost without a profiler.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Tuple, TypeVar

import nvtx
from nvtx._lib import pop_range as _lib_pop
from nvtx._lib import push_range as _lib_push

from ..formats import DOMAIN, MARKER_VERSION

F = TypeVar("F", bound=Callable[..., Any])


class _State:
    """Switches read by every wrapper on every call; attributes rather than globals so that
    wrappers built once keep seeing the current values."""

    __slots__ = ("on", "nested", "force", "live", "hooks", "push", "push_op", "pop", "mark", "compiling")

    def __init__(self) -> None:
        self.on = False          # build and push markers at all
        self.nested = False      # ranges also for torch calls made inside wrapped calls
        self.force = False       # build markers even with no tool and no recorder
        self.live = False        # the "pyprof" domain is a real one (a tool is attached)
        # Backward attribution by autograd node hooks (pyprof.nvtx.backward); off while PyTorch's
        # own node ranges say it (pyprof.nvtx.node_ranges).
        self.hooks = True
        self.push: Callable[[str], None] = _noop
        # An op range with its NVTX int64 payload (docs/markers.md, "Payload").
        self.push_op: Callable[[str, int], None] = _noop_op
        self.pop: Callable[[], None] = _noop_pop
        # An instant mark on this thread (inside the op range open there: an `out` marker).
        self.mark: Callable[[str], None] = _noop
        # Replaced by torch.compiler.is_compiling once torch is in use (pyprof.init).
        self.compiling: Callable[[], bool] = _never


def _noop(text: str) -> None:
    pass


def _noop_op(text: str, payload: int) -> None:
    pass


def _noop_pop() -> None:
    pass


def _never() -> bool:
    return False


state = _State()

_domain: Any = None
_handle: Any = None
# message -> EventAttributes. nvtx itself keeps every registered string forever (an lru_cache
# without bound on Domain.get_registered_string); training loops repeat the same messages, so
# this cache stays as small as that one.
_attrs: dict = {}
# Replaced, never mutated: pushes on other threads iterate a consistent snapshot.
_recorders: Tuple["Recording", ...] = ()
_lock = threading.RLock()


def _register(text: str) -> Any:
    """The event attributes of a message not pushed before, registered and cached."""
    a = _attrs[text] = _domain.get_event_attributes(message=text)
    return a


def _push_live(text: str) -> None:
    _lib_push(_attrs.get(text) or _register(text), _handle)


def _push_live_op(text: str, payload: int) -> None:
    # The attributes are shared by every push of this text: the payload is set just before the
    # push, with no Python call in between that could let another thread's push of the same text
    # set its own (a thread switch between the two lines would swap two calls' payloads).
    a = _attrs.get(text) or _register(text)
    a.payload = payload
    _lib_push(a, _handle)


def _push_live_plain(text: str, payload: int) -> None:
    # An nvtx package without int payloads (docs/markers.md): the range without its payload.
    _push_live(text)


def _pop_live() -> None:
    _lib_pop(_handle)


def _mark_live(text: str) -> None:
    # Rare (ops whose output size depends on their values, which synchronize anyway): nvtx's own call.
    nvtx.mark(message=text, domain=DOMAIN)


def _push_recording(text: str) -> None:
    for r in _recorders:
        r._push(text)
    if state.live:
        _push_live(text)


def _push_recording_op(text: str, payload: int) -> None:
    for r in _recorders:
        r._push(text, payload)
    if state.live:
        _push_live_op(text, payload)


def _pop_recording() -> None:
    for r in _recorders:
        r._pop()
    if state.live:
        _lib_pop(_handle)


def _mark_recording(text: str) -> None:
    for r in _recorders:
        r._mark(text)
    if state.live:
        _mark_live(text)


def _open_domain() -> None:
    global _domain, _handle, _push_live_op
    if _domain is not None:
        return
    d = nvtx.get_domain(DOMAIN) if nvtx.enabled() else None
    if isinstance(d, nvtx.Domain):
        _domain, _handle = d, d.handle
        state.live = True
        try:
            d.get_event_attributes(message=DOMAIN).payload = 0
        except Exception:
            _push_live_op = _push_live_plain
    else:
        _domain = False


def configure(*, nested: Optional[bool] = None, force: Optional[bool] = None) -> None:
    """Set the switches and recompute which push/pop the wrappers use."""
    with _lock:
        _open_domain()
        if nested is not None:
            state.nested = nested
        if force is not None:
            state.force = force
        _refresh()


def _refresh() -> None:
    if _recorders:
        state.push, state.push_op, state.pop, state.mark = _push_recording, _push_recording_op, _pop_recording, \
            _mark_recording
    elif state.live:
        state.push, state.push_op, state.pop, state.mark = _push_live, _push_live_op, _pop_live, _mark_live
    else:
        state.push, state.push_op, state.pop, state.mark = _noop, _noop_op, _noop_pop, _noop
    state.on = bool(state.live or state.force or _recorders)


def force_from_env() -> bool:
    """PYPROF_FORCE=1 builds markers even when no NVTX tool is attached."""
    return os.environ.get("PYPROF_FORCE", "") not in ("", "0")


class Range(NamedTuple):
    """One range pushed while a recording was active."""

    text: str                 #: the marker exactly as pushed (compact JSON)
    depth: int                #: number of recorded ranges open on the same thread at push time
    parent: Optional[int]     #: index of the enclosing recorded range on the same thread
    thread: int               #: threading.get_ident() of the pushing thread
    payload: Optional[int] = None  #: the NVTX int64 payload of an op range (docs/markers.md)

    @property
    def marker(self) -> dict:
        """The marker decoded (json.loads of `text`)."""
        return json.loads(self.text)


class Recording:
    """Ranges pushed to the pyprof domain while `recording()` is active, in push order.

    `ranges` holds `Range` tuples (text, nesting depth, parent index, thread); `markers` decodes
    the texts. Texts are decoded on access so that a malformed marker fails the test reading it,
    not the torch call that pushed it. `marks` holds the instant marks, each as (text, index of the
    recorded range open on its thread or None).
    """

    def __init__(self) -> None:
        self.ranges: List[Range] = []
        self.marks: List[Tuple[str, Optional[int]]] = []
        self._stacks: dict = {}

    @property
    def markers(self) -> List[dict]:
        """Every recorded marker decoded, in push order."""
        return [json.loads(r.text) for r in self.ranges]

    def _push(self, text: str, payload: Optional[int] = None) -> None:
        stack = self._stacks.setdefault(threading.get_ident(), [])
        self.ranges.append(Range(text, len(stack), stack[-1] if stack else None, threading.get_ident(), payload))
        stack.append(len(self.ranges) - 1)

    def _mark(self, text: str) -> None:
        stack = self._stacks.get(threading.get_ident())
        self.marks.append((text, stack[-1] if stack else None))

    def _pop(self) -> None:
        stack = self._stacks.get(threading.get_ident())
        # A range opened before the recording started closes inside it: nothing to pop.
        if stack:
            stack.pop()


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Collect every pyprof range pushed in this process (all threads) while the block runs.

    The test hook: no GPU or profiler needed. Markers are built while a recording is active even
    when no NVTX tool is attached. Recordings may nest; each sees every range.
    """
    global _recorders
    rec = Recording()
    with _lock:
        _open_domain()
        _recorders = _recorders + (rec,)
        _refresh()
    try:
        yield rec
    finally:
        with _lock:
            _recorders = tuple(r for r in _recorders if r is not rec)
            _refresh()


def layer_marker(name: str) -> str:
    """The marker of a user range: `{"v":1,"kind":"layer","name":...}`."""
    return json.dumps({"v": MARKER_VERSION, "kind": "layer", "name": name}, separators=(",", ":"))


class _Pushed(threading.local):
    # Whether each open `annotate` block pushed a range: the switches may change inside it.
    stack: list

    def __init__(self) -> None:
        self.stack = []


_pushed = _Pushed()


class annotate:
    """A user range, `kind: "layer"` (the `layer` column of parse): a context manager
    (`with pyprof.annotate("encoder"):`) and a decorator (`@pyprof.annotate("step")`).

    Costs nothing when no tool is attached, no recording is active and markers are not forced.
    Needs no `pyprof.init()`; after it, does nothing (and does not break graphs) inside
    torch.compile.
    """

    __slots__ = ("name", "text")

    def __init__(self, name: str) -> None:
        # Checked here, not when the range is pushed: a wrong name must fail the same way with
        # and without a profiler attached, not only in the run being profiled.
        if not isinstance(name, str):
            raise TypeError(f"pyprof.annotate: the name must be a str, not {type(name).__name__}")
        self.name = name
        self.text: Optional[str] = None  # built on first use: construction must stay traceable

    def __enter__(self) -> "annotate":
        # Inside torch.compile (after pyprof.init()) both ends see True and touch nothing.
        if state.compiling():
            return self
        if state.on:
            if self.text is None:
                self.text = layer_marker(self.name)
            state.push(self.text)
            _pushed.stack.append(True)
        else:
            _pushed.stack.append(False)
        return self

    def __exit__(self, *exc: Any) -> None:
        if state.compiling():
            return
        stack = _pushed.stack
        if stack and stack.pop():
            state.pop()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def annotated(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return annotated  # type: ignore[return-value]


with _lock:
    _open_domain()
    state.force = force_from_env()
    _refresh()
