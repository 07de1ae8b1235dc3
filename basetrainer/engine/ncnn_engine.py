"""Old import path of NCNN inference, which basetrainer does not support."""
raise ImportError(
    "basetrainer.engine.ncnn_engine: NCNN inference is not supported; export ONNX (basetrainer export "
    "--format onnx) and run it with basetrainer.engine.onnx_engine.ONNXEngine (onnxruntime)"
)
