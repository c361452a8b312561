// CPU reference of the dropout map (dropout_draw.h draws the same mask as the CUDA kernel).
#include "core/dispatch.h"
#include "core/half_types.h"
#include "layers/regularization/dropout_kernels.h"

namespace minidl::kernels {

template <class T>
void dropout_cpu(const DropoutDraw& draw, int64_t step, const T* x, T* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) y[i] = from_float<T>(to_float(x[i]) * dropout_factor(draw, step, i));
}

#define MINIDL_DROPOUT_CPU(T) template void dropout_cpu<T>(const DropoutDraw&, int64_t, const T*, T*, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_DROPOUT_CPU)

}  // namespace minidl::kernels
