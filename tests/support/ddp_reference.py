"""What DDP over ``ranks`` processes of the tiny job (``--plain``) must train to, computed in one process."""
import torch
import torch.nn as nn

from basetrainer.data import TrainSampler

from .workers.tiny import NoisyBlobs, parse


def one_process_weights(work_dir, ranks, epochs, accumulate=1, train_size=96):
    """The tiny job's weights after ``epochs``, from one process stepping on the gradient averaged over every
    rank's batch (and, accumulating, over each rank's ``accumulate`` batches), as DDP does."""
    cfg = parse(["--work-dir", str(work_dir), "--epochs", str(epochs), "--plain", "--train-size", str(train_size)])
    dataset = NoisyBlobs(cfg.train_size, 0, augment=False)
    torch.manual_seed(cfg.seed)  # the trainer seeds before build_model: the same initial weights
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.0), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    samplers = [TrainSampler(dataset, num_replicas=ranks, rank=r, seed=cfg.seed) for r in range(ranks)]
    steps = len(samplers[0]) // cfg.batch_size
    for epoch in range(cfg.num_epochs):
        for s in samplers:
            s.set_epoch(epoch)
        orders = [list(s) for s in samplers]
        for first in range(0, steps, accumulate):
            # DDP averages the ranks' gradients, each of a mean over the rank's batch;
            # BatchNorm normalises each rank's batch on its own, so batches run separately.
            loss = 0
            for b in range(first, first + accumulate):
                window = slice(b * cfg.batch_size, (b + 1) * cfg.batch_size)
                loss = loss + sum(nn.functional.cross_entropy(model(dataset.x[o[window]]), dataset.y[o[window]])
                                  for o in orders) / (ranks * accumulate)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


def assert_equal_to_one_process(ddp_weights, reference):
    for k, v in reference.items():
        if "running" not in k and "num_batches" not in k:  # DDP keeps rank 0's BatchNorm statistics
            torch.testing.assert_close(ddp_weights[k], v, atol=1e-5, rtol=1e-4, msg=f"{k} differs")
