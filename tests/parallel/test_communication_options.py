"""What DDP's replicas send, as the config asks it, and the combinations refused before anything is built;
a local-SGD or PowerSGD checkpoint read by another number of processes. In this process, no process group."""
import logging

import numpy as np
import pytest
import torch
from torch import nn

from basetrainer.engine.options import LoopOptions
from basetrainer.errors import ConfigError
from basetrainer.parallel import strategy_of
from basetrainer.parallel.communication import Communication
from basetrainer.parallel.local_sgd import LocalSGD
from basetrainer.parallel.powersgd import PowerSGD
from basetrainer.tasks.classification.config import parse_config
from support.toy import ToyTrainer, toy_cfg

CPU = torch.device("cpu")


def communication(**cfg):
    return LoopOptions.from_config(cfg, CPU).communication


def refusal(**cfg):
    with pytest.raises(ConfigError) as refused:
        communication(**cfg)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_without_the_keys_ddp_sends_full_gradients():
    assert communication() == Communication() and not Communication().enabled


def test_local_sgd_post_local_sgd_and_powersgd_are_read_with_their_defaults():
    assert communication(local_sgd={"period": 16}) == Communication(local_sgd_period=16)
    assert communication(local_sgd={"period": 8, "warmup_steps": 100}).local_sgd_warmup_steps == 100
    assert communication(grad_compression="PowerSGD", powersgd={"rank": 4}) == Communication(
        grad_compression="powersgd", powersgd_rank=4, powersgd_start_step=10)
    assert not communication(local_sgd={"period": 0}).enabled and not communication(local_sgd=None).enabled


@pytest.mark.parametrize("cfg, named", [
    ({"grad_compression": "int8"}, "'grad_compression' expects one of none, bf16, fp16, powersgd, got str 'int8'"),
    ({"local_sgd": {"peroid": 4}}, "'local_sgd' expects a mapping of period (an integer >= 0), warmup_steps"),
    ({"local_sgd": {"peroid": 4}}, "peroid is no field of it"),
    ({"local_sgd": 16}, "'local_sgd' expects a mapping of period (an integer >= 0), warmup_steps (an integer >= 0), "
                        "mode (average or diloco), "),
    ({"local_sgd": 16}, "fragment_sync_delay (an integer >= 0), got int 16"),
    ({"local_sgd": {"mode": "swa"}}, "mode is str 'swa'"),
    ({"local_sgd": {"period": -1}}, "period is int -1"),
    ({"local_sgd": {"period": 4, "warmup_steps": 1.5}}, "warmup_steps is float 1.5"),
    ({"grad_compression": "powersgd", "powersgd": {"rank": 0}}, "mapping of rank (an integer >= 1)"),
    ({"grad_compression": "powersgd", "powersgd": {"start_step": 1}}, "start_step (an integer >= 2)"),
])
def test_a_wrong_key_or_value_is_refused_in_one_line_naming_it(cfg, named):
    assert named in refusal(**cfg)


def test_local_sgd_with_gradient_compression_is_refused():
    assert "are alternatives" in refusal(local_sgd={"period": 4}, grad_compression="bf16")


@pytest.mark.parametrize("cfg", [{"local_sgd": {"period": 4}}, {"grad_compression": "powersgd"}])
def test_local_sgd_or_compression_under_fsdp_is_refused(cfg):
    assert "apply to strategy ddp" in refusal(strategy="fsdp", **cfg)


def test_local_sgd_with_fp16_autocast_is_refused_as_the_replicas_would_skip_steps_apart():
    assert "amp: fp16" in refusal(local_sgd={"period": 4}, amp="fp16")
    assert communication(local_sgd={"period": 4}, amp="bf16").local_sgd_period == 4


@pytest.mark.parametrize("setting", [{"local_sgd": {"period": 4}}, {"grad_compression": "bf16"}])
def test_one_process_refuses_local_sgd_and_compression_before_the_model_is_built(setting):
    with pytest.raises(ConfigError, match="needs several processes under strategy ddp and this run has one"):
        ToyTrainer(toy_cfg(**setting))


def test_a_model_build_model_wrapped_in_dataparallel_refuses_local_sgd():
    with pytest.raises(ConfigError, match="applies to DistributedDataParallel and build_model returned a DataParallel"):
        strategy_of(nn.DataParallel(nn.Linear(2, 2)), CPU, communication=Communication(local_sgd_period=4))


# ---------------------------------------------------------------------- another number of processes
def linear_with_optimizer():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_a_local_sgd_checkpoint_of_2_replicas_resumed_by_1_process_goes_on_from_the_average_with_a_warning(caplog):
    model, optimizer = linear_with_optimizer()
    local = LocalSGD(period=4)
    local.named_parameters = list(model.named_parameters())
    local.attach_optimizer(optimizer)
    average = {name: p.detach().clone() for name, p in model.named_parameters()}  # the checkpoint's model, loaded
    apart = [{"parameters": {name: value + rank for name, value in average.items()}, "optimizer": {}} for rank in (1, 2)]
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        local.load_state_dict({"local_sgd": {"steps": 9, "hook_iter": 0, "replicas": apart}}, "last.pth")
    assert "last.pth was written by 2 process(es) under local SGD and this run has 1: every replica starts from " \
           "their average" in caplog.text
    assert all(torch.equal(p, average[name]) for name, p in model.named_parameters())
    assert local.steps == 9 and not local.diverged


def test_a_powersgd_checkpoint_of_2_processes_resumed_by_1_keeps_the_warm_start_and_drops_the_error_feedback(caplog):
    powersgd = PowerSGD(rank=1, start_step=2)
    key, keys, position, has_gauss, gauss = np.random.RandomState(0).get_state()
    saved = {"iter": 30, "rng": [key, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss],
             "numel": [10, 2], "q": {"weight": torch.ones(3)}, "errors": [{"weight": torch.ones(6)}] * 2}
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        powersgd.load_state_dict({"powersgd": saved}, "last.pth")
    assert "its error feedback starts from zero" in caplog.text
    assert powersgd.state.iter == 30 and powersgd.pending["error"] == {} and list(powersgd.pending["q"]) == ["weight"]


def test_the_classification_task_refuses_an_ema_under_local_sgd():
    with pytest.raises(ConfigError, match="ema_decay 0.999 .*, local_sgd .*: the EMA would average one process's own weights"):
        parse_config(["ema_decay=0.999", "local_sgd.period=16"])
