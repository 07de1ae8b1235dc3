"""Old import path of a converter to MNN, which basetrainer does not support."""
raise ImportError(
    "basetrainer.utils.converter.onnx2mnn: conversion to MNN is not supported; export ONNX "
    "(basetrainer.export.export_model, or basetrainer export --format onnx) and convert it with MNN's own tools"
)
