"""A JPEG's pixel size and number of colour components, read from its frame header: no pixel decoded, nothing
copied, no image library asked (Pillow's ``Image.open`` spends longer finding the format than this takes).

The file is walked marker by marker from its start (SOI) to its first frame header (SOF0-SOF15, baseline,
progressive or lossless), skipping every segment before it by its length. Anything else (another format, a
truncated or malformed file, a height left to a DNL segment) is ``None``, and the caller asks Pillow, which
opens what it can and says in its own words why it cannot.
"""
import dataclasses
from typing import Optional

_FRAME_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # not DHT, JPG, DAC
_NO_LENGTH = frozenset(range(0xD0, 0xDA)) | {0x01}  # RSTn, SOI, EOI, TEM: markers without a segment
_START_OF_SCAN = 0xDA


@dataclasses.dataclass(frozen=True)
class JpegHeader:
    width: int
    height: int
    components: int  # 1 grey, 3 YCbCr or RGB, 4 CMYK or YCCK


def jpeg_header(data) -> Optional[JpegHeader]:
    """The frame header of the JPEG whose bytes are ``data`` (bytes, or a uint8 array or tensor's numpy view),
    or None where ``data`` is not a JPEG with a readable one."""
    view = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    end = len(view)
    if end < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    at = 2
    while at + 4 <= end:
        if view[at] != 0xFF:
            return None
        marker = view[at + 1]
        if marker == 0xFF:  # a fill byte before the marker
            at += 1
            continue
        if marker in _NO_LENGTH:
            at += 2
            continue
        if marker == _START_OF_SCAN:
            return None  # image data before any frame header
        length = (view[at + 2] << 8) | view[at + 3]
        if length < 2:
            return None
        if marker in _FRAME_MARKERS:
            if length < 8 or at + 10 > end:
                return None
            height = (view[at + 5] << 8) | view[at + 6]
            width = (view[at + 7] << 8) | view[at + 8]
            if not (height and width):
                return None
            return JpegHeader(width=width, height=height, components=view[at + 9])
        at += 2 + length
    return None
