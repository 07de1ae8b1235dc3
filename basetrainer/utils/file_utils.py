"""Small file helpers: folders, copies, atomic writes, timestamps."""
import contextlib
import os
import shutil
import tempfile
from datetime import datetime

from basetrainer.errors import ConfigError

TEMPORARY_SUFFIX = ".tmp"  # what atomic_write's temporary files end with (start-up removes stale ones)


def create_dir(path, dir1=None, filename=None):
    """Create the folder ``path`` (``path/dir1`` when ``dir1`` is given) and its parents if missing;
    return it, or the path of ``filename`` in it (the file itself is not created).

    ``dir1`` and ``filename`` are the earlier library's: ``create_dir(work_dir, "log", "train.log")``
    creates ``work_dir/log`` and returns ``work_dir/log/train.log``.
    """
    if dir1:
        path = os.path.join(path, dir1)
    if path:  # "" is the current folder, which exists
        _make_folder(path)
    return os.path.join(path, filename) if filename else path


def _make_folder(path):
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"cannot create {path}: a file of that name exists; choose another work_dir") from None
    except PermissionError:
        raise ConfigError(f"cannot create {path}: permission denied; choose a writable work_dir") from None
    except OSError as error:
        raise ConfigError(f"cannot create {path}: {error.strerror}; choose a writable work_dir") from None


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


def check_writable_file(path, name) -> str:
    """``path`` if a file can be written there (what ``name``, e.g. ``--out``, asks for); else a one-line
    ConfigError: an empty path, a folder, a parent that is a file or not writable, a name too long."""
    if not path or not str(path).strip():
        raise ConfigError(f"{name} is empty; name the file to write")
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"{name} {path} is a folder; name a file in it")
    # atomic_write writes ".<name>.<8 random characters>.tmp" beside it first
    if len(os.fsencode(os.path.basename(path))) + 14 > 255:
        raise ConfigError(f"{name} {path}: the file name is too long; choose a shorter one")
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):  # atomic_write creates the missing folders
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ConfigError(f"{name} {path}: {folder} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{name} {path}: cannot write in {folder} (permission denied); choose a writable folder")
    return path


@contextlib.contextmanager
def atomic_write(path, binary=False, durable=False):
    """Opens a temporary file beside ``path`` for writing (UTF-8 text, or bytes with
    ``binary``); when the block ends without error, it replaces ``path``.

    A reader, or a run killed mid-write, sees the old file or the new one, never half of
    one: the data goes to ``.<name>.<random>.tmp`` in the same folder (created if
    missing), which ``os.replace`` (atomic on POSIX and Windows) then renames over
    ``path``. ``durable`` also fsyncs the file and the folder, so that the new file
    survives a power cut (checkpoints). On any error the temporary file is removed and
    the error propagates, with ``path`` as it was.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=TEMPORARY_SUFFIX, dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600 files; these are ordinary files
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as stream:
            yield stream
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        _remove_quietly(temporary)
        raise
    if durable:
        _fsync_dir(folder)


def write_text_atomic(path, text):
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`); return ``path``."""
    with atomic_write(path) as stream:
        stream.write(text)
    return path


def get_time(format="%Y%m%d_%H%M%S"):
    """The local time as a string, e.g. ``20240131_154502`` (a strftime ``format``)."""
    return datetime.now().strftime(format)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_quietly(path) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _fsync_dir(folder) -> None:
    # Makes the rename itself durable; not possible on every platform, and harmless to skip.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
