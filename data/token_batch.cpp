#include <cstring>

#include "data/token_batch_kernel.h"

namespace minidl::kernels {

void token_batch_cpu(const int32_t* windows, const int32_t* order, int64_t batch, int64_t seq_len,
                     const BatchCursor* cursor, int64_t offset, int32_t* inputs, int32_t* targets) {
  const int32_t* indices = order + cursor->position + offset;
  const size_t row_bytes = static_cast<size_t>(seq_len) * sizeof(int32_t);
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* window = windows + indices[b] * (seq_len + 1);
    std::memcpy(inputs + b * seq_len, window, row_bytes);
    std::memcpy(targets + b * seq_len, window + 1, row_bytes);
  }
}

}  // namespace minidl::kernels
