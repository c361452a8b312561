// Non-overlapping channels-last convolutions (conv2d_patchify.h) as gather + GEMM: the patches
// of x gathered into P (n * oh * ow, kh * kw * c), then Linear's half GEMMs (float32
// accumulation on the tensor cores): y = P W^T + b, dW = dy^T P, dP = dy W scattered back to dx.
//
// Why not cuDNN: for a ViT's patch embedding (3 -> 384, k4 s4, bf16, batch 512) the reduction
// dimension kh * kw * c is 48 and cuDNN's deterministic pick took 0.58 ms forward on an H100 for a
// problem that writes 25 MB (y) and reads 3 MB (x): ~0.01 ms of memory traffic. The gather moves
// x once; the GEMMs are cuBLAS's, deterministic on one stream. The CPU reference is the general
// CPU path (layers/conv/conv2d_cpu.cpp), which the [cuda] tests compare against.
#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/dispatch.h"
#include "core/cuda/runtime.h"
#include "core/half_types.h"
#include "layers/conv/conv2d_patchify.h"
#include "layers/linear/linear_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kBlock = 256;

// The problem as the kernels read it (Conv2dShape's oh() and ow() are host functions).
struct Patches {
  int64_t n, h, w, c, kh, kw, oh, ow;
  explicit Patches(const Conv2dShape& s) : n(s.n), h(s.h), w(s.w), c(s.c), kh(s.kh), kw(s.kw), oh(s.oh()), ow(s.ow()) {}
};

// Where element k of patch row r lives in x: row r = (n, oy, ox), k = (ky, kx, ch) in the
// channels-last weight's order, so each (r, ky) is one contiguous run of kw * c values of x.
__device__ __forceinline__ int64_t patch_source(const Patches& s, int64_t r, int64_t k) {
  const int64_t ox = r % s.ow, oy = (r / s.ow) % s.oh, n = r / (s.ow * s.oh);
  const int64_t ch = k % s.c, kx = (k / s.c) % s.kw, ky = k / (s.c * s.kw);
  return ((n * s.h + oy * s.kh + ky) * s.w + ox * s.kw + kx) * s.c + ch;
}

template <class T>
__global__ void gather_patches_kernel(Patches s, const T* __restrict__ x, T* __restrict__ p) {
  const int64_t patch = s.kh * s.kw * s.c, total = s.n * s.oh * s.ow * patch;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = x[patch_source(s, i / patch, i % patch)];
}

// Every element of dx: its value in dP, or zero past the last whole patch (nothing read it).
template <class T>
__global__ void scatter_patches_kernel(Patches s, const T* __restrict__ dp, T* __restrict__ dx) {
  const int64_t total = s.n * s.h * s.w * s.c, patch = s.kh * s.kw * s.c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = i % s.c, xx = (i / s.c) % s.w, yy = (i / (s.c * s.w)) % s.h, n = i / (s.c * s.w * s.h);
    const int64_t oy = yy / s.kh, ox = xx / s.kw;
    T v{};  // all bits zero: +0 in every storage type
    if (oy < s.oh && ox < s.ow) {
      const int64_t r = (n * s.oh + oy) * s.ow + ox, k = ((yy % s.kh) * s.kw + xx % s.kw) * s.c + ch;
      v = dp[r * patch + k];
    }
    dx[i] = v;
  }
}

int64_t rows_of(const Conv2dShape& s) { return s.n * s.oh() * s.ow(); }
int64_t patch_of(const Conv2dShape& s) { return s.kh * s.kw * s.c; }

// P (rows, patch) of x, in scratch of the storage type.
template <class T>
std::shared_ptr<void> gather(const Conv2dShape& s, const T* x) {
  const int64_t total = rows_of(s) * patch_of(s);
  auto p = allocate(sizeof(T) * static_cast<size_t>(total), Device::cuda());
  gather_patches_kernel<T><<<cuda::grid_blocks(cuda::ceil_div(total, kBlock), kBlock), kBlock, 0, cuda::stream()>>>(
      Patches(s), x, static_cast<T*>(p.get()));
  MINIDL_LAUNCH_CHECK();
  return p;
}

}  // namespace

template <class T>
void conv2d_patchify_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  if (s.n == 0) return;
  const auto p = gather(s, x);
  linear_forward_cuda(rows_of(s), patch_of(s), s.o, static_cast<const T*>(p.get()), w, b, y);
}

template <class T>
void conv2d_patchify_backward_filter_cuda(const Conv2dShape& s, const T* x, const T* dy, T* dw) {
  const auto p = gather(s, x);
  linear_backward_weight_cuda(rows_of(s), patch_of(s), s.o, static_cast<const T*>(p.get()), dy, dw);
}

template <class T>
void conv2d_patchify_backward_data_cuda(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  if (s.n == 0) return;
  const int64_t total = s.n * s.h * s.w * s.c;
  auto dp = allocate(sizeof(T) * static_cast<size_t>(rows_of(s) * patch_of(s)), Device::cuda());
  linear_backward_data_cuda(rows_of(s), patch_of(s), s.o, dy, w, static_cast<T*>(dp.get()));
  scatter_patches_kernel<T><<<cuda::grid_blocks(cuda::ceil_div(total, kBlock), kBlock), kBlock, 0, cuda::stream()>>>(
      Patches(s), static_cast<const T*>(dp.get()), dx);
  MINIDL_LAUNCH_CHECK();
}

#define MINIDL_PATCHIFY_CUDA(T)                                                                        \
  template void conv2d_patchify_forward_cuda<T>(const Conv2dShape&, const T*, const T*, const T*, T*); \
  template void conv2d_patchify_backward_filter_cuda<T>(const Conv2dShape&, const T*, const T*, T*);   \
  template void conv2d_patchify_backward_data_cuda<T>(const Conv2dShape&, const T*, const T*, T*);
MINIDL_FOR_HALF_TYPES(MINIDL_PATCHIFY_CUDA)

}  // namespace minidl::kernels
