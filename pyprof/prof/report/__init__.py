"""What prof writes for other programs to show: the timeline for Perfetto (trace.py) and the
self-contained HTML report (html.py, data.py). The views that use them are views/trace.py and
views/html.py."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with NaN and infinities as None (JSON has neither; a record may carry them), dict
    keys as strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
