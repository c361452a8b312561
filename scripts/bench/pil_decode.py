#!/usr/bin/env python3
"""PIL beside `minidl bench data`: decode an image folder's split with Pillow on N worker
processes (PyTorch DataLoader style), fit every image to S x S, and print images/s and the
sha256 of the decoded pixels (uint8 C x S x S planes, class-sorted order: classes in sorted
folder order, files in sorted path order, recursively, hidden entries skipped; the order
`minidl bench data` hashes in).

Fitting as minidl does: an S x S image is kept as decoded; otherwise "crop" (torchvision
Resize(S) + CenterCrop(S), bilinear with antialias), "pad" (longer side to S on black) or
"stretch". Only images that need no resizing are promised the same bytes as minidl's.
Needs python3-pil and python3-numpy.
usage: pil_decode.py ROOT --image-size S [--split train|test] [--workers N] [--resize crop|pad|stretch]
"""
import argparse
import hashlib
import multiprocessing as mp
import os
import time
from multiprocessing import shared_memory

import numpy as np
from PIL import Image

EXTENSIONS = (".jpg", ".jpeg", ".png")


def list_split(root):
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    files = []
    for label, c in enumerate(classes):
        found = []
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, c), followlinks=True):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for f in filenames:
                if not f.startswith(".") and f.lower().endswith(EXTENSIONS):
                    found.append(os.path.relpath(os.path.join(dirpath, f), root))
        files += [(p, label) for p in sorted(found)]
    return classes, files


def fit(img, size, mode):
    w, h = img.size
    if (w, h) == (size, size):
        return img
    if mode == "stretch":
        return img.resize((size, size), Image.BILINEAR)
    if mode == "crop":
        s = size / min(w, h)
        img = img.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BILINEAR)
        left, top = (img.size[0] - size) // 2, (img.size[1] - size) // 2
        return img.crop((left, top, left + size, top + size))
    s = size / max(w, h)
    small = img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
    canvas = Image.new("RGB", (size, size))
    canvas.paste(small, ((size - small.size[0]) // 2, (size - small.size[1]) // 2))
    return canvas


_shm = None


def _init(name):
    global _shm
    _shm = shared_memory.SharedMemory(name=name)


def _work(task):
    root, paths, first, size, mode = task
    out = np.ndarray((first + len(paths), 3, size, size), dtype=np.uint8, buffer=_shm.buf)
    for k, p in enumerate(paths):
        with Image.open(os.path.join(root, p)) as img:
            out[first + k] = np.asarray(fit(img.convert("RGB"), size, mode)).transpose(2, 0, 1)
    return len(paths)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--resize", default="crop", choices=["crop", "pad", "stretch"])
    a = ap.parse_args()
    root = os.path.join(a.root, a.split)
    classes, files = list_split(root)
    n, s = len(files), a.image_size
    shm = shared_memory.SharedMemory(create=True, size=n * 3 * s * s)
    try:
        chunk = 256
        tasks = [(root, [p for p, _ in files[i:i + chunk]], i, s, a.resize) for i in range(0, n, chunk)]
        with mp.Pool(a.workers, initializer=_init, initargs=(shm.name,)) as pool:
            pool.map(_work, tasks[:1])  # workers started and importing done before the clock
            t0 = time.perf_counter()
            done = sum(pool.map(_work, tasks))
            seconds = time.perf_counter() - t0
        pixels = bytes(shm.buf[: n * 3 * s * s])
    finally:
        shm.close()
        shm.unlink()
    assert done == n
    print(f"PIL {Image.__version__}: {n} images ({len(classes)} classes) of {root} at {s}x{s} ({a.resize}) "
          f"in {seconds:.3f} s: {n / seconds:.0f} images/s ({a.workers} worker processes)")
    print(f"pixels sha256 (class-sorted) {a.split} {hashlib.sha256(pixels).hexdigest()}")


if __name__ == "__main__":
    main()
