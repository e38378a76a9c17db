"""ResNet-18 with fp16 AMP, channels_last, SGD and a GradScaler: the example behind examples/resnet.sqlite.

Convolutions on Tensor Cores in NHWC, batch norm, max/avg pooling, a GradScaler's unscale and
inf checks, forward and backward. The model is torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2])
written out, so that nothing beyond torch is needed; benchmarks/overhead.py uses it too. Capture:

    nsys profile -t cuda,nvtx -s none -c cudaProfilerApi -f true --export sqlite -o resnet python examples/resnet.py

The range is `pyprof.profiled()` (`--aten`: with PyTorch's emit_nvtx op ranges inside it).
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import pyprof


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection."""

    def __init__(self, inp: int, out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + identity)


class ResNet18(nn.Module):
    """ResNet-18 for 3xHxW images."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [64, 128, 256, 512]
        layers, inp = [], 64
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(inp, w, stride), BasicBlock(w, w)))
            inp = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    args = parser.parse_known_args()[0]  # --aten is read at the profiled range

    pyprof.init()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        print("resnet.py: no CUDA device: running on the CPU; a real capture needs a GPU and nsys.",
              file=sys.stderr)
    torch.manual_seed(0)
    model = ResNet18().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    images = torch.randn(args.batch, 3, args.size, args.size, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (args.batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.float16 if cuda else torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    for _ in range(3):
        step()
    # The CUDA profiler range that nsys captures (with PyTorch's op ranges under --aten), around
    # one step; without CUDA the step just runs.
    with pyprof.profiled(aten="--aten" in sys.argv):
        step()
    print("resnet.py: one training step done", file=sys.stderr)


if __name__ == "__main__":
    main()
