"""Warnings raised inside a wrapped call point at the line they point at without pyprof.

A wrapper is a Python frame between the user's line and the original: a warning torch raises in
C (stack level 1: the innermost Python frame) or with warnings.warn(stacklevel=N) counted through
the wrapper lands on pyprof/nvtx/wrappers.py, so `filterwarnings(module="__main__")` stops
matching and the "default" action, once per location, merges every call site into one.

Nothing is added to the call path. init() puts an "always" filter for the wrappers' modules first
and replaces `warnings._showwarnmsg` (what the interpreter calls to show a warning, C-raised ones
included): a warning placed on a wrapper frame comes here, is placed again on the frame it would
have had without the wrapper frames (the same stack level counted over the other frames) and
goes through the filters again from there, with that module's registry; but for a warning a
filter the user put in front of ours let through as "once" (remembered by text alone, already),
which is shown there as it is. The wrapper modules get `__warningregistry__ = None`, so no
decision taken on a wrapper frame is remembered by location.
"""
from __future__ import annotations

import sys
import warnings
from types import FrameType, ModuleType
from typing import Any, Callable, Optional

_MODULES = r"pyprof\.nvtx\.(wrappers|distributed)\Z"
_original: Optional[Callable[[Any], None]] = None
_codes: Callable[[], frozenset] = frozenset


def install(codes: Callable[[], frozenset], modules: list[ModuleType]) -> None:
    """Place warnings raised on frames of `codes()` (the wrappers' code objects) as without them;
    `modules` are where those code objects live."""
    global _original, _codes
    _codes = codes
    for m in modules:
        m.__warningregistry__ = None  # type: ignore[attr-defined]
    warnings.filterwarnings("always", module=_MODULES)
    if _original is None:
        _original = warnings._showwarnmsg  # type: ignore[attr-defined]
        warnings._showwarnmsg = _showwarnmsg  # type: ignore[attr-defined]


def uninstall() -> None:
    """Undo install() (the filter, and the hook where it is still ours)."""
    global _original
    warnings.filters[:] = [f for f in warnings.filters if not _ours(f)]
    getattr(warnings, "_filters_mutated", lambda: None)()  # registries' cached decisions are stale
    if _original is not None and warnings._showwarnmsg is _showwarnmsg:  # type: ignore[attr-defined]
        warnings._showwarnmsg = _original  # type: ignore[attr-defined]
        _original = None


def _ours(f: tuple) -> bool:
    return f[0] == "always" and f[3] is not None and f[3].pattern == _MODULES and f[2] is Warning


def _showwarnmsg(msg: warnings.WarningMessage) -> None:
    show = _original or warnings._showwarnmsg_impl  # type: ignore[attr-defined]
    placed = _placed(msg, sys._getframe(1))
    if placed is None:
        return show(msg)
    wrapper, frame = placed
    filename, lineno, module_globals = frame.f_code.co_filename, frame.f_lineno, frame.f_globals
    # "once" is remembered by text and category alone, already: placed again it would be lost.
    if _action(msg, wrapper.f_globals.get("__name__", "")) != "once":
        registry = module_globals.setdefault("__warningregistry__", {})
        warnings.warn_explicit(msg.message, msg.category, filename, lineno, module_globals.get("__name__"),
                               registry, module_globals, msg.source)
    else:
        show(warnings.WarningMessage(msg.message, msg.category, filename, lineno, msg.file, msg.line, msg.source))


def _placed(msg: warnings.WarningMessage, inner: Optional[FrameType]) -> Optional[tuple[FrameType, FrameType]]:
    """The wrapper frame `msg` was placed on and the frame it would have been placed on without
    the wrapper frames, `inner` being the innermost frame of the stack it was raised on; None
    when it is on no wrapper frame."""
    codes = _codes()
    stack = []
    while inner is not None:
        stack.append(inner)
        inner = inner.f_back
    level = next((i for i, f in enumerate(stack) if f.f_code in codes and f.f_lineno == msg.lineno
                  and f.f_code.co_filename == msg.filename), None)
    if level is None:
        return None
    others = [f for f in stack if f.f_code not in codes]
    return (stack[level], others[min(level, len(others) - 1)]) if others else None


def _action(msg: warnings.WarningMessage, module_name: str) -> str:
    """The action the filters took for `msg` on a wrapper frame of module `module_name` (the
    interpreter's own matching: message, category, module, line)."""
    text = str(msg.message)
    for action, message, category, module, lineno in warnings.filters:
        if ((message is None or message.match(text)) and issubclass(msg.category, category)
                and (module is None or module.match(module_name)) and (lineno == 0 or lineno == msg.lineno)):
            return action
    return warnings.defaultaction
