"""A small GPT training step with bf16 autocast, fused AdamW and scaled_dot_product_attention.

The example behind examples/gpt.sqlite: richer than LeNet (Tensor Core GEMMs, flash attention,
layer norm, GELU, cross-entropy, a fused multi-tensor optimizer, forward and backward). Capture:

    nsys profile -t cuda,nvtx -s none -c cudaProfilerApi -f true --export sqlite -o gpt python examples/gpt.py

The range is `pyprof.profiled()` (`--aten`: with PyTorch's emit_nvtx op ranges inside it).
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import pyprof


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Token and position embeddings, `layers` blocks, final norm and a vocabulary head."""

    def __init__(self, vocab: int, seq: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    args = parser.parse_known_args()[0]  # --aten is read at the profiled range

    pyprof.init()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        print("gpt.py: no CUDA device: running on the CPU; a real capture needs a GPU and nsys.",
              file=sys.stderr)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq, args.d, args.heads, args.layers).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    target = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, args.vocab), target.view(-1))
        loss.backward()
        optimizer.step()

    for _ in range(3):
        step()
    # The CUDA profiler range that nsys captures (with PyTorch's op ranges under --aten), around
    # one step; without CUDA the step just runs.
    with pyprof.profiled(aten="--aten" in sys.argv):
        with pyprof.annotate("train_step"):
            step()
    print("gpt.py: one training step done", file=sys.stderr)


if __name__ == "__main__":
    main()
