"""DDP on process groups of its own next to torch.distributed calls, one process per GPU, under pyprof.init().

The example behind tests/data/ddp_groups_*.sqlite.xz (two GPUs, benchmarks/collectives_capture.sh
with SCRIPT=examples/ddp_groups.py). DDP all-reduces gradients from its C++ reducer, under no
pyprof marker; what tells their group size differs between its two models, each on a process
group of its own:

- `early`: an MLP with a BatchNorm, built and warmed up before the capture, so its NCCL
  communicator was made before it too. DDP broadcasts the BatchNorm's buffers at the start of
  each forward, inside DDP's module range, whose marker says the group (docs/markers.md, module
  `dist`): that broadcast's NCCL payload ties the communicator to the size.
- `late`: an MLP built inside the capture: NCCL's creation of its communicator (its payload holds
  the size) is captured.

Each captured step: a forward and backward of both (--early-mb and --late-mb set DDP's bucket cap,
so the bucket counts differ from tests/data/ddp_* and coll_*), then broadcast, all_to_all_single,
send/recv and batch_isend_irecv on the default group. --truth FILE writes DDP's own bucket sizes.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

import pyprof


def mlp(sizes: list[int], norm: bool, device: torch.device) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.GELU()]
    if norm:
        layers.insert(1, torch.nn.BatchNorm1d(sizes[1]))
    return torch.nn.Sequential(*layers[:-1]).to(device)


def buckets(model: torch.nn.parallel.DistributedDataParallel) -> list[int]:
    """DDP's buckets in bytes, in the order its reducer launches them."""
    return [b.buffer().numel() * b.buffer().element_size() for b in model.reducer._get_zeros_like_grad_buckets()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--early-mb", type=float, default=5.0)
    parser.add_argument("--late-mb", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=2, help="steps captured (after 3 warm-up steps)")
    parser.add_argument("--truth", help="write DDP's bucket sizes of rank R to this file (%%r: R)")
    args = parser.parse_args()

    pyprof.init()
    # No device_id: each process group's communicator is made at its first collective, by
    # ncclCommInitRankConfig (not split from the default group's).
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    torch.manual_seed(0)
    everyone = list(range(world))
    early_group, late_group = dist.new_group(everyone), dist.new_group(everyone)
    early = torch.nn.parallel.DistributedDataParallel(mlp([512, 1024, 1024, 512], True, device), device_ids=[device.index],
                                                      process_group=early_group, bucket_cap_mb=args.early_mb)
    x = torch.randn(64, 512, device=device)
    y = torch.randn(64, 256, device=device)
    peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world

    def step(models: list[torch.nn.Module]) -> None:
        for model in models:
            for p in model.parameters():
                p.grad = None
            model(x if model is early else y).pow(2).mean().backward()
        flag = torch.full((1 << 14,), float(rank), device=device)
        dist.broadcast(flag, src=0)
        scattered = torch.arange(world * 2048, device=device, dtype=torch.float16)
        gathered = torch.empty_like(scattered)
        dist.all_to_all_single(gathered, scattered)
        message = torch.full((1 << 14,), float(rank), device=device)
        if rank == 0:
            dist.send(message, dst=1)
        elif rank == 1:
            dist.recv(message, src=0)
        ring_out = torch.full((5000,), float(rank), device=device)
        ring_in = torch.empty_like(ring_out)
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, ring_out, peer_next),
                                            dist.P2POp(dist.irecv, ring_in, peer_prev)]):
            work.wait()

    for _ in range(3):
        step([early])
    dist.barrier()
    with pyprof.profiled():
        late = torch.nn.parallel.DistributedDataParallel(mlp([256, 512, 512, 512, 256], False, device),
                                                         device_ids=[device.index], process_group=late_group,
                                                         bucket_cap_mb=args.late_mb)
        for _ in range(args.steps):
            with pyprof.annotate("train_step"):
                step([early, late])
    dist.barrier()
    if args.truth:
        truth = {"rank": rank, "early_bucket_bytes": buckets(early), "late_bucket_bytes": buckets(late),
                 "groups": {"early": early_group.group_name, "late": late_group.group_name},
                 "nccl": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__}
        with open(args.truth.replace("%r", str(rank)), "w") as f:
            json.dump(truth, f, indent=1)
    print(f"ddp_groups.py: rank {rank} of {world}: {args.steps} steps captured", file=sys.stderr)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
