// Raw 3-D convolution launchers (Conv3d, and ConvTranspose3d as its adjoint): the CPU path over
// contiguous float32 NCDHW tensors (layers/conv/conv3d_cpu.cpp, vol2col + Eigen GEMM) and the
// CUDA path (layers/conv/conv3d_cuda.cu, cuDNN) over float32 NCDHW or channels-last NDHWC tensors
// of float32, bfloat16 or float16. Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

namespace minidl {

// Input (n, c, d, h, w), weight (o, c, kd, kh, kw), stride (sd, sh, sw), zero padding
// (pd, ph, pw), output (n, o, od, oh, ow). Cross-correlation, as in PyTorch.
struct Conv3dShape {
  int64_t n, c, d, h, w, o, kd, kh, kw, sd, sh, sw, pd, ph, pw;
  int64_t od() const { return (d + 2 * pd - kd) / sd + 1; }
  int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
  int64_t in_spatial() const { return d * h * w; }
  int64_t out_spatial() const { return od() * oh() * ow(); }
  int64_t taps() const { return c * kd * kh * kw; }  // the weight's elements per output channel
  // 2 * multiply-adds: the work of the forward pass, and equally of backward-data and of
  // backward-filter.
  double flops() const { return 2.0 * n * o * out_spatial() * taps(); }
};

namespace kernels {

// y = conv(x, w) + b; b may be null.
void conv3d_forward_cpu(const Conv3dShape& s, const float* x, const float* w, const float* b, float* y);
// The gradients that are non-null (dx, dw), each overwritten; x is read only for dw (may be null
// otherwise). Summed in an order set by the shape alone (per sample, then over samples in order),
// so the bits do not depend on the thread count.
void conv3d_backward_cpu(const Conv3dShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw);
// y (n, o, spatial) += b per channel; db[o] = the sum of dy (n, o, spatial) over n and the
// positions, in double in that order.
void conv3d_add_bias_cpu(float* y, const float* b, int64_t n, int64_t o, int64_t spatial);
void conv3d_backward_bias_cpu(const float* dy, float* db, int64_t n, int64_t o, int64_t spatial);

// cuDNN over T (float, bf16, fp16): NDHWC operands and a channels-last (o, kd, kh, kw, c) weight
// when `channels_last` (every T), else float32 NCDHW (T = float). The bias is added after cuDNN's
// forward; db sums dy in a fixed order.
template <class T>
void conv3d_forward_cuda(const Conv3dShape& s, bool channels_last, const T* x, const T* w, const T* b, T* y);
template <class T>
void conv3d_backward_data_cuda(const Conv3dShape& s, bool channels_last, const T* dy, const T* w, T* dx);
template <class T>
void conv3d_backward_filter_cuda(const Conv3dShape& s, bool channels_last, const T* x, const T* dy, T* dw);
// y (n, o, spatial) += b per channel, and db = the sum of dy over n and the `spatial` positions:
// the bias of Conv3d (spatial = od*oh*ow) and of ConvTranspose3d (its output's positions).
template <class T>
void conv3d_add_bias_cuda(bool channels_last, T* y, const T* b, int64_t n, int64_t o, int64_t spatial);
template <class T>
void conv3d_backward_bias_cuda(bool channels_last, const T* dy, T* db, int64_t n, int64_t o, int64_t spatial);

}  // namespace kernels
}  // namespace minidl
