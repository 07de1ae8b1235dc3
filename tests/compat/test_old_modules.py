"""Every module path and name of the earlier library imports here, or fails at once with one line naming what to use.

Names whose job basetrainer does are thin aliases of its own code; modules whose job it
does not do raise ImportError on import; removed names raise ImportError when imported.
"""
import importlib

import pytest

from basetrainer.engine.events import Callback
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.scheduler.build_scheduler import LRSchedulerCallback

# (module, name) of the aliases, with what the name must be or build.
ALIASES = [
    ("basetrainer.scheduler.MultiStepLR", "MultiStepLR"),
    ("basetrainer.scheduler.CosineAnnealingLR", "CosineAnnealingLR"),
    ("basetrainer.scheduler.CosineAnnealingLR", "CosineLR"),
    ("basetrainer.scheduler.ExponentialLR", "ExponentialLR"),
    ("basetrainer.scheduler.LambdaLR", "LambdaLR"),
    ("basetrainer.scheduler.WarmUpLR", "WarmUpLR"),
    ("basetrainer.utils.plot_utils", "plot_multi_line"),
    ("basetrainer.utils.torch_data", "build_dataloader"),
    ("basetrainer.engine.engine", "Engine"),
    ("basetrainer.engine.base", "Base"),
    ("basetrainer.engine.onnx_engine", "ONNXEngine"),
    ("basetrainer.engine.onnx_engine", "simplify_onnx"),
    ("basetrainer.utils.converter.pytorch2onnx", "convert2onnx"),
]

# Modules whose job basetrainer does not do: importing them fails with a line naming the alternative.
REMOVED_MODULES = [
    ("basetrainer.scheduler.MultiStepValue", "get_scheduler"),
    ("basetrainer.utils.summary", "torch.utils.tensorboard.SummaryWriter"),
    ("basetrainer.dataloader.data_resample", "WeightedRandomSampler"),
    ("basetrainer.engine.trt_engine", "ONNXEngine"),
    ("basetrainer.engine.trt_calibrator", "ONNXEngine"),
    ("basetrainer.engine.mnn_engine", "ONNXEngine"),
    ("basetrainer.engine.ncnn_engine", "ONNXEngine"),
    ("basetrainer.engine.rknn_engine", "ONNXEngine"),
    ("basetrainer.utils.converter.onnx2trt", "basetrainer export --format onnx"),
    ("basetrainer.utils.converter.onnx2mnn", "basetrainer export --format onnx"),
    ("basetrainer.utils.converter.onnx2ncnn", "basetrainer export --format onnx"),
    ("basetrainer.utils.converter.pytorch2ncnn", "basetrainer export --format onnx"),
]

# Names removed from modules that stay.
REMOVED_NAMES = [
    ("basetrainer.utils.torch_data", "Collation", "collate_fn"),
    ("basetrainer.utils.torch_data", "build_model_parallel", "self.build_model_parallel"),
    ("basetrainer.utils.plot_utils", "plot_bar", "matplotlib.pyplot"),
    ("basetrainer.utils.plot_utils", "plot_skew_kurt", "matplotlib.pyplot"),
    ("basetrainer.engine.onnx_engine", "onnx_fp16", "onnxconverter_common"),
    ("basetrainer.engine.onnx_engine", "print_tensor", "numpy"),
]

@pytest.mark.parametrize("module, name", ALIASES)
def test_old_name_imports(module, name):
    assert callable(getattr(importlib.import_module(module), name))


def test_old_engine_is_the_trainer_and_old_base_is_the_callback_base():
    from basetrainer.engine.base import Base
    from basetrainer.engine.engine import Engine

    assert Engine is EngineTrainer and Base is Callback


def test_old_scheduler_classes_build_lr_schedule_callbacks():
    import torch

    from basetrainer.scheduler.MultiStepLR import MultiStepLR

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert isinstance(MultiStepLR(optimizer, epochs=4, num_steps=3, milestones=[2]), LRSchedulerCallback)


@pytest.mark.parametrize("module, hint", REMOVED_MODULES)
def test_removed_module_fails_on_import_with_one_line_naming_the_alternative(module, hint):
    with pytest.raises(ImportError) as error:
        importlib.import_module(module)
    message = str(error.value)
    assert hint in message and "\n" not in message and module.rsplit(".", 1)[1] in message


@pytest.mark.parametrize("module, name, hint", REMOVED_NAMES)
def test_removed_name_fails_on_import_with_one_line_naming_the_alternative(module, name, hint):
    with pytest.raises(ImportError) as error:
        exec(f"from {module} import {name}", {})
    message = str(error.value)
    assert hint in message and name in message and "\n" not in message


def test_an_unknown_name_is_still_an_attribute_error():
    torch_data = importlib.import_module("basetrainer.utils.torch_data")
    assert not hasattr(torch_data, "no_such_name")
