"""Reads what `minidl export --logits` (and `--examples`) writes and compares a runtime's logits
(or a layer's output) with minidl's.

The file is safetensors (8-byte little-endian header length, JSON header, raw tensors): images
float32 (N, 3, 32, 32) as the model sees them, labels int32 (N), logits float32 (N, classes).
Read with numpy alone, so no safetensors package is needed.
"""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out, meta


def _difference(name, what, got, want, atol, rtol):
    """(got, want, |got - want|, every element within atol + rtol |want|) in float64, or None after
    a FAIL line when the shapes differ."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        print(f"{name}: FAIL: {what} shape {got.shape}, minidl's {want.shape}")
        return None
    diff = np.abs(got - want)
    return got, want, diff, bool(np.all(diff <= atol + rtol * np.abs(want)))


def compare_outputs(name, got, want, atol, rtol):
    """Prints max |got - want| over any output (a layer's); True when every element is within
    atol + rtol |want|."""
    d = _difference(name, "output", got, want, atol, rtol)
    if d is None:
        return False
    got, want, diff, ok = d
    worst = np.unravel_index(np.argmax(diff), diff.shape) if diff.size else ()
    print(f"{name}: {'ok' if ok else 'FAIL'}: {want.size} values, max |diff| {diff.max() if diff.size else 0:.3g}"
          f" at {worst} (allowed {atol:g} + {rtol:g}|x|)")
    return ok


def compare(name, got, want, labels, atol, rtol):
    """Prints max |got - want|, argmax agreement and both accuracies; True when within tolerance."""
    d = _difference(name, "logits", got, want, atol, rtol)
    if d is None:
        return False
    got, want, diff, ok = d
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    agree = float(np.mean(got.argmax(1) == want.argmax(1))) * 100
    acc_got = float(np.mean(got.argmax(1) == labels)) * 100
    acc_want = float(np.mean(want.argmax(1) == labels)) * 100
    print(f"{name}: {'ok' if ok else 'FAIL'}: {len(labels)} images, max |diff| {diff.max():.3g} "
          f"(image {worst[0]}, class {worst[1]}: {got[worst]:.6g} vs minidl {want[worst]:.6g}; "
          f"allowed {atol:g} + {rtol:g}|x|), argmax agreement {agree:.2f}%, "
          f"accuracy {acc_got:.2f}% vs minidl {acc_want:.2f}%")
    return ok
