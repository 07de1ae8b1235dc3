"""Old import path of a converter to TensorRT, which basetrainer does not support."""
raise ImportError(
    "basetrainer.utils.converter.onnx2trt: conversion to TensorRT is not supported; export ONNX "
    "(basetrainer.export.export_model, or basetrainer export --format onnx) and convert it with TensorRT's own tools"
)
