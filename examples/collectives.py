"""Every kind of torch.distributed communication in one step, one process per GPU, under pyprof.init().

The example behind tests/data/coll_*.sqlite.xz (two GPUs). Each step: a DDP forward and backward
of a small MLP whose gradients DDP all-reduces in several buckets (--bucket-mb; DDP launches them
from its C++ reducer, not through torch.distributed's Python functions), then broadcast,
all_to_all_single, send/recv, batch_isend_irecv, reduce_scatter_tensor, all_gather_into_tensor,
all_gather, reduce and all_reduce of tensors of different dtypes. One nsys export per rank, under
torchrun:

    torchrun --nproc-per-node 2 --no-python nsys profile -t cuda,nvtx -s none -c cudaProfilerApi \\
        --capture-range-end=stop -f true --export sqlite -o coll_%q{RANK} python examples/collectives.py
    python -m pyprof.parse coll_*.sqlite -o coll.dict

--truth FILE writes what DDP itself says of its buckets (their sizes in bytes, in the order the
reducer launches them) for the tests to check the bytes pyprof gives each all-reduce kernel.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

import pyprof


def start(description: str, steps: int, caps: dict[str, float]) -> tuple[argparse.Namespace, int, int, torch.device]:
    """The command line (--steps, --truth and a DDP bucket cap in MB per option of `caps`),
    pyprof.init(), the NCCL process group (no device_id: each group's communicator is made at
    its first collective, by ncclCommInitRankConfig) and this rank's GPU: (args, rank, world, device)."""
    parser = argparse.ArgumentParser(description=description)
    for option, default in caps.items():
        parser.add_argument(option, type=float, default=default)
    parser.add_argument("--steps", type=int, default=steps, help="steps captured (after 3 warm-up steps)")
    parser.add_argument("--truth", help="write DDP's bucket sizes of rank R to this file (%%r: R)")
    args = parser.parse_args()

    pyprof.init()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    torch.manual_seed(0)
    return args, rank, world, device


def default_group_calls(rank: int, world: int, device: torch.device, flag: int, spread: tuple[int, torch.dtype],
                        message: tuple[int, torch.dtype], ring: int) -> torch.Tensor:
    """On the default group: a broadcast of `flag` float32 elements from rank 0, an
    all_to_all_single of `spread` (elements per rank, dtype), a send of `message` (elements,
    dtype) from rank 0 to 1, and a batch_isend_irecv of `ring` float32 elements around the ranks.
    Returns the broadcast tensor."""
    flags = torch.full((flag,), float(rank), device=device)
    dist.broadcast(flags, src=0)
    scattered = torch.arange(world * spread[0], device=device, dtype=spread[1])
    gathered = torch.empty_like(scattered)
    dist.all_to_all_single(gathered, scattered)
    sent = torch.full((message[0],), float(rank), device=device, dtype=message[1])
    if rank == 0:
        dist.send(sent, dst=1)
    elif rank == 1:
        dist.recv(sent, src=0)
    ring_out = torch.full((ring,), float(rank), device=device)
    ring_in = torch.empty_like(ring_out)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, ring_out, (rank + 1) % world),
                                        dist.P2POp(dist.irecv, ring_in, (rank - 1) % world)]):
        work.wait()
    return flags


def finish(args: argparse.Namespace, rank: int, world: int, script: str, truth: dict) -> None:
    """Write `truth` (with the versions) to --truth, say the steps were captured, end the group."""
    if args.truth:
        truth = {"rank": rank, **truth, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__}
        with open(args.truth.replace("%r", str(rank)), "w") as f:
            json.dump(truth, f, indent=1)
    print(f"{script}: rank {rank} of {world}: {args.steps} steps captured", file=sys.stderr)
    dist.destroy_process_group()


def main() -> None:
    args, rank, world, device = start(__doc__.splitlines()[0], 1, {"--bucket-mb": 1.0})
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                              torch.nn.GELU(), torch.nn.Linear(1024, 512)).to(device)
    model = torch.nn.parallel.DistributedDataParallel(mlp, device_ids=[device.index], bucket_cap_mb=args.bucket_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512, device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        flag = default_group_calls(rank, world, device, 1 << 16, (4096, torch.bfloat16), (1 << 15, torch.float16), 3000)
        shards = torch.ones(world * 8192, device=device)
        shard = torch.empty(8192, device=device)
        dist.reduce_scatter_tensor(shard, shards)
        whole = torch.empty(world * 8192, device=device)
        dist.all_gather_into_tensor(whole, shard)
        parts = [torch.empty(1000, device=device, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(parts, torch.full((1000,), rank, device=device, dtype=torch.int64))
        dist.reduce(flag, dst=0)
        dist.all_reduce(loss.detach())

    for _ in range(3):
        step()
    dist.barrier()
    with pyprof.profiled():
        for _ in range(args.steps):
            with pyprof.annotate("train_step"):
                step()
    dist.barrier()
    buckets = model.reducer._get_zeros_like_grad_buckets()
    logged = model._get_ddp_logging_data()
    finish(args, rank, world, "collectives.py", {
        "bucket_bytes": [b.buffer().numel() * b.buffer().element_size() for b in buckets],
        "bucket_dtypes": [str(b.buffer().dtype) for b in buckets],
        "rebuilt_bucket_sizes": logged.get("rebuilt_bucket_sizes"), "bucket_sizes": logged.get("bucket_sizes")})


if __name__ == "__main__":
    main()
