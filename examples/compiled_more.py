"""examples/gpt.py's GPT step in the compiled and graphed forms examples/compiled.py leaves out.

    --variant break      torch.compile default mode with a graph break in every block (a forward
                         hook calling torch._dynamo.graph_break(): compiled and eager regions mix),
                         the foreach AdamW step compiled too
    --variant dynamic    torch.compile(dynamic=True): symbolic shapes
    --variant graphed    no torch.compile: the whole step (forward, backward, capturable AdamW)
                         captured by hand with torch.cuda.graph inside pyprof.profiled(), replayed twice
    --variant callables  the model through torch.cuda.make_graphed_callables inside
                         pyprof.profiled(); loss and optimizer step eager

Capture (CUDA graphs need node-level tracing):

    nsys profile -t cuda,nvtx -s none -c cudaProfilerApi --cuda-graph-trace=node -f true --export sqlite \\
        -o gpt_break python examples/compiled_more.py --variant break

A hand-captured graph's kernels are explained by the ops recorded when it was captured, so the
capture happens inside the profiled range.
"""
import argparse

import torch
import torch.nn.functional as F

import pyprof
from gpt import GPT

VOCAB = 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=("break", "dynamic", "graphed", "callables"), required=True)
    args = parser.parse_args()
    pyprof.init()
    torch.manual_seed(0)
    model = GPT(VOCAB, 128, 256, 4, 2).cuda()
    inputs = torch.randint(0, VOCAB, (4, 128), device="cuda")
    target = torch.randint(0, VOCAB, (4, 128), device="cuda")
    if args.variant in ("break", "dynamic"):
        compiled(model, inputs, target, args.variant)
    elif args.variant == "graphed":
        graphed(model, inputs, target)
    else:
        callables(model, inputs, target)


def compiled(model: GPT, inputs: torch.Tensor, target: torch.Tensor, variant: str) -> None:
    """Three warm-up steps (compilation), then one profiled step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    if variant == "break":
        for block in model.blocks:
            block.register_forward_hook(lambda *_: torch._dynamo.graph_break())
        run = torch.compile(model)
        opt_step = torch.compile(optimizer.step)
    else:
        run = torch.compile(model, dynamic=True)
        opt_step = optimizer.step

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = run(inputs)
            loss = F.cross_entropy(out.view(-1, VOCAB), target.view(-1))
        loss.backward()
        opt_step()

    for _ in range(3):
        step()
    with pyprof.profiled():
        step()


def graphed(model: GPT, inputs: torch.Tensor, target: torch.Tensor) -> None:
    """The whole step in one CUDA graph (PyTorch's whole-network capture recipe)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True, capturable=True)

    def body() -> None:
        # Autocast's weight cache would hold casts made outside the graph: off while capturing.
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            out = model(inputs)
            loss = F.cross_entropy(out.view(-1, VOCAB), target.view(-1))
        loss.backward()
        optimizer.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with pyprof.profiled():
        with torch.cuda.graph(graph):
            body()
        graph.replay()
        graph.replay()


def callables(model: GPT, inputs: torch.Tensor, target: torch.Tensor) -> None:
    """The model's forward and backward as graphs; loss and optimizer step eager."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    with pyprof.profiled():
        run = torch.cuda.make_graphed_callables(model, (inputs,))
        for _ in range(2):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(run(inputs).view(-1, VOCAB).float(), target.view(-1))
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
