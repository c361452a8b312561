// CPU kernels of ReLU and GELU: plain loops over contiguous floats, split across threads in
// fixed chunks (each element's result depends only on its own inputs, so any split gives the
// same bits). The formulas are activation_math.h's, shared with the CUDA kernels.
#include "layers/activation/activation_kernels.h"
#include "layers/activation/activation_math.h"

namespace minidl::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save
}  // namespace

void relu_forward_cpu(const float* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = act::relu_forward(x[i]);
}

void relu_backward_cpu(const float* dy, const float* y, float* dx, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] = act::relu_backward(dy[i], y[i]);
}

void gelu_forward_cpu(const float* x, float* y, int64_t n, GeluApproximate approximate) {
  if (approximate == GeluApproximate::Tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = act::gelu_tanh_forward(x[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = act::gelu_forward(x[i]);
  }
}

void gelu_backward_cpu(const float* dy, const float* x, float* dx, int64_t n, GeluApproximate approximate) {
  if (approximate == GeluApproximate::Tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] = act::gelu_tanh_backward(dy[i], x[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] = act::gelu_backward(dy[i], x[i]);
  }
}

}  // namespace minidl::kernels
