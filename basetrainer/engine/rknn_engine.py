"""Old import path of RKNN inference, which basetrainer does not support."""
raise ImportError(
    "basetrainer.engine.rknn_engine: RKNN inference is not supported; export ONNX (basetrainer export "
    "--format onnx) and run it with basetrainer.engine.onnx_engine.ONNXEngine (onnxruntime)"
)
