"""LeNet-5, one SGD step under pyprof: the example behind examples/lenet.sqlite.

Capture on a GPU machine (the profiler range covers one training iteration after warm-up):

    nsys profile -t cuda,nvtx -s none -c cudaProfilerApi -f true --export sqlite -o lenet python examples/lenet.py
    python -m pyprof.parse lenet.sqlite | python -m pyprof.prof -w 150 -c idx,dir,op,kernel,sil,tc,flops,bytes

The range is `pyprof.profiled()` (`--aten`: with PyTorch's emit_nvtx op ranges inside it).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import pyprof


class LeNet5(nn.Module):
    """LeNet-5 for 1x32x32 inputs: two 5x5 convolutions with max pooling, three linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def step(net: nn.Module, optimizer: torch.optim.Optimizer, data: torch.Tensor, target: torch.Tensor) -> None:
    """One training iteration: forward, MSE loss, backward, SGD step."""
    optimizer.zero_grad()
    output = net(data)
    loss = F.mse_loss(output, target)
    loss.backward()
    optimizer.step()


def main() -> None:
    pyprof.init()
    if torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        device = torch.device("cpu")
        print("lenet.py: no CUDA device: running on the CPU; a real capture needs a GPU and nsys.",
              file=sys.stderr)
    torch.manual_seed(0)
    net = LeNet5().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    data = torch.randn(1, 1, 32, 32, device=device)
    target = torch.randn(1, 10, device=device)

    for _ in range(3):  # warm-up: cuDNN autotuning and allocator growth stay out of the capture
        step(net, optimizer, data, target)
    # The CUDA profiler range that nsys captures (with PyTorch's op ranges under --aten), around
    # one step; without CUDA the step just runs.
    with pyprof.profiled(aten="--aten" in sys.argv):
        step(net, optimizer, data, target)
    print("lenet.py: one training step done", file=sys.stderr)


if __name__ == "__main__":
    main()
