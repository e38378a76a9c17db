"""Global average pools (adaptive_avg_pool1d/2d/3d to 1) forward and backward, each once inside
the CUDA profiler range after a `spin_kernel`, for Nsight Compute (tests/data/kernel_truth/
global_pool_ncu.csv.xz): the backward's zero fill (channels_last inputs) and its multiply.
    ncu --profile-from-start off --kernel-name-base demangled --csv --metrics dram__bytes_read.sum,\\
        lts__t_sectors_srcunit_tex_op_write.sum,smsp__sass_data_bytes_mem_global_op_st.sum,\\
        lts__t_sectors_srcunit_tex_op_read.sum python3 benchmarks/global_pool.py | xz > global_pool_ncu.csv.xz
"""
import torch
import torch.nn.functional as F

# (input shape, channels_last, dtype name); the pool's dimensions are the shape's less two.
CASES = (((8, 512, 7, 7), True, "float16"), ((8, 512, 7, 7), False, "float16"), ((32, 1280, 7, 7), True, "float32"),
         ((16, 256, 14, 14), False, "float32"), ((4, 64, 4, 8, 8), True, "float16"), ((8, 64, 100), False, "float32"))


def run(shape: tuple, channels_last: bool, dtype: str) -> None:
    x = torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype))
    if channels_last:
        x = x.to(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    x.requires_grad_(True)
    pool = {3: F.adaptive_avg_pool1d, 4: F.adaptive_avg_pool2d, 5: F.adaptive_avg_pool3d}[len(shape)]
    torch.flatten(pool(x, 1), 1).backward(torch.ones(shape[:2], device="cuda", dtype=x.dtype))


def main() -> None:
    for case in CASES:  # warm-up
        run(*case)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for case in CASES:
        torch.cuda._sleep(1000)
        run(*case)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
