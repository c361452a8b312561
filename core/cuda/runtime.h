// The CUDA runtime of minidl: one stream that all work is queued on, cuBLAS and cuDNN handles
// created once and bound to it, device properties for grid sizing, and checks that name the
// failing call with file and line. Included only by .cu files (the CPU-only build never sees it).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>

namespace minidl::cuda {

void check(cudaError_t status, const char* expr, const char* file, int line);
void check(cublasStatus_t status, const char* expr, const char* file, int line);
void check(cudnnStatus_t status, const char* expr, const char* file, int line);

// The one stream every kernel, copy, cuBLAS and cuDNN call goes on. Work is ordered by it, which
// is also what lets the caching allocator reuse a freed block at once.
cudaStream_t stream();
cublasHandle_t cublas();
cudnnHandle_t cudnn();
const cudaDeviceProp& props();

// Blocks of `block_size` threads that fill every resident slot of the chip once
// (SMs * max threads per SM / block_size). Grids are sized from this, never a constant.
int resident_blocks(int block_size);
// The same at `kernel`'s own occupancy (its registers and static shared memory decide how many
// blocks fit on an SM), asked of the driver once per kernel and block size.
int resident_blocks_of(const void* kernel, int block_size);
// The same for a typed kernel (the occupancy query takes it untyped).
template <class... Params>
int resident_blocks_of(void (*kernel)(Params...), int block_size) {
  return resident_blocks_of(reinterpret_cast<const void*>(kernel), block_size);
}

// Waits for all queued work and turns an asynchronous kernel fault into an Error.
void synchronize();

}  // namespace minidl::cuda

#define MINIDL_CUDA_CHECK(expr) ::minidl::cuda::check((expr), #expr, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at the launch site.
#define MINIDL_LAUNCH_CHECK() ::minidl::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
