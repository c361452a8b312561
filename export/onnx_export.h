// ONNX export: a minidl model as an ONNX model for inference (opset 17, IR version 8, fp32), the
// format onnxruntime, TensorRT and OpenCV read. The graph is the model in eval mode: input
// "input" float32 (batch, 3, 32, 32), the normalized image batch the model trains on (the
// normalization is recorded in the model's metadata, not applied by the graph); output "logits"
// float32 (batch, classes). The batch dimension is symbolic ("batch"). Weights are initializers
// under the model's PyTorch state_dict names ("0.weight", "5.1.running_mean").
//
// Layer by layer: Conv2d -> Conv; BatchNorm2d -> BatchNormalization (running statistics; kept
// as its own node rather than folded into the conv, so the exported weights are exactly the
// checkpoint's and runtimes fold it themselves); GroupNorm -> Reshape (N, G, -1),
// InstanceNormalization, Reshape back, Mul and Add of the affine weights (opset 17 has no
// GroupNormalization); LayerNorm -> LayerNormalization over the trailing normalized_shape axes;
// a fused "relu": true -> Relu after the norm, "gelu": true -> the GELU nodes below; ReLU -> Relu;
// GELU -> Erf (or Tanh for approximate="tanh") arithmetic, as opset 17 has no Gelu; MaxPool2d ->
// MaxPool;
// GlobalAvgPool2d / GlobalMaxPool2d -> GlobalAveragePool / GlobalMaxPool + Flatten; Flatten
// (start_dim=1, end_dim=-1) -> Flatten; Linear -> Gemm (transB); Scale -> Mul; Residual -> Add
// of the input and the body; Sequential -> its children in order. Anything else (another
// Flatten range, a layer type without an export) is an Error naming the layer and its path.
// The emitters sit in a table keyed by the layer's descriptor (layers/layer_descriptor.h); a
// layer whose descriptor says `onnx` must have one, and one without must say so.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "layers/layer_descriptor.h"
#include "layers/module.h"

namespace minidl {

struct OnnxExportOptions {
  Shape sample = {3, 32, 32};                   // one input without the batch: the image (CIFAR-10)
  bool logits = true;                           // the output is (batch, classes) "logits"; else any "output"
  std::map<std::string, std::string> metadata;  // written as the model's metadata_props
};

// The serialized ONNX ModelProto of `model` (any device; weights are copied to the host). Runs
// one forward pass of a zero sample in eval mode (then restores the mode) to check the model
// takes the input shape and to learn the output's. Paths must be assigned (assign_paths).
std::string onnx_model_bytes(Module& model, const OnnxExportOptions& options);
// Writes it to `path`; errors name the path.
void export_onnx(Module& model, const std::string& path, const OnnxExportOptions& options);
// The layer types export has an emitter for: exactly those whose descriptor says `onnx` (tested).
std::vector<const LayerDescriptor*> onnx_exported_layers();

}  // namespace minidl
