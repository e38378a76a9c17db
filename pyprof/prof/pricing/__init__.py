"""Pricing: each kernel record's FLOPs, bytes, Tensor Core use and peaks. analysis.py derives them
from the op table (registry.py, ops/), the op call's parts (parts.py, from part.py and each kind's
conv_parts.py, gemm_parts.py, attention_parts.py, rnn_parts.py; multitensor.py, calls.py), PyTorch's
op ranges (op_ranges.py) or a compiled graph's FX nodes (fx_nodes.py), and holds them to the GPU's
peaks (peaks.py, beyond_peak.py)."""
