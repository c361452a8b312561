// Every example of every layer type that exports (the registry's table, layers/layer_descriptor.h)
// as an ONNX model of its own, with minidl's eval-mode output beside it: an ONNX runtime checked
// against these is checked layer by layer, on the specs the op harness and the PyTorch parity
// script run (`minidl export --examples DIR`; tests/onnx_export_test.sh evaluates each).
#pragma once
#include <string>
#include <vector>

namespace minidl {

// Writes DIR/<Type>_<i>.onnx and DIR/<Type>_<i>.safetensors ("input", float32 values drawn from
// Philox, and "output", the layer's eval-mode forward on the CPU) for example i of each layer
// type; parameters and buffers are drawn too (running variances in [0.5, 1.5]), so that each
// weight matters. Returns the stems written, "Conv2d_0", ...
std::vector<std::string> export_layer_examples(const std::string& dir);

}  // namespace minidl
