"""Weight gradients before which cuDNN may launch `init_device_workspace_kernel` (xmma's
segment-K wgrad kernels), over batches, channels, sizes and filters, each run once inside the CUDA
profiler range for Nsight Compute: what the init kernel writes against the segment kernel's launch
after it. Only the weight needs a gradient, so a case's backward is its wgrad's kernels alone; a
`spin_kernel` opens each case. Run as conv_helpers_truth.sh runs conv_helpers.py, with
smsp__sass_data_bytes_mem_global_op_st.sum (the bytes its stores wrote) among the metrics."""
import itertools
import sys

# (batch, channels, size, out channels, filter); stride 1, padding filter // 2.
SHAPES = ((8, 64, 56, 64, 3), (2, 64, 56, 64, 3), (1, 64, 56, 64, 3), (4, 64, 56, 64, 3), (32, 64, 56, 64, 3),
          (8, 64, 28, 64, 3), (8, 64, 14, 64, 3), (8, 96, 56, 96, 3), (32, 128, 28, 128, 3), (8, 256, 14, 256, 3),
          (8, 512, 7, 512, 3), (8, 64, 56, 64, 5), (8, 64, 56, 192, 3), (8, 48, 56, 48, 3)) + tuple(
    itertools.product((8, 16), (32, 64, 128, 256), (56, 112), (32, 64, 96, 128), (1, 3))) + tuple(
    itertools.product((8,), (16, 24, 40, 48, 80, 112, 160, 192, 320, 384), (28, 56), (16, 48, 80, 160, 192, 256), (3,)))
CASES = tuple((n, c, h, h, k, r, 1, r // 2, False) for n, c, h, k, r in SHAPES)

if __name__ == "__main__":
    from conv_helpers import main  # torch: the case table above is read without it (tests/prof/test_prof_split_k.py)

    main(CASES if len(sys.argv) < 2 else CASES[:int(sys.argv[1])])
