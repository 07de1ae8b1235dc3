"""Old import path of MNN inference, which basetrainer does not support."""
raise ImportError(
    "basetrainer.engine.mnn_engine: MNN inference is not supported; export ONNX (basetrainer export "
    "--format onnx) and run it with basetrainer.engine.onnx_engine.ONNXEngine (onnxruntime)"
)
