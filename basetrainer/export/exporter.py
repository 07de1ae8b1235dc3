"""Writes a model as an ONNX, TorchScript or torch.export file, then checks the file against the model.

Every format is checked the same way: the file is loaded back by what will run it
(onnxruntime, ``torch.jit.load``, ``torch.export.load``) and run on a batch of another
size than the example's, which proves that the batch dimension is dynamic; its outputs
must equal the model's within ``atol + rtol x`` the largest output, as ``torch.allclose``
measures: another runtime's float kernels differ in the last bits, which are 2e-4 on a
logit of 2000.

ONNX goes through torch's exporter built on ``torch.export`` (``dynamo=True``, torch's
default since 2.9; it needs onnxscript). The dynamic dimensions are declared with
``dynamic_shapes``, and ``torch.export`` refuses a model whose graph would not hold for
other sizes, where the older TorchScript-based exporter (``dynamo=False``, deprecated)
only renames an axis and can silently bake in the example's size. It writes opset 18 or
newer, with the weights inside the one file (``external_data=False``: up to 2 GB).

TorchScript uses ``torch.jit.trace``, which torch has deprecated in favour of
``torch.export``: prefer ``exported-program`` unless a consumer needs TorchScript.
"""
import contextlib
import io
import math
import os
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import ConfigError
from ..parallel import unwrap_model
from ..utils.file_utils import atomic_path, atomic_write
from ..utils.log import get_logger
from . import onnx_tools

logger = get_logger()

FORMATS = ("onnx", "torchscript", "exported-program")
_RUNTIMES = {"onnx": "onnxruntime", "torchscript": "torch.jit.load", "exported-program": "torch.export.load"}
_DIM_NAMES = {0: "batch", 2: "height", 3: "width"}


@dataclass
class ExportResult:
    """What :func:`export_model` wrote and how its check went; ``str()`` gives the check line."""

    path: str
    format: str
    batch_size: Optional[int] = None  # of the check batch
    max_abs_diff: Optional[float] = None  # None: not checked
    atol: float = 1e-4
    rtol: float = 1e-5
    largest: float = 0.0  # the largest absolute output of the model on the check batch

    @property
    def checked(self) -> bool:
        return self.max_abs_diff is not None

    @property
    def tolerance(self) -> float:
        return self.atol + self.rtol * self.largest

    @property
    def passed(self) -> bool:
        """Whether the file's outputs matched the model's (False when not checked, or NaN)."""
        return self.checked and self.max_abs_diff <= self.tolerance

    def __str__(self) -> str:
        if not self.checked:
            return f"{self.format}: {self.path} (not checked)"
        return (f"{self.format} check: {_RUNTIMES[self.format]} vs torch on a batch of {self.batch_size}: "
                f"max abs diff {self.max_abs_diff:.2e} (tolerance {self.atol:.0e} + {self.rtol:.0e} x the largest "
                f"output {self.largest:.3g}): {'pass' if self.passed else 'FAIL'}")


def export_model(model: nn.Module, example_input, path: str, format: str = "onnx", *, check: bool = True,
                 atol: float = 1e-4, rtol: float = 1e-5, check_batch_size: Optional[int] = None,
                 dynamic_dims: Sequence[int] = (0,),
                 input_names: Optional[Sequence[str]] = None, output_names: Optional[Sequence[str]] = None,
                 opset_version: Optional[int] = None) -> ExportResult:
    """Writes ``model`` (in eval mode, unwrapped from DDP/DataParallel) to ``path`` and checks the file.

    ``example_input`` is a tensor or a tuple of tensors, as ``model`` takes them;
    ``format`` one of ``onnx``, ``torchscript``, ``exported-program`` (``.pt2``).
    ``dynamic_dims`` are the dimensions of every input that may change size (the batch by
    default; 0, 2 and 3 are named batch, height and width). The check runs the file on a
    batch of ``check_batch_size`` samples (default: one more than the example's) and
    compares with the model within ``atol + rtol x`` its largest output; the result is returned and logged. ONNX
    takes ``input_names``/``output_names`` (default ``input``/``output``, numbered when
    there are several) and ``opset_version`` (default: torch's, at least 18).
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown export format {format!r}; use one of: {', '.join(FORMATS)}")
    if format == "onnx":  # fail before the work, not after it
        for module_name in ("onnx", "onnxscript") + (("onnxruntime",) if check else ()):
            onnx_tools.require(module_name)
    module = unwrap_model(model)
    inputs = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    inputs = _no_dynamic_size_one(inputs, dynamic_dims)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    was_training = module.training
    module.eval()
    try:
        _write(module, inputs, path, format, _dynamic_shapes(inputs, dynamic_dims), input_names, output_names,
               opset_version)
        result = ExportResult(path, format, atol=atol, rtol=rtol)
        if check:
            result.batch_size = check_batch_size or inputs[0].shape[0] + (1 if 0 in dynamic_dims else 0)
            batch = _check_inputs(inputs, result.batch_size)
            with torch.no_grad():
                expected = _tensors(module(*batch))
            result.max_abs_diff = _max_abs_diff(expected, _run_file(path, format, batch))
            result.largest = largest_output(expected)
    finally:
        module.train(was_training)
    if result.checked and not result.passed:
        logger.warning("%s: %s", path, result)
    else:
        logger.info("wrote %s; %s", path, result)
    return result


def _write(module, inputs, path, format, dynamic_shapes, input_names, output_names, opset_version) -> None:
    """Writes the file whole or not at all: ONNX through a temporary file renamed over ``path``; TorchScript and
    exported programs into memory first, since torch's C++ writer aborts the process when the disk fills."""
    if format == "onnx":
        with torch.no_grad():
            num_outputs = len(_tensors(module(*inputs)))
        with atomic_path(path) as temporary:
            torch.onnx.export(module, inputs, temporary, dynamo=True, verbose=False, external_data=False,
                              dynamic_shapes=dynamic_shapes, opset_version=opset_version,
                              input_names=list(input_names or _names("input", len(inputs))),
                              output_names=list(output_names or _names("output", num_outputs)))
        return
    buffer = io.BytesIO()
    if format == "torchscript":
        with _torchscript_deprecation_silenced():
            torch.jit.save(torch.jit.trace(module, inputs), buffer)
    else:
        torch.export.save(torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes), buffer)
    with atomic_write(path, binary=True) as stream:
        stream.write(buffer.getbuffer())


def _run_file(path: str, format: str, inputs: tuple) -> list:
    """The outputs of the written file on ``inputs``, run by what will run it in deployment."""
    if format == "onnx":
        return onnx_tools.run_onnx(onnx_tools.onnx_session(path), inputs)
    with torch.no_grad():
        if format == "torchscript":
            with _torchscript_deprecation_silenced():
                return _tensors(torch.jit.load(path, map_location=inputs[0].device)(*inputs))
        return _tensors(torch.export.load(path).module()(*inputs))


def _dynamic_shapes(inputs: tuple, dynamic_dims: Sequence[int]) -> tuple:
    # One Dim object per position, shared by all inputs: their batch sizes must agree.
    dims = {d: torch.export.Dim(_DIM_NAMES.get(d, f"dim{d}")) for d in dynamic_dims}
    return tuple({d: dims[d] for d in dynamic_dims if d < x.dim()} for x in inputs)


def _no_dynamic_size_one(inputs: tuple, dynamic_dims: Sequence[int]) -> tuple:
    """``inputs`` with every dynamic dimension of size 1 doubled: torch.export takes sizes 0 and 1 for constants."""
    doubled = []
    for x in inputs:
        for d in dynamic_dims:
            if d < x.dim() and x.shape[d] == 1:
                x = torch.cat([x, x], dim=d)
        doubled.append(x)
    return tuple(doubled)


def _check_inputs(inputs: tuple, batch: int) -> tuple:
    """``batch`` samples shaped like ``inputs``: random floats, or the example's rows repeated for other dtypes."""
    generator = torch.Generator().manual_seed(0)
    made = []
    for x in inputs:
        if x.is_floating_point():
            made.append(torch.randn((batch, *x.shape[1:]), generator=generator, dtype=x.dtype).to(x.device))
        else:
            made.append(x[torch.arange(batch, device=x.device) % x.shape[0]])
    return tuple(made)


def largest_output(outputs: list) -> float:
    """The largest absolute value among the outputs (0.0 when they hold none)."""
    return max((o.detach().abs().max().item() for o in outputs if o.numel()), default=0.0)


def _max_abs_diff(expected: list, actual: list) -> float:
    """The largest absolute difference between two lists of outputs; inf when their number or shapes differ."""
    actual = [torch.as_tensor(a).cpu() for a in actual]
    if len(expected) != len(actual) or any(e.shape != a.shape for e, a in zip(expected, actual)):
        return math.inf
    diffs = [(e.detach().cpu().double() - a.double()).abs().max().item()
             for e, a in zip(expected, actual) if e.numel()]
    return max(diffs, default=0.0)


def _tensors(outputs) -> list:
    """The tensors of a model's output (a tensor, or tuples, lists and dicts of them), in order."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    if isinstance(outputs, (tuple, list)):
        return [t for item in outputs for t in _tensors(item)]
    return []


def _names(stem: str, count: int) -> list:
    return [stem] if count == 1 else [f"{stem}_{i}" for i in range(count)]


@contextlib.contextmanager
def _torchscript_deprecation_silenced():
    # torch.jit warns on every call that it is deprecated; the module docstring says so once.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        yield
