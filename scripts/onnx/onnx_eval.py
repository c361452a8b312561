#!/usr/bin/env python3
"""Checks an ONNX file from `minidl export` and runs it with a small float64 numpy evaluator.

    scripts/onnx/onnx_eval.py MODEL.onnx [--logits REF.safetensors | --outputs REF.safetensors]
                              [--atol A] [--rtol R]

1. onnx.checker.check_model(full_check=True): the schema checks and ONNX's shape inference.
2. With --logits (from `minidl export --logits`): runs the graph on the file's images with the
   evaluator below, an implementation of the ONNX operators minidl exports written from the
   ONNX operator spec (not from minidl's kernels), and compares the logits with minidl's.
   With --outputs (from `minidl export --examples`: one layer's "input" and "output"): the same for
   a layer's output, element by element.
Exits 0 when both pass; 1 on a mismatch; 2 when python3-onnx is missing.
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import compare, compare_outputs, read_safetensors  # noqa: E402

try:
    import onnx
    from onnx import numpy_helper
except ImportError:
    print("onnx_eval.py: python3-onnx is not installed (apt-get install python3-onnx)")
    sys.exit(2)


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def conv(x, w, b, a):
    """ONNX Conv: output channel o of group g = o // (O / group) sees the input channels of g only;
    a dilation d spreads the kernel's taps d pixels apart."""
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    groups = a.get("group", 1)
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    y = np.concatenate([np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og],
                                  optimize=True) for g in range(groups)], axis=1)
    return y if b is None else y + b[None, :, None, None]


def max_pool(x, a):
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return win.max(axis=(4, 5))


def avg_pool(x, a):
    """AveragePool as PyTorch's AvgPool2d computes it: windows clipped to the padded input, the
    divisor the clipped window (count_include_pad) or its part inside the input."""
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    ceil, include = a.get("ceil_mode", 0), a.get("count_include_pad", 0)

    def windows(n, k, s, p0, p1):
        span = n + p0 + p1 - k
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= n + p0:
            out -= 1
        for o in range(out):
            lo = o * s - p0
            hi = min(lo + k, n + p1)
            yield max(lo, 0), min(hi, n), hi - lo

    rows = list(windows(x.shape[2], kh, sh, pt, pb))
    cols = list(windows(x.shape[3], kw, sw, pl, pr))
    y = np.zeros(x.shape[:2] + (len(rows), len(cols)), dtype=x.dtype)
    for i, (h0, h1, hs) in enumerate(rows):
        for j, (w0, w1, ws) in enumerate(cols):
            div = hs * ws if include else (h1 - h0) * (w1 - w0)
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3)) / div
    return y


def normalize(x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


_erf = np.vectorize(math.erf)


def run_node(op, ins, a):
    if op == "Conv":
        return conv(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a)
    if op == "BatchNormalization":
        x, s, b, m, v = ins
        e = lambda t: t.reshape((1, -1) + (1,) * (x.ndim - 2))  # noqa: E731
        return (x - e(m)) / np.sqrt(e(v) + a.get("epsilon", 1e-5)) * e(s) + e(b)
    if op == "InstanceNormalization":
        x, s, b = ins
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = normalize(x, tuple(range(2, x.ndim)), a.get("epsilon", 1e-5))
        return y * s.reshape(shape) + b.reshape(shape)
    if op == "LayerNormalization":
        x, s = ins[0], ins[1]
        axis = a.get("axis", -1) % x.ndim
        y = normalize(x, tuple(range(axis, x.ndim)), a.get("epsilon", 1e-5)) * s
        return y + ins[2] if len(ins) > 2 else y
    if op == "Reshape":
        x, shape = ins
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape.astype(np.int64))]
        return x.reshape(shape)
    if op == "Shape":
        return np.array(ins[0].shape, dtype=np.int64)
    if op == "Flatten":
        axis = a.get("axis", 1)
        return ins[0].reshape(int(np.prod(ins[0].shape[:axis])), -1)
    if op == "Gemm":
        assert a.get("transA", 0) == 0 and a.get("alpha", 1.0) == 1.0 and a.get("beta", 1.0) == 1.0
        w = ins[1].T if a.get("transB", 0) else ins[1]
        y = ins[0] @ w
        return y + ins[2] if len(ins) > 2 else y
    if op == "MaxPool":
        return max_pool(ins[0], a)
    if op == "AveragePool":
        return avg_pool(ins[0], a)
    if op == "GlobalAveragePool":
        return ins[0].mean(axis=(2, 3), keepdims=True)
    if op == "GlobalMaxPool":
        return ins[0].max(axis=(2, 3), keepdims=True)
    if op == "Transpose":
        return np.transpose(ins[0], a.get("perm"))
    if op == "MatMul":
        return np.matmul(ins[0], ins[1])
    if op == "Softmax":
        e = np.exp(ins[0] - ins[0].max(axis=a.get("axis", -1), keepdims=True))
        return e / e.sum(axis=a.get("axis", -1), keepdims=True)
    if op == "Gather":
        return np.take(ins[0], ins[1], axis=a.get("axis", 0))
    if op == "ReduceMean":
        return ins[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
    if op == "Slice":
        x, starts, ends = ins[0], ins[1], ins[2]
        axes = ins[3] if len(ins) > 3 else range(len(starts))
        index = [slice(None)] * x.ndim
        for axis, lo, hi in zip(axes, starts, ends):
            index[int(axis)] = slice(int(lo), int(hi))
        return x[tuple(index)]
    if op == "Concat":
        return np.concatenate(ins, axis=a["axis"])
    if op == "Expand":
        return ins[0] * np.ones(tuple(int(d) for d in ins[1]), dtype=ins[0].dtype)
    simple = {"Relu": lambda t: np.maximum(t[0], 0), "Add": lambda t: t[0] + t[1], "Mul": lambda t: t[0] * t[1],
              "Erf": lambda t: _erf(t[0]), "Tanh": lambda t: np.tanh(t[0]), "Identity": lambda t: t[0],
              "Sigmoid": lambda t: 1 / (1 + np.exp(-t[0])),
              "HardSwish": lambda t: t[0] * np.clip(t[0] / 6 + 0.5, 0, 1)}
    if op in simple:
        return simple[op](ins)
    raise SystemExit(f"onnx_eval.py: operator {op} is not in this evaluator")


def evaluate(model, images):
    g = model.graph
    values = {t.name: numpy_helper.to_array(t).astype(np.float64) if t.data_type == onnx.TensorProto.FLOAT
              else numpy_helper.to_array(t) for t in g.initializer}
    values[g.input[0].name] = images.astype(np.float64)
    for node in g.node:  # ONNX requires nodes in topological order
        values[node.output[0]] = run_node(node.op_type, [values[i] for i in node.input if i], attrs(node))
    return values[g.output[0].name]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--logits", help="minidl export --logits file to compare with")
    p.add_argument("--outputs", help="minidl export --examples file (input, output) to compare with")
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-4)
    args = p.parse_args()
    model = onnx.load(args.model)
    onnx.checker.check_model(model, full_check=True)
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"{args.model}: onnx {onnx.__version__} checker ok: opset {model.opset_import[0].version}, "
          f"{len(model.graph.node)} nodes ({', '.join(ops)}), {len(model.graph.initializer)} initializers")
    if args.outputs:
        ref, meta = read_safetensors(args.outputs)
        return 0 if compare_outputs(f"numpy evaluator vs minidl ({meta.get('spec', '')})", evaluate(model, ref["input"]),
                                    ref["output"], args.atol, args.rtol) else 1
    if not args.logits:
        return 0
    ref, meta = read_safetensors(args.logits)
    got = evaluate(model, ref["images"])
    return 0 if compare("numpy evaluator vs minidl " + meta.get("device", ""), got, ref["logits"], ref["labels"],
                        args.atol, args.rtol) else 1


if __name__ == "__main__":
    sys.exit(main())
