#!/usr/bin/env python3
"""Reads a minidl run's TensorBoard event file with TensorBoard's own reader (EventAccumulator)
and checks every scalar against the run's steps.jsonl and metrics.jsonl.

    scripts/gpu/tensorboard_check.py RUN_DIR

train/loss at every step must hold the loss's exact float32 bits (steps.jsonl "loss_bits"); each
epoch's scalars (at the epoch's last step, the record's "step" - 1) must equal float32 of metrics.jsonl's values, with the
tag names of train/tensorboard.cpp; no other tag and no extra event may be present. Exits 1 on
any mismatch, naming it.
"""
import json
import os
import struct
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

EPOCH_TAGS = {"train_acc": "accuracy/train", "test_acc": "accuracy/test", "test_acc_tta": "accuracy/test_tta",
              "train_loss": "epoch/train_loss", "lr": "lr", "images_per_s": "throughput/images_per_s",
              "seconds": "time/epoch_s", "eval_seconds": "time/eval_s", "epoch": "epoch"}


def lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def main():
    run = sys.argv[1]
    files = [f for f in os.listdir(run) if f.startswith("events.out.tfevents.")]
    if not files:
        print(f"tensorboard_check: FAIL: no events.out.tfevents.* in {run}")
        return 1
    ea = EventAccumulator(run, size_guidance={"scalars": 0})  # 0: keep every event
    ea.Reload()
    got = {tag: {e.step: e.value for e in ea.Scalars(tag)} for tag in ea.Tags()["scalars"]}
    counts = {tag: len(ea.Scalars(tag)) for tag in got}
    want = {}
    steps = lines(os.path.join(run, "steps.jsonl"))
    for s in steps:
        want.setdefault("train/loss", {})[s["step"]] = ("bits", s["loss_bits"])
    metrics = lines(os.path.join(run, "metrics.jsonl"))
    prev_step = 0
    for m in metrics:
        for key, tag in EPOCH_TAGS.items():
            if key in m:
                want.setdefault(tag, {})[m["step"] - 1] = ("value", np.float32(m[key]))
        want.setdefault("time/step_ms", {})[m["step"] - 1] = ("value", np.float32(1000.0 * m["seconds"] / (m["step"] - prev_step)))
        prev_step = m["step"]
    bad = []
    if set(got) != set(want):
        bad.append(f"tags: TensorBoard has {sorted(got)}, expected {sorted(want)}")
    checked = 0
    for tag, points in want.items():
        if counts.get(tag, 0) != len(points):
            bad.append(f"{tag}: {counts.get(tag, 0)} events, expected {len(points)}")
        for step, (kind, v) in points.items():
            if step not in got.get(tag, {}):
                bad.append(f"{tag} at step {step}: missing")
                continue
            value = np.float32(got[tag][step])
            bits = struct.pack("<f", value)[::-1].hex()
            if (kind == "bits" and bits != v) or (kind == "value" and value != v and
                                                   not (tag == "time/step_ms" and abs(value - v) <= 1e-6 * abs(v))):
                bad.append(f"{tag} at step {step}: TensorBoard {value!r} ({bits}), run files {v!r}")
            checked += 1
    for b in bad[:20]:
        print("tensorboard_check: FAIL:", b)
    print(f"tensorboard_check: {'FAIL' if bad else 'ok'}: {files[0]} read by TensorBoard's EventAccumulator: "
          f"{checked} scalars checked ({len(steps)} step losses bit for bit, {len(metrics)} epochs x "
          f"{len(want) - 1} epoch tags), {len(bad)} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
