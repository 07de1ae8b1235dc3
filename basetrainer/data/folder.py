"""torchvision's ImageFolder with one-line errors that name the folder or file, and a policy for unreadable images."""
import os

from PIL import UnidentifiedImageError
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from ..errors import ConfigError, DataError
from ..utils.log import get_logger

logger = get_logger()

BAD_IMAGE_POLICIES = ("skip", "raise")


class CheckedImageFolder(ImageFolder):
    """``torchvision.datasets.ImageFolder`` (``root/<class>/<image>``) that explains what is wrong.

    A missing ``root``, a ``root`` without class folders, or a class folder without
    images is a ``DataError`` naming the folder and the fix; ``name`` is what messages call
    ``root`` (e.g. the config key ``train_data``).

    An image that cannot be decoded is found when it is loaded (checking every file up
    front would cost a full pass over the data). With ``on_bad_image="raise"`` that is a
    DataError naming the file; with ``"skip"`` a warning names the file (once per loading
    process) and the next readable sample in the dataset's order is returned instead.
    """

    def __init__(self, root, transform=None, target_transform=None, on_bad_image="raise", name="root", **kwargs):
        if on_bad_image not in BAD_IMAGE_POLICIES:
            raise ConfigError(f"on_bad_image: {on_bad_image!r} is not one of {', '.join(BAD_IMAGE_POLICIES)}")
        root = os.fspath(root)
        self.name = name
        self.on_bad_image = on_bad_image
        self._warned = set()
        if not os.path.isdir(root):
            raise DataError(f"{name}: no such folder {root}; point {name} at an ImageFolder tree "
                            f"(one sub-folder per class)")
        if not any(entry.is_dir() for entry in os.scandir(root)):
            raise DataError(f"{name}: {root} has no class folders; put the images in one sub-folder per class "
                            f"({os.path.join(root, '<class>', '<image>')})")
        super().__init__(root, transform=transform, target_transform=target_transform, allow_empty=True, **kwargs)
        counts = [0] * len(self.classes)
        for _, target in self.samples:
            counts[target] += 1
        empty = [os.path.join(root, cls) for cls, count in zip(self.classes, counts) if count == 0]
        if empty:
            others = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
            raise DataError(f"{name}: class folder {empty[0]}{others} holds no images "
                            f"({' '.join(IMG_EXTENSIONS)}); add images or remove the folder")

    def __getitem__(self, index):
        for _ in range(len(self.samples)):
            path, target = self.samples[index]
            try:
                sample = self.loader(path)
            except Exception as error:  # noqa: BLE001 - PIL fails on bad files in many ways
                reason = image_error_reason(error)
                if self.on_bad_image == "raise":
                    raise DataError(f"{self.name}: cannot read image {path} ({reason}); "
                                    f"fix or remove the file, or set on_bad_image: skip") from None
                if path not in self._warned:
                    self._warned.add(path)
                    logger.warning("%s: skipping unreadable image %s (%s)", self.name, path, reason)
                index = (index + 1) % len(self.samples)
                continue
            if self.transform is not None:
                sample = self.transform(sample)
            if self.target_transform is not None:
                target = self.target_transform(target)
            return sample, target
        raise DataError(f"{self.name}: no image under {self.root} can be read; check the files")


def image_error_reason(error) -> str:
    """Why Pillow could not read an image, in a few words."""
    if isinstance(error, UnidentifiedImageError):  # its message repeats the file object
        return "not an image format Pillow can read"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def check_same_classes(train, test, train_name="train_data", test_name="test_data"):
    """Raises a DataError listing the differences when two ImageFolders do not have the same class folders."""
    if list(train.classes) == list(test.classes):
        return
    only_train = sorted(set(train.classes) - set(test.classes))
    only_test = sorted(set(test.classes) - set(train.classes))
    raise DataError(f"{train_name} and {test_name} must hold the same class folders: only in {train_name}: "
                    f"{only_train or 'none'}; only in {test_name}: {only_test or 'none'}")
