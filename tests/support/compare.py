"""Comparing what runs saved."""
import torch


def load_result(path):
    return torch.load(path, weights_only=False)


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
