"""Old import path of a converter to NCNN, which basetrainer does not support."""
raise ImportError(
    "basetrainer.utils.converter.onnx2ncnn: conversion to NCNN is not supported; export ONNX "
    "(basetrainer.export.export_model, or basetrainer export --format onnx) and convert it with NCNN's own tools"
)
