"""Two gloo processes prune resnet18 together; each writes what it ended up with.

Run by tests/test_pruning.py: ``python tests/prune_worker.py PORT OUT_DIR``.
"""
import gc
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 2


def worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE)
    try:
        prune_and_record(rank, out_dir)
        # Before the group is destroyed: the model and its DDP wrapper (which holds the group) are
        # released, as in launch() once the user's main returns, and both ranks are done communicating.
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def prune_and_record(rank: int, out_dir: str) -> None:
    import torchvision

    from basetrainer.pruning import model_pruning

    torch.set_num_threads(1)
    torch.manual_seed(rank)  # different initial weights on each rank: rank 0's must win
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    model = model_pruning(model, [1, 3, 32, 32], 0.5)
    # Taken before DDP wraps the model: DDP's own broadcast would hide unshared weights.
    checksum = sum(float(t.double().sum()) for t in model.state_dict().values())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp(torch.randn(2, 3, 32, 32)).sum().backward()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"spec": model.pruning_spec, "checksum": checksum}, f)


if __name__ == "__main__":
    mp.spawn(worker, args=(int(sys.argv[1]), sys.argv[2]), nprocs=WORLD_SIZE)
