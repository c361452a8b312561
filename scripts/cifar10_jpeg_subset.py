#!/usr/bin/env python3
"""Extracts a small, class-balanced image folder from the project's CIFAR-10 JPEG archive
(train/<class>/NNNN.jpg, test/<class>/NNNN.jpg), for the tests and the CI run from a folder.
Takes the first TRAIN_PER_CLASS / TEST_PER_CLASS files of each class in name order, so the
subset is the same on every machine. Standard library only.
usage: cifar10_jpeg_subset.py ARCHIVE OUTDIR [TRAIN_PER_CLASS=200] [TEST_PER_CLASS=100]
"""
import os
import sys
import tarfile


def main(archive, out, train_per_class=200, test_per_class=100):
    keep = {"train": train_per_class, "test": test_per_class}
    names = {}
    with tarfile.open(archive, "r:xz") as tf:
        members = [m for m in tf.getmembers() if m.isfile() and m.name.endswith(".jpg")]
        for m in members:
            split, cls, fname = m.name.split("/")[-3:]
            names.setdefault((split, cls), []).append((fname, m))
        wanted = {}
        for (split, cls), files in names.items():
            for fname, m in sorted(files, key=lambda t: t[0])[: keep.get(split, 0)]:
                wanted[m.name] = os.path.join(out, split, cls, fname)
        for m in members:
            if m.name in wanted:
                dst = wanted[m.name]
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(dst + ".tmp", "wb") as f:
                    f.write(tf.extractfile(m).read())
                os.replace(dst + ".tmp", dst)
    print(f"{out}: {len(wanted)} images")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:5]))
