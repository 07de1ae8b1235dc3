"""Specification of basetrainer.pruning: channels really go, the model keeps working, ranks agree."""
import copy
import json
import logging
import os
import socket
import sys
import types

import pytest
import torch
from torch import nn

import support
from basetrainer.errors import CheckpointError, ConfigError
from basetrainer.pruning import (
    apply_architecture_spec,
    architecture_spec,
    bn_l1_penalty,
    model_pruning,
    profile_model,
)
from basetrainer.pruning.report import example_input_shape
from support.processes import run_python

REPO = str(support.REPO)
INPUT_SIZE = [1, 3, 64, 64]
NUM_CLASSES = 10


def build(name: str, seed: int = 0) -> nn.Module:
    import torchvision

    torch.manual_seed(seed)
    return getattr(torchvision.models, name)(weights=None, num_classes=NUM_CLASSES)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class TwoConvNet(nn.Module):
    """Small enough to know which channels each mode must keep."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, NUM_CLASSES)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean((2, 3)))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The test machine's cores are shared: one thread is far faster than two competing."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pruned(one_thread):
    """resnet18 and mobilenet_v2 pruned once at sparsity 0.5, with their unpruned sizes."""
    models = {}
    for name in ("resnet18", "mobilenet_v2"):
        model = build(name)
        params_before = count_params(model)
        models[name] = (model_pruning(model, INPUT_SIZE, 0.5), params_before)
    return models


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_half_sparsity_removes_at_least_40_percent_of_parameters(pruned, name):
    model, params_before = pruned[name]
    assert count_params(model) <= 0.6 * params_before


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_pruned_model_trains_one_step(pruned, name):
    model = copy.deepcopy(pruned[name][0]).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]

    loss = nn.functional.cross_entropy(model(torch.randn(2, 3, 64, 64)), torch.tensor([0, 1]))
    loss.backward()
    optimizer.step()

    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


@pytest.mark.parametrize("name, classifier", [("resnet18", "fc"), ("mobilenet_v2", "classifier.1")])
def test_final_classifier_keeps_its_output_width(pruned, name, classifier):
    model = pruned[name][0].eval()
    layer = dict(model.named_modules())[classifier]

    assert layer.out_features == NUM_CLASSES
    assert layer.weight.shape[0] == NUM_CLASSES
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, NUM_CLASSES)


@pytest.mark.parametrize("mode", ["L2", "FPGM"])
def test_every_structured_mode_removes_channels(mode):
    model = build("resnet18")
    params_before = count_params(model)

    model = model_pruning(model, INPUT_SIZE, 0.5, prune_mod=mode)

    assert model.layer1[0].conv1.out_channels == 32
    assert count_params(model) <= 0.6 * params_before


def test_slim_keeps_the_channels_with_the_largest_bn_scale():
    model = TwoConvNet()
    scales = torch.tensor([0.1, 0.9, 0.2, 0.8, 0.3, 0.7, 0.4, 0.6])
    with torch.no_grad():
        model.bn1.weight.copy_(scales)
        # Weight norms point the other way, so only a ranking by BN scale keeps the large scales.
        model.conv1.weight.copy_(torch.ones_like(model.conv1.weight) / scales.view(-1, 1, 1, 1))

    model = model_pruning(model, INPUT_SIZE, 0.5, prune_mod="Slim")

    assert sorted(model.bn1.weight.tolist()) == pytest.approx([0.6, 0.7, 0.8, 0.9])


def test_bn_l1_penalty_is_strength_times_the_bn_scales_l1_norm_and_pushes_them_to_zero():
    model = TwoConvNet()
    with torch.no_grad():
        model.bn1.weight.uniform_(-1, 1)

    penalty = bn_l1_penalty(model, 1e-3)
    penalty.backward()

    expected = 1e-3 * (model.bn1.weight.abs().sum() + model.bn2.weight.abs().sum())
    assert penalty.item() == pytest.approx(expected.item())
    assert torch.allclose(model.bn1.weight.grad, 1e-3 * model.bn1.weight.sign())


def test_level_mode_zeroes_weights_keeps_shapes_and_warns_of_no_speedup(caplog):
    model = TwoConvNet()
    spec_before = architecture_spec(model)

    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        model = model_pruning(model, INPUT_SIZE, 0.5, prune_mod="Level")

    assert architecture_spec(model) == spec_before
    assert (model.conv2.weight == 0).float().mean().item() == pytest.approx(0.5)
    assert not hasattr(model.conv2, "weight_mask")  # made permanent, no pruning hooks left
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no faster" in warnings[0].getMessage()


def test_pruning_leaves_training_mode_and_batchnorm_statistics_alone():
    model = TwoConvNet().train()

    model = model_pruning(model, INPUT_SIZE, 0.5)

    assert model.training
    assert model.bn2.num_batches_tracked.item() == 0
    assert torch.equal(model.bn2.running_var, torch.ones(4))


def test_pruned_model_carries_its_architecture_spec(pruned):
    model = pruned["resnet18"][0]
    assert model.pruning_spec == architecture_spec(model)
    assert model.pruning_spec["layer1.0.conv1"]["out_channels"] == 32


def test_architecture_spec_and_state_dict_rebuild_the_pruned_model(pruned, tmp_path):
    model = pruned["resnet18"][0].eval()
    torch.save({"model": model.state_dict(), "architecture": model.pruning_spec}, tmp_path / "last.pth")

    checkpoint = torch.load(tmp_path / "last.pth", weights_only=True)
    fresh = apply_architecture_spec(build("resnet18"), checkpoint["architecture"])
    fresh.load_state_dict(checkpoint["model"])

    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(fresh.eval()(images), model(images))


def test_architecture_spec_is_plain_json_data(pruned):
    spec = pruned["mobilenet_v2"][0].pruning_spec
    assert json.loads(json.dumps(spec)) == spec


def test_architecture_spec_of_another_network_is_refused_with_a_checkpoint_error(pruned):
    with pytest.raises(CheckpointError, match="build the same network"):
        apply_architecture_spec(build("mobilenet_v2"), pruned["resnet18"][0].pruning_spec)


def test_pruned_model_exports_with_torch_export(pruned):
    model = pruned["resnet18"][0].eval()
    images = torch.randn(1, 3, 64, 64)

    exported = torch.export.export(model, (images,))

    with torch.no_grad():
        assert torch.allclose(exported.module()(images), model(images), atol=1e-5)


def test_report_in_output_prune_gives_params_macs_latency_and_layer_widths(tmp_path):
    model = build("resnet18")
    params_before = count_params(model)

    model = model_pruning(model, INPUT_SIZE, 0.5, output_prune=str(tmp_path))

    report = json.loads((tmp_path / "prune_report.json").read_text())
    assert report == json.loads(json.dumps(model.pruning_report))
    assert (report["before"]["params"], report["after"]["params"]) == (params_before, count_params(model))
    assert report["after"]["macs"] < 0.5 * report["before"]["macs"]
    assert report["before"]["latency_ms"] > 0 and report["after"]["latency_ms"] > 0
    assert report["layers"]["layer1.0.conv1"] == {"before": 64, "after": 32}
    assert report["layers"]["fc"] == {"before": NUM_CLASSES, "after": NUM_CLASSES}


def test_profile_model_counts_parameters_and_multiply_accumulates():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 5))

    profile = profile_model(model, [1, 3, 4, 4], repeats=3)

    assert profile["params"] == 48 * 5 + 5
    assert profile["macs"] == 48 * 5
    assert profile["latency_ms"] > 0


def test_reuse_removes_the_channels_recorded_by_an_earlier_run(tmp_path):
    first_original = build("resnet18")
    first = model_pruning(copy.deepcopy(first_original), INPUT_SIZE, 0.5, output_prune=str(tmp_path))
    kept = [
        i for i, row in enumerate(first_original.conv1.weight)
        if any(torch.equal(row, kept_row) for kept_row in first.conv1.weight)
    ]
    # Other weights: ranking afresh would keep other channels than the recorded ones.
    second_original = build("resnet18", seed=1)

    second = model_pruning(copy.deepcopy(second_original), INPUT_SIZE, 0.5, reuse=True, output_prune=str(tmp_path))

    assert second.pruning_spec == first.pruning_spec
    assert torch.equal(second.conv1.weight, second_original.conv1.weight[kept])


def test_ignored_layers_keep_their_width():
    model = model_pruning(build("resnet18"), INPUT_SIZE, 0.5, ignored_layers=["fc", "layer1.0.conv1"])

    assert model.layer1[0].conv1.out_channels == 64
    assert model.layer1[0].conv2.out_channels == 32


def test_input_size_may_be_width_and_height():
    assert example_input_shape([64, 32]) == [1, 3, 32, 64]
    assert example_input_shape([1, 1, 28, 28]) == [1, 1, 28, 28]
    with pytest.raises(ConfigError, match=r"\[1, C, H, W\]"):
        example_input_shape([3, 64, 64])


def test_unknown_prune_mod_names_the_valid_modes():
    with pytest.raises(ConfigError, match="L1, L2, FPGM, Slim, Level"):
        model_pruning(TwoConvNet(), INPUT_SIZE, 0.5, prune_mod="taylor")


def test_slim_on_a_model_without_batchnorm_is_refused():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, NUM_CLASSES))

    with pytest.raises(ConfigError, match="no BatchNorm"):
        model_pruning(model, INPUT_SIZE, 0.5, prune_mod="Slim")


def test_a_wrapped_model_is_refused():
    with pytest.raises(ConfigError, match="before build_model_parallel"):
        model_pruning(nn.DataParallel(TwoConvNet()), INPUT_SIZE, 0.5)


def test_missing_torch_pruning_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_pruning", None)  # makes `import torch_pruning` fail

    with pytest.raises(ConfigError) as error:
        model_pruning(TwoConvNet(), INPUT_SIZE, 0.5)

    assert 'pip install "basetrainer[prune]"' in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_nni_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nni", None)

    with pytest.raises(ConfigError) as error:
        model_pruning(TwoConvNet(), INPUT_SIZE, 0.5, backend="nni")

    assert 'pip install "basetrainer[nni]"' in str(error.value)
    assert "\n" not in str(error.value)


def test_nni_3_is_refused_because_its_speedup_fails_on_current_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "nni", types.SimpleNamespace(__version__="3.0"))

    with pytest.raises(ConfigError, match=r"nni==2\.10\.1.*torch-pruning"):
        model_pruning(TwoConvNet(), INPUT_SIZE, 0.5, backend="nni")


@pytest.mark.slow
def test_importing_pruning_loads_neither_torchvision_nor_a_backend():
    code = (
        "import sys, basetrainer.pruning; "
        "print([m for m in ('torchvision', 'torch_pruning', 'nni') if m in sys.modules])"
    )
    result = run_python(["-c", code], cwd=REPO, check=True, fresh=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_pruning_under_two_processes_gives_every_rank_rank_0s_model(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_python([os.path.join(REPO, "tests", "support", "prune_worker.py"), port, tmp_path], cwd=REPO, check=True,
               timeout=120, env={"PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")})

    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["spec"]["layer1.0.conv1"]["out_channels"] == 32
    assert rank0["spec"] == rank1["spec"]
    assert rank0["checksum"] == rank1["checksum"]


@pytest.mark.parametrize("mode", ["L1", "Slim"])
def test_nni_backend_removes_channels_where_nni_2_is_installed(mode):
    nni = pytest.importorskip("nni")
    if int(nni.__version__.split(".")[0]) >= 3:
        pytest.skip(f"NNI {nni.__version__}: only NNI 2.x is supported")
    model = build("resnet18")
    params_before = count_params(model)

    model = model_pruning(model, INPUT_SIZE, 0.5, prune_mod=mode, backend="nni")

    assert count_params(model) <= 0.6 * params_before
    assert model.fc.out_features == NUM_CLASSES
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, NUM_CLASSES)
