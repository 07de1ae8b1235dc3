"""The ONNX API of the earlier library's later versions: ``convert2onnx`` and ``ONNXEngine``, over basetrainer.export."""
import numpy as np
import pytest
import torch
from torch import nn

from basetrainer.engine.onnx_engine import ONNXEngine
from basetrainer.errors import ConfigError
from basetrainer.utils.converter.pytorch2onnx import convert2onnx


def small_convnet():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4)).eval()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    model = small_convnet()
    folder = tmp_path_factory.mktemp("onnx")
    return model, convert2onnx(model, [2, 3, 32, 32], onnx_file=str(folder / "net.onnx")), folder


def test_convert2onnx_returns_the_file_and_writes_the_simplified_copy_beside_it(converted):
    _, path, folder = converted
    assert path == str(folder / "net.onnx") and (folder / "net_sim.onnx").is_file()


@pytest.mark.parametrize("name", ["net.onnx", "net_sim.onnx"])
def test_onnx_engine_runs_the_converted_model_at_other_batch_height_and_width(converted, name):
    model, _, folder = converted
    engine = ONNXEngine(str(folder / name), use_gpu=False)
    batch = torch.randn(3, 3, 40, 48)
    outputs = engine(batch.numpy())
    assert (engine.inp_names, engine.out_names) == (["input"], ["output"])
    with torch.no_grad():
        np.testing.assert_allclose(outputs[0], model(batch).numpy(), atol=1e-4, rtol=0)


def test_onnx_engine_quantisation_is_a_config_error(converted):
    with pytest.raises(ConfigError, match="quant=1"):
        ONNXEngine(converted[1], use_gpu=False, quant=1)


def test_convert2onnx_static_shape_has_a_batch_of_one(tmp_path):
    path = convert2onnx(small_convnet(), [4, 3, 16, 16], onnx_file=str(tmp_path / "static.onnx"), dynamic=False,
                        simplify=False)
    assert ONNXEngine(path, use_gpu=False).onnx_session.get_inputs()[0].shape == [1, 3, 16, 16]
