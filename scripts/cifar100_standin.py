#!/usr/bin/env python3
"""A CIFAR-100-layout stand-in made from decoded CIFAR-10, for the checks that need files in
CIFAR-100's binary layout and not its images: `minidl repro` of configs/resnet9_cifar100.json (same
bits twice, graphed against eager) on a machine that has only CIFAR-10.

Each record is <coarse label><fine label><3072 pixels>, as CIFAR-100's train.bin and test.bin.
Image i of the CIFAR-10 files (data_batch_1..5.bin, then test_batch.bin, in order) keeps its pixels
and gets fine label 10 * label + i % 10 and coarse label 2 * label + i % 2, so all 100 fine and 20
coarse classes occur. The accuracy of a run on it means nothing.

usage: cifar100_standin.py CIFAR10_DIR OUT_DIR [--limit N]   (N: at most N images per file)
"""
import argparse
import os
import sys

RECORD = 3073  # CIFAR-10: one label byte, then 3 x 32 x 32 pixels


def convert(src_dir, names, out_path, limit):
    written = 0
    with open(out_path, "wb") as out:
        for name in names:
            path = os.path.join(src_dir, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as e:
                sys.exit(f"cifar100_standin: cannot read {path}: {e.strerror} (scripts/data.sh decodes CIFAR-10)")
            if len(data) == 0 or len(data) % RECORD:
                sys.exit(f"cifar100_standin: {path}: {len(data)} bytes is not a whole number of {RECORD}-byte records")
            for r in range(len(data) // RECORD):
                if limit and written == limit:
                    return written
                rec = data[r * RECORD:(r + 1) * RECORD]
                label = rec[0]
                if label > 9:
                    sys.exit(f"cifar100_standin: {path}: record {r} has label {label}, not 0..9")
                out.write(bytes([2 * label + written % 2, 10 * label + written % 10]))
                out.write(rec[1:])
                written += 1
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cifar10_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--limit", type=int, default=0, help="at most this many images per file (0: all)")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    n_train = convert(a.cifar10_dir, [f"data_batch_{k}.bin" for k in range(1, 6)],
                      os.path.join(a.out_dir, "train.bin"), a.limit)
    n_test = convert(a.cifar10_dir, ["test_batch.bin"], os.path.join(a.out_dir, "test.bin"), a.limit)
    print(f"cifar100_standin: {n_train} training and {n_test} test images in {a.out_dir}")


if __name__ == "__main__":
    main()
