"""Small ImageFolder trees of generated pictures, for tests that train or predict on images."""
import os

import torch
from PIL import Image


def write_class_images(root, classes, per_class, seed=0, size=16):
    """Writes ``root/<class>/<n>.png``: ``per_class`` pictures of ``size`` pixels a side for each class,
    one colour per class with noise, so that a small network tells them apart. Returns ``root``."""
    generator = torch.Generator().manual_seed(seed)
    for index, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for number in range(per_class):
            pixels = torch.full((size, size, 3), 60.0 * (index + 1)) + 40 * torch.rand(size, size, 3,
                                                                                    generator=generator)
            Image.fromarray(pixels.clamp(0, 255).byte().numpy()).save(os.path.join(root, name, f"{number}.png"))
    return root
