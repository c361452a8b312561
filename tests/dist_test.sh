#!/usr/bin/env bash
# ctest dist: data-parallel `minidl train` under mpirun on the CPU (MPI backend), as a user runs it.
#   1. 2 ranks at micro-batch 64 == 1 rank with accumulate_steps 2 (micro-batch 64): the same
#      model.safetensors, byte for byte, and the same loss bits at every step.
#      The same with the gradients reduced in 3 buckets during backward, and in none.
#   2. The 2-rank run: rank 0 alone writes, and the log and summary.json say the world size.
#      `minidl bench train` under mpirun reports images/s per rank and the all-reduce per step.
#   2b. BatchNorm2d "sync": 2 ranks follow the losses of one process training the whole batch
#      (to float rounding), and on one process it changes no bit.
#   3. A 2-rank run stopped after its first epoch and resumed by 2 ranks == an uninterrupted one;
#      resumed by 1 rank it is refused unless --set accumulate_steps=2, and then equal too.
#   4. A rank killed mid-run ends the whole job, non-zero, with a message naming the rank. An
#      error one rank meets anywhere (the folder, the logs, the checkpoint) ends the job within
#      seconds with its message; ranks with other data, another start, another --max-steps or
#      other weights are refused before the first step.
#   5. A rank that hangs without dying: after --dist-timeout, rank 0 names it and ends the job,
#      non-zero, and the checkpoint written before resumes to the uninterrupted run's bits; when
#      rank 0 hangs, rank 1 ends the job a little later, saying so.
#   tests/dist_test.sh MINIDL SOURCE_DIR CIFAR10_DIR
# Exit 4 (ctest: skipped) without mpirun, without the data, or with a minidl built without MPI.
set -euo pipefail
minidl=$1 src=$2 data=$3
if ! command -v mpirun >/dev/null; then echo "SKIPPED: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 4; fi
if [ ! -f "$data/test_batch.bin" ]; then echo "SKIPPED: no CIFAR-10 at $data (scripts/data.sh)"; exit 4; fi
work=$(mktemp -d)
job=
cleanup() {
  if [ -n "$job" ]; then kill -9 "$job" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
small=(--config "$src/configs/quick_cpu.json" --set "data.dir=$data" --set data.train_limit=512 --set data.test_limit=500
       --set eval.tta=none
       --set output.progress=false)

"$minidl" train "${small[@]}" --set accumulate_steps=2 --max-steps 2 --output "$work/acc2" >"$work/acc2.out" 2>&1 ||
  { cat "$work/acc2.out"; echo "FAIL: the accumulate_steps=2 run failed"; exit 1; }
grep -q "data parallel: world size 1 (single), 2 micro-batches of 64 per rank" "$work/acc2.out" ||
  { cat "$work/acc2.out"; echo "FAIL: no data-parallel line for accumulate_steps 2"; exit 1; }

rc=0
"${mpi[@]}" "$minidl" train "${small[@]}" --max-steps 2 --output "$work/ranks2" >"$work/ranks2.out" 2>&1 || rc=$?
if grep -q "built without MPI" "$work/ranks2.out"; then
  echo "SKIPPED: this minidl was built without MPI, and says so:"; grep -m1 "built without MPI" "$work/ranks2.out"; exit 4
fi
[ "$rc" -eq 0 ] || { cat "$work/ranks2.out"; echo "FAIL: the 2-rank run failed (rc $rc)"; exit 1; }
grep -q "data parallel: world size 2 (mpi), 1 micro-batch of 64 per rank" "$work/ranks2.out" ||
  { cat "$work/ranks2.out"; echo "FAIL: no data-parallel line for 2 ranks"; exit 1; }
[ "$(grep -c "^minidl train: " "$work/ranks2.out")" -eq 1 ] || { cat "$work/ranks2.out"; echo "FAIL: more than one rank printed"; exit 1; }
grep -q '"world_size": 2' "$work/ranks2/summary.json" || { echo "FAIL: summary.json does not say world_size 2"; exit 1; }
a=$(sha256sum <"$work/acc2/model.safetensors" | cut -d' ' -f1)
b=$(sha256sum <"$work/ranks2/model.safetensors" | cut -d' ' -f1)
[ "$a" = "$b" ] || { echo "FAIL: 2 ranks ($b) differ from 1 rank with accumulate_steps 2 ($a)"; exit 1; }
[ "$(grep -o '"loss_bits":"[0-9a-f]*"' "$work/acc2/steps.jsonl")" = "$(grep -o '"loss_bits":"[0-9a-f]*"' "$work/ranks2/steps.jsonl")" ] ||
  { echo "FAIL: the step losses differ"; exit 1; }
echo "dist: 2 ranks == 1 rank x accumulate_steps 2, model.safetensors sha256 $a"
# Gradient buckets change no bit: 3 buckets of 0.05 MiB queued during backward, and none (the
# reduction after backward).
for mb in 0.05 0; do
  "${mpi[@]}" "$minidl" train "${small[@]}" --set bucket_mb=$mb --max-steps 2 --output "$work/buckets$mb" \
    >"$work/buckets$mb.out" 2>&1 || { cat "$work/buckets$mb.out"; echo "FAIL: the 2-rank run with bucket_mb $mb failed"; exit 1; }
  b=$(sha256sum <"$work/buckets$mb/model.safetensors" | cut -d' ' -f1)
  [ "$a" = "$b" ] || { echo "FAIL: 2 ranks with bucket_mb $mb ($b) differ from 1 rank with accumulate_steps 2 ($a)"; exit 1; }
done
echo "dist: 2 ranks with bucket_mb 0.05 (3 buckets during backward) and 0 (after it) give the same bits"
# A parameter frozen from step 2 on: that step's backward queued buckets made for the gradients
# before; they are dropped and the step reduces after backward with new ones, the same bits.
freeze=(--set 'freeze=[{"match": "0.weight", "from_epoch": 0.5}]' --max-steps 3)
"$minidl" train "${small[@]}" "${freeze[@]}" --set accumulate_steps=2 --output "$work/freeze1" >"$work/freeze1.out" 2>&1 &&
  "${mpi[@]}" "$minidl" train "${small[@]}" "${freeze[@]}" --set bucket_mb=0.05 --output "$work/freeze2" >"$work/freeze2.out" 2>&1 ||
  { cat "$work/freeze1.out" "$work/freeze2.out"; echo "FAIL: the runs with a parameter frozen from step 2 failed"; exit 1; }
cmp -s "$work/freeze1/model.safetensors" "$work/freeze2/model.safetensors" ||
  { echo "FAIL: with a parameter frozen from step 2, 2 ranks differ from 1 rank with accumulate_steps 2"; exit 1; }
echo "dist: a parameter frozen mid-run (its gradient gone): 2 ranks with buckets == 1 rank x accumulate_steps 2"

# bench train under mpirun: images/s per rank and in total, and the reduction's time per step.
"${mpi[@]}" "$minidl" bench train "${small[@]}" --set bucket_mb=0.05 --steps 2 --warmup 1 >"$work/bench.out" 2>&1 ||
  { cat "$work/bench.out"; echo "FAIL: bench train under mpirun failed"; exit 1; }
grep -q "ranks:      world size 2 (mpi), [0-9]* images/s per rank, [0-9]* in total" "$work/bench.out" &&
  grep -q "all-reduce: [0-9.]* ms/step ([0-9.]*% of the step), the ordered reduction of 2 micro-batches of [0-9.]* MB over 2 rank(s) (mpi)" "$work/bench.out" &&
  grep -q "overlap:    3 gradient bucket(s), 3 reduced inside backward once complete" "$work/bench.out" &&
  grep -q "(500 test images in " "$work/bench.out" ||
  { cat "$work/bench.out"; echo "FAIL: bench train does not report the ranks, the all-reduce and the test images"; exit 1; }
[ "$(grep -c "^bench train: " "$work/bench.out")" -eq 1 ] || { cat "$work/bench.out"; echo "FAIL: more than one rank reported"; exit 1; }
echo "dist: $(grep -o "all-reduce: [0-9.]* ms/step ([0-9.]*% of the step)" "$work/bench.out") in bench train over 2 ranks"

# Synchronized BatchNorm ("sync": true on the three BatchNorm2d): the 2 ranks normalize with the
# statistics of the step's whole batch, so their losses follow one process training batches of 128
# to float rounding (not bit for bit: the ranks' sums are merged in another grouping), where the
# 2 unsynchronized ranks are further off than that; on one process "sync" changes no bit.
sync=(--set model.layers.1.sync=true --set model.layers.4.sync=true --set model.layers.7.sync=true)
"$minidl" train "${small[@]}" --max-steps 3 --output "$work/batch1" >"$work/batch1.out" 2>&1 ||
  { cat "$work/batch1.out"; echo "FAIL: the 1-process run of whole batches failed"; exit 1; }
"$minidl" train "${small[@]}" "${sync[@]}" --max-steps 3 --output "$work/sync1" >"$work/sync1.out" 2>&1 ||
  { cat "$work/sync1.out"; echo "FAIL: the 1-process run with sync BatchNorm failed"; exit 1; }
cmp -s "$work/batch1/model.safetensors" "$work/sync1/model.safetensors" ||
  { echo "FAIL: \"sync\": true changed the bits of a 1-process run"; exit 1; }
"${mpi[@]}" "$minidl" train "${small[@]}" "${sync[@]}" --max-steps 3 --output "$work/sync2" >"$work/sync2.out" 2>&1 ||
  { cat "$work/sync2.out"; echo "FAIL: the 2-rank run with sync BatchNorm failed"; exit 1; }
grep -q "data parallel: world size 2 (mpi), .*, 3 BatchNorm2d layers synchronized over the 2 ranks" "$work/sync2.out" ||
  { cat "$work/sync2.out"; echo "FAIL: the log does not say the BatchNorm2d layers are synchronized"; exit 1; }
losses() { grep -o '"loss":[-0-9.e]*' "$1/steps.jsonl" | cut -d: -f2; }
# Prints the largest relative difference of the step losses of two runs over their common steps.
loss_gap() { paste <(losses "$1") <(losses "$2") | awk 'NF == 2 { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; n++ }
  END { if (n < 2) { print "no-steps"; exit 1 } printf "%.2g\n", m }'; }
sync_gap=$(loss_gap "$work/batch1" "$work/sync2") && plain_gap=$(loss_gap "$work/batch1" "$work/ranks2") ||
  { echo "FAIL: steps.jsonl holds too few steps"; exit 1; }
awk -v s="$sync_gap" -v p="$plain_gap" 'BEGIN { exit !(s <= 1e-5 && p > 1e-5) }' ||
  { echo "FAIL: 2 synchronized ranks are $sync_gap off the whole-batch losses (at most 1e-5), unsynchronized ones $plain_gap (over 1e-5)"; exit 1; }
echo "dist: 2 ranks with sync BatchNorm follow the whole-batch losses to $sync_gap (unsynchronized: $plain_gap)"

# Resumed: every rank loads rank 0's checkpoint (2 epochs of 2 steps).
two=(--set data.train_limit=256 --set epochs=2)
"${mpi[@]}" "$minidl" train "${small[@]}" "${two[@]}" --output "$work/whole" >"$work/whole.out" 2>&1 ||
  { cat "$work/whole.out"; echo "FAIL: the uninterrupted 2-rank run failed"; exit 1; }
"${mpi[@]}" "$minidl" train "${small[@]}" "${two[@]}" --max-steps 2 --output "$work/halves" >"$work/half1.out" 2>&1 ||
  { cat "$work/half1.out"; echo "FAIL: the first half failed"; exit 1; }
cp -r "$work/halves" "$work/one_rank"
"${mpi[@]}" "$minidl" train --resume "$work/halves" >"$work/half2.out" 2>&1 ||
  { cat "$work/half2.out"; echo "FAIL: the 2-rank resume failed"; exit 1; }
grep -q "resumed at step 2" "$work/half2.out" || { cat "$work/half2.out"; echo "FAIL: did not resume at step 2"; exit 1; }
a=$(sha256sum <"$work/whole/model.safetensors" | cut -d' ' -f1)
b=$(sha256sum <"$work/halves/model.safetensors" | cut -d' ' -f1)
[ "$a" = "$b" ] || { echo "FAIL: the resumed 2-rank run ($b) differs from the uninterrupted one ($a)"; exit 1; }
echo "dist: 2 ranks resumed after epoch 1 == uninterrupted, sha256 $a"

# Resumed by 1 rank: refused unless accumulate_steps makes up the 2 micro-batches, then the same bits.
if "$minidl" train --resume "$work/one_rank" >"$work/one.out" 2>&1; then
  echo "FAIL: 1 rank resumed a 2-rank run without accumulate_steps 2"; exit 1
fi
grep -q "trained with 2 micro-batches per step.*--set accumulate_steps=2" "$work/one.out" ||
  { cat "$work/one.out"; echo "FAIL: the refusal does not say how to resume"; exit 1; }
"$minidl" train --resume "$work/one_rank" --set accumulate_steps=2 >"$work/one.out" 2>&1 ||
  { cat "$work/one.out"; echo "FAIL: 1 rank with accumulate_steps 2 could not resume the 2-rank run"; exit 1; }
b=$(sha256sum <"$work/one_rank/model.safetensors" | cut -d' ' -f1)
[ "$a" = "$b" ] || { echo "FAIL: 1 rank x accumulate_steps 2 resuming 2 ranks ($b) differs from 2 ranks ($a)"; exit 1; }
echo "dist: a 2-rank run resumed by 1 rank with accumulate_steps 2 == uninterrupted, sha256 $b"

# A synchronized-BatchNorm run normalizes over its ranks' batches: resumed on another world size it
# would train another model, so that is refused, naming the world size to use.
"${mpi[@]}" "$minidl" train "${small[@]}" "${sync[@]}" --max-steps 2 --output "$work/sync_resume" >"$work/sr.out" 2>&1 ||
  { cat "$work/sr.out"; echo "FAIL: the 2-rank sync BatchNorm run failed"; exit 1; }
if "$minidl" train --resume "$work/sync_resume" --set accumulate_steps=2 >"$work/sr1.out" 2>&1; then
  echo "FAIL: 1 rank resumed a 2-rank run with synchronized BatchNorm"; exit 1
fi
grep -q "3 synchronized BatchNorm layer(s) normalize over the batches of all 2 ranks.*resume it on 2 ranks" "$work/sr1.out" ||
  { cat "$work/sr1.out"; echo "FAIL: the refusal does not say to resume on 2 ranks"; exit 1; }
echo "dist: a sync BatchNorm run resumed at another world size is refused"

# An error on one rank only (rank 0 alone checks the run folder; a --set on one rank): that rank's
# message, and the job ends at once instead of its peers waiting out --dist-timeout.
t0=$SECONDS
rc=0
timeout 60 "${mpi[@]}" "$minidl" train "${small[@]}" --max-steps 1 --output "$work/ranks2" >"$work/used.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ $((SECONDS - t0)) -le 30 ] || { cat "$work/used.out"; echo "FAIL: rank 0's error did not end the job at once (rc $rc)"; exit 1; }
grep -q "^minidl: error: output folder '$work/ranks2' is not empty" "$work/used.out" ||
  { cat "$work/used.out"; echo "FAIL: rank 0's own error was not printed"; exit 1; }
rc=0
timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 "$minidl" train "${small[@]}" --max-steps 1 --output "$work/mixed" :   -np 1 "$minidl" train "${small[@]}" --max-steps 1 --output "$work/mixed" --set seed=1 >"$work/mixed.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/mixed.out"; echo "FAIL: ranks with different configs trained (rc $rc)"; exit 1; }
grep -q "^minidl: error: rank 1 of 2 was started with another config than rank 0" "$work/mixed.out" ||
  { cat "$work/mixed.out"; echo "FAIL: ranks with different configs were not named"; exit 1; }
echo "dist: an error on one rank ends the job at once with its message; ranks with different configs are refused"

# An error one rank meets at any point of the job (creating or locking the folder, a damaged log,
# a checkpoint that changed while the job started) ends it within seconds with that rank's own
# message, not after --dist-timeout (600 s here) naming the wrong rank.
ends_fast() {  # ends_fast NAME PATTERN COMMAND...: the job fails within 30 s and prints PATTERN
  local name=$1 pattern=$2
  shift 2
  local t0=$SECONDS rc=0
  timeout 120 "$@" >"$work/$name.out" 2>&1 || rc=$?
  local elapsed=$((SECONDS - t0))
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$elapsed" -le 30 ] ||
    { cat "$work/$name.out"; echo "FAIL: $name: the job did not end within 30 s with an error (rc $rc, ${elapsed} s)"; exit 1; }
  grep -Eq "$pattern" "$work/$name.out" ||
    { cat "$work/$name.out"; echo "FAIL: $name: the job's message /$pattern/ was not printed"; exit 1; }
  echo "dist: $name: the job ends in ${elapsed} s: $(grep -Eo "$pattern.{0,50}" "$work/$name.out" | head -1)"
}
ends_fast "rank 0 cannot create the folder" "^minidl: error: cannot create output folder '/proc/nope/x'" \
  "${mpi[@]}" "$minidl" train "${small[@]}" --max-steps 1 --output /proc/nope/x
"${mpi[@]}" "$minidl" train "${small[@]}" "${two[@]}" --max-steps 2 --output "$work/part" >"$work/part.out" 2>&1 ||
  { cat "$work/part.out"; echo "FAIL: the 2-rank run to step 2 failed"; exit 1; }
cp -r "$work/part" "$work/torn"
sed -i '1s/.*/{"step": 0, "lo/' "$work/torn/steps.jsonl"
ends_fast "rank 0 finds a damaged steps.jsonl" "^minidl: error: run log '.*steps.jsonl': line 1 is not a JSON record" \
  "${mpi[@]}" "$minidl" train --resume "$work/torn"
cp -r "$work/part" "$work/locked"
flock "$work/locked" sleep 60 &
holder=$!
ends_fast "rank 0 finds the folder locked" "^minidl: error: run folder '$work/locked' is in use by another minidl process" \
  "${mpi[@]}" "$minidl" train --resume "$work/locked"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
# Both ranks are held just before the folder's lock (the test hook MINIDL_TEST_PAUSE_BEFORE_LOCK);
# rank 0 goes on, locks the folder, loads the checkpoint, rewrites the logs and waits for rank 1;
# then another process moves the checkpoint on and rank 1, let go, finds it changed.
cp -r "$work/part" "$work/moved"
cp -r "$work/part" "$work/later"
"$minidl" train --resume "$work/later" --set accumulate_steps=2 --max-steps 3 >"$work/later.out" 2>&1 ||
  { cat "$work/later.out"; echo "FAIL: the run to step 3 failed"; exit 1; }
"${mpi[@]}" sh -c 'export MINIDL_TEST_PAUSE_BEFORE_LOCK=$0.$OMPI_COMM_WORLD_RANK; exec "$@"' "$work/go" \
  "$minidl" train --resume "$work/moved" >"$work/moved.out" 2>&1 &
job=$!
for _ in $(seq 600); do [ -f "$work/go.0.waiting" ] && [ -f "$work/go.1.waiting" ] && break; sleep 0.1; done
# Rank 0 rewrites steps.jsonl (a new file) once it has loaded the checkpoint.
before=$(stat -c %i "$work/moved/steps.jsonl")
touch "$work/go.0"
for _ in $(seq 600); do [ "$(stat -c %i "$work/moved/steps.jsonl")" != "$before" ] && break; sleep 0.1; done
cp "$work/later/checkpoint.safetensors" "$work/moved/checkpoint.safetensors"
t0=$SECONDS
touch "$work/go.1"
rc=0
for _ in $(seq 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then echo "FAIL: the job still runs 60 s after rank 1's error"; exit 1; fi
wait "$job" || rc=$?
job=
elapsed=$((SECONDS - t0))
[ "$rc" -ne 0 ] && [ "$elapsed" -le 30 ] || { cat "$work/moved.out"; echo "FAIL: rank 1's error did not end the job within 30 s (rc $rc, ${elapsed} s)"; exit 1; }
grep -q "^minidl: error: --resume $work/moved: its checkpoint changed while this command was starting" "$work/moved.out" ||
  { cat "$work/moved.out"; echo "FAIL: rank 1's own error was not printed"; exit 1; }
echo "dist: rank 1's error ends the job in ${elapsed} s with its message"

# Ranks that would train apart are refused before the first step, by rank 0, naming what differs:
# other data (CIFAR10_DIR per node, one image changed), one rank resuming while another starts
# fresh, another --max-steps, other weights at the same step (a checkpoint edited by hand).
mkdir -p "$work/data2"
for f in "$data"/*; do ln -s "$(realpath "$f")" "$work/data2/"; done
rm "$work/data2/data_batch_1.bin"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[100] ^= 0x40; open(sys.argv[2], "wb").write(b)' \
  "$data/data_batch_1.bin" "$work/data2/data_batch_1.bin"
nodir=(--config "$src/configs/quick_cpu.json" --set data.train_limit=512 --set data.test_limit=500 --set eval.tta=none
       --set output.progress=false --max-steps 1 --output "$work/data_differs")
ends_fast "ranks with other data" "^minidl: error: rank 1 of 2 loaded other training data than rank 0 \(CRC-32 [0-9a-f]{8}, rank 0's [0-9a-f]{8}\)" \
  "${mpi[@]}" sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && CIFAR10_DIR=$1 || CIFAR10_DIR=$0; export CIFAR10_DIR; shift; exec "$@"' \
  "$data" "$work/data2" "$minidl" train "${nodir[@]}"
ends_fast "one rank resumes, one starts fresh" "^minidl: error: rank 1 of 2 starts as a fresh run, rank 0 from a checkpoint at step 2" \
  mpirun --allow-run-as-root --oversubscribe -np 1 "$minidl" train --resume "$work/part" : \
  -np 1 "$minidl" train "${small[@]}" "${two[@]}" --output "$work/fresh_rank1"
ends_fast "ranks with another --max-steps" "^minidl: error: rank 1 of 2 was started with --max-steps 3, rank 0 with 2" \
  mpirun --allow-run-as-root --oversubscribe -np 1 "$minidl" train "${small[@]}" --max-steps 2 --output "$work/steps_differ" : \
  -np 1 "$minidl" train "${small[@]}" --max-steps 3 --output "$work/steps_differ"
cp -r "$work/part" "$work/edited"
python3 - "$work/edited/checkpoint.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
raw = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
for key in ('payload_crc32', 'tensors_crc32', 'metadata_crc32'):
    header['__metadata__'].pop(key, None)
begin = header['0.weight']['data_offsets'][0]
data = raw[8 + n:]
data[begin + 3] ^= 0x01
text = json.dumps(header, separators=(',', ':')).encode()
text += b' ' * ((8 - len(text) % 8) % 8)
open(path, 'wb').write(struct.pack('<Q', len(text)) + text + data)
PY
ends_fast "ranks with other weights" "^minidl: error: rank 1 of 2 holds other weights than rank 0 before the first step" \
  mpirun --allow-run-as-root --oversubscribe -np 1 "$minidl" train --resume "$work/part" : \
  -np 1 "$minidl" train --resume "$work/edited"

# A rank killed once training runs: mpirun ends the job and names the rank; no rank is left waiting.
"${mpi[@]}" "$minidl" train "${small[@]}" --max-steps 1000 --output "$work/killed" >"$work/killed.out" 2>&1 &
job=$!
victim=
for _ in $(seq 600); do
  if grep -q "^data: test images" "$work/killed.out" 2>/dev/null; then
    # mpirun's children are the ranks; rank 1 is the one whose environment says so.
    for d in /proc/[0-9]*; do
      [ "$(cut -d' ' -f4 "$d/stat" 2>/dev/null)" = "$job" ] || continue
      if grep -qzx "OMPI_COMM_WORLD_RANK=1" "$d/environ" 2>/dev/null; then victim=${d#/proc/}; fi
    done
    [ -n "$victim" ] && break
  fi
  kill -0 "$job" 2>/dev/null || break
  sleep 0.2
done
[ -n "$victim" ] || { cat "$work/killed.out"; echo "FAIL: rank 1 of the 2-rank run was not found"; exit 1; }
kill -9 "$victim"
rc=0
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$job" 2>/dev/null; then echo "FAIL: the job still runs 60 s after rank 1 was killed"; exit 1; fi
wait "$job" || rc=$?
job=
[ "$rc" -ne 0 ] || { cat "$work/killed.out"; echo "FAIL: the job exited 0 after rank 1 was killed"; exit 1; }
grep -Eq "rank 1 .*(exited on signal 9|Killed)" "$work/killed.out" ||
  { cat "$work/killed.out"; echo "FAIL: no message naming rank 1"; exit 1; }
echo "dist: a killed rank ends the job (rc $rc): $(grep -Eo "process rank 1 .*" "$work/killed.out" | head -1)"

# A rank that hangs (MINIDL_TEST_HANG_AT, set for one rank only) after step 2, the end of epoch 1:
# the other rank waits --dist-timeout in its next collective, then the job ends, naming the rank.
hang_rank() {  # RANK NAME ARGS...: a 2-rank run of `small` and `two` whose rank RANK hangs after step 2
  local rank=$1 name=$2; shift 2
  local t0=$SECONDS rc=0
  timeout 120 "${mpi[@]}" sh -c '[ "$OMPI_COMM_WORLD_RANK" = "$0" ] && export MINIDL_TEST_HANG_AT=step:2; exec "$@"' \
    "$rank" "$minidl" train "${small[@]}" "${two[@]}" --dist-timeout 3 --output "$work/$name" "$@" >"$work/$name.out" 2>&1 ||
    rc=$?
  elapsed=$((SECONDS - t0))
  [ "$rc" -ne 124 ] || { cat "$work/$name.out"; echo "FAIL: the job still ran 120 s after rank $rank hung"; exit 1; }
  [ "$rc" -ne 0 ] || { cat "$work/$name.out"; echo "FAIL: the job exited 0 although rank $rank hung"; exit 1; }
  [ "$elapsed" -le 30 ] || { cat "$work/$name.out"; echo "FAIL: the job took ${elapsed} s to end after rank $rank hung"; exit 1; }
}
hang_rank 1 hung
said="minidl: error: rank 1 of 2 did not reach collective #[0-9]+ \(all_gather\) within 3 s \(it is at #[0-9]+\): it hangs or is stuck; ending the job \(rank 0 is at step 2; the last checkpoint, step 2, is intact\)"
grep -Eq "$said" "$work/hung.out" || { cat "$work/hung.out"; echo "FAIL: rank 0 did not name rank 1, the rank that hangs"; exit 1; }
grep -qE "^[0-9T:-]+Z error: rank 1 of 2 did not reach" "$work/hung/log.txt" || { cat "$work/hung/log.txt"; echo "FAIL: log.txt does not say why the run ended"; exit 1; }
[ "$(grep -c "^minidl: error: " "$work/hung.out")" -eq 1 ] || { cat "$work/hung.out"; echo "FAIL: more than one rank said why the job ended"; exit 1; }
"${mpi[@]}" "$minidl" train --resume "$work/hung" >"$work/hung2.out" 2>&1 ||
  { cat "$work/hung2.out"; echo "FAIL: the checkpoint of the run whose rank hung did not resume"; exit 1; }
grep -q "resumed at step 2" "$work/hung2.out" || { cat "$work/hung2.out"; echo "FAIL: did not resume at step 2"; exit 1; }
a=$(sha256sum <"$work/whole/model.safetensors" | cut -d' ' -f1)
b=$(sha256sum <"$work/hung/model.safetensors" | cut -d' ' -f1)
[ "$a" = "$b" ] || { echo "FAIL: resumed after the hang ($b) differs from the uninterrupted run ($a)"; exit 1; }
echo "dist: a rank that hangs ends the job in ${elapsed} s: $(grep -Eo "rank 1 of 2 did not reach[^:]*" "$work/hung.out")"

# Rank 0 hangs: rank 1, which gives rank 0 a tenth of the timeout more (at least 2 s), ends the job.
hang_rank 0 hung0
said="minidl: error: rank 1 of 2: collective #[0-9]+ \(all_gather\) did not complete within 5 s, and rank 0, which names a rank that does not arrive, did not end the job: rank 0 hangs or is stuck; ending the job \(rank 1 is at step 2\)"
grep -Eq "$said" "$work/hung0.out" || { cat "$work/hung0.out"; echo "FAIL: rank 1 did not say that rank 0 hangs"; exit 1; }
echo "dist: rank 0 hanging ends the job in ${elapsed} s, by rank 1"
