// Pooling over NCHW float32 tensors: MaxPool2d (PyTorch's nn.MaxPool2d without dilation or
// ceil_mode) and the global pools GlobalAvgPool2d / GlobalMaxPool2d. CPU kernels in
// pooling_cpu.cpp, CUDA kernels in pooling_cuda.cu.
//
// MaxPool2d pads with -inf (a padded cell never wins) and records, per output, the argmax as an
// index into its input plane (ih * W + iw). Which element wins, as in PyTorch's kernels: the first
// maximum in row-major window order on ties, and a NaN always (the last NaN of the window), so a
// NaN input gives a NaN output. The backward is a gather: each input element sums, in a fixed
// window order, the gradients of the windows whose argmax it is. No atomics, so overlapping
// windows (kernel 3, stride 2) give the same bits every run.
//
// The global pools reduce each (n, c) plane to one value and return (N, C), i.e. they also
// flatten (PyTorch: nn.AdaptiveAvgPool2d(1) / nn.AdaptiveMaxPool2d(1) then nn.Flatten()), so a
// Linear layer can follow directly, as at the end of ResNet-9.
#pragma once
#include <cstdint>
#include <string>

#include "layers/module.h"

namespace minidl {

struct Pool2dGeometry {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

Tensor max_pool2d(const Tensor& x, const Pool2dGeometry& g);  // (N,C,H,W) -> (N,C,OH,OW)
Tensor global_avg_pool2d(const Tensor& x);                     // (N,C,H,W) -> (N,C)
Tensor global_max_pool2d(const Tensor& x);                     // (N,C,H,W) -> (N,C)

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dGeometry& g) : g_(g) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, g_); }
  std::string type_name() const override { return "MaxPool2d"; }
  std::string describe() const override;
  nlohmann::json to_json() const override;

 private:
  Pool2dGeometry g_;
};

class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool2d(x); }
  std::string type_name() const override { return "GlobalAvgPool2d"; }
  nlohmann::json to_json() const override { return {{"type", "GlobalAvgPool2d"}}; }
};

class GlobalMaxPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_max_pool2d(x); }
  std::string type_name() const override { return "GlobalMaxPool2d"; }
  nlohmann::json to_json() const override { return {{"type", "GlobalMaxPool2d"}}; }
};

namespace kernels {
// planes = N*C; every plane is H*W (input) or OH*OW (output), contiguous. argmax may be null in
// the forward (no backward will follow): then it is not written.
struct Pool2dShape {
  int64_t planes, H, W, OH, OW;
};
void max_pool2d_forward_cpu(const float* x, float* y, int32_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g);
void max_pool2d_backward_cpu(const float* dy, const int32_t* argmax, float* dx, const Pool2dShape& s,
                             const Pool2dGeometry& g);
// Global pools over planes of hw elements: y[p] = mean or max of plane p; argmax as above.
void global_avg_pool2d_forward_cpu(const float* x, float* y, int64_t planes, int64_t hw);
void global_avg_pool2d_backward_cpu(const float* dy, float* dx, int64_t planes, int64_t hw);
void global_max_pool2d_forward_cpu(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t hw);
void global_max_pool2d_backward_cpu(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t hw);
#ifdef MINIDL_WITH_CUDA
void max_pool2d_forward_cuda(const float* x, float* y, int32_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g);
void max_pool2d_backward_cuda(const float* dy, const int32_t* argmax, float* dx, const Pool2dShape& s,
                              const Pool2dGeometry& g);
void global_avg_pool2d_forward_cuda(const float* x, float* y, int64_t planes, int64_t hw);
void global_avg_pool2d_backward_cuda(const float* dy, float* dx, int64_t planes, int64_t hw);
void global_max_pool2d_forward_cuda(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t hw);
void global_max_pool2d_backward_cuda(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t hw);
#endif
}  // namespace kernels

}  // namespace minidl
