"""Old import path of TensorRT inference, which basetrainer does not support."""
raise ImportError(
    "basetrainer.engine.trt_engine: TensorRT inference is not supported; export ONNX (basetrainer export "
    "--format onnx) and run it with basetrainer.engine.onnx_engine.ONNXEngine (onnxruntime)"
)
