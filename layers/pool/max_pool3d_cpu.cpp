// MaxPool3d on the CPU: every element independent (max_pool3d_math.h), OpenMP over them.
#include "core/dispatch.h"
#include "layers/pool/max_pool3d_kernels.h"

namespace minidl::kernels {

template <class T>
void max_pool3d_forward_cpu(const Pool3dShape& s, const T* x, T* y, int32_t* idx) {
  const int64_t total = s.n * s.c * s.od() * s.oh() * s.ow();
#pragma omp parallel for schedule(static) if (total > (1 << 16))
  for (int64_t i = 0; i < total; ++i) pool3d::forward_at(s, x, y, idx, i);
}

template <class T>
void max_pool3d_backward_cpu(const Pool3dShape& s, const T* dy, const int32_t* idx, T* dx) {
  const int64_t total = s.n * s.c * s.d * s.h * s.w;
#pragma omp parallel for schedule(static) if (total > (1 << 16))
  for (int64_t i = 0; i < total; ++i) pool3d::backward_at(s, dy, idx, dx, i);
}

#define MINIDL_MAX_POOL3D_CPU(T)                                                       \
  template void max_pool3d_forward_cpu<T>(const Pool3dShape&, const T*, T*, int32_t*); \
  template void max_pool3d_backward_cpu<T>(const Pool3dShape&, const T*, const int32_t*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_MAX_POOL3D_CPU)

}  // namespace minidl::kernels
