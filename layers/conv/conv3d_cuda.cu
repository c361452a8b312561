// Conv3d on the GPU: cuDNN's N-d convolutions through the plan cache of cudnn_conv_cuda.cu (its
// deterministic algorithm choice included), the bias kernels Conv2d uses.
#include "core/cuda/kernel_helpers.cuh"
#include "core/dispatch.h"
#include "core/error.h"
#include "layers/conv/conv2d_kernels.h"
#include "layers/conv/conv3d_kernels.h"
#include "layers/conv/cudnn_conv.h"

namespace minidl::kernels {
namespace {

CudnnConvProblem problem(const Conv3dShape& s) {
  CudnnConvProblem p;
  p.rank = 3;
  p.n = s.n;
  p.c = s.c;
  p.o = s.o;
  p.in = {s.d, s.h, s.w};
  p.k = {s.kd, s.kh, s.kw};
  p.stride = {s.sd, s.sh, s.sw};
  p.pad = {s.pd, s.ph, s.pw};
  p.dil = {1, 1, 1};
  return p;
}

// The float32 NCDHW path takes float only: a half NCDHW operand is the op's to widen
// (conv3d_ops.h).
template <class T>
CudnnOperands operands(bool channels_last) {
  MINIDL_CHECK(channels_last || DTypeOf<T>::value == DType::Float32, "conv3d on CUDA: a ",
               dtype_name(DTypeOf<T>::value), " operand must be channels_last_3d");
  return {DTypeOf<T>::value, channels_last};
}

}  // namespace

template <class T>
void conv3d_forward_cuda(const Conv3dShape& s, bool channels_last, const T* x, const T* w, const T* b, T* y) {
  if (s.n == 0) return;
  cudnn_conv_forward(problem(s), operands<T>(channels_last), x, w, y);
  if (b) conv3d_add_bias_cuda(channels_last, y, b, s.n, s.o, s.out_spatial());
}

template <class T>
void conv3d_backward_data_cuda(const Conv3dShape& s, bool channels_last, const T* dy, const T* w, T* dx) {
  if (s.n == 0) return;
  cudnn_conv_backward_data(problem(s), operands<T>(channels_last), dy, w, dx);
}

template <class T>
void conv3d_backward_filter_cuda(const Conv3dShape& s, bool channels_last, const T* x, const T* dy, T* dw) {
  cudnn_conv_backward_filter(problem(s), operands<T>(channels_last), x, dy, dw);
}

template <class T>
void conv3d_add_bias_cuda(bool channels_last, T* y, const T* b, int64_t n, int64_t o, int64_t spatial) {
  if (n == 0) return;
  if (channels_last) return conv2d_nhwc_add_bias_cuda(y, b, n * spatial, o);
  operands<T>(false);
  cuda::add_channel_bias(reinterpret_cast<float*>(y), reinterpret_cast<const float*>(b), n, o, spatial);
}

template <class T>
void conv3d_backward_bias_cuda(bool channels_last, const T* dy, T* db, int64_t n, int64_t o, int64_t spatial) {
  if (channels_last) return conv2d_nhwc_backward_bias_cuda(dy, db, n * spatial, o);
  operands<T>(false);
  conv_backward_bias_cuda(reinterpret_cast<const float*>(dy), reinterpret_cast<float*>(db), n, o, spatial);
}

#define MINIDL_CONV3D_CUDA(T)                                                                       \
  template void conv3d_forward_cuda<T>(const Conv3dShape&, bool, const T*, const T*, const T*, T*); \
  template void conv3d_backward_data_cuda<T>(const Conv3dShape&, bool, const T*, const T*, T*);     \
  template void conv3d_backward_filter_cuda<T>(const Conv3dShape&, bool, const T*, const T*, T*);   \
  template void conv3d_add_bias_cuda<T>(bool, T*, const T*, int64_t, int64_t, int64_t);             \
  template void conv3d_backward_bias_cuda<T>(bool, const T*, T*, int64_t, int64_t, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_CONV3D_CUDA)

}  // namespace minidl::kernels
