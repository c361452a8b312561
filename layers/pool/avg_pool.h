// Average pooling: AvgPool2d (torch.nn.AvgPool2d: kernel_size, stride, padding, ceil_mode,
// count_include_pad) and AdaptiveAvgPool2d (torch.nn.AdaptiveAvgPool2d: output_size), (N, C, H, W)
// -> (N, C, OH, OW) in float32, bfloat16 or float16, contiguous or channels_last (the output keeps
// the input's layout). CPU kernels in avg_pool_cpu.cpp (NCHW; a channels-last input is reordered
// around them), CUDA kernels in avg_pool_cuda.cu (both layouts, no reordering). The windows are
// avg_pool_window.h's; the backward gathers, so every run gives the same bits. For the mean over
// the whole plane flattened to (N, C), GlobalAvgPool2d (pooling.h) is the faster kernel.
#pragma once
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/pool/avg_pool_kernels.h"
#include "layers/size2d.h"

namespace minidl {

// The op behind both layers; `g.adaptive` picks AdaptiveAvgPool2d's windows for (out_h, out_w).
// Errors naming `what` when the input is too small for the windows.
Tensor avg_pool2d(const Tensor& x, const AvgPool2dGeometry& g, const std::string& what = "avg_pool2d");
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

// The layer types' descriptors (layers/layer_descriptor.h), listed in layers/registry.cpp.
const LayerDescriptor& avgpool2d_layer();
const LayerDescriptor& adaptive_avgpool2d_layer();

struct AvgPool2dSpec {
  Size2d kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  static const Fields<AvgPool2dSpec>& fields();
};

class AvgPool2d : public Layer<AvgPool2dSpec> {
 public:
  explicit AvgPool2d(const AvgPool2dSpec& spec);
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, g_); }
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  const AvgPool2dGeometry& geometry() const { return g_; }

 private:
  AvgPool2dGeometry g_;
};

struct AdaptiveAvgPool2dSpec {
  Size2d output_size;
  static const Fields<AdaptiveAvgPool2dSpec>& fields();
};

class AdaptiveAvgPool2d : public Layer<AdaptiveAvgPool2dSpec> {
 public:
  explicit AdaptiveAvgPool2d(const AdaptiveAvgPool2dSpec& spec) : Layer(adaptive_avgpool2d_layer(), spec) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, out_h(), out_w()); }
  std::string describe() const override;
  std::optional<LayerWork> work(const Tensor& input, const Tensor& output) const override;
  int64_t out_h() const { return spec().output_size.h; }
  int64_t out_w() const { return spec().output_size.w; }
};

}  // namespace minidl
