// CPU side of core/cast_kernels.h: one conversion per element, threaded on large tensors.
#include "core/cast_kernels.h"
#include "core/dispatch.h"

namespace minidl::kernels {

namespace {
template <class From, class To>
void cast_loop(const From* x, To* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = from_float<To>(to_float(x[i]));
}
template <class From, class To>
void convert_loop(const From* x, To* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<To>(x[i]);
}
}  // namespace

void cast_cpu(const void* x, DType from, void* y, DType to, int64_t n) {
  if (from == DType::Int32 && to == DType::Float32)
    return convert_loop(static_cast<const int32_t*>(x), static_cast<float*>(y), n);
  if (from == DType::Float32 && to == DType::Int32)
    return convert_loop(static_cast<const float*>(x), static_cast<int32_t*>(y), n);
  dispatch_dtype(from, "cast", [&](auto a) {
    dispatch_dtype(to, "cast", [&](auto b) {
      using From = decltype(a);
      using To = decltype(b);
      cast_loop(static_cast<const From*>(x), static_cast<To*>(y), n);
    });
  });
}

}  // namespace minidl::kernels
