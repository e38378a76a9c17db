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
import torch
import torch.distributed as dist

import pyprof
from collectives import default_group_calls, finish, start


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
    args, rank, world, device = start(__doc__.splitlines()[0], 2, {"--early-mb": 5.0, "--late-mb": 0.25})
    everyone = list(range(world))
    early_group, late_group = dist.new_group(everyone), dist.new_group(everyone)
    early = torch.nn.parallel.DistributedDataParallel(mlp([512, 1024, 1024, 512], True, device), device_ids=[device.index],
                                                      process_group=early_group, bucket_cap_mb=args.early_mb)
    x = torch.randn(64, 512, device=device)
    y = torch.randn(64, 256, device=device)

    def step(models: list[torch.nn.Module]) -> None:
        for model in models:
            for p in model.parameters():
                p.grad = None
            model(x if model is early else y).pow(2).mean().backward()
        default_group_calls(rank, world, device, 1 << 14, (2048, torch.float16), (1 << 14, torch.float32), 5000)

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
    finish(args, rank, world, "ddp_groups.py", {
        "early_bucket_bytes": buckets(early), "late_bucket_bytes": buckets(late),
        "groups": {"early": early_group.group_name, "late": late_group.group_name}})


if __name__ == "__main__":
    main()
