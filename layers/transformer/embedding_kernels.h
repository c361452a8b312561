// Launchers of the embedding lookup (embedding.h): ids (n) int32 in [0, num_embeddings), weight
// (num_embeddings, d) and the rows (n, d) float32 row-major. The backward sums, for every id, the
// gradient rows of its occurrences in token order, one float32 sum per (id, column): the CPU and
// CUDA give the same bits, every run. Plain C++ (no CUDA headers).
#pragma once
#include <cstdint>

namespace minidl::kernels {

// y[i] = weight[ids[i]]; ids checked by the caller.
void embedding_forward_cpu(int64_t n, int64_t d, const int32_t* ids, const float* weight, float* y);
// dweight (num_embeddings, d) = 0, then dweight[ids[i]] += dy[i] for i = 0, 1, ... in order.
void embedding_backward_cpu(int64_t n, int64_t num_embeddings, int64_t d, const int32_t* ids, const float* dy,
                            float* dweight);

// CUDA: an id out of range gives a NaN row forward and adds nothing backward (the host never
// waits to check ids; the token data is checked when it is read). The backward sorts (id, token)
// pairs with CUB's stable radix sort, then one block per run of equal ids sums its rows in token
// order.
void embedding_forward_cuda(int64_t n, int64_t d, int64_t num_embeddings, const int32_t* ids, const float* weight,
                            float* y);
void embedding_backward_cuda(int64_t n, int64_t num_embeddings, int64_t d, const int32_t* ids, const float* dy,
                             float* dweight);

}  // namespace minidl::kernels
