// CPU reference of the dropout map (dropout_draw.h draws the same mask as the CUDA kernel).
#include "layers/regularization/dropout_kernels.h"

namespace minidl::kernels {

void dropout_cpu(const DropoutDraw& draw, int64_t step, const float* x, float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * dropout_factor(draw, step, i);
}

}  // namespace minidl::kernels
