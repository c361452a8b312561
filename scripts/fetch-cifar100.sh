#!/usr/bin/env bash
# Downloads the official CIFAR-100 binary archive (168,513,733 bytes), checks its md5 and unpacks
# it into DIR, giving DIR/cifar-100-binary/{train.bin,test.bin,fine_label_names.txt,
# coarse_label_names.txt}; minidl accepts DIR or DIR/cifar-100-binary as data.dir with
# "format": "cifar100" (configs/resnet9_cifar100.json). Idempotent: does nothing when the files
# are there. Offline, scripts/cifar100_standin.py writes CIFAR-10 in CIFAR-100's layout instead
# (what the tests use).
# usage: scripts/fetch-cifar100.sh DIR
set -euo pipefail
exec bash "$(dirname "$0")/fetch-archive.sh" cifar100 https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz \
  03b5dce01913d631647c71ecec9e9cb8 "${1:?usage: fetch-cifar100.sh DIR}" cifar-100-binary \
  train.bin test.bin fine_label_names.txt coarse_label_names.txt
