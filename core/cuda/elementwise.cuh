// Elementwise maps over contiguous tensors of float32, bfloat16 or float16, shared by the
// activations and the tensor ops: out[i] = op(a[i]) or op(a[i], b[i]), computed in float32 and
// rounded once to the storage type with the host's conversion code (core/half_types.h). So a half
// map gives exactly the bits of the storage-rounded float32 op (core/storage_rounding.h), which
// the tests compare it against.
//
// Pure bandwidth: each element is read once and written once. The bulk moves in 16-byte packs
// (4 floats or 8 halves: one load/store per thread per step, the widest the memory system serves
// in one transaction) when every pointer is 16-byte aligned; the leftover elements, or a
// misaligned view, go one at a time. Grid-stride loops over a grid that fills the chip once.
// The pointers may alias elementwise (axpy_ writes its own input): no __restrict__.
#pragma once
#include <cstdint>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/half_types.h"

namespace minidl::cuda {

template <class T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T v[kN];
};

template <class T, class Op>
__global__ void map1_kernel(const T* a, T* out, int64_t n, int64_t packs, Op op) {
  constexpr int K = Pack<T>::kN;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = tid; i < packs; i += stride) {
    const Pack<T> u = reinterpret_cast<const Pack<T>*>(a)[i];
    Pack<T> r;
#pragma unroll
    for (int j = 0; j < K; ++j) r.v[j] = from_float<T>(op(to_float(u.v[j])));
    reinterpret_cast<Pack<T>*>(out)[i] = r;
  }
  for (int64_t i = K * packs + tid; i < n; i += stride) out[i] = from_float<T>(op(to_float(a[i])));
}

template <class T, class Op>
__global__ void map2_kernel(const T* a, const T* b, T* out, int64_t n, int64_t packs, Op op) {
  constexpr int K = Pack<T>::kN;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = tid; i < packs; i += stride) {
    const Pack<T> u = reinterpret_cast<const Pack<T>*>(a)[i];
    const Pack<T> v = reinterpret_cast<const Pack<T>*>(b)[i];
    Pack<T> r;
#pragma unroll
    for (int j = 0; j < K; ++j) r.v[j] = from_float<T>(op(to_float(u.v[j]), to_float(v.v[j])));
    reinterpret_cast<Pack<T>*>(out)[i] = r;
  }
  for (int64_t i = K * packs + tid; i < n; i += stride) out[i] = from_float<T>(op(to_float(a[i]), to_float(b[i])));
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether every row of a (rows, row_len) matrix at p starts 16-byte aligned, so each row reads in
// whole packs.
template <class T>
bool packed_rows(const T* p, int64_t row_len) {
  return aligned16(p) && row_len % Pack<T>::kN == 0;
}

constexpr int kMapBlock = 256;

template <class T, class Op>
void launch_map1(const T* a, T* out, int64_t n, Op op) {
  if (n == 0) return;
  const int64_t packs = aligned16(a) && aligned16(out) ? n / Pack<T>::kN : 0;
  const int64_t rest = n - packs * Pack<T>::kN;
  const int grid = grid_blocks(ceil_div(packs > rest ? packs : rest, kMapBlock), kMapBlock);
  map1_kernel<T, Op><<<grid, kMapBlock, 0, stream()>>>(a, out, n, packs, op);
  MINIDL_LAUNCH_CHECK();
}

template <class T, class Op>
void launch_map2(const T* a, const T* b, T* out, int64_t n, Op op) {
  if (n == 0) return;
  const int64_t packs = aligned16(a) && aligned16(b) && aligned16(out) ? n / Pack<T>::kN : 0;
  const int64_t rest = n - packs * Pack<T>::kN;
  const int grid = grid_blocks(ceil_div(packs > rest ? packs : rest, kMapBlock), kMapBlock);
  map2_kernel<T, Op><<<grid, kMapBlock, 0, stream()>>>(a, b, out, n, packs, op);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::cuda
