"""A JPEG's size and components are read from its frame header as Pillow reads them, whatever comes before it
(EXIF, fill bytes, progressive frames), and anything that is not such a JPEG is None, never an exception."""
import io
import random

import numpy as np
import pytest
import torch
from PIL import Image

from basetrainer.data.images.jpeg_header import JpegHeader, jpeg_header


def jpeg(mode="RGB", size=(67, 45), **save):
    stream = io.BytesIO()
    Image.new(mode, size, 90).save(stream, format="JPEG", **save)
    return stream.getvalue()


def exif_of_64_kb():
    exif = Image.Exif()
    exif[0x010E] = "x" * 60000  # ImageDescription: an APP1 segment of 60 KB before the frame header
    return exif


@pytest.mark.parametrize("mode, save, components", [
    ("RGB", {}, 3),
    ("RGB", {"progressive": True}, 3),
    ("RGB", {"subsampling": 0, "quality": 95}, 3),
    ("L", {}, 1),
    ("CMYK", {}, 4),
    ("RGB", {"exif": exif_of_64_kb()}, 3),
])
def test_the_header_gives_what_pillow_reads(mode, save, components):
    data = jpeg(mode, (67, 45), **save)
    assert jpeg_header(data) == JpegHeader(width=67, height=45, components=components)
    assert Image.open(io.BytesIO(data)).size == (67, 45)


def test_fill_bytes_before_a_marker_are_skipped():
    data = jpeg()
    assert jpeg_header(data[:2] + b"\xff\xff\xff" + data[2:]) == JpegHeader(67, 45, 3)


@pytest.mark.parametrize("data", [
    b"", b"\xff", b"\xff\xd8", b"\x89PNG\r\n\x1a\n" + bytes(40), b"GIF89a" + bytes(40),
    b"\xff\xd8\xff\xda\x00\x08" + bytes(20),  # scan data before any frame header
    b"\xff\xd8\xff\xe0\x00\x01" + bytes(20),  # a segment length under 2
    b"\xff\xd8\x00\x00" + bytes(20),  # no marker where one must be
])
def test_what_is_not_a_readable_jpeg_header_is_none(data):
    assert jpeg_header(data) is None


def test_a_frame_header_with_height_zero_is_left_to_pillow():
    data = bytearray(jpeg())
    at = data.index(b"\xff\xc0")
    data[at + 5:at + 7] = b"\x00\x00"  # the height comes later, in a DNL segment
    assert jpeg_header(bytes(data)) is None


def test_every_truncation_and_random_damage_is_none_or_the_true_header():
    data = jpeg(exif=exif_of_64_kb())
    frame_end = data.index(b"\xff\xc0") + 10
    for end in range(len(data[:frame_end + 40])):
        header = jpeg_header(data[:end])
        assert header is None if end < frame_end else header == JpegHeader(67, 45, 3)
    chooser = random.Random(0)
    small = jpeg()
    for _ in range(2000):
        damaged = bytearray(small)
        for _ in range(chooser.randint(1, 4)):
            damaged[chooser.randrange(len(damaged))] = chooser.randrange(256)
        header = jpeg_header(bytes(damaged))
        assert header is None or isinstance(header, JpegHeader)


def test_a_uint8_array_reads_as_its_bytes():
    data = jpeg()
    assert jpeg_header(np.frombuffer(data, dtype=np.uint8)) == JpegHeader(67, 45, 3)
    assert jpeg_header(torch.frombuffer(bytearray(data), dtype=torch.uint8).numpy()) == JpegHeader(67, 45, 3)
