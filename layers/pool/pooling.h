// Pooling over NCHW float32 tensors: MaxPool2d (PyTorch's nn.MaxPool2d without dilation or
// ceil_mode) and the global pools GlobalAvgPool2d / GlobalMaxPool2d. CPU kernels in
// pooling_cpu.cpp, CUDA kernels in pooling_cuda.cu.
//
// MaxPool2d pads with -inf (a padded cell never wins) and records, per output, the argmax as the
// offset of the winner within its window: (h - h0) * kernel_w + (w - w0), (h0, w0) being the
// padded window's top-left corner. One byte holds it when the window has at most 256 cells
// (ResNet-9's 2x2 windows: a quarter of the bytes of an int32 input index, which matters since
// the backward reads argmax next to dy); int32 otherwise. Which element wins, as in PyTorch's
// kernels: the first maximum in row-major window order on ties, and a NaN always (the last NaN
// of the window), so a NaN input gives a NaN output.
//
// The backward has two shapes, chosen from the geometry alone (CPU and CUDA alike):
// - disjoint windows (stride >= kernel, no padding; ResNet-9's k2 s2): every input element lies
//   in at most one window, so each window writes its own block of dx (dy at the argmax, 0 in
//   the rest, 0 in the rows/columns no window covers): every dx written once, no zero-fill;
// - overlapping windows: a gather, each input element summing, from 0 in a fixed window order,
//   the gradients of the windows whose argmax it is.
// No atomics either way, so every run gives the same bits.
//
// The global pools reduce each (n, c) plane to one value and return (N, C), i.e. they also
// flatten (PyTorch: nn.AdaptiveAvgPool2d(1) / nn.AdaptiveMaxPool2d(1) then nn.Flatten()), so a
// Linear layer can follow directly, as at the end of ResNet-9.
#pragma once
#include <cstdint>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/pool/pooling_kernels.h"
#include "layers/size2d.h"

namespace minidl {

Tensor max_pool2d(const Tensor& x, const Pool2dGeometry& g);  // (N,C,H,W) -> (N,C,OH,OW)
Tensor global_avg_pool2d(const Tensor& x);                     // (N,C,H,W) -> (N,C)
Tensor global_max_pool2d(const Tensor& x);                     // (N,C,H,W) -> (N,C)

// The layer types' descriptors (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& maxpool2d_layer();
const LayerDescriptor& global_avg_pool2d_layer();
const LayerDescriptor& global_max_pool2d_layer();

struct MaxPool2dSpec {
  Size2d kernel_size, stride, padding;
  static const Fields<MaxPool2dSpec>& fields();
};

class MaxPool2d : public Layer<MaxPool2dSpec> {
 public:
  explicit MaxPool2d(const Pool2dGeometry& g)
      : MaxPool2d(MaxPool2dSpec{{g.kernel_h, g.kernel_w}, {g.stride_h, g.stride_w}, {g.pad_h, g.pad_w}}) {}
  explicit MaxPool2d(const MaxPool2dSpec& spec);
  Tensor forward(const Tensor& x) override { return max_pool2d(x, g_); }
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;

 private:
  Pool2dGeometry g_;
};

class GlobalAvgPool2d : public Layer<NoKeys> {
 public:
  explicit GlobalAvgPool2d(const NoKeys& spec = {}) : Layer(global_avg_pool2d_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return global_avg_pool2d(x); }
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

class GlobalMaxPool2d : public Layer<NoKeys> {
 public:
  explicit GlobalMaxPool2d(const NoKeys& spec = {}) : Layer(global_max_pool2d_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return global_max_pool2d(x); }
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
};

}  // namespace minidl
