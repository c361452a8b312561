#!/usr/bin/env bash
# Downloads an archive, checks its md5 and unpacks it into DIR, which then holds DIR/SUBDIR/FILE
# for every FILE named; idempotent: does nothing when those files are there. A download goes to
# a .part file first, and an archive whose md5 differs is named and kept for inspection, not
# unpacked. scripts/fetch-cifar10.sh and scripts/fetch-cifar100.sh call it.
# usage: scripts/fetch-archive.sh NAME URL MD5 DIR SUBDIR FILE...
set -euo pipefail
name=$1 url=$2 md5=$3 out=$4 sub=$5
shift 5
files=("$@")

complete() {
  local f
  for f in "${files[@]}"; do [ -f "$out/$sub/$f" ] || return 1; done
}
if complete; then echo "$name: already in $out/$sub"; exit 0; fi

mkdir -p "$out"
archive="$out/$(basename "$url")"
part="$archive.part"
if [ ! -f "$archive" ]; then
  echo "$name: downloading $url"
  if command -v curl >/dev/null 2>&1; then
    curl -fL --retry 3 -o "$part" "$url"
  elif command -v wget >/dev/null 2>&1; then
    wget -O "$part" "$url"
  else
    echo "fetch-$name: needs curl or wget" >&2; exit 1
  fi
  mv "$part" "$archive"
fi
got=$(md5sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$md5" ]; then
  echo "fetch-$name: $archive has md5 $got, expected $md5 (corrupt download: delete it and retry)" >&2
  exit 1
fi
tar -xzf "$archive" -C "$out"
complete || { echo "fetch-$name: $out/$sub is incomplete after unpacking" >&2; exit 1; }
rm -f "$archive"
echo "$name: unpacked into $out/$sub"
