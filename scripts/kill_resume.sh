#!/usr/bin/env bash
# The kill test (docs/reliability.md): a small quick_cpu run is killed with SIGKILL at random
# moments (inside a step range, while evaluating, while a checkpoint or the weights are being
# written, while a background checkpoint write is held open, and once by a real `kill -9` after
# a random delay), resumed until it finishes, and must end with the same steps.jsonl, weights and
# epoch metrics as a run never killed.
# The kill points come from MINIDL_TEST_KILL_AT (core/test_hooks.h), so a failure replays with
# the seed the script prints. About a minute on 2 CPU cores.
# With --gpu the run is configs/resnet9_bf16.json on CUDA (bf16, channels_last, CUDA graph), the
# same 2 epochs of 8 steps at its batch of 512: a graphed step's state must resume as exactly.
# usage: scripts/kill_resume.sh [--gpu] MINIDL_BINARY CIFAR10_DIR [SEED]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: kill_resume.sh [--gpu] MINIDL_BINARY CIFAR10_DIR [SEED]"
gpu=0
[ "${1:-}" = "--gpu" ] && { gpu=1; shift; }
minidl=$(realpath "${1:?$usage}")
data=${2:?$usage}
[ -f "$data/test_batch.bin" ] || { echo "kill_resume: SKIPPED, no CIFAR-10 in '$data' (scripts/data.sh)"; exit 4; }
seed=${3:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$seed
work=$(mktemp -d /tmp/minidl_kill_resume.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "kill_resume: seed $seed (replay: scripts/kill_resume.sh MINIDL DATA $seed)"

# 2 epochs of 8 steps, a checkpoint every 3 steps and at each epoch's end, the last 2 kept.
if [ "$gpu" -eq 1 ]; then
  run=(--config "$root/configs/resnet9_bf16.json" --device cuda --set cuda_graph=true --set data.train_limit=4096)
else
  run=(--config "$root/configs/quick_cpu.json" --set data.train_limit=256 --set batch_size=32)
fi
run+=(--set "data.dir=$data" --set data.test_limit=200 --set epochs=2 --set output.progress=false
      --set checkpoint.every_steps=3 --set checkpoint.keep=2)
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

"$minidl" train "${run[@]}" --output "$work/ref" >"$work/ref.out" 2>&1 || { cat "$work/ref.out"; exit 1; }

# Everything a resumed run must reproduce: the step losses' bits, the weights, the epoch metrics
# (times excluded).
fingerprint() {
  python3 - "$1" <<'PY'
import hashlib, json, struct, sys
d = sys.argv[1]
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
print(hashlib.sha256(raw[8 + n:]).hexdigest())
print(hashlib.sha256(open(d + "/steps.jsonl", "rb").read()).hexdigest())
for line in open(d + "/metrics.jsonl"):
    r = json.loads(line)
    print(json.dumps({k: r[k] for k in ("epoch", "step", "train_loss", "train_acc", "test_acc", "test_acc_tta", "lr")}))
PY
}
want=$(fingerprint "$work/ref")
kept=$(cd "$work/ref" && ls checkpoint*.safetensors | tr '\n' ' ')
[ "$kept" = "checkpoint.safetensors checkpoint.step-15.safetensors " ] || fail "keep=2: the run folder holds $kept"

# Resumes the run in $1 until it finishes (a run killed before its first checkpoint is started
# again with --restart, as --resume tells).
finish() {
  local dir=$1 rc
  for _ in 1 2 3; do
    "$minidl" train --resume "$dir" >"$work/resume.out" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] && return 0
    if grep -q "stopped before its first checkpoint.*--restart" "$work/resume.out"; then
      "$minidl" train --resume "$dir" --restart >"$work/resume.out" 2>&1 && return 0
    fi
    grep -q "the run is finished" "$work/resume.out" && return 0
  done
  cat "$work/resume.out"
  return 1
}

# check NAME DIR: the run in DIR, resumed to its end, equals the uninterrupted one.
check() {
  local name=$1 dir=$2
  if ! finish "$dir"; then
    fail "$name: the resume failed"
  elif [ "$(fingerprint "$dir")" != "$want" ]; then
    fail "$name: differs from the uninterrupted run"; diff <(echo "$want") <(fingerprint "$dir") | head -6
  elif [ "$(grep -c . "$dir/metrics.jsonl")" -ne 2 ]; then
    fail "$name: metrics.jsonl does not hold each epoch once"
  elif compgen -G "$dir/*.tmp.*" >/dev/null; then
    fail "$name: temp files left: $(ls "$dir" | tr '\n' ' ')"
  else
    echo "ok   $name"
  fi
}

# kill_at NAME POINT...: one killed run per point (each resumes the previous), then the check.
kill_at() {
  local name=$1 dir="$work/$1" rc
  shift
  for point in "$@"; do
    if [ -f "$dir/checkpoint.safetensors" ]; then
      MINIDL_TEST_KILL_AT=$point "$minidl" train --resume "$dir" >"$work/kill.out" 2>&1
    elif [ -d "$dir" ]; then
      MINIDL_TEST_KILL_AT=$point "$minidl" train --resume "$dir" --restart >"$work/kill.out" 2>&1
    else
      MINIDL_TEST_KILL_AT=$point "$minidl" train "${run[@]}" --output "$dir" >"$work/kill.out" 2>&1
    fi
    rc=$?
    [ "$rc" -eq 137 ] || { fail "$name: kill at $point: exit $rc, expected 137 (SIGKILL)"; tail -3 "$work/kill.out"; return; }
  done
  check "$name $*" "$dir"
}

first=$((RANDOM % 5 + 1))
kill_at steps "step:$first" "step:$((first + RANDOM % 9 + 2))"
kill_at eval "eval:$((RANDOM % 2 + 1))"
kill_at checkpoint_write "write:checkpoint.safetensors#$((RANDOM % 4 + 1))"
kill_at weights_write "write:model.safetensors"

# A kill -9 while a checkpoint is written in the background: the write of step 6's checkpoint is
# held (MINIDL_TEST_PAUSE_CHECKPOINT_WRITE) while training goes on to the epoch's end, so the
# process dies with the step-4 checkpoint on disk and steps.jsonl holding steps past it.
dir="$work/kill_in_write"
"$minidl" train "${run[@]}" --output "$dir" --max-steps 4 >"$work/held.out" 2>&1 || fail "held write: the first run failed"
MINIDL_TEST_PAUSE_CHECKPOINT_WRITE="$work/go" "$minidl" train --resume "$dir" >"$work/held.out" 2>&1 &
pid=$!
for _ in $(seq 1200); do
  [ -f "$work/go.waiting" ] && [ "$(grep -c . "$dir/steps.jsonl")" -ge 8 ] && break
  sleep 0.05
done
lines=$(grep -c . "$dir/steps.jsonl")
kill -9 "$pid" 2>/dev/null
wait "$pid"
on_disk=$(python3 - "$dir/checkpoint.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
print(json.loads(raw[8:8 + n])["__metadata__"]["step"])
PY
)
if [ ! -f "$work/go.waiting" ] || [ "$lines" -lt 8 ] || [ "$on_disk" != 4 ]; then
  fail "held write: expected the write held, 8 steps logged and the step-4 checkpoint on disk; got" \
    "$([ -f "$work/go.waiting" ] && echo held || echo 'not held'), $lines steps, checkpoint at step $on_disk"
else
  check "kill -9 during a held background write (checkpoint at step 4, $lines steps logged)" "$dir"
fi

# A real kill -9 at a random moment of a run (it may have finished, or not started training).
dir="$work/kill9"
"$minidl" train "${run[@]}" --output "$dir" >"$work/kill9.out" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "minidl train:" "$dir/log.txt" 2>/dev/null && break; sleep 0.05; done
delay=$(python3 -c "import random; random.seed($seed); print(round(random.uniform(0.2, 6), 2))")
sleep "$delay"
kill -9 "$pid" 2>/dev/null
wait "$pid"
check "kill -9 after ${delay}s (exit $?)" "$dir"

# Nothing to resume: the message gives the command that starts the run again.
MINIDL_TEST_KILL_AT=step:1 "$minidl" train "${run[@]}" --output "$work/early" >/dev/null 2>&1
"$minidl" train --resume "$work/early" >"$work/early.out" 2>&1
if grep -q "stopped before its first checkpoint.*minidl train --resume $work/early --restart" "$work/early.out"; then
  echo "ok   no checkpoint yet: $(cut -c1-150 "$work/early.out")"
else
  fail "no checkpoint yet: $(cat "$work/early.out")"
fi
# The same command again reuses that folder without --overwrite.
if "$minidl" train "${run[@]}" --output "$work/early" --max-steps 2 >"$work/early.out" 2>&1 &&
   grep -q "a run stopped before its first checkpoint: removed the earlier run's" "$work/early/log.txt"; then
  echo "ok   the same command reuses a folder without a checkpoint"
else
  fail "the same command in a folder without a checkpoint: $(tail -2 "$work/early.out")"
fi

[ "$failed" -eq 0 ] && echo "kill_resume: passed ($SECONDS s)" || echo "kill_resume: $failed failed"
[ "$failed" -eq 0 ]
