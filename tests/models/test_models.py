"""Models build by name, train one step, and load pretrained weights without any network."""
import logging
import os
import urllib.error
import urllib.request

import pytest
import torch

from basetrainer.errors import CheckpointError, ConfigError
from basetrainer.models import get_models
from basetrainer.models.build_models import get_models as get_models_old_path
from support.processes import run_python

NUM_CLASSES = 3


def trains_one_step(model, size=32):
    torch.manual_seed(0)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    outputs = model(torch.randn(2, 3, size, size))
    torch.nn.functional.cross_entropy(outputs, torch.tensor([0, 2])).backward()
    optimizer.step()
    return outputs.shape == (2, NUM_CLASSES)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Model tests share a small machine with other test runs; more threads than free
    # cores makes torch's CPU kernels many times slower, not faster.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """An empty torch.hub cache and a network that refuses every request."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))

    def refuse(url, *args, timeout=None, **kwargs):
        refused.append(timeout)
        raise urllib.error.URLError("network is unreachable")

    refused = []
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return tmp_path / "torch" / "hub" / "checkpoints", refused


def torchvision_file_name(name):
    from torchvision import models as tv

    return os.path.basename(tv.get_model_weights(name).DEFAULT.url)


def test_old_import_path_is_the_same_function():
    assert get_models_old_path is get_models


@pytest.mark.slow  # a fresh interpreter: the only place where torchvision is not imported yet
def test_importing_basetrainer_models_does_not_import_torchvision():
    code = "import sys, basetrainer.models; sys.exit('torchvision' in sys.modules)"
    assert run_python(["-c", code], fresh=True).returncode == 0


@pytest.mark.parametrize("net_type", [
    "resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf",
    "shufflenet_v2_x0_5", "squeezenet1_1", "convnext_tiny",
])
def test_a_sample_of_models_builds_with_a_new_head_and_trains_one_step(net_type):
    assert trains_one_step(get_models(net_type, [32, 32], NUM_CLASSES, pretrained=False))


def test_vit_takes_its_image_size_from_input_size():
    model = get_models("vit_b_32", [32, 32], NUM_CLASSES, pretrained=False)
    assert model.image_size == 32 and trains_one_step(model, size=32)


def test_vit_with_a_non_square_input_size_is_a_config_error():
    with pytest.raises(ConfigError, match="square"):
        get_models("vit_b_16", [224, 112], NUM_CLASSES, pretrained=False)


def test_names_are_case_insensitive_and_accept_dashes():
    assert type(get_models("MobileNet-V2", 32, NUM_CLASSES, pretrained=False)).__name__ == "MobileNetV2"


def test_family_names_give_their_usual_member():
    model = get_models("mobilenet_v3", 32, NUM_CLASSES, pretrained=False)
    assert type(model).__name__ == "MobileNetV3" and model.classifier[0].in_features == 960  # the large one


def test_unknown_net_type_is_a_config_error_suggesting_close_names():
    with pytest.raises(ConfigError, match="did you mean resnet18"):
        get_models("resnet19", 32, NUM_CLASSES, pretrained=False)


def test_width_mult_narrows_mobilenets():
    narrow = get_models("mobilenet_v3_small", 32, NUM_CLASSES, width_mult=0.5, pretrained=False)
    full = get_models("mobilenet_v3_small", 32, NUM_CLASSES, pretrained=False)
    assert narrow.features[0][0].out_channels < full.features[0][0].out_channels
    assert trains_one_step(narrow)


def test_width_mult_on_a_model_without_it_is_a_config_error():
    with pytest.raises(ConfigError, match="no width_mult"):
        get_models("resnet18", 32, NUM_CLASSES, width_mult=0.5, pretrained=False)


def test_invalid_num_classes_is_a_config_error():
    with pytest.raises(ConfigError, match="num_classes"):
        get_models("resnet18", 32, 0, pretrained=False)


def test_old_is_train_argument_is_accepted():
    assert trains_one_step(get_models("mobilenet_v2", 32, NUM_CLASSES, is_train=True, pretrained=False))


def test_pretrained_offline_is_a_one_line_config_error_naming_the_file_and_folder(offline):
    cache, _ = offline
    with pytest.raises(ConfigError) as error:
        get_models("mobilenet_v3_small", 32, NUM_CLASSES, pretrained=True)
    message = str(error.value)
    assert torchvision_file_name("mobilenet_v3_small") in message and str(cache) in message
    assert "pretrained=False" in message and "\n" not in message


def test_pretrained_download_has_a_short_timeout_instead_of_hanging(offline):
    _, refused = offline
    with pytest.raises(ConfigError):
        get_models("mobilenet_v3_small", 32, NUM_CLASSES, pretrained=True)
    assert len(refused) == 1 and refused[0] is not None and refused[0] <= 30


def test_pretrained_weights_in_the_hub_cache_load_without_network(offline, caplog):
    cache, refused = offline
    torch.manual_seed(1)
    from torchvision import models as tv

    imagenet_model = tv.mobilenet_v3_small()
    cache.mkdir(parents=True)
    torch.save(imagenet_model.state_dict(), cache / torchvision_file_name("mobilenet_v3_small"))

    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        model = get_models("mobilenet_v3_small", 32, NUM_CLASSES, pretrained=True)
    assert torch.equal(model.features[0][0].weight, imagenet_model.features[0][0].weight)
    assert model.classifier[3].out_features == NUM_CLASSES
    assert "classifier.3.weight" in caplog.text  # the 1000-class head was skipped, and said so
    assert refused == []


def test_a_local_weights_file_with_module_prefixes_loads(tmp_path):
    source = get_models("mobilenet_v2", 32, NUM_CLASSES, pretrained=False)
    path = tmp_path / "weights.pth"
    torch.save({"module." + k: v for k, v in source.state_dict().items()}, path)
    model = get_models("mobilenet_v2", 32, NUM_CLASSES, pretrained=str(path))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values()))


def test_a_missing_local_weights_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        get_models("mobilenet_v2", 32, NUM_CLASSES, pretrained=str(tmp_path / "absent.pth"))


def test_weights_of_another_model_are_a_checkpoint_error(tmp_path):
    path = tmp_path / "shufflenet.pth"
    torch.save(get_models("shufflenet_v2_x0_5", 32, NUM_CLASSES, pretrained=False).state_dict(), path)
    with pytest.raises(CheckpointError, match="mobilenet_v2"):
        get_models("mobilenet_v2", 32, NUM_CLASSES, pretrained=str(path))


def test_pretrained_torchvision_weights_need_width_mult_1(offline):
    with pytest.raises(ConfigError, match="width_mult=1.0"):
        get_models("mobilenet_v2", 32, NUM_CLASSES, width_mult=0.5, pretrained=True)
