"""The GPT of examples/gpt.py trained data-parallel, one process per GPU: DDP or FSDP2.

The example behind tests/data/ddp_*.sqlite.xz and fsdp_*.sqlite.xz (two H200s). One nsys export
per rank, under torchrun:

    torchrun --nproc-per-node 2 --no-python nsys profile -t cuda,nvtx -s none -c cudaProfilerApi \\
        --capture-range-end=stop -f true --export sqlite -o ddp_%q{RANK} python examples/data_parallel.py --mode ddp
    python -m pyprof.parse ddp_*.sqlite -o ddp.dict

Each step: forward and backward under bf16 autocast (DDP) or FSDP2's bf16 parameters with fp32
gradient reduction, the optimizer step, then an all-reduce of the loss for logging
(torch.distributed.all_reduce: a pyprof marker with `dist`). DDP all-reduces gradient buckets
of --bucket-mb MB from its C++ reducer during backward; FSDP2 all-gathers each block's
parameters before use and reduce-scatters its gradients after. The captured step is
`pyprof.profiled()` (emit_nvtx with shapes, so PyTorch's `record_param_comms` ranges carry the
tensors' sizes).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT  # noqa: E402

import pyprof  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--bucket-mb", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=1, help="steps captured (after 3 warm-up steps)")
    args = parser.parse_args()

    pyprof.init()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, local = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq, args.dim, args.heads, args.layers).to(device)
    if args.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None,
                                                          bucket_cap_mb=args.bucket_mb)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
        autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        autocast = torch.autocast(device.type, enabled=False)
    gen = torch.Generator(device="cpu").manual_seed(rank)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(device)
    target = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            logits = model(idx)
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), target.view(-1))
        loss.backward()
        optimizer.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG if cuda else dist.ReduceOp.SUM)

    for _ in range(3):
        step()
    dist.barrier()
    with pyprof.profiled(record_shapes=True):
        for _ in range(args.steps):
            with pyprof.annotate("train_step"):
                step()
    dist.barrier()
    print(f"data_parallel.py: rank {rank} of {dist.get_world_size()}: {args.steps} {args.mode} steps captured",
          file=sys.stderr)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
