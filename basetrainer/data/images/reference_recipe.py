"""The torchvision reference recipe: Pillow decodes, ``torchvision.transforms`` crops, flips, makes floats
(``ToTensor``) and normalises, all in the loader. ``decoder: pil`` trains with it; the other decoders are measured
and checked against it (``bench/input_pipeline.py``, ``tests/data/images``)."""
from torchvision import transforms

from .crops import ASPECT_RATIOS, Recipe


def reference_transform(recipe: Recipe, mean, std) -> transforms.Compose:
    """``recipe`` (see :mod:`.crops`) as torchvision's transforms on a Pillow image, ending in a normalised float
    tensor."""
    height, width = recipe.size
    if recipe.augmentation == "imagenet":
        if recipe.train:
            steps = [transforms.RandomResizedCrop([height, width], scale=tuple(recipe.crop_scale),
                                                  ratio=ASPECT_RATIOS)]
        else:
            steps = [transforms.Resize(recipe.resized_side()), transforms.CenterCrop([height, width])]
    else:
        steps = [transforms.Resize([round(height / recipe.crop_ratio), round(width / recipe.crop_ratio)])]
        steps.append(transforms.RandomCrop([height, width]) if recipe.train else transforms.CenterCrop([height, width]))
    if recipe.train and recipe.hflip:
        steps.append(transforms.RandomHorizontalFlip())
    steps += [transforms.ToTensor(), transforms.Normalize(mean=list(mean), std=list(std))]
    return transforms.Compose(steps)
