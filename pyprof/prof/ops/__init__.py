"""Op families. Importing this package fills the op table (registry.py)."""
from . import attention, conv, elementwise, gemm, memory, nn, optim  # noqa: F401  (registration)
