"""PNG image folders for the workflow tests, written with the standard library only (zlib).

  png_folder.py folder ROOT CLASSES...      ROOT/train/<class>/*.png and ROOT/test/<class>/*.png:
                                            40 training and 10 test images per class, of mixed sizes
  png_folder.py image PATH CLASS W H        one W x H image of CLASS (a colour class: red, green, blue)
  png_folder.py huge PATH W H               a W x H gray image, compressed row by row (10000 x 10000:
                                            100 MB of pixels in a file of about 100 kB)
  png_folder.py header PATH W H             a header saying W x H and one row of pixels

A class is a colour: its images are that colour's channel high and the others low, with noise and
a lighter square at a random place, so a small convolutional network learns them in a few epochs.
"""
import os
import random
import struct
import sys
import zlib

COLOURS = {"red": 0, "green": 1, "blue": 2}


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(width, height, rows, colour_type=2):
    """rows: an iterable of `height` byte strings of one scanline each (without the filter byte)."""
    z = zlib.compressobj(6)
    body = b"".join(z.compress(b"\x00" + row) for row in rows) + z.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def colour_image(path, cls, width, height, rng):
    channel = COLOURS[cls]
    sx, sy = rng.randrange(width // 2), rng.randrange(height // 2)
    rows = []
    for y in range(height):
        row = bytearray()
        for x in range(width):
            lift = 60 if sx <= x < sx + width // 2 and sy <= y < sy + height // 2 else 0
            for c in range(3):
                base = 170 if c == channel else 50
                row.append(max(0, min(255, base + lift + rng.randrange(-40, 41))))
        rows.append(bytes(row))
    with open(path, "wb") as f:
        f.write(png_bytes(width, height, rows))


def folder(root, classes):
    rng = random.Random(0)
    for split, count in (("train", 40), ("test", 10)):
        for cls in classes:
            d = os.path.join(root, split, cls)
            os.makedirs(d, exist_ok=True)
            for i in range(count):
                colour_image(os.path.join(d, f"{i:03d}.png"), cls, rng.choice([16, 20, 24]), rng.choice([16, 18]), rng)


def huge(path, width, height):
    row = bytes(width)
    with open(path, "wb") as f:
        f.write(png_bytes(width, height, (row for _ in range(height)), colour_type=0))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "folder":
        folder(sys.argv[2], sys.argv[3:])
    elif what == "image":
        colour_image(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), random.Random(sys.argv[2]))
    elif what == "header":
        with open(sys.argv[2], "wb") as f:
            f.write(png_bytes(int(sys.argv[3]), int(sys.argv[4]), [bytes(int(sys.argv[3]))], colour_type=0))
    elif what == "huge":
        huge(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(f"png_folder.py: unknown mode {what}")
