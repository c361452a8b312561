#!/usr/bin/env python3
"""An exported minidl model under onnxruntime, against minidl's own eval outputs.

    scripts/gpu/onnx_check.py MODEL.onnx --gpu-ref CUDA.safetensors --cpu-ref CPU.safetensors
                              [--metrics RUN/metrics.jsonl]

Both references come from `minidl export --logits` (images, labels, minidl's logits). Checks:
onnx.checker; onnxruntime on the CPU (fp32) against minidl on the CPU (tight: 1e-4 + 1e-4|x|);
onnxruntime (CUDA provider when present) on the whole --gpu-ref set against minidl on the GPU
(TF32 convolutions on both sides, so a looser 5e-2 + 5e-2|x|, and argmax agreement >= 99.5%);
and the ONNX model's test accuracy against minidl's and against the run's last metrics.jsonl
test_acc (within 0.1 points). Exits 1 when any check fails.
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "onnx"))
from reference import compare, read_safetensors  # noqa: E402


def run(session, images, batch=1000):
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: images[i:i + batch]})[0] for i in range(0, len(images), batch)])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--gpu-ref", required=True)
    p.add_argument("--cpu-ref", required=True)
    p.add_argument("--metrics")
    a = p.parse_args()
    ok = True
    model = onnx.load(a.model)
    onnx.checker.check_model(model, full_check=True)
    print(f"{a.model}: onnx {onnx.__version__} checker ok; onnxruntime {ort.__version__}")

    cpu_ref, _ = read_safetensors(a.cpu_ref)
    cpu = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    ok &= compare("onnxruntime CPU vs minidl CPU", run(cpu, cpu_ref["images"]), cpu_ref["logits"],
                  cpu_ref["labels"], 1e-4, 1e-4)

    gpu_ref, meta = read_safetensors(a.gpu_ref)
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
    gpu = ort.InferenceSession(a.model, providers=providers)
    got = run(gpu, gpu_ref["images"])
    name = f"onnxruntime {gpu.get_providers()[0]} vs minidl {meta.get('device', '?')}"
    ok &= compare(name, got, gpu_ref["logits"], gpu_ref["labels"], 5e-2, 5e-2)
    agree = float(np.mean(got.argmax(1) == gpu_ref["logits"].argmax(1))) * 100
    acc_onnx = float(np.mean(got.argmax(1) == gpu_ref["labels"])) * 100
    acc_minidl = float(np.mean(gpu_ref["logits"].argmax(1) == gpu_ref["labels"])) * 100
    if agree < 99.5:
        print(f"FAIL: argmax agreement {agree:.2f}% < 99.5%")
        ok = False
    line = f"test accuracy on {len(got)} images: ONNX {acc_onnx:.2f}%, minidl eval {acc_minidl:.2f}%"
    ok &= abs(acc_onnx - acc_minidl) <= 0.1
    if a.metrics:
        with open(a.metrics) as f:
            last = [json.loads(x) for x in f if x.strip()][-1]
        line += f", the run's metrics.jsonl (epoch {last['epoch']}) {last['test_acc']:.2f}%"
        ok &= abs(acc_onnx - last["test_acc"]) <= 0.1
    print(("ok: " if ok else "FAIL: ") + line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
