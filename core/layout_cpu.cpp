// CPU side of core/layout_kernels.h: blocked so that both the reads and the writes of a block
// stay in cache; threaded over (matrix, block row) on large tensors.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/layout_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int64_t kBlock = 32;

template <class From, class To>
void transpose_loop(const From* x, To* y, int64_t batch, int64_t rows, int64_t cols) {
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) schedule(static) if (batch * rows * cols > (1 << 16))
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
      const From* xm = x + b * rows * cols;
      To* ym = y + b * rows * cols;
      const int64_t r1 = rb * kBlock + kBlock < rows ? rb * kBlock + kBlock : rows;
      for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
        const int64_t c1 = c0 + kBlock < cols ? c0 + kBlock : cols;
        for (int64_t r = rb * kBlock; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) ym[c * rows + r] = from_float<To>(to_float(xm[r * cols + c]));
      }
    }
}

}  // namespace

void transpose_cast_cpu(const void* x, DType from, void* y, DType to, int64_t batch, int64_t rows, int64_t cols) {
  dispatch_dtype(from, "to(memory_format)", [&](auto a) {
    dispatch_dtype(to, "to(memory_format)", [&](auto b) {
      using From = decltype(a);
      using To = decltype(b);
      transpose_loop(static_cast<const From*>(x), static_cast<To*>(y), batch, rows, cols);
    });
  });
}

}  // namespace minidl::kernels
