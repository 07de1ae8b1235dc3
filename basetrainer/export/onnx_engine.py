"""onnxruntime inference on an exported ONNX file (``pip install "basetrainer[onnx]"``).

::

    engine = ONNXEngine("model.onnx", use_gpu=False)
    # images: a numpy array or tensor (B, C, H, W); outputs: numpy arrays
    outputs = engine(images)

The file comes from ``basetrainer export`` or :func:`basetrainer.export.export_model`.
"""
from ..errors import ConfigError
from . import onnx_tools


class ONNXEngine:
    """An onnxruntime session on ``model_file``; calling it on a batch returns the list of outputs.

    ``use_gpu`` uses onnxruntime's CUDA provider (GPU ``device_id``) when it is installed,
    else the CPU. ``simplify`` runs on the simplified copy ``<name>_sim.onnx`` (written
    first). ``dynamic`` and the other keyword arguments are accepted for calls written for
    earlier versions: batches always run whole, and the fp16/int8 conversion they tuned
    (``quant`` 1 or 2) is not supported.
    """

    def __init__(self, model_file, use_gpu=True, quant=0, simplify=False, dynamic=True, device_id=0, **kwargs):
        if quant:
            raise ConfigError(f"ONNXEngine: quant={quant} (fp16/int8 conversion) is not supported; use quant=0, "
                              f"or convert the file with onnxconverter-common or onnxruntime.quantization")
        if simplify:
            model_file = simplify_onnx(model_file)
        self.model_file = model_file
        self.onnx_session = onnx_tools.onnx_session(model_file, use_gpu=use_gpu, device_id=device_id)
        self.device = self.onnx_session.get_providers()
        self.inp_names = [node.name for node in self.onnx_session.get_inputs()]
        self.out_names = [node.name for node in self.onnx_session.get_outputs()]

    def __call__(self, inputs):
        return self.forward(inputs)

    def forward(self, inputs) -> list:
        """The outputs for ``inputs``: one array or tensor, or a list of them for a model with several inputs."""
        return onnx_tools.run_onnx(self.onnx_session, list(inputs) if isinstance(inputs, (list, tuple)) else [inputs])


def simplify_onnx(onnx_file: str, onnx_model=None, dynamic=False) -> str:
    """Writes ``<name>_sim.onnx`` beside ``onnx_file`` (from ``onnx_model`` when given) and returns its path.

    Dynamic dimensions stay dynamic whatever ``dynamic`` says.
    """
    return onnx_tools.simplify(onnx_model if onnx_model is not None else onnx_file,
                               onnx_file.replace(".onnx", "_sim.onnx"))

