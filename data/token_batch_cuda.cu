// The GPU side of data/token_batch_kernel.h: one block per window, its threads copying the
// window's tokens into the input and target rows (coalesced int32 reads and writes).
#include "core/cuda/runtime.h"
#include "data/token_batch_kernel.h"

namespace minidl::kernels {

namespace {

constexpr int kTokenBatchBlock = 256;

__global__ void token_batch_kernel(const int32_t* __restrict__ windows, const int32_t* __restrict__ order,
                                   int64_t seq_len, const BatchCursor* __restrict__ cursor, int64_t offset,
                                   int32_t* __restrict__ inputs, int32_t* __restrict__ targets) {
  const int64_t b = blockIdx.x;
  const int32_t* window = windows + order[cursor->position + offset + b] * (seq_len + 1);
  for (int64_t t = threadIdx.x; t < seq_len; t += blockDim.x) {
    inputs[b * seq_len + t] = window[t];
    targets[b * seq_len + t] = window[t + 1];
  }
}

}  // namespace

void token_batch_cuda(const int32_t* windows, const int32_t* order, int64_t batch, int64_t seq_len,
                      const BatchCursor* cursor, int64_t offset, int32_t* inputs, int32_t* targets) {
  if (batch == 0) return;
  token_batch_kernel<<<static_cast<unsigned>(batch), kTokenBatchBlock, 0, cuda::stream()>>>(
      windows, order, seq_len, cursor, offset, inputs, targets);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
