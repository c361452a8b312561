// MaxPool3d on the CPU: every element independent (max_pool3d_math.h), OpenMP over them.
#include "core/cast_kernels.h"
#include "layers/pool/max_pool3d_kernels.h"

namespace minidl::kernels {

void max_pool3d_forward_cpu(const Pool3dShape& s, DType dtype, const void* x, void* y, int32_t* idx) {
  const int64_t total = s.n * s.c * s.od() * s.oh() * s.ow();
  visit_floating(dtype, "max_pool3d", [&](auto t) {
    using T = decltype(t);
#pragma omp parallel for schedule(static) if (total > (1 << 16))
    for (int64_t i = 0; i < total; ++i) pool3d::forward_at(s, static_cast<const T*>(x), static_cast<T*>(y), idx, i);
  });
}

void max_pool3d_backward_cpu(const Pool3dShape& s, DType dtype, const void* dy, const int32_t* idx, void* dx) {
  const int64_t total = s.n * s.c * s.d * s.h * s.w;
  visit_floating(dtype, "max_pool3d", [&](auto t) {
    using T = decltype(t);
#pragma omp parallel for schedule(static) if (total > (1 << 16))
    for (int64_t i = 0; i < total; ++i) pool3d::backward_at(s, static_cast<const T*>(dy), idx, static_cast<T*>(dx), i);
  });
}

}  // namespace minidl::kernels
