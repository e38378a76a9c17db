"""Stage 1 of pyprof: the annotation of PyTorch calls with NVTX ranges (docs/annotation.md).

Public pieces: `recording()` (the test hook), `Recording`, `Range`, and the pure encoder in
`pyprof.nvtx.marker` (`op_marker`, `module_marker`, `layer_marker`), which imports torch.
"""
from pyprof.nvtx.emit import Range, Recording, recording

__all__ = ["Range", "Recording", "recording"]
