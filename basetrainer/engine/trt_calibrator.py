"""Old import path of TensorRT calibration, which basetrainer does not support."""
raise ImportError(
    "basetrainer.engine.trt_calibrator: TensorRT calibration is not supported; export ONNX (basetrainer export "
    "--format onnx) and run it with basetrainer.engine.onnx_engine.ONNXEngine (onnxruntime)"
)
