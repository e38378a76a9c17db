"""Launches for Nsight Compute of the kernel families issue 27's default-mode gaps left unpriced:
cuDNN's Winograd forward path of 3x3 data gradients, its generic filter transform, and a cuDNN
LSTM's inter-layer dropout kernels. Each configuration follows a torch.cuda._sleep (ncu's
`spin_kernel` row), which separates them in ncu's rows, and prints `CFG i ...` when done.

usage (on the GPU machine; H100, torch 2.11, cuDNN 9.19 made the shipped files):
  M=smsp__sass_data_bytes_mem_global_op_ld.sum,smsp__sass_data_bytes_mem_global_op_st.sum
  ncu --csv --metrics $M,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum \\
      --kernel-name regex:'winograd|spin_kernel|sm80_xmma_gemm_f32f32_f32f32' \\
      python3 benchmarks/cov_default_truth.py winograd          # -> winograd_fwd_ncu.csv
  ncu --csv --metrics $M,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum \\
      --kernel-name regex:'spin_kernel|tensorTransform|dropout|direct_copy' \\
      python3 benchmarks/cov_default_truth.py transform dropout  # -> transform_dropout_ncu.csv
  ncu --csv --metrics $M,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
      --kernel-name regex:'spin_kernel|tensorTransform' \\
      python3 benchmarks/cov_default_truth.py filter            # -> filter_transform_ncu.csv
(tests/data/kernel_truth/; tests/prof/test_prof_conv_winograd.py and test_prof_cov_default.py read them).
"""
from __future__ import annotations

import itertools
import sys

import torch
import torch.nn.functional as F


def winograd() -> list:
    """Data gradients of 3x3 convolutions (padding 1) in fp16: (N, C, H, W, K)."""
    cfgs = [(n, 128, hw, hw, 32) for n, hw in itertools.product((1, 2, 4, 8), (2, 3, 4, 5, 7, 8, 12))]
    cfgs += [(4, c, hw, hw, 64) for hw, c in itertools.product((4, 8), (64, 256))]
    return cfgs + [(4, 128, 4, 8, 32), (4, 128, 8, 4, 32), (4, 128, 5, 9, 32), (3, 128, 6, 10, 32)]


def run_winograd(n: int, c: int, h: int, w: int, k: int) -> None:
    x = torch.randn(n, c, h, w, device="cuda", dtype=torch.half, requires_grad=True)
    y = F.conv2d(x, torch.randn(k, c, 3, 3, device="cuda", dtype=torch.half), padding=1)
    y.backward(torch.randn_like(y))


def run_conv(k: int, c: int, hw: int) -> None:
    """A bf16-autocast 3x3 convolution of k filters over 8 x c x hw x hw, forward and backward."""
    x = torch.randn(8, c, hw, hw, device="cuda", requires_grad=True)
    w = torch.randn(k, c, 3, 3, device="cuda", requires_grad=True)
    b = torch.randn(k, device="cuda", requires_grad=True)
    with torch.autocast("cuda", torch.bfloat16):
        y = F.conv2d(x, w, b, padding=1)
    y.float().sum().backward()


def run_lstm(layers: int, proj: int, bidirectional: bool) -> None:
    m = torch.nn.LSTM(128, 256, num_layers=layers, batch_first=True, dropout=0.1, bidirectional=bidirectional,
                      proj_size=proj).cuda()
    y, _ = m(torch.randn(16, 50, 128, device="cuda", requires_grad=True))
    y.sum().backward()


SETS = {
    "winograd": [(run_winograd, cfg) for cfg in winograd()],
    "transform": [(run_conv, (k, 64, 32)) for k in (1, 2, 3, 4, 5, 6, 7, 9, 12, 16)] + [(run_conv, (3, 32, 16))],
    "dropout": [(run_lstm, cfg) for cfg in ((2, 64, True), (3, 64, True), (2, 0, True), (2, 0, False), (2, 64, False))],
    "filter": [(run_conv, cfg) for cfg in ((3, 64, 32), (3, 64, 64), (3, 128, 32))],
}

if __name__ == "__main__":
    torch.backends.cudnn.benchmark = False
    i = 0
    for name in sys.argv[1:]:
        for fn, cfg in SETS[name]:
            torch.cuda._sleep(100)
            fn(*cfg)
            torch.cuda.synchronize()
            print("CFG", i, name, cfg, flush=True)
            i += 1
