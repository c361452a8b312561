#!/usr/bin/env bash
# docs/config.md is generated: it must be what `minidl config --doc` prints now.
# usage: config_doc_test.sh MINIDL SOURCE_DIR
set -euo pipefail
minidl=$1 root=$2
if ! diff -u "$root/docs/config.md" <("$minidl" config --doc); then
  echo "docs/config.md is stale: regenerate it with  build/minidl config --doc > docs/config.md" >&2
  exit 1
fi
echo "docs/config.md matches minidl config --doc"
