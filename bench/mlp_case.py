"""The case the engine-overhead benches share: an MLP 64-128-10 and its random batches already in memory.

``bench/overhead.py`` trains it (by hand and through EngineTrainer), ``bench/metric_overhead.py`` records the metrics
of its logits and ``bench/instructions.py`` counts the instructions of ``overhead.py``'s variants: all three import
it from here, so that neither script imports the other for it.
"""
import torch
import torch.nn as nn

STEPS_PER_EPOCH, EPOCHS, BATCH = 500, 4, 64


def make_batches(args, steps_per_epoch=STEPS_PER_EPOCH):
    """``steps_per_epoch`` batches of ``args.batch`` rows of ``args.features`` normal values and 10 classes, on
    ``args.device``, the same on every call."""
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(args.batch, args.features, generator=g).to(args.device),
             torch.randint(0, 10, (args.batch,), generator=g).to(args.device)) for _ in range(steps_per_epoch)]


def make_model(args):
    """The MLP ``args.features``-``args.width``-10 on ``args.device``, with the same initial weights on every call."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(args.features, args.width), nn.ReLU(), nn.Linear(args.width, 10)).to(args.device)
