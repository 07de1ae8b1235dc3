"""The earlier library's ``convert2onnx`` (``basetrainer.utils.converter.pytorch2onnx``), over :func:`basetrainer.export.export_model`."""
import os

import torch

from ..utils.log import get_logger
from . import onnx_tools
from .exporter import export_model

logger = get_logger()

# torch's exporter writes opset 18 and newer; older opsets are not converted to reliably.
MIN_OPSET = 18


def convert2onnx(model, input_shape, input_names=("input",), output_names=("output",), onnx_file="", dynamic=True,
                 simplify=True, opset_version=11, use_prune=False, sparsity=0.2, device="cpu"):
    """Writes ``model`` for inputs of ``input_shape`` (B, C, H, W) to ``onnx_file`` (default
    ``./output/model.onnx``), checks it with onnxruntime, and returns its path.

    ``dynamic``: batch, height and width may change (else the batch is 1). ``simplify``
    also writes ``<name>_sim.onnx``. ``opset_version`` below 18 is raised to 18 (see
    ``MIN_OPSET``). ``use_prune`` prunes ``sparsity`` of the channels first
    (:func:`basetrainer.pruning.model_pruning`).
    """
    onnx_file = onnx_file or os.path.join("output", "model.onnx")
    batch, channels, height, width = input_shape
    model = model.to(device)
    if use_prune:
        from ..pruning import model_pruning

        model = model_pruning(model, input_size=[1, channels, height, width], sparsity=sparsity,
                              output_prune=os.path.join(os.path.dirname(onnx_file), "prune"))
    if opset_version < MIN_OPSET:
        logger.warning("convert2onnx: opset_version %s is older than torch's exporter writes; writing opset %d",
                       opset_version, MIN_OPSET)
        opset_version = MIN_OPSET
    example = torch.randn(batch if dynamic else 1, channels, height, width, device=device)
    export_model(model, example, onnx_file, "onnx", dynamic_dims=(0, 2, 3) if dynamic else (),
                 input_names=input_names, output_names=output_names, opset_version=opset_version)
    if simplify:
        onnx_tools.simplify(onnx_file, onnx_file.replace(".onnx", "_sim.onnx"))
    return onnx_file

