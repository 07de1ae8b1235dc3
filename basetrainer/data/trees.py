"""A dataset written as a folder tree that appears complete or not at all.

The files go into a temporary folder beside ``root``, with a manifest (the settings they were written with and the
number of files of each folder) written last; the folder is then renamed to ``root``. A later call compares the
manifest and the files with what it would write, and skips the work when they match. Several processes may write
at once (torchrun's ranks): the first rename wins and the others find a complete tree.
"""
import json
import os
import shutil
import tempfile


def is_complete(root, manifest: str, suffix: str, settings=None) -> bool:
    """Whether ``root`` holds every ``*suffix`` file its ``manifest`` counts (and, if given, was written with
    ``settings``)."""
    try:
        with open(os.path.join(root, manifest), encoding="utf-8") as stream:
            written = json.load(stream)
        if settings is not None and any(written.get(key) != value for key, value in settings.items()):
            return False
        return all(_count(os.path.join(root, split, name), suffix) == count
                   for split, per_class in written["counts"].items() for name, count in per_class.items())
    except (OSError, ValueError, KeyError, AttributeError):
        return False


def replaceable(root, manifest: str) -> bool:
    """An empty folder, or a tree of ours (it has ``manifest``)."""
    return os.path.isdir(root) and (not os.listdir(root) or os.path.isfile(os.path.join(root, manifest)))


def partial_folder(root) -> str:
    """A new, empty folder beside ``root`` to write the tree into, with the permissions of an ordinary folder."""
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(root))}.", suffix=".partial", dir=parent)
    os.chmod(partial, 0o777 & ~_umask())  # mkdtemp makes it private; the dataset is an ordinary folder
    return partial


def write_manifest(partial, manifest: str, settings: dict, counts: dict) -> None:
    with open(os.path.join(partial, manifest), "w", encoding="utf-8") as stream:
        json.dump({**settings, "counts": counts}, stream, indent=1)


def move_into_place(partial, root, manifest: str, suffix: str, settings) -> bool:
    """Renames ``partial`` to ``root``; False when another process got there first."""
    if is_complete(root, manifest, suffix, settings):
        return False
    if os.path.isdir(root) and os.listdir(root):
        shutil.rmtree(root)
    try:
        os.replace(partial, root)
    except OSError:
        if not is_complete(root, manifest, suffix, settings):
            raise
        return False
    return True


def _count(folder, suffix) -> int:
    with os.scandir(folder) as entries:
        return sum(1 for entry in entries if entry.name.endswith(suffix))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
