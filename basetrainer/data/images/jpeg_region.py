"""A JPEG's crop decoded alone: libjpeg-turbo 3's TurboJPEG API (``tj3SetCroppingRegion``) through ctypes.

libjpeg-turbo decodes only the rows from the crop's top to its bottom (the rows above are entropy-decoded and
skipped, those below not read at all) and only the columns from the MCU the crop starts in, and leaves out the
inverse DCT, the colour conversion and the upsampling of the rest: on photographs of ImageNet's size a
RandomResizedCrop's region costs about 0.8 of the whole image's decode (``bench/region_decode.py``).

The pixels are those of the whole image's decode, bit for bit: one MCU more than the crop is decoded on every
side, so that chroma upsampling at the region's edges (which treats them as the image's) never reaches the
crop's pixels, and the same slow-integer inverse DCT and smooth upsampling are used as simplejpeg's and Pillow's.

The library: the TurboJPEG 3 library that the ``turbojpeg`` wheels bundle (``pip install "basetrainer[region]"``:
Linux x86-64 and Windows for Python 3.9-3.13, macOS arm64 for 3.9-3.12), else a system one that has the
TurboJPEG 3 API (libjpeg-turbo 3.0 and later). Without either, :func:`region_decoder` is None and images are
decoded whole, as before (``MISSING``, the start-up line's note). Python's ``turbojpeg`` module itself is
not imported: its bindings take no region.
"""
import ctypes
import ctypes.util
import functools
import importlib.metadata
import threading
from typing import Optional

import numpy as np

MISSING = ('JPEG crops decoded whole; pip install "basetrainer[region]" (libjpeg-turbo 3) decodes only each '
           "crop's region, a fifth less decoding")

_INIT_DECOMPRESS = 1
_JPEG_WIDTH, _JPEG_HEIGHT, _SUBSAMPLING = 5, 6, 4  # TJPARAM_JPEGWIDTH, TJPARAM_JPEGHEIGHT, TJPARAM_SUBSAMP
_RGB = 0  # TJPF_RGB
# An MCU's (width, height) in pixels for each TJSAMP_*: 4:4:4, 4:2:2, 4:2:0, grey, 4:4:0, 4:1:1, 4:4:1
_MCU = {0: (8, 8), 1: (16, 8), 2: (16, 16), 3: (8, 8), 4: (8, 16), 5: (32, 8), 6: (8, 32)}


class _Box(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Scale(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


_WHOLE = _Scale(1, 1)


def _candidates():
    """Paths of TurboJPEG libraries: the ``turbojpeg`` wheel's own (its name carries a hash), then the system's."""
    try:
        files = importlib.metadata.distribution("turbojpeg").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        name = file.name.lower()
        if "turbojpeg" in name and (".so" in name or name.endswith((".dylib", ".dll"))) and "cpython" not in name \
                and not name.endswith(".pyd"):
            yield str(file.locate())
    system = ctypes.util.find_library("turbojpeg")
    if system:
        yield system


def _load():
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "tj3SetCroppingRegion"):
            return _declare(lib)
    return None


def _declare(lib):
    handle, data, size = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t
    lib.tj3Init.restype, lib.tj3Init.argtypes = handle, [ctypes.c_int]
    lib.tj3DecompressHeader.argtypes = [handle, data, size]
    lib.tj3Get.argtypes = [handle, ctypes.c_int]
    lib.tj3SetScalingFactor.argtypes = [handle, _Scale]
    lib.tj3SetCroppingRegion.argtypes = [handle, _Box]
    lib.tj3Decompress8.argtypes = [handle, data, size, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.tj3Destroy.argtypes = [handle]
    return lib


class _Handle:
    """A TurboJPEG decompressor, destroyed with its thread's local data (or the process)."""

    def __init__(self, lib):
        self.lib, self.pointer = lib, lib.tj3Init(_INIT_DECOMPRESS)

    def __del__(self):
        self.lib.tj3Destroy(self.pointer)


class RegionDecoder:
    """Decodes a box of a JPEG to RGB, each thread with its own TurboJPEG handle (a loader worker is a process of
    its own: a forked handle is a copy, used by that process alone)."""

    def __init__(self, lib):
        self.lib = lib
        self.local = threading.local()

    def _handle(self):
        handle = getattr(self.local, "handle", None)
        if handle is None:
            handle = self.local.handle = _Handle(self.lib)
        return handle.pointer

    def decode(self, data, box, reduction=1) -> Optional[np.ndarray]:
        """The RGB uint8 ``(height, width, 3)`` view of ``box`` (``top, left, height, width``, in the image
        decoded at ``1 / reduction`` of its size: 1, 2, 4 or 8), or None where libjpeg-turbo refuses the data or
        warns about it (the caller decodes it another way, which says why)."""
        lib, handle = self.lib, self._handle()
        data = np.frombuffer(data, np.uint8)  # bytes, a buffer or an array's, not copied
        address, size = data.ctypes.data, data.size
        if lib.tj3DecompressHeader(handle, address, size) != 0:
            return None
        width, height = lib.tj3Get(handle, _JPEG_WIDTH), lib.tj3Get(handle, _JPEG_HEIGHT)
        mcu = _MCU.get(lib.tj3Get(handle, _SUBSAMPLING))
        if mcu is None:
            return None
        # libjpeg-turbo's scaled sizes round up; its scaled MCU is the MCU / reduction
        width, height = -(-width // reduction), -(-height // reduction)
        mcu_w, mcu_h = max(1, mcu[0] // reduction), max(1, mcu[1] // reduction)
        top, left, rows, columns = box
        x = max(0, (left // mcu_w - 1) * mcu_w)
        y = max(0, top - mcu_h)
        w = min(width, left + columns + mcu_w) - x
        h = min(height, top + rows + mcu_h) - y
        if lib.tj3SetScalingFactor(handle, _Scale(1, reduction) if reduction > 1 else _WHOLE) != 0 or \
                lib.tj3SetCroppingRegion(handle, _Box(x, y, w, h)) != 0:
            return None
        out = np.empty((h, w, 3), np.uint8)
        if lib.tj3Decompress8(handle, address, size, out.ctypes.data, w * 3, _RGB) != 0:
            return None
        return out[top - y:top - y + rows, left - x:left - x + columns]


@functools.cache
def region_decoder() -> Optional[RegionDecoder]:
    """The process's :class:`RegionDecoder`, or None where no TurboJPEG 3 library is found (found once)."""
    lib = _load()
    return RegionDecoder(lib) if lib is not None else None
