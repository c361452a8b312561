// Launchers of the average pools AvgPool2d and AdaptiveAvgPool2d (avg_pool_cpu.cpp,
// avg_pool_cuda.cu) and the windows they share (avg_pool_window.h): plain C++, no Module and no
// JSON, so nvcc compiles only this with the kernels.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl {

// AvgPool2d's windows (torch.nn.AvgPool2d without divisor_override), or, with `adaptive`,
// AdaptiveAvgPool2d's (window i along an axis of n inputs and m outputs spans
// [floor(i n / m), ceil((i + 1) n / m)); the kernel, stride and padding are then unused).
struct AvgPool2dGeometry {
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  bool adaptive = false;
};

namespace kernels {
// x is (n, c, H, W), y (n, c, OH, OW), in NCHW order or, with channels_last, NHWC.
struct AvgPool2dShape {
  int64_t n, c, H, W, OH, OW;
};

// CPU: NCHW float32. Forward y = the window's sum (row-major order, float32) / its divisor;
// backward dx = the sum over the windows covering the element, in (oh, ow) order from 0, of
// dy / divisor (PyTorch's CPU kernels' operations, so its bits).
void avg_pool2d_forward_cpu(const float* x, float* y, const AvgPool2dShape& s, const AvgPool2dGeometry& g);
void avg_pool2d_backward_cpu(const float* dy, float* dx, const AvgPool2dShape& s, const AvgPool2dGeometry& g);
// CUDA: T float, bf16 or fp16, NCHW or NHWC, the CPU's operations in float32 with one rounding
// to T at the end, so the CPU's bits on the widened values.
template <class T>
void avg_pool2d_forward_cuda(const T* x, T* y, const AvgPool2dShape& s, const AvgPool2dGeometry& g, bool channels_last);
template <class T>
void avg_pool2d_backward_cuda(const T* dy, T* dx, const AvgPool2dShape& s, const AvgPool2dGeometry& g,
                              bool channels_last);
}  // namespace kernels

}  // namespace minidl
