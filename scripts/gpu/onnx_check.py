#!/usr/bin/env python3
"""An exported minidl model under onnxruntime, against minidl's own eval outputs.

    scripts/gpu/onnx_check.py MODEL.onnx --gpu-ref CUDA.safetensors --cpu-ref CPU.safetensors
                              [--metrics RUN/metrics.jsonl]

Both references come from `minidl export --logits` (images, labels, minidl's logits). Checks:
onnx.checker; onnxruntime on the CPU (fp32) against minidl on the CPU (1e-4 + 1e-4|x| per
logit, argmax agreement >= 99.9%, test accuracy within 0.05 points); onnxruntime (CUDA provider
when present) against minidl on the GPU (TF32 convolutions on both sides, different algorithms:
5e-2 + 5e-2|x|, agreement >= 99.5%, accuracy within 0.2 points); and minidl's export-time GPU
accuracy against the run's last metrics.jsonl test_acc (the same computation: equal). Exits 1
when any check fails.
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

    def accuracy(logits, labels):
        return float(np.mean(np.asarray(logits).argmax(1) == labels)) * 100

    def agreement(x, y):
        return float(np.mean(np.asarray(x).argmax(1) == np.asarray(y).argmax(1))) * 100

    # fp32 against fp32: onnxruntime's CPU provider against minidl on the CPU.
    cpu_ref, _ = read_safetensors(a.cpu_ref)
    cpu = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    got_cpu = run(cpu, cpu_ref["images"])
    ok &= compare("onnxruntime CPU vs minidl CPU", got_cpu, cpu_ref["logits"], cpu_ref["labels"], 1e-4, 1e-4)
    acc_cpu, acc_minidl_cpu = accuracy(got_cpu, cpu_ref["labels"]), accuracy(cpu_ref["logits"], cpu_ref["labels"])
    if agreement(got_cpu, cpu_ref["logits"]) < 99.9 or abs(acc_cpu - acc_minidl_cpu) > 0.05:
        print(f"FAIL: CPU accuracy ONNX {acc_cpu:.2f}% vs minidl {acc_minidl_cpu:.2f}%")
        ok = False

    # On the GPU both sides use TF32 convolutions (different algorithms): looser.
    gpu_ref, meta = read_safetensors(a.gpu_ref)
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
    gpu = ort.InferenceSession(a.model, providers=providers)
    got = run(gpu, gpu_ref["images"])
    name = f"onnxruntime {gpu.get_providers()[0]} vs minidl {meta.get('device', '?')}"
    ok &= compare(name, got, gpu_ref["logits"], gpu_ref["labels"], 5e-2, 5e-2)
    agree = agreement(got, gpu_ref["logits"])
    acc_onnx, acc_minidl = accuracy(got, gpu_ref["labels"]), accuracy(gpu_ref["logits"], gpu_ref["labels"])
    if agree < 99.5 or abs(acc_onnx - acc_minidl) > 0.2:
        print(f"FAIL: GPU argmax agreement {agree:.2f}%, accuracy ONNX {acc_onnx:.2f}% vs minidl {acc_minidl:.2f}%")
        ok = False
    line = (f"test accuracy: ONNX on the CPU {acc_cpu:.2f}% = minidl CPU {acc_minidl_cpu:.2f}% "
            f"({len(got_cpu)} images); ONNX {gpu.get_providers()[0]} {acc_onnx:.2f}%, minidl {meta.get('device', '?')} "
            f"{acc_minidl:.2f}% ({len(got)} images)")
    if a.metrics:
        with open(a.metrics) as f:
            last = [json.loads(x) for x in f if x.strip()][-1]
        line += f"; the run's metrics.jsonl (epoch {last['epoch']}) {last['test_acc']:.2f}%"
        # The same weights, batches and device as the run's own last evaluation: the same figure.
        if len(got) == 10000 and abs(acc_minidl - last["test_acc"]) > 0.005:
            print("FAIL: minidl's export-time evaluation differs from the run's metrics.jsonl")
            ok = False
    print(("ok: " if ok else "FAIL: ") + line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
