#!/usr/bin/env bash
# Downloads the official CIFAR-10 binary archive, checks its md5 and unpacks it into DIR, giving
# DIR/cifar-10-batches-bin/{data_batch_1..5.bin,test_batch.bin,batches.meta.txt}; minidl accepts
# DIR or DIR/cifar-10-batches-bin as data.dir. Idempotent: does nothing when the files are there.
# usage: scripts/fetch-cifar10.sh DIR
set -euo pipefail
exec bash "$(dirname "$0")/fetch-archive.sh" cifar10 https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz \
  c32a1d4ab5d03f1284b67883e8d87530 "${1:?usage: fetch-cifar10.sh DIR}" cifar-10-batches-bin \
  data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin
