"""Old import path of the model converters: ``pytorch2onnx.convert2onnx`` remains, over :mod:`basetrainer.export`."""
