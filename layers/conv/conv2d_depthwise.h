// Depthwise convolutions (groups = in_channels = out_channels): kernels of our own. On CUDA, on
// channels-last operands (layers/conv/conv2d_depthwise_cuda.cu, conv2d_depthwise_filter_cuda.cu),
// where cuDNN's grouped engines are far from the memory floor (docs/perf/depthwise.md): a depthwise
// convolution does kh*kw multiply-adds per value it reads, too few for a GEMM, so the kernels
// stream x (or dy) once, each thread holding 8 channels of a strip of outputs, the weights staged
// in shared memory. On the CPU (conv2d_depthwise_cpu.cpp), each plane convolved directly, which
// the tests hold to the float64 definition as they do the CUDA kernels. Plain C++ (no CUDA
// headers).
#pragma once
#include "core/dtype.h"
#include "layers/conv/conv2d_kernels.h"

namespace minidl::kernels {

// Channels one thread holds: one 16-byte vector of bfloat16/float16 (two of float32). The
// channels must come in whole vectors.
constexpr int64_t kConv2dDepthwiseVector = 8;

// Whether our kernels serve this problem: depthwise (groups = c = o), channels a multiple of 8, a
// square 3x3, 5x5 or 7x7 kernel, stride 1 or 2 (the same both ways), no dilation, any padding;
// float32, bfloat16 or float16. conv2d_nhwc_*_cuda also need 16-byte-aligned x, y, dy and dx;
// other problems, dilated ones included, go to cuDNN.
inline bool conv2d_depthwise_applies(const Conv2dShape& s) {
  const bool depthwise = s.groups == s.c && s.o == s.c && s.c % kConv2dDepthwiseVector == 0;
  const bool kernel = s.kh == s.kw && (s.kh == 3 || s.kh == 5 || s.kh == 7);
  return depthwise && kernel && s.sh == s.sw && (s.sh == 1 || s.sh == 2) && s.dil_h == 1 && s.dil_w == 1;
}

// The channels-last operands of conv2d_nhwc_*_cuda (conv2d_kernels.h): x and dx (n, h, w, c),
// weight and dw (c, kh, kw) (a depthwise weight (c, 1, kh, kw) is the same in either layout), y
// and dy (n, oh, ow, c), b (c) or null; all of T (float, bf16 or fp16). float32 FMAs on the widened values, taps
// in (i, j) order, the bias added last, each output rounded once. dw sums fixed slices of the
// batch into float32 partials and then the partials in slice order (no atomics): the same bits
// every run on a given GPU. Outputs are overwritten, not accumulated into.
template <class T>
void conv2d_depthwise_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y);
template <class T>
void conv2d_depthwise_backward_data_cuda(const Conv2dShape& s, const T* dy, const T* w, T* dx);
template <class T>
void conv2d_depthwise_backward_filter_cuda(const Conv2dShape& s, const T* x, const T* dy, T* dw);

// The CPU's direct path, NCHW float32, for every depthwise problem of more than one channel (any
// kernel, stride, padding and dilation): what conv2d_forward_cpu and conv2d_backward_cpu
// (conv2d_kernels.h) run for them, with their arguments.
inline bool conv2d_depthwise_cpu_applies(const Conv2dShape& s) { return s.groups > 1 && s.groups == s.c && s.o == s.c; }
void conv2d_depthwise_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y);
void conv2d_depthwise_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx,
                                   float* dw, float* db);

}  // namespace minidl::kernels
