import pytest
import torch
from torch import nn

from basetrainer.errors import ConfigError
from basetrainer.optimizer import get_optimizer
from basetrainer.optimizer.build_optimizer import get_optimizer as get_optimizer_old_path


def tiny_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))


def one_step(model, optimizer):
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(torch.randn(2, 3, 8, 8)).square().mean()
    loss.backward()
    optimizer.step()
    return [not torch.equal(b, p) for b, p in zip(before, model.parameters())]


def test_old_import_path_is_the_same_function():
    assert get_optimizer_old_path is get_optimizer


@pytest.mark.parametrize("name, expected", [
    ("SGD", torch.optim.SGD), ("sgd", torch.optim.SGD), ("Adam", torch.optim.Adam),
    ("adamw", torch.optim.AdamW), ("RMSprop", torch.optim.RMSprop),
])
def test_every_named_optimizer_builds_and_updates_all_parameters(name, expected):
    model = tiny_model()
    optimizer = get_optimizer(model, optim_type=name, lr=0.01, momentum=0.9, weight_decay=1e-4)
    assert type(optimizer) is expected
    assert all(one_step(model, optimizer))


def test_unknown_name_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError, match="SGD, Adam, AdamW, RMSprop"):
        get_optimizer(tiny_model(), optim_type="Adagrad")


def test_sgd_gets_momentum_nesterov_and_weight_decay():
    optimizer = get_optimizer(tiny_model(), "SGD", lr=0.1, momentum=0.8, weight_decay=5e-4, nesterov=True)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["momentum"], group["nesterov"], group["weight_decay"]) == (0.1, 0.8, True, 5e-4)


def test_nesterov_without_momentum_is_a_config_error():
    with pytest.raises(ConfigError, match="momentum"):
        get_optimizer(tiny_model(), "SGD", momentum=0.0, nesterov=True)


def test_adam_and_adamw_get_betas_and_eps():
    for name in ("Adam", "AdamW"):
        group = get_optimizer(tiny_model(), name, betas=(0.8, 0.99), eps=1e-6).param_groups[0]
        assert group["betas"] == (0.8, 0.99) and group["eps"] == 1e-6


def test_rmsprop_gets_momentum_and_eps():
    group = get_optimizer(tiny_model(), "RMSprop", momentum=0.5, eps=1e-5).param_groups[0]
    assert group["momentum"] == 0.5 and group["eps"] == 1e-5


def test_bias_and_norm_weights_can_be_excluded_from_weight_decay():
    model = tiny_model()
    optimizer = get_optimizer(model, "SGD", weight_decay=1e-4, exclude_bias_norm_from_decay=True)
    decay_of = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    conv, bn, _, linear = model
    assert decay_of[id(conv.weight)] == 1e-4 and decay_of[id(linear.weight)] == 1e-4
    assert decay_of[id(conv.bias)] == decay_of[id(linear.bias)] == 0.0
    assert decay_of[id(bn.weight)] == decay_of[id(bn.bias)] == 0.0
    assert len(decay_of) == len(list(model.parameters()))


def test_old_split_params_flag_also_excludes_bias_from_decay():
    model = tiny_model()
    optimizer = get_optimizer(model, "SGD", weight_decay=1e-4, split_params=True)
    decay_of = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    assert decay_of[id(model[0].bias)] == 0.0


def test_weight_decay_applies_to_every_parameter_by_default():
    optimizer = get_optimizer(tiny_model(), "SGD", weight_decay=1e-4)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [1e-4]


def test_explicit_param_groups_keep_their_own_lr():
    model = tiny_model()
    groups = [{"params": model[0].parameters(), "lr": 0.001}, {"params": model[3].parameters()}]
    optimizer = get_optimizer(groups, "AdamW", lr=0.01)
    assert [g["lr"] for g in optimizer.param_groups] == [0.001, 0.01]


def test_explicit_param_groups_are_split_for_decay_keeping_their_lr():
    model = tiny_model()
    groups = [{"params": model[0].parameters(), "lr": 0.001}, {"params": model[3].parameters()}]
    optimizer = get_optimizer(groups, "SGD", lr=0.01, weight_decay=1e-4, exclude_bias_norm_from_decay=True)
    summary = [(g["lr"], g["weight_decay"], len(g["params"])) for g in optimizer.param_groups]
    assert summary == [(0.001, 1e-4, 1), (0.001, 0.0, 1), (0.01, 1e-4, 1), (0.01, 0.0, 1)]


def test_a_plain_list_of_tensors_is_accepted():
    weight = nn.Parameter(torch.ones(3))
    optimizer = get_optimizer([weight], "SGD", lr=0.5, momentum=0.0)
    weight.sum().backward()
    optimizer.step()
    assert torch.allclose(weight, torch.full((3,), 0.5))


def test_extra_parameters_are_trained_with_the_model():
    model, extra = tiny_model(), nn.Parameter(torch.zeros(2))
    optimizer = get_optimizer(model, "SGD", parameters=[extra])
    assert any(p is extra for g in optimizer.param_groups for p in g["params"])


def test_no_parameters_is_a_config_error():
    with pytest.raises(ConfigError, match="no parameters"):
        get_optimizer(nn.ReLU(), "SGD")
