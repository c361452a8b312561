// CPU kernels of ReLU and GELU: plain loops over contiguous elements, split across threads in
// fixed chunks (each element's result depends only on its own inputs, so any split gives the
// same bits). The formulas are activation_math.h's, shared with the CUDA kernels; a half element
// is widened, computed in float32 and rounded once, the bits of the storage-rounded float32 op.
#include "core/dispatch.h"
#include "core/half_types.h"
#include "layers/activation/activation_kernels.h"
#include "layers/activation/activation_math.h"

namespace minidl::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save
}  // namespace

template <class T>
void relu_forward_cpu(const T* x, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = from_float<T>(act::relu_forward(to_float(x[i])));
}

template <class T>
void relu_backward_cpu(const T* dy, const T* y, T* dx, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] = from_float<T>(act::relu_backward(to_float(dy[i]), to_float(y[i])));
}

template <class T>
void gelu_forward_cpu(const T* x, T* y, int64_t n, GeluApproximate approximate) {
  if (approximate == GeluApproximate::Tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = from_float<T>(act::gelu_tanh_forward(to_float(x[i])));
  } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = from_float<T>(act::gelu_forward(to_float(x[i])));
  }
}

template <class T>
void gelu_backward_cpu(const T* dy, const T* x, T* dx, int64_t n, GeluApproximate approximate) {
  if (approximate == GeluApproximate::Tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] = from_float<T>(act::gelu_tanh_backward(to_float(dy[i]), to_float(x[i])));
  } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] = from_float<T>(act::gelu_backward(to_float(dy[i]), to_float(x[i])));
  }
}

#define MINIDL_ACTIVATION_CPU(T)                                             \
  template void relu_forward_cpu<T>(const T*, T*, int64_t);                  \
  template void relu_backward_cpu<T>(const T*, const T*, T*, int64_t);       \
  template void gelu_forward_cpu<T>(const T*, T*, int64_t, GeluApproximate); \
  template void gelu_backward_cpu<T>(const T*, const T*, T*, int64_t, GeluApproximate);
MINIDL_FOR_FLOATING_TYPES(MINIDL_ACTIVATION_CPU)

}  // namespace minidl::kernels
