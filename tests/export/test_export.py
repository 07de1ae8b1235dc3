"""Export: the files compute what the model computes, at any batch size; ``basetrainer export`` works on a run's files.

Each file is checked here by loading it back independently of ``export_model``'s own check.
"""
import os
import re
import shutil
import sys

import onnxruntime
import pytest
import torch
from torch import nn

from basetrainer.cli import main
from basetrainer.errors import CheckpointError, ConfigError, DiskFullError
from basetrainer.export import MissingDependencyError, export_model, model_from_checkpoint
from basetrainer.models.build_models import get_models
from support import EXAMPLES
from support.full_disk import small_filesystem
from support.processes import run_python

EXAMPLE = str(EXAMPLES / "example.py")
SUFFIXES = {"onnx": ".onnx", "torchscript": ".ts", "exported-program": ".pt2"}
ONNX_EXTRA = 'pip install "basetrainer[onnx]"'


def resnet18(num_classes=10):
    torch.manual_seed(0)
    return get_models("resnet18", input_size=[32, 32], num_classes=num_classes, pretrained=False)


def run_file(path, format, batch):
    """The outputs of an exported file, run by what deployment runs it with."""
    if format == "onnx":
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: batch.numpy()})[0])
    with torch.no_grad():
        if format == "torchscript":
            return torch.jit.load(str(path))(batch)
        return torch.export.load(str(path)).module()(batch)


def outputs_of(model, batch):
    with torch.no_grad():
        return model.eval()(batch)


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
@pytest.mark.parametrize("format", list(SUFFIXES))
def test_exported_resnet18_computes_what_torch_computes_at_another_batch_size(format, tmp_path):
    model = resnet18()
    path = tmp_path / f"model{SUFFIXES[format]}"
    result = export_model(model, torch.randn(2, 3, 32, 32), str(path), format=format)
    assert result.passed and result.batch_size == 3 and result.max_abs_diff <= 1e-4
    assert str(result).startswith(f"{format} check:") and str(result).endswith(": pass")
    batch = torch.randn(5, 3, 32, 32)
    torch.testing.assert_close(run_file(path, format, batch), outputs_of(model, batch), atol=1e-4, rtol=0)


@pytest.mark.parametrize("format", list(SUFFIXES))
def test_a_full_disk_is_a_one_line_error_and_leaves_no_file(format, tmp_path):
    # ResNet-18 takes 45 MB in any format, on a real filesystem of 4 (torch's C++ writers abort the process when
    # they meet a full disk: the file is made in memory first).
    with small_filesystem(tmp_path / "disk", "4m") as disk:
        path = f"{disk}/model{SUFFIXES[format]}"
        with pytest.raises(DiskFullError, match=rf"^could not write {re.escape(path)}: no space left on device"):
            export_model(resnet18(), torch.randn(2, 3, 32, 32), path, format=format, check=False)
        assert os.listdir(disk) == []


def test_onnx_file_declares_a_dynamic_batch_named_batch(tmp_path):
    export_model(resnet18(), torch.randn(1, 3, 32, 32), str(tmp_path / "m.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (inputs,), (outputs,) = session.get_inputs(), session.get_outputs()
    assert (inputs.name, inputs.shape, outputs.name) == ("input", ["batch", 3, 32, 32], "output")


def test_export_leaves_the_model_in_training_mode_if_it_was(tmp_path):
    model = resnet18().train()
    export_model(model, torch.randn(2, 3, 32, 32), str(tmp_path / "m.pt2"), format="exported-program")
    assert model.training


def test_pruned_resnet18_exports_and_computes_what_torch_computes(tmp_path):
    pytest.importorskip("torch_pruning")
    from basetrainer.pruning import model_pruning

    full_size = sum(p.numel() for p in resnet18().parameters())
    pruned = model_pruning(resnet18(), input_size=[1, 3, 32, 32], sparsity=0.5, prune_mod="L1")
    assert sum(p.numel() for p in pruned.parameters()) < 0.5 * full_size
    result = export_model(pruned, torch.randn(2, 3, 32, 32), str(tmp_path / "pruned.onnx"))
    assert result.passed
    batch = torch.randn(4, 3, 32, 32)
    torch.testing.assert_close(run_file(tmp_path / "pruned.onnx", "onnx", batch), outputs_of(pruned, batch),
                               atol=1e-4, rtol=0)


class BranchOnBatchSize(nn.Module):
    """Tracing keeps only the branch the example takes: the TorchScript file is wrong for other batch sizes."""

    def forward(self, x):
        return x + 1 if x.shape[0] > 2 else x


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_file_that_disagrees_with_the_model_fails_the_check(tmp_path):
    result = export_model(BranchOnBatchSize(), torch.randn(2, 4), str(tmp_path / "m.ts"), format="torchscript")
    assert result.checked and not result.passed and result.max_abs_diff == pytest.approx(1.0)
    assert str(result).endswith(": FAIL")


def test_unknown_format_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="onnx, torchscript, exported-program"):
        export_model(resnet18(), torch.randn(1, 3, 32, 32), str(tmp_path / "m.bin"), format="tflite")


def test_missing_onnxruntime_is_a_one_line_error_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError) as error:
        export_model(resnet18(), torch.randn(1, 3, 32, 32), str(tmp_path / "m.onnx"))
    assert str(error.value) == f"onnxruntime is not installed: {ONNX_EXTRA}"
    assert isinstance(error.value, ImportError) and not (tmp_path / "m.onnx").exists()


# ---------------------------------------------------------------------- the command, on a real run
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One epoch of examples/example.py on the digits at 16x16, with EMA on."""
    root = tmp_path_factory.mktemp("run")
    result = run_python([EXAMPLE, "--num_epochs", "1", "--input_size", "16", "16", "--batch_size", "64",
                         "--no-progress", "--work_dir", root / "work", "ema_decay=0.9"], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "work"


def export_command(capsys, *args):
    """Runs ``basetrainer export ARGS`` in this process; returns (exit code, stdout, stderr)."""
    try:
        code = main(["export", *map(str, args)]) or 0
    except SystemExit as exit:
        code = exit.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ema_and_training_weights(last_path):
    state = torch.load(last_path, weights_only=True)
    averaged = [s["averaged"] for s in state["callbacks"].values() if isinstance(s, dict) and s.get("averaged")]
    assert len(averaged) == 1
    return averaged[0], state["model"], state["config"]["num_classes"]


@pytest.mark.slow
def test_export_command_writes_a_checked_onnx_file_of_the_ema_weights_of_last_pth(run_dir, tmp_path, capsys):
    out = tmp_path / "model.onnx"
    code, stdout, stderr = export_command(capsys, run_dir / "model" / "last.pth", "--format", "onnx", "--out", out,
                                          "--batch", "2")
    assert code == 0, stderr
    lines = stdout.strip().splitlines()
    assert "EMA average" in lines[0]
    assert re.fullmatch(r"onnx check: onnxruntime vs torch on a batch of 3: max abs diff \S+ "
                        r"\(tolerance 1e-04 \+ 1e-05 x the largest output \S+\): pass", lines[-1])

    ema, training, num_classes = ema_and_training_weights(run_dir / "model" / "last.pth")
    model = get_models("resnet18", input_size=[16, 16], num_classes=num_classes, pretrained=False)
    batch = torch.randn(3, 3, 16, 16)
    exported = run_file(out, "onnx", batch)
    model.load_state_dict(ema)
    torch.testing.assert_close(exported, outputs_of(model, batch), atol=1e-4, rtol=0)
    model.load_state_dict(training)
    assert not torch.allclose(exported, outputs_of(model, batch), atol=1e-3)


@pytest.mark.slow
def test_export_command_rebuilds_a_weights_only_file_from_the_runs_config(run_dir, tmp_path, capsys):
    out = tmp_path / "final.pt2"
    code, stdout, stderr = export_command(capsys, run_dir / "model" / "model_final.pth", "--format",
                                          "exported-program", "--out", out)
    assert code == 0, stderr
    assert "model_final.pth (the EMA average" in stdout and stdout.strip().endswith(": pass")
    ema, _, num_classes = ema_and_training_weights(run_dir / "model" / "last.pth")
    model = get_models("resnet18", input_size=[16, 16], num_classes=num_classes, pretrained=False)
    model.load_state_dict(ema)
    batch = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(run_file(out, "exported-program", batch), outputs_of(model, batch), atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name, format", [("model.ts", "torchscript"), ("model.pt2", "exported-program")])
def test_without_format_the_suffix_of_out_says_what_to_write(run_dir, tmp_path, capsys, name, format):
    out = tmp_path / name
    code, stdout, stderr = export_command(capsys, run_dir / "model" / "last.pth", "--out", out)
    assert code == 0, stderr
    assert stdout.strip().splitlines()[-1].startswith(f"{format} check: ")
    ema, _, num_classes = ema_and_training_weights(run_dir / "model" / "last.pth")
    model = get_models("resnet18", input_size=[16, 16], num_classes=num_classes, pretrained=False)
    model.load_state_dict(ema)
    batch = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(run_file(out, format, batch), outputs_of(model, batch), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_a_weights_only_file_without_last_pth_beside_it_is_rebuilt_from_the_runs_config_yaml(run_dir, tmp_path):
    (tmp_path / "model").mkdir()
    shutil.copy(run_dir / "model" / "model_final.pth", tmp_path / "model")
    shutil.copy(run_dir / "config.yaml", tmp_path)
    loaded = model_from_checkpoint(str(tmp_path / "model" / "model_final.pth"))
    ema, _, num_classes = ema_and_training_weights(run_dir / "model" / "last.pth")
    model = get_models("resnet18", input_size=[16, 16], num_classes=num_classes, pretrained=False)
    model.load_state_dict(ema)
    batch = loaded.example_input(2)
    assert batch.shape == (2, 3, 16, 16)
    torch.testing.assert_close(outputs_of(loaded.model, batch), outputs_of(model, batch), atol=0, rtol=0)


@pytest.mark.slow
def test_export_command_without_onnxruntime_fails_with_one_line_naming_the_extra(run_dir, tmp_path, capsys,
                                                                                  monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    code, _, stderr = export_command(capsys, run_dir / "model" / "last.pth", "--out", tmp_path / "m.onnx")
    assert code == 2 and stderr.strip().splitlines() == [f"error: onnxruntime is not installed: {ONNX_EXTRA}"]
    assert not (tmp_path / "m.onnx").exists()


def test_export_command_on_a_missing_file_is_a_one_line_error(tmp_path, capsys):
    code, _, stderr = export_command(capsys, tmp_path / "nope.pth", "--out", tmp_path / "m.onnx")
    assert code == 2 and stderr.startswith("error: no checkpoint at") and len(stderr.strip().splitlines()) == 1


def test_a_detectors_file_is_refused_by_the_classifier_rebuild_in_one_line_naming_predict_and_export(tmp_path):
    # basetrainer export sends a detector to the detection task (tests/tasks/detection/test_detection_export.py)
    config = {"net_type": "fcos_tiny", "input_size": [64, 64], "num_classes": 10, "train_annotations": "a.json"}
    torch.save({"config": config, "model": {}}, tmp_path / "last.pth")
    with pytest.raises(CheckpointError) as refused:
        model_from_checkpoint(str(tmp_path / "last.pth"))
    message = str(refused.value)
    assert "\n" not in message and "holds a detector (net_type fcos_tiny" in message
    assert "basetrainer predict --task detection" in message and "--out model.onnx" in message
