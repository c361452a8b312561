#include <cstring>

#include "core/dispatch.h"
#include "layers/containers/cat_kernels.h"

namespace minidl::kernels {

template <class T>
void copy_rows_cpu(T* dst, int64_t dst_pitch, const T* src, int64_t src_pitch, int64_t width, int64_t rows) {
  const size_t bytes = sizeof(T) * static_cast<size_t>(width);
#pragma omp parallel for schedule(static) if (rows * width > (int64_t{1} << 20))
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, bytes);
}

#define MINIDL_COPY_ROWS_CPU(T) template void copy_rows_cpu<T>(T*, int64_t, const T*, int64_t, int64_t, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_COPY_ROWS_CPU)

}  // namespace minidl::kernels
