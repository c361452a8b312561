#!/usr/bin/env python3
"""PyTorch twin of a minidl language-model run: a "tokens" config trained on the same token files.

The model is built from the config's layer list (model_from_json.py) and trained with its recipe:
AdamW with the config's parameter groups (model_from_json.build_optimizer), the config's schedule
per step (model_from_json.schedule_factor), clip_grad_norm_ at grad_clip, bf16 autocast for
"precision": "bf16". Data as minidl's "tokens" format reads it: llm.c's files (a 256-int32 header,
then uint16 tokens), windows of seq_len + 1 tokens starting every seq_len, the training windows
reshuffled every epoch, batch_size windows per step. At the end, the mean token loss over every
window of val.bin: what minidl's summary.json holds as test_loss.

usage: train_tokens.py --config configs/gpt2_124m.json --data DIR --steps N --out result.json [--seed S]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_from_json as mfj  # noqa: E402


def windows(path, seq_len):
    data = np.fromfile(path, dtype=np.uint8)
    header = np.frombuffer(data[:1024].tobytes(), dtype=np.int32)
    if header[0] != 20240520 or header[1] != 1:
        sys.exit(f"train_tokens.py: {path} is not an llm.c token file (magic {header[0]}, version {header[1]})")
    tokens = np.frombuffer(data[1024:].tobytes(), dtype=np.uint16)[: header[2]].astype(np.int64)
    n = (len(tokens) - 1) // seq_len
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return torch.from_numpy(tokens[idx])


def mean_loss(model, data, batch, dtype):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
        for i in range(0, len(data), batch):
            w = data[i:i + batch].cuda()
            logits = model(w[:, :-1]).float()
            total += F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
            count += w[:, 1:].numel()
    model.train()
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    config = json.load(open(args.config))
    seq_len, batch = config["data"]["seq_len"], config["batch_size"]
    train = windows(os.path.join(args.data, "train.bin"), seq_len)
    val = windows(os.path.join(args.data, "val.bin"), seq_len)
    torch.manual_seed(args.seed)
    model = mfj.build_model(config).cuda()
    opt, _ = mfj.build_optimizer(config, model)
    base_lr = [g["lr"] for g in opt.param_groups]
    dtype = torch.bfloat16 if config.get("precision", "bf16") in ("bf16", "auto") else None
    clip = config.get("grad_clip", 0.0)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(args.seed)
    per_epoch = len(train) // batch
    order, step, t0 = None, 0, time.perf_counter()
    while step < args.steps:
        if step % per_epoch == 0:
            order = torch.randperm(len(train), generator=gen)
        w = train[order[(step % per_epoch) * batch:(step % per_epoch + 1) * batch]].cuda(non_blocking=True)
        factor = mfj.schedule_factor(config, step, per_epoch, args.steps)
        for g, lr in zip(opt.param_groups, base_lr):
            g["lr"] = lr * factor
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        step += 1
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    val_loss = mean_loss(model, val, batch, dtype)
    res = {"steps": step, "tokens": step * batch * seq_len, "val_loss": val_loss, "train_loss": loss.item(),
           "seconds": seconds, "seed": args.seed, "device": torch.cuda.get_device_name()}
    print(f"PyTorch twin: val.bin loss {val_loss:.4f} after {step} steps ({res['tokens']} tokens), "
          f"last training loss {res['train_loss']:.4f}, {seconds:.1f} s", flush=True)
    json.dump(res, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
