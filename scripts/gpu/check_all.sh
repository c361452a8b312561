#!/usr/bin/env bash
# One device run of every GPU check and benchmark, for the lent H200 (see docs/perf/).
#   scripts/gpu/check_all.sh BIN_DIR OUT_DIR [STAGES]
# BIN_DIR holds minidl and minidl_tests built here (-arch sm_90); .devshare/ holds a copy of
# ../shared/{tools,data} and libgomp. STAGES (default "tests bench"): any of
#   tests   the [cuda] tests
#   bench   train/profile benchmarks of ResNet-9, norm and conv benchmarks beside PyTorch, parity
#   train   the three ResNet-9 configs trained to the end, PyTorch's BatchNorm run beside
#   repro   minidl repro and a resume check on the GPU
#   graph   CUDA graph tests, graphed-vs-eager bit identity and step times (scripts/gpu/graph.sh)
#   half    the [half] tests and bf16/fp16 safetensors against PyTorch (half_safetensors.sh)
#   precision  bf16/fp16 training (docs/perf/precision.md): the half GPU kernels' tests, repro
#           (bf16 graphed against eager, fp16), step times beside PyTorch autocast + channels_last
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: check_all.sh BIN_DIR OUT_DIR [STAGES]}
out=${2:?usage: check_all.sh BIN_DIR OUT_DIR [STAGES]}
stages=${3:-tests bench}
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/.devshare/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader
data=/tmp/cifar10
bash "$root/.devshare/tools/prepare-cifar10.sh" "$data" >/dev/null
export MINIDL_DATA_DIR=$data CIFAR10_DIR=$data
rm -f "$out/FAILED"
source "$root/scripts/gpu/run_stage.sh"
for stage in $stages; do
  case $stage in
    tests)
      run timeout 300 "$bin/minidl_tests" "[cuda]" 2>&1 | tee "$out/cuda_tests.log" | grep -vE "^(\.\.\.|---|~~~)" | tail -80 ;;
    bench)
      {
        run timeout 120 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 30
        run timeout 120 "$bin/minidl" profile --config "$root/configs/resnet9.json" --device cuda --steps 10 --output /tmp/prof
        run timeout 120 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" --data "$data" \
          --time-steps 30 --profile --out /tmp/torch_time.json
      } 2>&1 | tee "$out/bench_train.log"
      run timeout 200 bash "$root/scripts/gpu/norm.sh" "$bin/minidl" /tmp/norm 2>&1 | tee "$out/norm.log" | tail -40
      run timeout 150 bash "$root/scripts/gpu/conv.sh" "$bin/minidl" /tmp/conv 2>&1 | tee "$out/conv.log" | tail -30
      run timeout 200 bash "$root/scripts/gpu/parity.sh" "$bin/minidl" /tmp/parity 2>&1 | tee "$out/parity.log" | grep -E "FAIL|parity:" | tail -30 ;;
    train)
      for cfg in resnet9 resnet9_groupnorm resnet9_layernorm; do
        run timeout 400 "$bin/minidl" train --config "$root/configs/$cfg.json" --device cuda --output "/tmp/runs/$cfg"
      done 2>&1 | tee "$out/train.log" | grep -E "minidl train|epoch (1|12|24)/|done" ;;
    torchtrain)
      run timeout 300 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" --data "$data" \
        --epochs 0 --out /tmp/torch_train.json 2>&1 | tee "$out/torch_train.log" | tail -5 ;;
    graph)
      run bash "$root/scripts/gpu/graph.sh" "$bin" "$out/graph" 2>&1 | tee "$out/graph.log" |
        grep -E "repro:|graphed resume|training:|GPU time|torch |FAILED|test cases" ;;
    half)
      run timeout 300 bash "$root/scripts/gpu/half_safetensors.sh" "$bin" "$out/half" 2>&1 | tee "$out/half.log" |
        grep -E "^==|half_safetensors|test cases|FAILED" | tail -30 ;;
    precision)
      {
        run timeout 150 "$bin/minidl_tests" "[precision][cuda]"
        run timeout 90 "$bin/minidl" repro --config "$root/configs/resnet9.json" --device cuda --steps 200 \
          --set precision=bf16 --set-b cuda_graph=false --output /tmp/repro_bf16
        run timeout 90 "$bin/minidl" repro --config "$root/configs/resnet9.json" --device cuda --steps 200 \
          --set precision=fp16 --output /tmp/repro_fp16
        for p in fp32 bf16 fp16; do
          run timeout 60 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 50 \
            --set precision=$p
        done
        for m in "--amp bf16 --channels-last" "--amp fp16 --channels-last" "--channels-last"; do
          run timeout 100 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" --data "$data" \
            --time-steps 50 --benchmark $m --out /tmp/torch_amp.json
        done
      } 2>&1 | tee "$out/precision.log" | grep -E "test cases|All tests|repro:|training:|GPU time|^time:|FAILED" ;;
    repro)
      {
        run timeout 200 "$bin/minidl" repro --config "$root/configs/resnet9.json" --device cuda --steps 200 --output /tmp/repro
        run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 --output /tmp/full
        run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 --max-steps 194 --output /tmp/half
        run timeout 100 "$bin/minidl" train --resume /tmp/half
        echo "resume check: $(cmp -s /tmp/full/steps.jsonl /tmp/half/steps.jsonl && echo steps identical || echo steps DIFFER)," \
             "$(cmp -s /tmp/full/model.safetensors /tmp/half/model.safetensors && echo weights identical || echo weights DIFFER)"
        run timeout 100 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 30 --set deterministic=false
      } 2>&1 | tee "$out/repro.log" | grep -E "repro:|resume check|==|training:" ;;
  esac
done
if [ -s "$out/FAILED" ]; then
  echo "check_all.sh: failed:"
  cat "$out/FAILED"
  exit 1
fi
