// Conv2d on the GPU: cuDNN (through the plan cache of cudnn_conv_cuda.cu, which says how
// algorithms are chosen) and our own kernels where they win.
//
// Few input channels (c * kh * kw <= 32, stride 1: a first layer on RGB images): forward and
// backward-filter go to our direct kernels (layers/conv/conv2d_small_cin_cuda.cu) in every mode. They
// are deterministic and full fp32, so they satisfy any setting, and run near the memory floor
// where cuDNN is 8-20x above it. Backward-data of such layers stays with cuDNN. On channels-last
// bfloat16/float16 operands the forward goes to a direct kernel of the same file; both backward
// directions stay with cuDNN there. A half forward with 17..31 input channels runs as the
// problem zero-padded to 32 (conv2d_nhwc_padded_channels, conv2d_kernels.h).
#include <cstdint>
#include <type_traits>

#include "core/allocator.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "layers/conv/conv2d_depthwise.h"
#include "layers/conv/conv2d_kernels.h"
#include "layers/conv/conv2d_patchify.h"
#include "layers/conv/conv2d_small_cin.h"
#include "layers/conv/cudnn_conv.h"

namespace minidl::kernels {
namespace {

constexpr CudnnOperands kNchwFloat{};

CudnnConvProblem problem(const Conv2dShape& s) {
  CudnnConvProblem p;
  p.rank = 2;
  p.n = s.n;
  p.c = s.c;
  p.o = s.o;
  p.groups = s.groups;
  p.in = {s.h, s.w, 0};
  p.k = {s.kh, s.kw, 0};
  p.stride = {s.sh, s.sw, 0};
  p.pad = {s.ph, s.pw, 0};
  p.dil = {s.dil_h, s.dil_w, 0};
  return p;
}

template <class T>
void run_forward(const Conv2dShape& s, CudnnOperands ops, const T* x, const T* w, T* y) {
  cudnn_conv_forward(problem(s), ops, x, w, y);
}
template <class T>
void run_backward_data(const Conv2dShape& s, CudnnOperands ops, const T* dy, const T* w, T* dx) {
  cudnn_conv_backward_data(problem(s), ops, dy, w, dx);
}
template <class T>
void run_backward_filter(const Conv2dShape& s, CudnnOperands ops, const T* x, const T* dy, T* dw) {
  cudnn_conv_backward_filter(problem(s), ops, x, dy, dw);
}

// Whether our depthwise kernels take this problem with these operands: they load 16-byte vectors.
template <class T>
bool depthwise(const Conv2dShape& s, const T* a, const T* b) {
  const auto aligned = [](const T* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return conv2d_depthwise_applies(s) && aligned(a) && aligned(b);
}

// The paths of bf16 and fp16 operands only (patchify, small-channel forward, channel padding).
template <class T>
constexpr bool kHalf = !std::is_same_v<T, float>;

// cuDNN's channels-last forward, on input channels padded first where conv2d_nhwc_padded_channels
// says so (half operands only).
template <class T>
void run_nhwc_forward(const Conv2dShape& s, const T* x, const T* w, T* y) {
  constexpr CudnnOperands ops{DTypeOf<T>::value, true};
  if constexpr (kHalf<T>) {
    if (const int64_t cp = conv2d_nhwc_padded_channels(s, ops.dtype)) {
      Conv2dShape p = s;
      p.c = cp;
      auto xp = allocate(sizeof(T) * s.n * s.h * s.w * cp, Device::cuda());
      auto wp = allocate(sizeof(T) * s.o * s.kh * s.kw * cp, Device::cuda());
      conv2d_nhwc_pad_channels_cuda(x, static_cast<T*>(xp.get()), s.n * s.h * s.w, s.c, cp);
      conv2d_nhwc_pad_channels_cuda(w, static_cast<T*>(wp.get()), s.o * s.kh * s.kw, s.c, cp);
      return run_forward(p, ops, static_cast<const T*>(xp.get()), static_cast<const T*>(wp.get()), y);
    }
  }
  run_forward(s, ops, x, w, y);
}

}  // namespace

void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  if (s.n == 0) return;
  if (conv2d_small_cin_applies(s)) return conv2d_small_cin_forward_cuda(s, x, w, b, y);
  run_forward(s, kNchwFloat, x, w, y);
  if (b) cuda::add_channel_bias(y, b, s.n, s.o, s.oh() * s.ow());
}

void conv2d_backward_data_cuda(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  if (s.n == 0) return;
  run_backward_data(s, kNchwFloat, dy, w, dx);
}

void conv2d_backward_filter_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw) {
  if (conv2d_small_cin_applies(s)) return conv2d_small_cin_backward_filter_cuda(s, x, dy, dw);
  run_backward_filter(s, kNchwFloat, x, dy, dw);
}

template <class T>
void conv2d_nhwc_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  if (s.n == 0) return;
  if (depthwise(s, x, y)) return conv2d_depthwise_forward_cuda(s, x, w, b, y);
  if constexpr (kHalf<T>) {
    if (conv2d_patchify_applies(s, DTypeOf<T>::value)) return conv2d_patchify_forward_cuda(s, x, w, b, y);
    if (conv2d_small_cin_nhwc_applies(s, DTypeOf<T>::value)) return conv2d_small_cin_nhwc_forward_cuda(s, x, w, b, y);
  }
  run_nhwc_forward(s, x, w, y);
  if (b) conv2d_nhwc_add_bias_cuda(y, b, s.n * s.oh() * s.ow(), s.o);
}

template <class T>
void conv2d_nhwc_backward_data_cuda(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  if (s.n == 0) return;
  if (depthwise(s, dy, dx)) return conv2d_depthwise_backward_data_cuda(s, dy, w, dx);
  if constexpr (kHalf<T>) {
    if (conv2d_patchify_applies(s, DTypeOf<T>::value)) return conv2d_patchify_backward_data_cuda(s, dy, w, dx);
  }
  run_backward_data(s, {DTypeOf<T>::value, true}, dy, w, dx);
}

template <class T>
void conv2d_nhwc_backward_filter_cuda(const Conv2dShape& s, const T* x, const T* dy, T* dw) {
  if (depthwise(s, x, dy)) return conv2d_depthwise_backward_filter_cuda(s, x, dy, dw);
  if constexpr (kHalf<T>) {
    if (conv2d_patchify_applies(s, DTypeOf<T>::value)) return conv2d_patchify_backward_filter_cuda(s, x, dy, dw);
  }
  run_backward_filter(s, {DTypeOf<T>::value, true}, x, dy, dw);
}

#define MINIDL_CONV2D_NHWC_CUDA(T)                                                                 \
  template void conv2d_nhwc_forward_cuda<T>(const Conv2dShape&, const T*, const T*, const T*, T*); \
  template void conv2d_nhwc_backward_data_cuda<T>(const Conv2dShape&, const T*, const T*, T*);     \
  template void conv2d_nhwc_backward_filter_cuda<T>(const Conv2dShape&, const T*, const T*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_CONV2D_NHWC_CUDA)

void conv2d_backward_bias_cuda(const Conv2dShape& s, const float* dy, float* db) {
  conv_backward_bias_cuda(dy, db, s.n, s.o, s.oh() * s.ow());
}

size_t conv2d_cuda_plan_count() { return cudnn_conv_plan_count(); }

std::string conv2d_cuda_algorithms(const Conv2dShape& s) {
  const CudnnConvAlgorithms a = cudnn_conv_algorithms(problem(s), kNchwFloat);
  if (conv2d_small_cin_applies(s)) return str("fwd small_cin fma | bwd_data ", a.bwd_data, " | bwd_filter small_cin fma");
  return a.planned ? a.str() : "";
}

std::string conv2d_nhwc_cuda_algorithms(const Conv2dShape& s, DType dtype) {
  if (conv2d_depthwise_applies(s)) return "fwd depthwise direct | bwd_data depthwise direct | bwd_filter depthwise direct";
  if (conv2d_patchify_applies(s, dtype)) return "fwd patchify gemm | bwd_data patchify gemm | bwd_filter patchify gemm";
  const CudnnConvAlgorithms a = cudnn_conv_algorithms(problem(s), {dtype, true});
  const std::string backward = str(" | bwd_data ", a.bwd_data, " | bwd_filter ", a.bwd_filter);
  if (conv2d_small_cin_nhwc_applies(s, dtype)) return "fwd small_cin fma" + backward;
  if (const int64_t cp = conv2d_nhwc_padded_channels(s, dtype)) {
    Conv2dShape p = s;
    p.c = cp;
    return str("fwd ", cudnn_conv_algorithms(problem(p), {dtype, true}).fwd, " padded to ", cp, " channels",
               backward);
  }
  return a.planned ? a.str() : "";
}

}  // namespace minidl::kernels