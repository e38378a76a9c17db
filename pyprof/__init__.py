"""pyprof: attribute every GPU kernel of a PyTorch program to its op, arguments, call site and layer.

`pyprof.init()` is the one line to add to a training script (docs/annotation.md). Importing
this package does not import torch: `pyprof.parse` and `pyprof.prof` run on machines without it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it from here)

__all__ = ["__version__", "init", "restore", "wrap", "annotate", "profiled", "records", "rows", "dataframe", "table", "summary",
           "modules", "diff", "overlap", "stragglers", "roofline", "report", "trace", "ProfWarning",
           "register_cost"]

# Notebook API (pyprof/api.py), loaded on first use: neither torch nor pandas is imported.
_API = frozenset(("records", "rows", "dataframe", "table", "summary", "modules", "diff", "overlap", "stragglers", "roofline",
                  "report", "trace", "ProfWarning"))

_NEEDS_TORCH = "pyprof.init() annotates PyTorch programs and needs torch: pip install torch (or pyprof-nvtx[torch])"


def _patch_module() -> Any:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ImportError(_NEEDS_TORCH) from None
    from pyprof.nvtx import patch

    return patch


def init(*, nested: bool = False, force: Optional[bool] = None) -> None:
    """Wrap torch so that every call pushes an NVTX range (domain "pyprof") carrying its marker.

    Idempotent and thread-safe; a second call only updates the options.

    nested: also emit ranges for torch calls made inside another wrapped call (default: only
        the outermost, user-visible call).
    force: build markers even when no NVTX tool is attached (default: the PYPROF_FORCE
        environment variable). Without a tool the pushes themselves do nothing; this exists to
        measure the marker cost without a profiler.
    """
    _patch_module().init(nested=nested, force=force)


def restore() -> None:
    """Put back every original that init() and wrap() replaced. Safe to call at any time."""
    import sys

    if "pyprof.nvtx.patch" in sys.modules:
        sys.modules["pyprof.nvtx.patch"].restore()


def wrap(obj: Any, name: str) -> Callable:
    """Annotate a user function or an extension's function like a torch op.

    `wrap(container, "fn")`, where `container` (a module, class or object) has a callable
    attribute `fn`: replaces it in place (restore() undoes it); markers carry `mod` = the
    container's name and `op` = "fn". `wrap(fn, "name")` for a callable `fn`: returns a wrapped
    copy whose markers carry `mod` = "name" and `op` = fn's `__name__`. Returns the wrapper.
    """
    return _patch_module().wrap(obj, name)


def __getattr__(name: str) -> Any:
    # `annotate` and `profiled` live with the NVTX plumbing; parse and prof import this package without
    # needing either, so it is loaded on first use.
    if name == "annotate":
        from pyprof.nvtx.emit import annotate

        return annotate
    if name == "profiled":
        from pyprof.nvtx.profiled import profiled

        return profiled
    if name == "register_cost":  # pricing a user's ops (pyprof/prof/pricing/extend.py): no torch either
        from pyprof.prof.pricing.extend import register_cost
        return register_cost
    if name in _API:
        from pyprof import api

        return getattr(api, name)
    raise AttributeError(f"module 'pyprof' has no attribute {name!r}")
