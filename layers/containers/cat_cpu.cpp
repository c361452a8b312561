#include <cstdint>
#include <cstring>

#include "layers/containers/cat_kernels.h"

namespace minidl::kernels {

void copy_rows_cpu(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#pragma omp parallel for schedule(static) if (rows * width > (size_t{1} << 20))
  for (int64_t r = 0; r < static_cast<int64_t>(rows); ++r)
    std::memcpy(d + static_cast<size_t>(r) * dst_pitch, s + static_cast<size_t>(r) * src_pitch, width);
}

}  // namespace minidl::kernels
