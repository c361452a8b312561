#!/usr/bin/env bash
# The one entry point for the GPU checks and benchmarks (docs/perf/), in one device run.
#   scripts/gpu/check_all.sh BIN_DIR OUT_DIR [STAGES]
# BIN_DIR holds minidl and minidl_tests built with CUDA (sm_90); each stage writes under
# OUT_DIR/<stage>/; the data is $CIFAR10_DIR, else CIFAR-10 decoded into OUT_DIR/cifar10
# (scripts/gpu/run_stage.sh). STAGES (default "tests bench"), any of:
#   tests      the [cuda] tests
#   op_harness every layer's examples on CUDA against the CPU, every dtype and layout, graphed (op_harness.sh)
#   bench      train/profile benchmarks of ResNet-9 beside PyTorch, then the norm, conv and parity stages
#   norm       minidl bench norm beside PyTorch (scripts/gpu/norm.sh)
#   conv       minidl bench conv beside PyTorch (scripts/gpu/conv.sh)
#   depthwise  grouped/depthwise tests, our depthwise kernels beside the floor and PyTorch (scripts/gpu/depthwise.sh)
#   unet3d     the volume layers' tests, GroupNorm/BatchNorm3d at a 128^3 UNet's shapes (scripts/gpu/unet3d.sh)
#   parity     every layer and one ResNet-9 step against PyTorch (scripts/gpu/parity.sh)
#   train      the three ResNet-9 configs trained to the end
#   torchtrain PyTorch's BatchNorm ResNet-9 trained to the end
#   torch_resnet9  PyTorch's ResNet-9 step times, profile and training run (scripts/gpu/torch_resnet9.sh)
#   repro      minidl repro and a resume check on the GPU
#   graph      CUDA graph tests, graphed-vs-eager bit identity and step times (scripts/gpu/graph.sh)
#   half       the [half] tests and bf16/fp16 safetensors against PyTorch (half_safetensors.sh)
#   precision  bf16/fp16 training (docs/perf/precision.md): the half GPU kernels' tests, repro
#              (bf16 graphed against eager, fp16), step times beside PyTorch autocast + channels_last
#   airbench   time to accuracy of the airbench recipes (scripts/gpu/airbench.sh)
#   norm_single_read  the single-read normalization paths (scripts/gpu/norm_single_read.sh)
#   onnx       ONNX round trip through onnxruntime (scripts/gpu/onnx_check.sh)
#   tensorboard  TensorBoard round trip (scripts/gpu/tensorboard_check.sh)
#   profile    the profile with its roofline beside bench conv (scripts/gpu/profile_check.sh)
#   image_folder  airbench94 from the CIFAR-10 JPEG folder against the binaries (scripts/gpu/image_folder.sh)
#   validation  a validation split, early stopping and the best checkpoint, resumed (scripts/gpu/validation.sh)
#   workflow   eval and predict on CUDA against training, PyTorch's weights through init_from (scripts/gpu/workflow.sh)
# A failing stage does not stop the next; the script exits 1 when any failed, listing them.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: check_all.sh BIN_DIR OUT_DIR [STAGES]}
out=${2:?usage: check_all.sh BIN_DIR OUT_DIR [STAGES]}
stages=${3:-tests bench}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
data=$CIFAR10_DIR
# The configs' "auto" precision trains bf16 channels_last on this GPU; the stages that sit beside
# PyTorch float32 or reproduce float32 figures and hashes (README, docs/perf) name float32 NCHW.
fp32=(--set precision=fp32 --set memory_format=contiguous)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true
[ "$stages" = "${stages/bench/}" ] || stages=${stages/bench/bench norm conv parity}
for stage in $stages; do
  s=$out/$stage
  mkdir -p "$s"
  case $stage in
    tests)
      run timeout 300 "$bin/minidl_tests" "[cuda]" 2>&1 | tee "$s/cuda_tests.log" | grep -vE "^(\.\.\.|---|~~~)" | tail -80 ;;
    bench)
      {
        run timeout 120 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 30 "${fp32[@]}"
        run timeout 120 "$bin/minidl" profile --config "$root/configs/resnet9.json" --device cuda --steps 10 "${fp32[@]}" \
          --output "$s/profile"
        run timeout 120 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" --data "$data" \
          --time-steps 30 --profile --out "$s/torch_time.json"
      } 2>&1 | tee "$s/bench_train.log" ;;
    norm)
      run timeout 200 bash "$root/scripts/gpu/norm.sh" "$bin/minidl" "$s" 2>&1 | tee "$s/norm.log" | tail -40 ;;
    conv)
      run timeout 150 bash "$root/scripts/gpu/conv.sh" "$bin/minidl" "$s" 2>&1 | tee "$s/conv.log" | tail -30 ;;
    depthwise)
      run timeout 500 bash "$root/scripts/gpu/depthwise.sh" "$bin" "$s" 2>&1 | tee "$s/depthwise.log" | tail -36 ;;
    unet3d)
      run timeout 500 bash "$root/scripts/gpu/unet3d.sh" "$bin" "$s" 2>&1 | tee "$s/unet3d.log" | tail -40 ;;
    parity)
      run timeout 200 bash "$root/scripts/gpu/parity.sh" "$bin/minidl" "$s" 2>&1 | tee "$s/parity.log" |
        grep -E "FAIL|parity:" | tail -30 ;;
    train)
      for cfg in resnet9 resnet9_groupnorm resnet9_layernorm; do
        run timeout 400 "$bin/minidl" train --config "$root/configs/$cfg.json" --device cuda "${fp32[@]}" --output "$s/$cfg"
      done 2>&1 | tee "$s/train.log" | grep -E "minidl train|epoch (1|12|24)/|done" ;;
    torchtrain)
      run timeout 300 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" --data "$data" \
        --epochs 0 --out "$s/torch_train.json" 2>&1 | tee "$s/torch_train.log" | tail -5 ;;
    torch_resnet9)
      run timeout 500 bash "$root/scripts/gpu/torch_resnet9.sh" "$s" "$data" 2>&1 | tee "$s/torch_resnet9.log" | tail -8 ;;
    validation)
      run timeout 600 bash "$root/scripts/gpu/validation.sh" "$bin" "$s" 2>&1 | tee "$s/validation.log" |
        grep -E "resume:|best:|per-class|FAILED|test cases" ;;
    graph)
      run bash "$root/scripts/gpu/graph.sh" "$bin" "$s" 2>&1 | tee "$s/graph.log" |
        grep -E "repro:|graphed resume|training:|GPU time|torch |FAILED|test cases" ;;
    half)
      run timeout 300 bash "$root/scripts/gpu/half_safetensors.sh" "$bin" "$s" 2>&1 | tee "$s/half.log" |
        grep -E "^==|half_safetensors|test cases|FAILED" | tail -30 ;;
    workflow)
      run timeout 400 bash "$root/scripts/gpu/workflow.sh" "$bin" "$s" 2>&1 | tee "$s/workflow.log" |
        grep -E "^==|epoch:|init_from|workflow.sh|Error|error" | tail -30 ;;
    precision)
      {
        run timeout 150 "$bin/minidl_tests" "[precision][cuda]"
        run timeout 90 "$bin/minidl" repro --config "$root/configs/resnet9.json" --device cuda --steps 200 \
          --set precision=bf16 --set memory_format=contiguous --set-b cuda_graph=false --output "$s/repro_bf16"
        run timeout 90 "$bin/minidl" repro --config "$root/configs/resnet9.json" --device cuda --steps 200 \
          --set precision=fp16 --set memory_format=contiguous --output "$s/repro_fp16"
        for p in fp32 bf16 fp16; do
          run timeout 60 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 50 \
            --set precision=$p --set memory_format=contiguous
        done
        for m in "--amp bf16 --channels-last" "--amp fp16 --channels-last" "--channels-last"; do
          run timeout 100 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" --data "$data" \
            --time-steps 50 --benchmark $m --out "$s/torch_amp.json"
        done
      } 2>&1 | tee "$s/precision.log" | grep -E "test cases|All tests|repro:|training:|GPU time|^time:|FAILED" ;;
    repro)
      {
        run timeout 200 "$bin/minidl" repro --config "$root/configs/resnet9.json" --device cuda --steps 200 "${fp32[@]}" \
          --output "$s/repro"
        run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 "${fp32[@]}" \
          --output "$s/full"
        run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 "${fp32[@]}" \
          --max-steps 194 --output "$s/resumed"
        run timeout 100 "$bin/minidl" train --resume "$s/resumed"
        if cmp -s "$s/full/steps.jsonl" "$s/resumed/steps.jsonl" && cmp -s "$s/full/model.safetensors" "$s/resumed/model.safetensors"; then
          echo "resume check: steps and weights identical"
        else
          echo "resume check: DIFFERENT"; echo "repro: resume differs" >> "$out/FAILED"
        fi
        run timeout 100 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 30 "${fp32[@]}" \
          --set deterministic=false
      } 2>&1 | tee "$s/repro.log" | grep -E "repro:|resume check|==|training:" ;;
    airbench)
      run timeout 580 bash "$root/scripts/gpu/airbench.sh" "$bin" "$s" 2>&1 | tee "$s/airbench.log" | tail -12 ;;
    norm_single_read)
      run timeout 300 bash "$root/scripts/gpu/norm_single_read.sh" "$bin" "$s" 2>&1 | tee "$s/norm_single_read.log" | tail -40 ;;
    op_harness)
      run timeout 300 bash "$root/scripts/gpu/op_harness.sh" "$bin" "$s" 2>&1 | tail -40 ;;
    onnx)
      run timeout 580 bash "$root/scripts/gpu/onnx_check.sh" "$bin" "$s" 2>&1 | tee "$s/onnx.log" | tail -8 ;;
    tensorboard)
      run timeout 300 bash "$root/scripts/gpu/tensorboard_check.sh" "$bin" "$s" 2>&1 | tee "$s/tensorboard.log" | tail -8 ;;
    profile)
      run timeout 300 bash "$root/scripts/gpu/profile_check.sh" "$bin" "$s" 2>&1 | tee "$s/profile.log" | tail -40 ;;
    image_folder)
      run timeout 580 bash "$root/scripts/gpu/image_folder.sh" "$bin" "$s" 2>&1 | tee "$s/image_folder.log" | tail -30 ;;
    *)
      echo "check_all.sh: unknown stage '$stage'" | tee -a "$out/FAILED" ;;
  esac
done
gpu_finish check_all.sh
