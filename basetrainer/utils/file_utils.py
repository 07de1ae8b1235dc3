"""Small file helpers: folders, copies, atomic writes, timestamps."""
import os
import shutil
import uuid
from datetime import datetime

from basetrainer.errors import ConfigError


def create_dir(path):
    """Create ``path`` and its parents if missing; return ``path``."""
    if not path:  # "" is the current folder, which exists
        return path
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"cannot create {path}: a file of that name exists; choose another work_dir") from None
    except PermissionError:
        raise ConfigError(f"cannot create {path}: permission denied; choose a writable work_dir") from None
    except OSError as error:
        raise ConfigError(f"cannot create {path}: {error.strerror}; choose a writable work_dir") from None
    return path


def copy_file_to_dir(file, dir):
    """Copy ``file`` into folder ``dir`` (created if missing); return the copy's path.

    ``file=None`` does nothing and returns None: old scripts pass ``cfg.config_file``,
    which is None when no config file was given.
    """
    if file is None:
        return None
    if not os.path.isfile(file):
        raise ConfigError(f"cannot copy {file} to {dir}: no such file; check the path")
    create_dir(dir)
    target = os.path.join(dir, os.path.basename(file))
    try:
        shutil.copy2(file, target)
    except shutil.SameFileError:  # e.g. a run restarted from the config it saved in its own folder
        pass
    return target


def write_text_atomic(path, text):
    """Write ``text`` to ``path`` via a temporary file and ``os.replace``, creating the parent folder.

    A reader, or a run killed mid-write, sees the old file or the new one, never half of one.
    """
    create_dir(os.path.dirname(os.path.abspath(path)))
    temporary = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return path


def get_time(format="%Y%m%d_%H%M%S"):
    """The local time as a string, e.g. ``20240131_154502`` (a strftime ``format``)."""
    return datetime.now().strftime(format)
