"""pyprof's eager-path helpers kept out of Dynamo's compilation of frames.

Where Dynamo gives up on a frame (an op it cannot trace: nn.GRU without allow_rnn) it runs the
frame eagerly and offers each Python frame called from it for compilation in turn. The markers'
eager path then calls pyprof's helpers (hooking the backward's nodes, building marker text), and
Dynamo would compile each of them as a graph of its own: graph breaks at the JSON encoder and at
a tensor's hook dict, a recompile for each new call's guards up to its cache limit, and graph-break
warnings in the user's log, none of which a program without pyprof has. So their code objects are
marked skipped (torch._dynamo.eval_frame.skip_code): called as a frame, such a helper runs as it
is; inlined into a frame Dynamo traces, nothing changes. The marks stay after uninstall(): no
user frame is pyprof's helper.

pyprof's nn.Module.__call__ wrapper is marked too. torch.compile(model) enters the model through
`model.__call__`, and without pyprof Dynamo skips that frame (torch's own, which every module
shares) to compile the model's forward. The wrapper's code is shared by every module as well:
compiled as the entry frame, it held every compiled model's graphs as entries of one code object,
and where Dynamo gave up on one model there (nn.GRU) it skipped that code for all: the other
models' graphs went unused and each compiled again at its forward on its next call (an H200
capture: MobileNetV3's 20 s recompilation inside the profiled step, beside a compiled GRU).
Skipped as a frame, the wrapper runs eagerly around the compiled forward (its module range
included) and is still inlined where Dynamo traces a call of a submodule.
"""
from __future__ import annotations

import importlib
import inspect
from types import CodeType
from typing import Any, Iterator

# The modules whose functions run only on the markers' eager path, never as a program's own frame.
_HELPERS = ("backward", "leaf_grads", "marker", "memo", "node_ranges", "site")


def skip_helpers() -> int:
    """Mark every code object of the helper modules, and the module-call wrapper's, as a frame
    Dynamo does not compile; how many (0 where this torch has no skip_code)."""
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return 0
    count = 0
    for name in _HELPERS:
        for code in _codes(importlib.import_module(f"{__package__}.{name}")):
            skip_code(code)
            count += 1
    skip_code(module_call_code())
    return count + 1


def module_call_code() -> CodeType:
    """The code of the nn.Module.__call__ wrapper (wrappers.module_call's), every module's."""
    from .wrappers import module_call
    return next(c for c in module_call.__code__.co_consts if isinstance(c, CodeType) and c.co_name == "__call__")


def _codes(module: Any) -> Iterator[CodeType]:
    """The code objects defined in `module`: its functions', its classes' methods' (properties'
    too), and those nested in them."""
    seen: set = set()
    todo = []
    for value in vars(module).values():
        members = vars(value).values() if inspect.isclass(value) and value.__module__ == module.__name__ else [value]
        for member in members:
            for fn in (member.fget, member.fset) if isinstance(member, property) else (member,):
                fn = inspect.unwrap(getattr(fn, "__func__", fn)) if callable(fn) else None
                code = getattr(fn, "__code__", None)
                if isinstance(code, CodeType) and getattr(fn, "__module__", None) == module.__name__:
                    todo.append(code)
    while todo:
        code = todo.pop()
        if code in seen:
            continue
        seen.add(code)
        yield code
        todo.extend(c for c in code.co_consts if isinstance(c, CodeType))
