"""timm backbones as ``net_type: timm/<name>``: built with random weights or timm's pretrained ones (through timm's
own loader, from a local file here: the machine reaches no hub), refused in one line, fed their own input size and
normalisation, and taken through every path a model takes in this process (autocast, channels-last, activation
checkpointing, compile, FSDP on a one-process group, pruning, export). tests/e2e/test_timm_classification.py
trains one with the task and predicts with it."""
import importlib.util

import huggingface_hub
import pytest
import timm
import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch import nn

from basetrainer import cli
from basetrainer.errors import CheckpointError, ConfigError
from basetrainer.export import export_model
from basetrainer.models import get_models
from basetrainer.models.timm_models import check_prunable
from basetrainer.parallel import FSDPStrategy, Strategy
from basetrainer.pruning import model_pruning
from basetrainer.tasks.classification.config import parse_config, unset_data_defaults

NUM_CLASSES = 3
CNN, VIT = "timm/resnet10t", "timm/test_vit"  # timm's smallest: 4 BasicBlocks; 0.3M parameters in 3 Blocks


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # More threads than free cores makes torch's CPU kernels slower on this shared machine, not faster.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def timm_model(net_type=CNN, num_classes=NUM_CLASSES, **kwargs):
    torch.manual_seed(0)
    return get_models(net_type, input_size=[32, 32], num_classes=num_classes, pretrained=False, **kwargs)


def images(n=2, size=32):
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def test_a_timm_name_builds_that_timm_model_with_random_weights_and_a_num_classes_head():
    model = timm_model()
    assert type(model).__module__.startswith("timm.") and model.pretrained_cfg["architecture"] == "resnet10t"
    assert model(images()).shape == (2, NUM_CLASSES)


def test_a_timm_model_made_for_one_input_size_is_made_for_input_size():
    assert timm_model(VIT)(images()).shape == (2, NUM_CLASSES)  # test_vit's own size is 160 x 160


def test_an_unknown_timm_name_is_a_one_line_config_error_naming_close_matches():
    with pytest.raises(ConfigError, match=r"^unknown net_type 'timm/resnet10x'; did you mean timm/resnet10t") as error:
        timm_model("timm/resnet10x")
    assert "\n" not in str(error.value)


def test_an_unknown_timm_name_is_refused_when_the_config_is_read():
    with pytest.raises(ConfigError, match="net_type 'timm/resnet10x'.*did you mean timm/resnet10t"):
        parse_config(["net_type=timm/resnet10x"])


def test_without_timm_a_timm_net_type_is_a_one_line_error_naming_the_pip_command(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else find_spec(name, *a))
    with pytest.raises(ConfigError, match=r'^net_type timm/resnet10t needs the timm package: '
                                          r'pip install "basetrainer\[timm\]"$'):
        timm_model()


def test_pretrained_weights_come_from_a_local_file_and_a_head_of_another_size_stays_fresh(tmp_path):
    trained = timm_model(num_classes=10)
    torch.save(trained.state_dict(), tmp_path / "resnet10t.pth")
    torch.manual_seed(1)
    model = get_models(CNN, num_classes=NUM_CLASSES, pretrained=str(tmp_path / "resnet10t.pth"))
    assert torch.equal(model.conv1[0].weight, trained.conv1[0].weight)
    assert model.fc.weight.shape == (NUM_CLASSES, trained.fc.in_features)


def test_timm_s_own_weights_file_of_the_model_loads_through_timm_and_its_1000_class_head_stays_fresh(tmp_path):
    """model.safetensors, as the Hugging Face hub holds timm's weights (timm/resnet10t.c3_in1k)."""
    hub_weights = timm.create_model("resnet10t", num_classes=1000)
    save_file(hub_weights.state_dict(), tmp_path / "model.safetensors")
    model = get_models(CNN, num_classes=NUM_CLASSES, pretrained=str(tmp_path / "model.safetensors"))
    assert torch.equal(model.layer4[0].conv2.weight, hub_weights.layer4[0].conv2.weight)
    assert torch.equal(model.conv1[1].running_mean, hub_weights.conv1[1].running_mean)  # BatchNorm's buffers too
    assert model.fc.weight.shape == (NUM_CLASSES, hub_weights.fc.in_features)


def test_a_weights_file_whose_head_has_the_model_s_classes_keeps_its_head(tmp_path):
    earlier = timm_model(num_classes=NUM_CLASSES)
    torch.save(earlier.state_dict(), tmp_path / "earlier.pth")
    model = get_models(CNN, num_classes=NUM_CLASSES, pretrained=str(tmp_path / "earlier.pth"))
    assert torch.equal(model.fc.weight, earlier.fc.weight)


def test_a_vit_s_weights_load_at_another_input_size_as_timm_adapts_its_position_embeddings(tmp_path):
    torch.save(timm.create_model("test_vit", num_classes=1000).state_dict(), tmp_path / "vit.pth")
    model = get_models(VIT, input_size=[32, 32], num_classes=NUM_CLASSES, pretrained=str(tmp_path / "vit.pth"))
    assert model(images()).shape == (2, NUM_CLASSES)


def test_a_weights_file_of_another_model_is_one_line_naming_what_it_lacks(tmp_path):
    torch.save(timm_model().state_dict(), tmp_path / "resnet10t.pth")
    with pytest.raises(CheckpointError, match=r"resnet10t.pth lacks \d+ of timm/test_vit's weights \(e.g. cls_token\)"):
        get_models(VIT, input_size=[32, 32], num_classes=NUM_CLASSES, pretrained=str(tmp_path / "resnet10t.pth"))


def test_a_file_that_holds_no_weights_is_one_line(tmp_path):
    (tmp_path / "notes.pth").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=r"notes.pth: cannot read weights from it \(.*not a safetensors file, nor "
                                              r"a torch file of tensors only\)") as error:
        get_models(CNN, num_classes=NUM_CLASSES, pretrained=str(tmp_path / "notes.pth"))
    assert "\n" not in str(error.value)


def test_pretrained_true_out_of_reach_of_timm_s_weights_ends_the_command_in_one_line_naming_the_file_to_pass(
        tmp_path, monkeypatch, capsys):
    """timm fetches them through the Hugging Face hub, whose offline mode this machine's closed network amounts
    to (with the network merely down, the hub retries for some 40 s first, then fails alike)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        cli.main(["train", "net_type=timm/resnet10t", "pretrained=true", "input_size=[32,32]", "num_epochs=1",
                  "progress=false", "work_dir=run"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert ended.value.code == 2 and not (tmp_path / "run").exists()
    assert error.startswith("error: timm/resnet10t: pretrained=true cannot fetch timm's weights for it (")
    assert error.endswith("take model.safetensors of hf-hub:timm/resnet10t.c3_in1k, and pass pretrained=<that file>; "
                          "or pretrained=false")


def test_a_config_that_leaves_them_unset_takes_the_timm_models_input_size_mean_and_std():
    cfg = parse_config(["net_type=timm/resnet10t"])
    assert unset_data_defaults(cfg) == {"input_size": [176, 176], "rgb_mean": [0.485, 0.456, 0.406],
                                        "rgb_std": [0.229, 0.224, 0.225]}


def test_what_the_config_sets_is_kept_and_only_the_rest_comes_from_the_timm_model():
    cfg = parse_config(["net_type=timm/resnet10t", "input_size=[64,48]", "rgb_std=[0.5,0.5,0.5]"])
    assert unset_data_defaults(cfg) == {"rgb_mean": [0.485, 0.456, 0.406]}


def test_a_torchvision_model_left_unset_takes_32_pixels_and_a_mean_and_std_of_a_half():
    assert unset_data_defaults(parse_config([])) == {"input_size": [32, 32], "rgb_mean": [0.5, 0.5, 0.5],
                                                     "rgb_std": [0.5, 0.5, 0.5]}


def test_activation_checkpointing_of_timm_blocks_gives_identical_gradients_and_timms_keys():
    plain = timm_model()
    checkpointed = Strategy(torch.device("cpu"), activation_checkpointing=["BasicBlock"]).wrap(timm_model())
    for model in (plain, checkpointed):
        nn.functional.cross_entropy(model(images()), torch.tensor([0, 2])).backward()
    assert sum(type(m).__name__ == "CheckpointWrapper" for m in checkpointed.modules()) == 4
    assert checkpointed.state_dict().keys() == plain.state_dict().keys()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_a_timm_model_takes_an_optimizer_step_in_channels_last_under_bf16_autocast():
    model = Strategy(torch.device("cpu"), channels_last=True).wrap(timm_model())
    before = model.conv1[0].weight.detach().clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs = model(images().contiguous(memory_format=torch.channels_last))
        loss = nn.functional.cross_entropy(outputs, torch.tensor([0, 2]))
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert outputs.dtype == torch.bfloat16 and torch.isfinite(loss)
    assert model.conv1[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert not torch.equal(model.conv1[0].weight, before)


def test_compile_compiles_a_timm_model_in_place_so_its_keys_stay_timms():
    plain = timm_model()
    compiled = Strategy(torch.device("cpu"), compile=True).wrap(timm_model())
    assert compiled._compiled_call_impl is not None and compiled.state_dict().keys() == plain.state_dict().keys()


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_fsdp_shards_each_timm_block_as_a_unit_and_computes_what_the_plain_model_does(one_process_group):
    plain, strategy = timm_model(), FSDPStrategy(torch.device("cpu"))
    sharded = strategy.wrap(timm_model())
    assert [type(unit).__name__ for unit in strategy.units(sharded)] == ["FSDPBasicBlock"] * 4
    with torch.no_grad():
        torch.testing.assert_close(sharded.eval()(images()), plain.eval()(images()), rtol=0, atol=1e-6)


def test_a_timm_cnn_prunes_to_fewer_parameters_and_still_classifies(tmp_path):
    model = timm_model()
    before = sum(p.numel() for p in model.parameters())
    pruned = model_pruning(model, input_size=[1, 3, 32, 32], sparsity=0.5, output_prune=str(tmp_path))
    assert sum(p.numel() for p in pruned.parameters()) < before / 2
    assert pruned(images()).shape == (2, NUM_CLASSES)


def test_a_timm_model_with_attention_is_refused_for_pruning_in_one_line_naming_the_layer():
    with pytest.raises(ConfigError, match=r"^use_prune: timm/test_vit has attention layers \(blocks.0.attn: "
                                          r"Attention, 2 heads\) whose heads channel pruning cannot keep whole"):
        check_prunable(timm_model(VIT), VIT)


def test_a_timm_model_exports_to_onnx_that_computes_what_torch_computes(tmp_path):
    result = export_model(timm_model(), images(), str(tmp_path / "resnet10t.onnx"), format="onnx")
    assert result.passed and result.max_abs_diff <= 1e-4
