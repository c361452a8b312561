// CPU kernels of the pointwise activations: loops over contiguous floats in fixed chunks (each
// element depends only on its own inputs, so any split gives the same bits), the activation a
// compile-time constant so each loop holds only its own formula (activation_math.h).
#include "layers/activation/pointwise_kernels.h"

namespace minidl::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save
}  // namespace

void pointwise_forward_cpu(Activation a, const float* x, float* y, int64_t n) {
  act::with_activation(a, [&](auto kind) {
    constexpr Activation A = decltype(kind)::value;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = act::forward(A, x[i]);
  });
}

void pointwise_backward_cpu(Activation a, const float* dy, const float* saved, float* dx, int64_t n) {
  act::with_activation(a, [&](auto kind) {
    constexpr Activation A = decltype(kind)::value;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] = act::backward(A, dy[i], saved[i]);
  });
}

}  // namespace minidl::kernels
