"""Op families. Importing this package fills the op table (registry.py); import `lookup` from
here rather than from registry so that the table is always full."""
from . import attention, autograd, conv, elementwise, gemm, memory, nn, optim  # noqa: F401  (registration)
from ..registry import Call, lookup, registered  # noqa: F401  (re-exported with the table filled)
