"""cub's radix sort of key-value pairs (PyTorch's at::cuda::cub::radix_sort_pairs) as the named
stages (registry.Cost.stages) of the ops whose kernels run it: an index_put with accumulate (an
advanced index's backward), embedding_bag's backward.

Which of cub's kernels run depends on the item count against the GPU's tile (a policy of cub's per
architecture): one tile sorted by one kernel, or a histogram of every pass's digits, their
exclusive sums and one onesweep pass per digit. The stages of both are offered; each is taken by
its kernel's name (parts.CallParts.stage), and a stage no kernel takes costs nothing.
"""
from __future__ import annotations

_DIGITS = 256  # cub's onesweep digits: 8 bits a pass for keys wider than a byte
_RADIX_BITS = 8
_COUNTER = 8  # PyTorch's int64 item count: cub's counters are unsigned long long (the kernels' names)


def num_bits(max_key: int) -> int:
    """The key bits PyTorch sorts on for keys no larger than `max_key` (at::cuda::cub::get_num_bits)."""
    return max(1, max_key.bit_length())


def radix_sort_pairs(n: int, key_size: int, value_size: int, bits: int) -> tuple:
    """cub's sort of `n` keys of `key_size` bytes with `n` values of `value_size` on the keys' low
    `bits` bits, as named stages (FLOPs 0, no floating-point bytes, bytes of integers): one tile
    sorted in one kernel (keys and values read and written), or the histogram (the keys read once,
    256 counters a pass written), their exclusive sums (read and written) and a onesweep pass
    for every 8 bits (keys and values read and written, its pass's 256 counters read): with 8-bit
    keys of 169 rows' indices one onesweep kernel (swin_t's relative position bias, H100)."""
    passes = -(-bits // _RADIX_BITS)
    moved = 2 * n * (key_size + value_size)
    counters = passes * _DIGITS * _COUNTER
    return (("DeviceRadixSortSingleTileKernel", 0, 0, moved),
            ("DeviceRadixSortHistogramKernel", 0, 0, n * key_size + counters),
            ("DeviceRadixSortExclusiveSumKernel", 0, 0, 2 * counters)) \
        + (("DeviceRadixSortOnesweepKernel", 0, 0, moved + _DIGITS * _COUNTER),) * passes
