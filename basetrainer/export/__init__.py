"""Model export: ONNX, TorchScript and torch.export files, each checked against the model it came from.

::

    from basetrainer.export import export_model, model_from_checkpoint

    loaded = model_from_checkpoint("work_dirs/classification/model/last.pth")
    result = export_model(loaded.model, loaded.example_input(), "model.onnx", format="onnx")
    print(result)
    # onnx check: onnxruntime vs torch on a batch of 2: max abs diff 4.8e-07
    #   (tolerance 1e-04 + 1e-05 x the largest output 3.1): pass

or, from the shell, ``basetrainer export work_dirs/classification/model/last.pth --out model.onnx``.
``write_weights(checkpoint, "weights.pth")`` (``--out weights.pth``) writes the weights alone, one
consolidated file also from a sharded (FSDP) checkpoint directory.
ONNX needs ``pip install "basetrainer[onnx]"`` (onnx, onnxruntime, onnxscript, onnxslim).

Importing this package loads nothing: the names below are resolved on first use, so that
``basetrainer.export.onnx_engine`` can use :mod:`.onnx_tools` without the model zoo.
"""
from ..utils.lazy import lazy_attributes, names_of

_LAZY = {
    "basetrainer.export.exporter": ("FORMATS", "ExportResult", "export_model"),
    "basetrainer.export.from_checkpoint": ("LoadedModel", "model_from_checkpoint"),
    "basetrainer.export.onnx_tools": ("MissingDependencyError",),
    "basetrainer.export.weights": ("read_weights", "write_weights"),
}

__all__ = names_of(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
