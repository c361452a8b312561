#!/usr/bin/env bash
# The typed schema (core/fields.h) on the GPU, in one device run: the layer table, schema and
# config tests, the [cuda] tests of every layer family (each module now built from its spec), and
# the bits of two shipped configs against a build from before the change: resnet9_bf16 over 200
# steps and vit_cifar10 over 100, each `minidl repro` (graphed against eager) with both binaries,
# whose final weights' sha256 must be equal.
#   scripts/gpu/schema.sh BASE_BIN_DIR BIN_DIR OUT_DIR   (both built here, sm_90, same flags)
# The data is $CIFAR10_DIR, else decoded into OUT_DIR/cifar10 (scripts/gpu/run_stage.sh). Exits 1
# when a stage fails or a hash differs.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=${1:?usage: schema.sh BASE_BIN_DIR BIN_DIR OUT_DIR}
bin=${2:?usage: schema.sh BASE_BIN_DIR BIN_DIR OUT_DIR}
out=${3:?usage: schema.sh BASE_BIN_DIR BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
run timeout 300 "$bin/minidl_tests" "[registry],[fields],[config],[schedule],[optim],[muon],[lookahead]"
run timeout 400 "$bin/minidl_tests" "[cuda]"
same_bits "$base" "$bin" resnet9_bf16:200 vit_cifar10:100
gpu_finish schema
