"""Image folders decoded and augmented fast: the ``decoder`` setting and what each backend runs.

- :mod:`.crops`: an image's crop, size and flip, drawn from its pixel size before decoding (the recipes
  ``resize_crop`` and ``imagenet``);
- :mod:`.reference_recipe`: torchvision's reference recipe (Pillow, ``ToTensor``, ``Normalize``), ``decoder: pil``;
- :mod:`.jpeg_header`: a JPEG's size and components from its frame header, nothing decoded;
- :mod:`.cpu_decode`: ``decoder: cpu``, libjpeg-turbo at reduced size and uint8 augmentation in the loader;
- :mod:`.jpeg_region`: a random crop's region of a JPEG decoded alone (libjpeg-turbo 3, the ``region`` extra);
- :mod:`.gpu_decode`: ``decoder: nvjpeg``, the files' bytes to the GPU, decoded and augmented there;
- :mod:`.on_device`: the batches that finish on the device (float, normalisation, channels-last) after the copy;
- :mod:`.decoders`: the setting's values, its checks and the one call a task makes (:func:`.decoders.image_folder`);
- :mod:`.photo_digits`: a JPEG set of photograph-sized pictures to train and measure on, offline.
"""
from ...utils.lazy import lazy_attributes, names_of

_LAZY = {
    "basetrainer.data.images.decoders": ("DECODERS", "image_decoder", "image_folder", "resolve_decoder"),
    "basetrainer.data.images.crops": ("AUGMENTATIONS", "Recipe", "Plan", "sample_plan"),
    "basetrainer.data.images.reference_recipe": ("reference_transform",),
    "basetrainer.data.images.on_device": ("Uint8Images", "normalised"),
    "basetrainer.data.images.photo_digits": ("write_photo_digits",),
}

__all__ = names_of(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
