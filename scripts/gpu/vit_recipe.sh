#!/usr/bin/env bash
# Which of the PyTorch twin's recipe differences move the ViT's accuracy: configs/vit_cifar10.json
# trained as shipped and with each difference the config can express, alone and together, for
# the full 30 epochs, each with the given seeds; prints one table of test accuracies.
#   twin_schedule: the warm-up multiplied into a cosine over the whole run (decay_over "run")
#   own_stats:     per-channel normalization with the training set's own mean and std ("auto")
#   pos_no_decay:  the position embedding kept out of weight decay (the twin decays only the
#                  matrices of its Linear and Conv2d layers)
#   all:           the three together
#   scripts/gpu/vit_recipe.sh BIN_DIR OUT_DIR [SEEDS]    (SEEDS: "0 1" by default)
# BIN_DIR holds the built minidl. The data is $CIFAR10_DIR, else decoded into OUT_DIR/cifar10.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: vit_recipe.sh BIN_DIR OUT_DIR [SEEDS]}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "${2:?usage: vit_recipe.sh BIN_DIR OUT_DIR [SEEDS]}"
seeds=${3:-0 1}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

# Each variant is the shipped config with its changes, written into OUT_DIR.
python3 - "$root/configs/vit_cifar10.json" "$out" <<'PY'
import copy, json, sys
shipped = json.load(open(sys.argv[1]))
def twin_schedule(c): c["schedule"]["decay_over"] = "run"
def own_stats(c): c["data"]["mean"] = c["data"]["std"] = "auto"
def pos_no_decay(c): c["optimizer"]["groups"].append({"module_type": "PositionEmbedding", "weight_decay": 0})
changes = {"shipped": [], "twin_schedule": [twin_schedule], "own_stats": [own_stats],
           "pos_no_decay": [pos_no_decay], "all": [twin_schedule, own_stats, pos_no_decay]}
for name, edits in changes.items():
    c = copy.deepcopy(shipped)
    for edit in edits: edit(c)
    json.dump(c, open(f"{sys.argv[2]}/{name}.json", "w"), indent=2)
PY
printf '%-14s %6s %9s\n' variant seed test_acc > "$out/table.txt"
for name in shipped twin_schedule own_stats pos_no_decay all; do
  for seed in $seeds; do
    dir=$out/$name-$seed
    run timeout 300 "$bin/minidl" train --config "$out/$name.json" --device cuda --set seed="$seed" \
      --set data.dir="$CIFAR10_DIR" --set output.progress=false --output "$dir" --overwrite > "$dir.log" 2>&1
    acc=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['test_acc'])" "$dir/summary.json" 2>/dev/null || echo failed)
    printf '%-14s %6s %9s\n' "$name" "$seed" "$acc" | tee -a "$out/table.txt"
  done
done
cat "$out/table.txt"
gpu_finish vit_recipe
