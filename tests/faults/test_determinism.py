"""Deterministic algorithms and the fault options."""
import os

import pytest
import torch

from basetrainer.engine.options import LoopOptions
from basetrainer.errors import ConfigError
from support.toy import ToyTrainer, toy_cfg


# ---------------------------------------------------------------------- deterministic algorithms
@pytest.fixture
def restore_determinism():
    """``deterministic: true`` sets process-wide flags: put them back for the next test."""
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False


def test_deterministic_true_asks_torch_cudnn_and_cublas_for_deterministic_kernels(monkeypatch, restore_determinism):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    ToyTrainer(toy_cfg(deterministic=True))
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_two_deterministic_runs_end_with_bitwise_equal_weights(restore_determinism):
    weights = []
    for _ in range(2):
        trainer = ToyTrainer(toy_cfg(deterministic=True))
        trainer.run()
        weights.append(trainer.export_weights())
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])


# ---------------------------------------------------------------------- options
@pytest.mark.parametrize("key, value, expected", [
    ("watchdog_timeout", -1, r"config key 'watchdog_timeout' expects a number in \[0, 1e9\], got int -1"),
    ("watchdog_factor", "fast", r"config key 'watchdog_factor' expects a number in \[0, 1e9\], got str 'fast'"),
    ("deterministic", "yes", "config key 'deterministic' expects one of false, true, warn, got str 'yes'"),
])
def test_fault_options_are_checked(key, value, expected):
    with pytest.raises(ConfigError, match=expected):
        LoopOptions.from_config({key: value}, torch.device("cpu"))
