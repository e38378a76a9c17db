"""Convolutions whose cuDNN calls launch helper kernels (channel padding, workspace init, split-K
and segment-K weight-gradient passes), each run forward and backward once inside the CUDA
profiler range, for Nsight Compute (benchmarks/conv_helpers_truth.sh). A `spin_kernel`
(torch.cuda._sleep) starts each case, so that the n-th spin in ncu's rows opens the n-th case;
the cases are printed to stdout in order. fp16 autocast and channels_last, as examples/resnet.py."""
import sys

import torch
import torch.nn.functional as F

# (batch, channels, height, width, out channels, kernel, stride, padding, input needs grad)
CASES = (
    (8, 3, 224, 224, 64, 7, 2, 3, False),   # ResNet's stem
    (32, 3, 32, 32, 64, 3, 1, 1, False),    # a CIFAR stem
    (16, 1, 28, 28, 32, 5, 1, 2, False),    # one channel
    (4, 3, 224, 224, 64, 7, 2, 3, True),    # the stem with an input gradient
    (8, 64, 56, 56, 64, 3, 1, 1, True),     # ResNet's layer1
    (16, 64, 56, 56, 64, 3, 1, 1, True),
    (2, 64, 56, 56, 64, 3, 1, 1, True),
    (8, 128, 28, 28, 128, 3, 1, 1, True),
    (8, 64, 56, 56, 128, 1, 2, 0, True),    # ResNet's first downsample
    (32, 64, 28, 28, 64, 3, 1, 1, True),
    (8, 32, 112, 112, 32, 3, 1, 1, True),
)


def run(case: tuple) -> None:
    n, c, h, w, k, r, s, p, grad = case
    x = torch.randn(n, c, h, w, device="cuda").to(memory_format=torch.channels_last).requires_grad_(grad)
    weight = torch.randn(k, c, r, r, device="cuda").to(memory_format=torch.channels_last).requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.float16):
        y = F.conv2d(x, weight, None, s, p)
    y.backward(torch.ones_like(y))


def main(cases: tuple = CASES) -> None:
    """Each case once as warm-up, then once inside the profiler range after a spin_kernel."""
    for case in cases:  # warm-up: cuDNN's plans made outside the range
        run(case)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for i, case in enumerate(cases):
        torch.cuda._sleep(1000)
        print(i, case, file=sys.stderr, flush=True)
        run(case)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), file=sys.stderr)


if __name__ == "__main__":
    main()
