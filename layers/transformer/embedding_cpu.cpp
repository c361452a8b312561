// CPU loops of the embedding lookup (embedding_kernels.h). The backward runs OpenMP over column
// blocks, each thread walking every token in order: every (id, column) sum is one loop in token
// order, as on the GPU.
#include <algorithm>
#include <cstring>

#include "layers/transformer/embedding_kernels.h"

namespace minidl::kernels {

namespace {
constexpr int64_t kColumnBlock = 64;
}  // namespace

void embedding_forward_cpu(int64_t n, int64_t d, const int32_t* ids, const float* weight, float* y) {
#pragma omp parallel for schedule(static) if (n * d > (1 << 16))
  for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * d, weight + ids[i] * d, sizeof(float) * static_cast<size_t>(d));
}

void embedding_backward_cpu(int64_t n, int64_t num_embeddings, int64_t d, const int32_t* ids, const float* dy,
                            float* dweight) {
  std::fill(dweight, dweight + num_embeddings * d, 0.f);
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (n * d > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kColumnBlock, c1 = std::min(d, c0 + kColumnBlock);
    for (int64_t i = 0; i < n; ++i) {
      float* row = dweight + ids[i] * d;
      const float* g = dy + i * d;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }
}

}  // namespace minidl::kernels
