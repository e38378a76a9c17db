"""One training step of pricing_coverage.py's vision models (the cases named on the command line),
each after two warm-up steps, inside the CUDA profiler range for Nsight Compute: cuDNN's Winograd
transforms and GEMMs, its grouped and depthwise convolutions' kernels and their helpers, as the
coverage captures ran them (benchmarks/conv_winograd_truth.sh). A `spin_kernel` opens each
model's step; the models are printed to stderr in order."""
import sys

import torch

from pricing_coverage import CASES, make_step


def main(models: list) -> None:
    steps = []
    for name in models:
        step = make_step(CASES[name], torch.device("cuda"))
        for _ in range(2):  # cuDNN's plans made outside the range
            step()
        steps.append((name, step))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, step in steps:
        torch.cuda._sleep(1000)
        print(name, file=sys.stderr, flush=True)
        step()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
