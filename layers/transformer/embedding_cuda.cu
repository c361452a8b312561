// CUDA kernels of the embedding lookup (embedding_kernels.h). Forward: one thread per output
// element. Backward, deterministic without atomics: (id, token) pairs sorted by id with CUB's
// stable radix sort (tokens of one id stay in increasing order), then one block per sorted
// position; the block that starts a run of equal ids sums the run's gradient rows in that order,
// its threads striding over the columns, and writes the id's row. The CPU sums in the same order,
// so both give the same bits. Everything runs on the stream with no host sync (CUDA graphs hold it).
#include <cmath>
#include <cub/device/device_radix_sort.cuh>

#include "core/allocator.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/transformer/embedding_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kBlock = 256;

__global__ void embedding_forward_kernel(int64_t total, int64_t d, int64_t num_embeddings,
                                         const int32_t* __restrict__ ids, const float* __restrict__ weight,
                                         float* __restrict__ y) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = ids[e / d];
    y[e] = id >= 0 && id < num_embeddings ? weight[id * d + e % d] : NAN;
  }
}

__global__ void iota_kernel(int n, int32_t* __restrict__ out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = i;
}

// Block i: if sorted position i starts a run of one id, the run's rows summed in token order.
__global__ void embedding_backward_kernel(int n, int64_t num_embeddings, int64_t d, const int32_t* __restrict__ keys,
                                          const int32_t* __restrict__ tokens, const float* __restrict__ dy,
                                          float* __restrict__ dweight) {
  const int i = blockIdx.x;
  const int32_t id = keys[i];
  if ((i > 0 && keys[i - 1] == id) || id < 0 || id >= num_embeddings) return;
  int end = i + 1;
  while (end < n && keys[end] == id) ++end;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float sum = 0.f;
    for (int j = i; j < end; ++j) sum += dy[static_cast<int64_t>(tokens[j]) * d + c];
    dweight[id * d + c] = sum;
  }
}

}  // namespace

void embedding_forward_cuda(int64_t n, int64_t d, int64_t num_embeddings, const int32_t* ids, const float* weight,
                            float* y) {
  const int64_t total = n * d;
  if (total == 0) return;
  embedding_forward_kernel<<<cuda::grid_blocks(cuda::ceil_div(total, kBlock), kBlock), kBlock, 0, cuda::stream()>>>(
      total, d, num_embeddings, ids, weight, y);
  MINIDL_LAUNCH_CHECK();
}

void embedding_backward_cuda(int64_t n, int64_t num_embeddings, int64_t d, const int32_t* ids, const float* dy,
                             float* dweight) {
  MINIDL_CUDA_CHECK(cudaMemsetAsync(dweight, 0, sizeof(float) * num_embeddings * d, cuda::stream()));
  if (n == 0 || d == 0) return;
  MINIDL_CHECK(n <= INT32_MAX, "embedding on CUDA: ", n, " tokens exceed the sort's 32-bit count");
  const int count = static_cast<int>(n);
  auto pairs = allocate(sizeof(int32_t) * 3 * n, Device::cuda());
  int32_t* tokens_in = static_cast<int32_t*>(pairs.get());
  int32_t* keys_out = tokens_in + n;
  int32_t* tokens_out = keys_out + n;
  iota_kernel<<<cuda::grid_blocks(cuda::ceil_div(n, kBlock), kBlock), kBlock, 0, cuda::stream()>>>(count, tokens_in);
  MINIDL_LAUNCH_CHECK();
  size_t temp_bytes = 0;
  MINIDL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids, keys_out, tokens_in, tokens_out, count, 0,
                                                    32, cuda::stream()));
  auto temp = allocate(temp_bytes, Device::cuda());
  MINIDL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, ids, keys_out, tokens_in, tokens_out, count,
                                                    0, 32, cuda::stream()));
  embedding_backward_kernel<<<count, kBlock, 0, cuda::stream()>>>(count, num_embeddings, d, keys_out, tokens_out, dy,
                                                                  dweight);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
