"""The optional ONNX packages (``pip install "basetrainer[onnx]"``) and the little basetrainer does with them.

onnx and onnxscript write the file (torch's exporter needs both), onnxruntime runs it,
onnxslim simplifies it: onnxslim is pure Python, so it installs wherever onnx does, and it
keeps dynamic dimensions.
"""
import importlib

import numpy as np
import torch

from ..errors import BaseTrainerError, one_line
from ..utils.log import get_logger

logger = get_logger()

ONNX_EXTRA = 'pip install "basetrainer[onnx]"'


class MissingDependencyError(BaseTrainerError, ImportError):
    """An optional package is missing; the message names the command that installs it."""


def require(module: str):
    """Imports ``module``, or raises a one-line :class:`MissingDependencyError` naming the onnx extra."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if isinstance(error, ModuleNotFoundError) and error.name == module:
            raise MissingDependencyError(f"{module} is not installed: {ONNX_EXTRA}") from None
        # e.g. a dependency of its own is missing or broken
        raise MissingDependencyError(
            f"{module} does not load ({one_line(error)}); reinstall it: {ONNX_EXTRA}") from None


def onnx_session(path: str, use_gpu: bool = False, device_id: int = 0):
    """An onnxruntime session on ``path``: on the CPU, or on GPU ``device_id`` when asked and available."""
    ort = require("onnxruntime")
    providers = ["CPUExecutionProvider"]
    if use_gpu:
        if "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device_id}))
        else:
            logger.info("onnxruntime has no CUDA provider here (pip install onnxruntime-gpu): running on the CPU")
    return ort.InferenceSession(path, providers=providers)


def run_onnx(session, inputs) -> list:
    """The session's outputs (numpy arrays) for ``inputs``: arrays or tensors, one per model input."""
    names = [node.name for node in session.get_inputs()]
    if len(inputs) != len(names):
        raise ValueError(f"the ONNX model takes {len(names)} input(s) {names}, got {len(inputs)}")
    feed = {name: _as_array(x) for name, x in zip(names, inputs)}
    return session.run(None, feed)


def simplify(source, out_path: str) -> str:
    """Writes the simplified ONNX model (constants folded, redundant nodes removed) to ``out_path``.

    ``source`` is an ONNX file or a loaded ``onnx.ModelProto``.
    """
    onnx = require("onnx")
    onnxslim = require("onnxslim")
    model = onnx.load(source) if isinstance(source, str) else source
    onnx.save(onnxslim.slim(model), out_path)
    return out_path


def _as_array(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x)
