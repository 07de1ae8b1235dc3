"""Datasets for the built-in pipelines: a checked ImageFolder and the bundled handwritten digits.

``folder`` imports torchvision; ``digits`` needs only numpy and Pillow.
"""
from .digits import load_digits, split_indices, write_digits_imagefolder
from .folder import CheckedImageFolder, check_same_classes

__all__ = ["CheckedImageFolder", "check_same_classes", "load_digits", "split_indices", "write_digits_imagefolder"]
