"""``basetrainer.utils.torch_tools.load_state_dict`` reads weights however they were saved."""
import torch
from torch import nn

from basetrainer.utils.torch_tools import load_state_dict


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))


def assert_same(loaded, expected):
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)


def test_reads_a_bare_state_dict(tmp_path):
    model = small_model()
    torch.save(model.state_dict(), tmp_path / "bare.pth")
    assert_same(load_state_dict(str(tmp_path / "bare.pth")), model.state_dict())


def test_strips_the_module_prefix_of_a_data_parallel_state_dict(tmp_path):
    model = small_model()
    torch.save(nn.DataParallel(small_model()).state_dict(), tmp_path / "wrapped.pth")  # on a GPU, moved to cuda:0
    assert all(k.startswith("module.") for k in torch.load(tmp_path / "wrapped.pth", weights_only=True))
    weights = load_state_dict(str(tmp_path / "wrapped.pth"))
    assert_same(weights, model.state_dict())
    small_model().load_state_dict(weights)  # loads into an unwrapped model as it is


def test_reads_the_model_of_a_checkpoint_dict(tmp_path):
    model = small_model()
    torch.save({"model": model.state_dict(), "epoch": 3}, tmp_path / "checkpoint.pth")
    assert_same(load_state_dict(str(tmp_path / "checkpoint.pth")), model.state_dict())
