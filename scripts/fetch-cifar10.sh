#!/usr/bin/env bash
# Downloads the official CIFAR-10 binary archive, checks its md5 and unpacks it into DIR, giving
# DIR/cifar-10-batches-bin/{data_batch_1..5.bin,test_batch.bin,batches.meta.txt}; minidl accepts
# DIR or DIR/cifar-10-batches-bin as data.dir. Idempotent: does nothing when the files are there.
# usage: scripts/fetch-cifar10.sh DIR
set -euo pipefail
url=https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
md5=c32a1d4ab5d03f1284b67883e8d87530
out=${1:?usage: fetch-cifar10.sh DIR}
files="data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin"

complete() {
  local f
  for f in $files; do [ -f "$out/cifar-10-batches-bin/$f" ] || return 1; done
}
if complete; then echo "cifar10: already in $out/cifar-10-batches-bin"; exit 0; fi

mkdir -p "$out"
archive="$out/cifar-10-binary.tar.gz"
part="$archive.part"
if [ ! -f "$archive" ]; then
  echo "cifar10: downloading $url"
  if command -v curl >/dev/null 2>&1; then
    curl -fL --retry 3 -o "$part" "$url"
  elif command -v wget >/dev/null 2>&1; then
    wget -O "$part" "$url"
  else
    echo "fetch-cifar10: needs curl or wget" >&2; exit 1
  fi
  mv "$part" "$archive"
fi
got=$(md5sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$md5" ]; then
  echo "fetch-cifar10: $archive has md5 $got, expected $md5 (corrupt download: delete it and retry)" >&2
  exit 1
fi
tar -xzf "$archive" -C "$out"
complete || { echo "fetch-cifar10: $out/cifar-10-batches-bin is incomplete after unpacking" >&2; exit 1; }
rm -f "$archive"
echo "cifar10: unpacked into $out/cifar-10-batches-bin"
