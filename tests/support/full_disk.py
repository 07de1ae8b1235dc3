"""A real small filesystem for the tests of a full disk: a tmpfs of a chosen size, mounted with the mount(2) system
call (no process started, so the fast tier may use it). It needs root, as CI runs; elsewhere the test is skipped."""
import contextlib
import ctypes
import os

import pytest

_MNT_DETACH = 2


@contextlib.contextmanager
def small_filesystem(folder, size: str):
    """Mounts a tmpfs of ``size`` (``"2m"``, ``"60m"``: tmpfs's own notation) on ``folder`` (made if missing) for the
    block; skips the test where mounting is not allowed."""
    libc = ctypes.CDLL(None, use_errno=True)  # this process's own C library (find_library would start ldconfig)
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, f"size={size}".encode()) != 0:
        pytest.skip(f"mounting a tmpfs needs root ({os.strerror(ctypes.get_errno())}); CI runs as root")
    try:
        yield folder
    finally:
        libc.umount2(folder.encode(), _MNT_DETACH)


def fill(folder, leave_bytes: int = 0) -> None:
    """Fills ``folder``'s filesystem but for about ``leave_bytes``, with one file, ``filler``."""
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    with open(os.path.join(folder, "filler"), "wb") as stream:
        stream.write(b"\0" * max(0, free - leave_bytes))
