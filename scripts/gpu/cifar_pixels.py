#!/usr/bin/env python3
"""The sha256 of the pixels in CIFAR-10 binaries made by prepare-cifar10.sh, in the image
folder's class-sorted order (class, then file name; order.txt maps each record to its JPEG), so
it compares with `minidl bench data`'s and scripts/bench/pil_decode.py's hashes. Standard library only.
usage: cifar_pixels.py CIFAR10_DIR
"""
import hashlib
import os
import sys

RECORD = 3073


def main(d):
    records = {"train": b"".join(open(os.path.join(d, f"data_batch_{i}.bin"), "rb").read() for i in range(1, 6)),
               "test": open(os.path.join(d, "test_batch.bin"), "rb").read()}
    names = {"train": [], "test": []}
    for line in open(os.path.join(d, "order.txt")):
        split, index, name = line.split()
        names[split].append((name, int(index)))
    for split in ("train", "test"):
        raw = records[split]
        h = hashlib.sha256()
        # Class folders are named so that sorting the names sorts by label too; check it.
        ordered = sorted(names[split])
        labels = [raw[i * RECORD] for _, i in ordered]
        assert labels == sorted(labels), "class names do not sort in label order"
        for _, i in ordered:
            h.update(raw[i * RECORD + 1:(i + 1) * RECORD])
        print(f"pixels sha256 (class-sorted) {split} {h.hexdigest()}  ({len(ordered)} images of {d})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
