"""A training step of examples/gpt.py's GPT or examples/resnet.py's ResNet-18 under torch.compile.

The example behind examples/gpt_compiled.sqlite (`--model gpt`), gpt_graphs.sqlite (`--model gpt
--mode reduce-overhead`: CUDA graphs, captured with `nsys --cuda-graph-trace=node`) and
resnet_compiled.sqlite (`--model resnet`). The model is compiled; the loss, backward call and
optimizer step run as in the eager examples. Capture:

    nsys profile -t cuda,nvtx -s none -c cudaProfilerApi --cuda-graph-trace=node -f true --export sqlite \\
        -o gpt_graphs python examples/compiled.py --model gpt --mode reduce-overhead

On stderr, one JSON line: the first step's time (compilation included), the time pyprof spent
recording the kernels Inductor generated, and with `--time N` the mean step time over N steps.
`--no-pyprof` runs without pyprof.init() (the compile-time baseline), `--no-record` with it but
without the compile-time recorder.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

import pyprof
from gpt import GPT
from resnet import ResNet18


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("gpt", "resnet"), default="gpt")
    parser.add_argument("--mode", default="default", help="torch.compile mode (default, reduce-overhead, "
                                                          "max-autotune, ...), or eager: not compiled")
    parser.add_argument("--no-pyprof", action="store_true", help="without pyprof.init()")
    parser.add_argument("--no-record", action="store_true", help="pyprof.init() without the compile-time "
                                                                  "recorder (its cost measured apart)")
    parser.add_argument("--time", type=int, default=0, metavar="N", help="time N more steps after the capture")
    args = parser.parse_args()

    if not args.no_pyprof:
        pyprof.init()
        if args.no_record:
            from pyprof.nvtx import inductor

            inductor.uninstall()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    if args.model == "gpt":  # examples/gpt.py's defaults
        vocab = 1024
        model = GPT(vocab, 128, 256, 4, 2).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
        inputs = torch.randint(0, vocab, (4, 128), device=device)
        target = torch.randint(0, vocab, (4, 128), device=device)
        amp, scaler = torch.bfloat16, None
    else:  # examples/resnet.py's defaults
        model = ResNet18().to(device, memory_format=torch.channels_last)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        inputs = torch.randn(8, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
        target = torch.randint(0, 1000, (8,), device=device)
        amp, scaler = (torch.float16 if cuda else torch.bfloat16), torch.amp.GradScaler(device.type, enabled=cuda)
    run = model if args.mode == "eager" else torch.compile(model, mode=None if args.mode == "default" else args.mode)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp):
            out = run(inputs)
            loss = F.cross_entropy(out.view(-1, out.shape[-1]), target.view(-1))
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    for _ in range(3):  # CUDA graph trees: a warm-up run, the recording, then replays
        step()
    with pyprof.profiled(record_shapes=True):
        step()
    report = {"model": args.model, "mode": args.mode, "pyprof": not args.no_pyprof,
              "record": not (args.no_pyprof or args.no_record), "torch": torch.__version__,
              "first_step_s": round(first, 3)}
    if report["record"]:
        from pyprof.nvtx import inductor

        report.update(record_s=round(inductor.record_ns / 1e9, 4), recorded_calls=sum(
            1 for m in inductor.table() if m["kind"] == "kernel"), record_failures=inductor.failures)
    if args.time:
        sync()
        t0 = time.perf_counter()
        for _ in range(args.time):
            step()
        sync()
        report["step_ms"] = round((time.perf_counter() - t0) / args.time * 1e3, 3)
    print(json.dumps(report), file=sys.stderr)


if __name__ == "__main__":
    main()
