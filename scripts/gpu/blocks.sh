#!/usr/bin/env bash
# The blocks of modern backbones and their three configs on the GPU, minidl beside the PyTorch twin
# built from the same JSON (scripts/torch/model_from_json.py), in one device run:
#   scripts/gpu/blocks.sh BIN_DIR OUT_DIR [CONFIG...]
# BIN_DIR holds the built `minidl` and `minidl_tests` (nothing is built here); the configs default
# to configs/resnet18.json, mobilenetv2.json and convnext_cifar.json. Keeping every log in OUT_DIR:
#   1. the CUDA tests of the new layers (SiLU, Hardswish, Sigmoid, the fused activations of
#      BatchNorm2d / GroupNorm / LayerNorm against the float64 oracle, AvgPool2d,
#      AdaptiveAvgPool2d, LayerNorm2d, LayerScale2d, the projection Residual), in every dtype and
#      layout;
#   2. per config: the parameter count of minidl's model against the twin's, `minidl bench train`
#      (bf16 channels_last, batch 512: the config's "auto" on these GPUs) and
#      scripts/torch/bench_twin.py (the twin under bf16 autocast and channels_last, eager and
#      torch.compile);
# then prints ms/step side by side with the ratios and the targets (ResNet-18 >= 1.4x eager
# and >= 1.05x torch.compile, MobileNetV2 >= 1.5x eager, ConvNeXt >= 1.3x eager and >= 1.0x
# torch.compile). Exits non-zero if a stage fails or a parameter count differs.
set -euo pipefail
bin=${1:?usage: blocks.sh BIN_DIR OUT_DIR [CONFIG...]}
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "${2:?usage: blocks.sh BIN_DIR OUT_DIR [CONFIG...]}"
shift 2
configs=("$@")
if [ ${#configs[@]} -eq 0 ]; then
  for name in resnet18 mobilenetv2 convnext_cifar; do
    if [ -f "$root/configs/$name.json" ]; then configs+=("$root/configs/$name.json"); else
      echo "blocks.sh: configs/$name.json is not in this tree (it needs Conv2d's groups); left out"; fi
  done
fi
data=$CIFAR10_DIR
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true

run timeout 600 "$bin/minidl_tests" "[activation][cuda],[pool][cuda],[blocks][cuda],[norm][cuda]" 2>&1 |
  tee "$out/cuda_tests.log" | tail -5 || true

# PyTorch parity (scripts/parity/parity.py, docs/parity.md): every layer case with the first
# config's training step, then the step of each other config, against the twin on the CPU and
# CUDA. Dropout and DropPath draw their masks from different generators in the two frameworks,
# so their p is 0 in the step's copy of a config.
only=()
for config in "${configs[@]}"; do
  name=$(basename "$config" .json)
  python3 - "$config" "$out/${name}_parity.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
def zero(layers):
    for l in layers:
        if l["type"] in ("Dropout", "DropPath"):
            l["p"] = 0.0
        for key in ("body", "shortcut", "layers"):
            if isinstance(l.get(key), list):
                zero(l[key])
zero(c["model"]["layers"])
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  run timeout 900 python3 "$root/scripts/parity/parity.py" --minidl "$bin/minidl" --out "$out/${name}_parity" \
    --config "$out/${name}_parity.json" "${only[@]}" 2>&1 | tee "$out/${name}_parity.log" | tail -3 || true
  only=(--only "step")
done

for config in "${configs[@]}"; do
  name=$(basename "$config" .json)
  run timeout 300 "$bin/minidl" train --config "$config" --device cuda --set data.dir="$data" --max-steps 2 \
    --set output.progress=false --output "$out/${name}_run" --overwrite > "$out/${name}_train.log" 2>&1 || true
  grep -m1 "parameters" "$out/${name}_train.log" || tail -5 "$out/${name}_train.log"
  run timeout 300 "$bin/minidl" bench train --config "$config" --device cuda --set data.dir="$data" --steps 50 \
    2>&1 | tee "$out/${name}_bench.log" || true
  run timeout 600 python3 "$root/scripts/torch/bench_twin.py" --config "$config" --out "$out/${name}_twin.json" \
    --steps 50 2>&1 | tee "$out/${name}_twin.log" || true
done

echo "== minidl against its PyTorch twin (bf16 channels_last, batch 512; ratios above 1: minidl is faster)"
python3 - "$out" "${configs[@]}" <<'PY' || echo "rc=1: the side-by-side check" >> "$out/FAILED"
import json, os, re, sys
out, configs = sys.argv[1], sys.argv[2:]
targets = {"resnet18": (1.4, 1.05), "mobilenetv2": (1.5, None), "convnext_cifar": (1.3, 1.0)}
ok = True
for path in configs:
    name = os.path.basename(path)[:-5]
    read = lambda f: open(f).read() if os.path.exists(f) else ""
    params = re.search(r"([0-9]+) parameters", read(f"{out}/{name}_train.log"))
    step = re.search(r"training: +([0-9.]+) ms/step", read(f"{out}/{name}_bench.log"))
    twin = json.load(open(f"{out}/{name}_twin.json")) if os.path.exists(f"{out}/{name}_twin.json") else {}
    ms = float(step.group(1)) if step else None
    eager = twin.get("eager", {}).get("ms_per_step")
    comp = twin.get("compile", {}).get("ms_per_step")
    mine = int(params.group(1)) if params else None
    same = mine is not None and mine == twin.get("parameters")
    ok = ok and same
    print(f"{name}: parameters minidl {mine}, twin {twin.get('parameters')} ({'same' if same else 'DIFFERENT'})")
    print(f"  minidl {ms} ms/step; PyTorch {twin.get('torch', '?')} eager {eager} ms/step, torch.compile {comp} ms/step")
    if ms and eager:
        te, tc = targets.get(name, (None, None))
        line = f"  {eager / ms:.2f}x eager" + (f" (target {te}x)" if te else "")
        if comp:
            line += f", {comp / ms:.2f}x torch.compile" + (f" (target {tc}x)" if tc else "")
        print(line)
sys.exit(0 if ok else 1)
PY
gpu_finish blocks
