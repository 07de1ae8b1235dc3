import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from basetrainer.criterion import get_criterion
from basetrainer.criterion.criterion import get_criterion as get_criterion_old_path
from basetrainer.criterion.losses import FocalLoss, OneHotBCEWithLogitsLoss
from basetrainer.errors import ConfigError

NUM_CLASSES = 3


def batch(seed=0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, NUM_CLASSES, generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (6,), generator=generator)
    return logits, labels


def test_old_import_path_is_the_same_function():
    assert get_criterion_old_path is get_criterion


@pytest.mark.parametrize("name", [
    "CrossEntropyLoss", "CELoss", "LabelSmoothing", "FocalLoss", "BCEWithLogitsLoss",
])
def test_every_classification_loss_trains_one_step_on_int_labels(name):
    torch.manual_seed(0)
    model = nn.Linear(4, NUM_CLASSES)
    criterion = get_criterion(name, NUM_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    inputs, labels = torch.randn(8, 4), torch.randint(0, NUM_CLASSES, (8,))
    before = criterion(model(inputs), labels)
    before.backward()
    optimizer.step()
    assert before.ndim == 0 and criterion(model(inputs), labels) < before


@pytest.mark.parametrize("name, expected", [
    ("L1Loss", nn.L1Loss), ("MSELoss", nn.MSELoss), ("mse", nn.MSELoss), ("SmoothL1Loss", nn.SmoothL1Loss),
])
def test_every_regression_loss_trains_one_step(name, expected):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    criterion = get_criterion(name)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(8, 4), torch.randn(8, 2)
    before = criterion(model(inputs), targets)
    before.backward()
    optimizer.step()
    assert type(criterion) is expected and criterion(model(inputs), targets) < before


def test_names_are_case_insensitive():
    assert type(get_criterion("celoss")) is type(get_criterion("CROSS_ENTROPY_LOSS")) is nn.CrossEntropyLoss


def test_unknown_name_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError, match="CrossEntropyLoss .CELoss., LabelSmoothing, FocalLoss"):
        get_criterion("HingeLoss")


def test_cross_entropy_takes_label_smoothing():
    logits, labels = batch()
    loss = get_criterion("CELoss", NUM_CLASSES, label_smoothing=0.2)(logits, labels)
    assert loss == pytest.approx(F.cross_entropy(logits, labels, label_smoothing=0.2).item())


def test_label_smoothing_is_cross_entropy_smoothed_by_0_1():
    logits, labels = batch()
    loss = get_criterion("LabelSmoothing", NUM_CLASSES)(logits, labels)
    assert loss == pytest.approx(F.cross_entropy(logits, labels, label_smoothing=0.1).item())


def test_class_weight_weighs_cross_entropy_and_accepts_lists_and_arrays():
    logits, labels = batch()
    expected = F.cross_entropy(logits, labels, weight=torch.tensor([1.0, 2.0, 0.5]))
    for class_weight in ([1.0, 2.0, 0.5], np.array([1.0, 2.0, 0.5])):
        assert get_criterion("CELoss", NUM_CLASSES, class_weight)(logits, labels) == pytest.approx(expected.item())


def test_class_weight_of_the_wrong_length_is_a_config_error():
    with pytest.raises(ConfigError, match="one per class"):
        get_criterion("CELoss", NUM_CLASSES, class_weight=[1.0, 2.0])


def test_class_weight_is_moved_to_the_device():
    criterion = get_criterion("FocalLoss", NUM_CLASSES, class_weight=[1.0, 2.0, 0.5], device="meta")
    assert criterion.weight.device.type == "meta"


def test_regression_losses_warn_that_class_weight_does_not_apply(caplog):
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        get_criterion("L1Loss", NUM_CLASSES, class_weight=[1.0, 2.0, 0.5])
    assert "class_weight is ignored by L1Loss" in caplog.text


def test_focal_loss_with_gamma_0_is_weighted_cross_entropy():
    logits, labels = batch()
    weight = torch.tensor([1.0, 2.0, 0.5])
    focal = FocalLoss(gamma=0.0, weight=weight)(logits, labels)
    assert focal == pytest.approx(F.cross_entropy(logits, labels, weight=weight).item())


def test_focal_loss_scales_each_sample_by_one_minus_p_to_gamma():
    logits, labels = batch()
    p_target = logits.softmax(1)[torch.arange(len(labels)), labels]
    expected = (-(1 - p_target) ** 2 * p_target.log()).mean()
    assert get_criterion("FocalLoss", NUM_CLASSES)(logits, labels) == pytest.approx(expected.item())


def test_focal_loss_works_per_pixel():
    logits, labels = torch.randn(2, NUM_CLASSES, 4, 4), torch.randint(0, NUM_CLASSES, (2, 4, 4))
    focal = FocalLoss(gamma=0.0)(logits, labels)
    assert focal == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-6)


def test_bce_with_int_labels_equals_bce_with_one_hot_targets():
    logits, labels = batch()
    expected = F.binary_cross_entropy_with_logits(logits, F.one_hot(labels, NUM_CLASSES).float())
    assert get_criterion("BCEWithLogitsLoss", NUM_CLASSES)(logits, labels) == pytest.approx(expected.item())


def test_bce_uses_float_targets_as_given():
    logits, targets = torch.randn(4, NUM_CLASSES), torch.rand(4, NUM_CLASSES)
    expected = F.binary_cross_entropy_with_logits(logits, targets)
    assert OneHotBCEWithLogitsLoss()(logits, targets) == pytest.approx(expected.item())


def test_bce_class_weight_weighs_each_class_column():
    logits, labels = batch()
    weight = torch.tensor([1.0, 2.0, 0.5])
    one_hot = F.one_hot(labels, NUM_CLASSES).float()
    expected = F.binary_cross_entropy_with_logits(logits, one_hot, weight=weight)
    assert get_criterion("BCEWithLogitsLoss", NUM_CLASSES, weight)(logits, labels) == pytest.approx(expected.item())


def test_a_dict_of_losses_returns_every_weighted_term():
    logits, labels = batch()
    criterion = get_criterion({"CELoss": 1.0, "FocalLoss": 0.5}, NUM_CLASSES)
    losses = criterion(logits, labels)
    assert list(losses) == ["CELoss", "FocalLoss"]
    assert losses["CELoss"] == pytest.approx(F.cross_entropy(logits, labels).item())
    assert losses["FocalLoss"] == pytest.approx(0.5 * FocalLoss()(logits, labels).item())


def test_a_dict_of_losses_trains_on_the_sum_of_its_terms():
    torch.manual_seed(0)
    model = nn.Linear(4, NUM_CLASSES)
    criterion = get_criterion({"CELoss": 1.0, "LabelSmoothing": 0.3})
    inputs, labels = torch.randn(8, 4), torch.randint(0, NUM_CLASSES, (8,))
    sum(criterion(model(inputs), labels).values()).backward()
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0


def test_a_list_of_names_weighs_each_loss_1():
    logits, labels = batch()
    losses = get_criterion(["CELoss", "FocalLoss"], NUM_CLASSES)(logits, labels)
    assert losses["FocalLoss"] == pytest.approx(FocalLoss()(logits, labels).item())


def test_a_non_numeric_loss_weight_is_a_config_error():
    with pytest.raises(ConfigError, match="must be a number"):
        get_criterion({"CELoss": "high"})
