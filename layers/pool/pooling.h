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
// planes = N*C; every plane is H*W (input) or OH*OW (output), contiguous.
struct Pool2dShape {
  int64_t planes, H, W, OH, OW;
};

// Windows that share no input element: the backward writes each window's block of dx.
inline bool pool2d_windows_disjoint(const Pool2dGeometry& g) {
  return g.stride_h >= g.kernel_h && g.stride_w >= g.kernel_w && g.pad_h == 0 && g.pad_w == 0;
}

// The dtype of MaxPool2d's argmax (window offsets): UInt8 up to 256 cells per window, else Int32.
inline DType max_pool2d_argmax_dtype(const Pool2dGeometry& g) {
  return g.kernel_h * g.kernel_w <= 256 ? DType::UInt8 : DType::Int32;
}

// argmax may be null in the forward (no backward will follow): then it is not written. The
// uint8_t overloads need kernel_h * kernel_w <= 256.
void max_pool2d_forward_cpu(const float* x, float* y, uint8_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g);
void max_pool2d_forward_cpu(const float* x, float* y, int32_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g);
void max_pool2d_backward_cpu(const float* dy, const uint8_t* argmax, float* dx, const Pool2dShape& s,
                             const Pool2dGeometry& g);
void max_pool2d_backward_cpu(const float* dy, const int32_t* argmax, float* dx, const Pool2dShape& s,
                             const Pool2dGeometry& g);
// Global pools over planes of hw elements: y[p] = mean or max of plane p; argmax is the index
// within the plane (the plane is the window).
void global_avg_pool2d_forward_cpu(const float* x, float* y, int64_t planes, int64_t hw);
void global_avg_pool2d_backward_cpu(const float* dy, float* dx, int64_t planes, int64_t hw);
void global_max_pool2d_forward_cpu(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t hw);
void global_max_pool2d_backward_cpu(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t hw);
#ifdef MINIDL_WITH_CUDA
void max_pool2d_forward_cuda(const float* x, float* y, uint8_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g);
void max_pool2d_forward_cuda(const float* x, float* y, int32_t* argmax, const Pool2dShape& s, const Pool2dGeometry& g);
void max_pool2d_backward_cuda(const float* dy, const uint8_t* argmax, float* dx, const Pool2dShape& s,
                              const Pool2dGeometry& g);
void max_pool2d_backward_cuda(const float* dy, const int32_t* argmax, float* dx, const Pool2dShape& s,
                              const Pool2dGeometry& g);
void global_avg_pool2d_forward_cuda(const float* x, float* y, int64_t planes, int64_t hw);
void global_avg_pool2d_backward_cuda(const float* dy, float* dx, int64_t planes, int64_t hw);
void global_max_pool2d_forward_cuda(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t hw);
void global_max_pool2d_backward_cuda(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t hw);
#endif
}  // namespace kernels

}  // namespace minidl
