"""Detectors by name: losses by name in train mode, predictions in eval mode, weights from a file."""
import pytest
import torch

from basetrainer.errors import ConfigError
from basetrainer.tasks.detection.models import get_detector, loss_names, without_background

NORMALISE = {"input_size": [64, 64], "rgb_mean": [0.5] * 3, "rgb_std": [0.5] * 3}


def targets():
    return [{"boxes": torch.tensor([[4.0, 6.0, 30.0, 40.0]]), "labels": torch.tensor([3])},
            {"boxes": torch.tensor([[10.0, 10.0, 20.0, 28.0], [40.0, 2.0, 60.0, 30.0]]),
             "labels": torch.tensor([1, 10])}]


@pytest.mark.parametrize("name", ["fcos_tiny", "ssdlite320_mobilenet_v3_large"])
def test_a_detector_returns_its_named_losses_in_train_mode_and_predictions_in_eval_mode(name):
    torch.manual_seed(0)
    model = get_detector(name, 10, **NORMALISE)
    images = [torch.rand(3, 64, 64), torch.rand(3, 64, 64)]
    losses = model.train()(images, targets())
    assert sorted(losses) == sorted(loss_names(name))
    with torch.no_grad():
        predictions = model.eval()(images)
    assert len(predictions) == 2 and set(predictions[0]) == {"boxes", "scores", "labels"}
    assert all(int(label) in range(0, 11) for p in predictions for label in p["labels"])


def test_boxes_of_the_background_label_are_left_out_of_predictions():
    predictions = [{"boxes": torch.ones(3, 4), "scores": torch.tensor([0.75, 0.5, 0.25]),
                    "labels": torch.tensor([0, 4, 0])}]
    (kept,) = without_background(predictions)
    assert kept["labels"].tolist() == [4] and kept["scores"].tolist() == [0.5] and kept["boxes"].shape == (1, 4)


def test_an_unknown_detector_is_one_line_suggesting_the_closest():
    with pytest.raises(ConfigError, match="'fcos_tny' is not a detection model; did you mean 'fcos_tiny'"):
        get_detector("fcos_tny", 10, **NORMALISE)


def test_pretrained_weights_for_other_classes_load_all_but_the_class_head(tmp_path):
    torch.manual_seed(1)
    source = get_detector("fcos_tiny", 5, **NORMALISE)
    torch.save(source.state_dict(), tmp_path / "five.pth")
    torch.manual_seed(2)
    model = get_detector("fcos_tiny", 10, pretrained=str(tmp_path / "five.pth"), **NORMALISE)
    own, saved = model.state_dict(), source.state_dict()
    fresh = sorted(key for key in own if not torch.equal(own[key], saved[key]))
    assert fresh == ["head.classification_head.cls_logits.bias", "head.classification_head.cls_logits.weight"]


def test_a_missing_pretrained_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        get_detector("fcos_tiny", 10, pretrained=str(tmp_path / "none.pth"), **NORMALISE)
