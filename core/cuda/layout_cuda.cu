// CUDA side of core/layout_kernels.h: the classic shared-memory tiled transpose. A block moves
// one 32 x 32 tile: its warps read tile rows (consecutive addresses of x), stage them in shared
// memory, and write tile columns as rows of y (consecutive addresses again), so both sides of
// DRAM traffic are coalesced; the +1 column of padding keeps the column reads of shared memory
// free of bank conflicts. Each element is converted once, with the host's code
// (core/half_types.h), so the CPU's bits. Memory-bound: 2 x numel x element size bytes.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/error.h"
#include "core/layout_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // block (32, 8): each thread moves 4 elements of the tile

template <class From, class To>
__global__ void transpose_cast_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t batch, int64_t rows,
                                      int64_t cols, int64_t row_tiles, int64_t col_tiles) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t tiles = batch * row_tiles * col_tiles;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t b = t / (row_tiles * col_tiles);
    const int64_t rest = t - b * row_tiles * col_tiles;
    const int64_t r0 = (rest / col_tiles) * kTile, c0 = (rest % col_tiles) * kTile;
    const From* xm = x + b * rows * cols;
    To* ym = y + b * rows * cols;
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = to_float(xm[r * cols + c]);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (r < rows && c < cols) ym[c * rows + r] = from_float<To>(tile[threadIdx.x][i]);
    }
    __syncthreads();
  }
}

}  // namespace

void transpose_cast_cuda(const void* x, DType from, void* y, DType to, int64_t batch, int64_t rows, int64_t cols) {
  if (batch == 0 || rows == 0 || cols == 0) return;
  const int64_t row_tiles = cuda::ceil_div(rows, kTile), col_tiles = cuda::ceil_div(cols, kTile);
  const dim3 block(kTile, kRowsPerPass);
  const int grid = cuda::grid_blocks(batch * row_tiles * col_tiles, kTile * kRowsPerPass);
  dispatch_dtype(from, "to(memory_format)", [&](auto a) {
    dispatch_dtype(to, "to(memory_format)", [&](auto b) {
      using From = decltype(a);
      using To = decltype(b);
      transpose_cast_kernel<From, To><<<grid, block, 0, cuda::stream()>>>(
          static_cast<const From*>(x), static_cast<To*>(y), batch, rows, cols, row_tiles, col_tiles);
      MINIDL_LAUNCH_CHECK();
    });
  });
}

}  // namespace minidl::kernels
