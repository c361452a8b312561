// Launchers of the pooling kernels (pooling_cpu.cpp, pooling_cuda.cu, pooling_nhwc_cuda.cu) and the
// geometry they share with the modules: plain C++, no Module and no JSON, so nvcc compiles only
// this with the kernels.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl {

struct Pool2dGeometry {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
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

// ---- Channels-last (NHWC) launchers (pooling_nhwc_cuda.cu) ----
// Results: those of the NCHW float32 launchers above on the values widened to float32, rounded
// once to T, bit for bit (argmax offsets, ties, NaN, every dx), except that the global
// average sums each plane in hw order, not in the NCHW CUDA kernel's lane tree. argmax may be
// null in the forwards, as above; the uint8_t overloads need kernel_h * kernel_w <= 256.
// Channels-last (NHWC) tensors on CUDA: x is [n][H][W][c], y and argmax [n][OH][OW][c]; values of
// T (float, bf16, fp16) read and written in that type, compared/summed in float32. Index is
// uint8_t or int32_t.
struct Pool2dNhwcShape { int64_t n, c, H, W, OH, OW; };
template <class T, class Index>
void max_pool2d_nhwc_forward_cuda(const T* x, T* y, Index* argmax, const Pool2dNhwcShape& s, const Pool2dGeometry& g);
template <class T, class Index>
void max_pool2d_nhwc_backward_cuda(const T* dy, const Index* argmax, T* dx, const Pool2dNhwcShape& s,
                                   const Pool2dGeometry& g);
// Global pools: x [n][hw][c] -> y [n][c] (y is (N, C), the same bytes in either layout).
template <class T> void global_avg_pool2d_nhwc_forward_cuda(const T* x, T* y, int64_t n, int64_t hw, int64_t c);
template <class T> void global_avg_pool2d_nhwc_backward_cuda(const T* dy, T* dx, int64_t n, int64_t hw, int64_t c);
template <class T>
void global_max_pool2d_nhwc_forward_cuda(const T* x, T* y, int32_t* argmax, int64_t n, int64_t hw, int64_t c);
template <class T>
void global_max_pool2d_nhwc_backward_cuda(const T* dy, const int32_t* argmax, T* dx, int64_t n, int64_t hw, int64_t c);
}  // namespace kernels

}  // namespace minidl
