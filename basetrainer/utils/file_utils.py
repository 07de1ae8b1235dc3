"""Small file helpers: folders, copies, atomic writes, timestamps."""
import contextlib
import errno
import os
import shutil
import tempfile
from datetime import datetime

from basetrainer.errors import ConfigError, DiskFullError

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
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=TEMPORARY_SUFFIX,
                                         dir=folder)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise DiskFullError(no_space_message(path)) from None
        raise
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600 files; these are ordinary files
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as stream:
            yield stream
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        _remove_quietly(temporary)
        if error.errno == errno.ENOSPC and not isinstance(error, DiskFullError):
            raise DiskFullError(no_space_message(path)) from None
        raise
    except BaseException:
        _remove_quietly(temporary)
        raise
    if durable:
        _fsync_dir(folder)


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` (with its extension) for a library that writes the file itself; when the
    block ends without error it replaces ``path``, and otherwise it is removed: a reader, or a failed write, never
    leaves half a file at ``path``. No space left is a one-line :class:`~basetrainer.errors.DiskFullError`."""
    folder, name = os.path.split(os.path.abspath(path))
    stem, extension = os.path.splitext(name)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{stem}.", suffix=TEMPORARY_SUFFIX + extension, dir=folder)
        os.close(fd)
        yield temporary
        os.replace(temporary, path)
    except BaseException as error:
        _remove_quietly(locals().get("temporary"))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC and not isinstance(error, DiskFullError):
            raise DiskFullError(no_space_message(path)) from None
        raise


def no_space_message(path) -> str:
    """The one line of a write that found no space left: the file, what is free, that the file there before is
    intact, and the fix."""
    try:
        free = f" ({file_size_text(shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free)} free)"
    except OSError:
        free = ""
    had = "the file there before is intact" if os.path.isfile(path) else "nothing was left there"
    return (f"could not write {path}: no space left on device{free}; free some disk space or write elsewhere "
            f"(work_dir, --out) ({had})")


def file_size_text(num_bytes: float) -> str:
    """``num_bytes`` for a message: ``512 bytes``, ``45.2 MB``, ``1.3 GB``."""
    if num_bytes < 1000:
        return f"{num_bytes:.0f} bytes"
    for unit in ("KB", "MB", "GB", "TB"):
        num_bytes /= 1000
        if num_bytes < 1000 or unit == "TB":
            return f"{num_bytes:.1f} {unit}"


def append_text(path, text) -> None:
    """Appends ``text`` to ``path`` (UTF-8, made with its folder when missing), all of it or nothing: a write that
    fails part-way (a full disk: a one-line :class:`~basetrainer.errors.DiskFullError`) is cut back off."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    try:
        with open(path, "a", newline="", encoding="utf-8") as stream:
            stream.write(text)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.truncate(path, size)
        if error.errno == errno.ENOSPC:
            raise DiskFullError(no_space_message(path)) from None
        raise


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
