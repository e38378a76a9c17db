"""Op families. Importing this package fills the op table (registry.py); import `lookup` from
here rather than from registry so that the table is always full."""
from . import attention, autograd, conv, counting, ctc, distributed, elementwise, fft, fx, gemm, loss, memory  # noqa: F401  (registration)
from . import nn, optim, order, packed_sequence, rnn, sampling, scatter_reduce, transformer, vision  # noqa: F401  (registration)
from . import foreach  # noqa: F401,E402  (torch.<op>'s formulas over lists: the families above first)
from . import aten  # noqa: F401,E402  (the aten level's table, built on the families above)
from ..registry import Call, lookup, registered  # noqa: F401  (re-exported with the table filled)
