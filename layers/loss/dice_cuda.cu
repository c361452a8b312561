// The Dice loss and counts on the GPU. The loss sums each (sample, class)'s I, P and T in three
// deterministic steps: each block sums its chunk of a sample's voxels per thread in order, then
// across its threads in a fixed tree; one block sums the chunks in order in double and forms the
// loss and the gradient coefficients; one thread per voxel writes the gradient. The counts are
// integers (shared, then global atomics): exact in any order.
#include <algorithm>

#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/loss/dice_kernels.h"
#include "layers/loss/dice_math.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kVoxelsPerThread = 16;

int64_t chunks_of(int64_t spatial) {
  return std::min<int64_t>(cuda::ceil_div(spatial, kThreads * kVoxelsPerThread), 1024);
}

// partial (n, chunks, classes, 3): the block's sums of I, P, T; a label out of range adds NaN.
__global__ void partial_kernel(const float* __restrict__ x, const int32_t* __restrict__ labels, int64_t classes,
                               int64_t spatial, int64_t chunks, float* __restrict__ partial) {
  __shared__ float red[kThreads];
  const int64_t s = blockIdx.y, chunk = blockIdx.x;
  const int64_t per = (spatial + chunks - 1) / chunks, begin = chunk * per;
  const int64_t end = begin + per < spatial ? begin + per : spatial;
  float acc[3 * kMaxDiceClasses], p[kMaxDiceClasses];
  for (int64_t i = 0; i < 3 * classes; ++i) acc[i] = 0.f;
  for (int64_t v = begin + threadIdx.x; v < end; v += kThreads) {
    dice::softmax_at(x + s * classes * spatial + v, spatial, classes, p);
    const int32_t t = labels[s * spatial + v];
    if (t < 0 || t >= classes) acc[0] = __int_as_float(0x7fc00000);
    for (int64_t c = 0; c < classes; ++c) {
      acc[3 * c] += c == t ? p[c] : 0.f;
      acc[3 * c + 1] += p[c];
      acc[3 * c + 2] += c == t ? 1.f : 0.f;
    }
  }
  float* out = partial + (s * chunks + chunk) * classes * 3;
  for (int64_t i = 0; i < 3 * classes; ++i) {
    red[threadIdx.x] = acc[i];
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) red[threadIdx.x] += red[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[i] = red[0];
    __syncthreads();
  }
}

// One block: stats (pairs, 3) in double from the chunks in order, then the loss and coef.
__global__ void finish_kernel(const float* __restrict__ partial, int64_t n, int64_t classes, int64_t chunks,
                              float smooth, double* __restrict__ stats, float* __restrict__ coef,
                              float* __restrict__ loss) {
  const int64_t pairs = n * classes;
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int64_t s = i / classes, c = i % classes;
    for (int k = 0; k < 3; ++k) {
      double sum = 0.0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partial[((s * chunks + chunk) * classes + c) * 3 + k];
      stats[3 * i + k] = sum;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    *loss = static_cast<float>(dice::loss_of(stats, pairs, smooth));
    if (coef) dice::gradient_coefficients(stats, pairs, smooth, coef);
  }
}

__global__ void gradient_kernel(const float* __restrict__ x, const int32_t* __restrict__ labels,
                                const float* __restrict__ coef, int64_t n, int64_t classes, int64_t spatial,
                                float* __restrict__ dx) {
  float p[kMaxDiceClasses];
  const int64_t total = n * spatial;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i / spatial, v = i % spatial;
    dice::gradient_at(x + s * classes * spatial + v, dx + s * classes * spatial + v, spatial, classes, labels[i],
                      coef + s * classes * 2, p);
  }
}

__global__ void counts_kernel(const float* __restrict__ x, const int32_t* __restrict__ labels, int64_t n,
                              int64_t classes, int64_t spatial, int32_t* __restrict__ counts) {
  __shared__ int32_t local[3 * kMaxDiceClasses];
  for (int64_t i = threadIdx.x; i < 3 * classes; i += blockDim.x) local[i] = 0;
  __syncthreads();
  const int64_t total = n * spatial;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i / spatial, v = i % spatial;
    const int64_t pred = dice::argmax_at(x + s * classes * spatial + v, spatial, classes);
    const int32_t t = labels[i];
    atomicAdd(&local[3 * pred + 1], 1);
    if (t >= 0 && t < classes) {
      atomicAdd(&local[3 * t + 2], 1);
      if (t == pred) atomicAdd(&local[3 * t], 1);
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < 3 * classes; i += blockDim.x)
    if (local[i]) atomicAdd(&counts[i], local[i]);
}

}  // namespace

// partial (n, chunks, classes, 3) floats, one float to align the doubles, stats (n, classes, 3)
// doubles (two floats each), then coef (n, classes, 2).
int64_t dice_scratch_floats(int64_t n, int64_t classes, int64_t spatial) {
  return n * classes * (3 * chunks_of(spatial) + 6 + 2) + 1;
}

void dice_loss_cuda(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                    float smooth, float* scratch, float* loss, float* dlogits) {
  MINIDL_CHECK(classes <= kMaxDiceClasses, "dice_loss on CUDA: at most ", kMaxDiceClasses, " classes, got ", classes);
  const int64_t chunks = chunks_of(spatial);
  float* partial = scratch;
  auto* stats = reinterpret_cast<double*>(partial + n * chunks * classes * 3 + (n * chunks * classes * 3) % 2);
  float* coef = reinterpret_cast<float*>(stats + n * classes * 3);
  partial_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(n)), kThreads, 0, cuda::stream()>>>(
      logits, labels, classes, spatial, chunks, partial);
  MINIDL_LAUNCH_CHECK();
  finish_kernel<<<1, kThreads, 0, cuda::stream()>>>(partial, n, classes, chunks, smooth, stats,
                                                    dlogits ? coef : nullptr, loss);
  MINIDL_LAUNCH_CHECK();
  if (!dlogits) return;
  const int64_t total = n * spatial;
  gradient_kernel<<<cuda::grid_blocks(cuda::ceil_div(total, kThreads), kThreads), kThreads, 0, cuda::stream()>>>(
      logits, labels, coef, n, classes, spatial, dlogits);
  MINIDL_LAUNCH_CHECK();
}

void dice_counts_cuda(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t spatial,
                      int32_t* counts) {
  MINIDL_CHECK(classes <= kMaxDiceClasses, "dice counts on CUDA: at most ", kMaxDiceClasses, " classes, got ", classes);
  const int64_t total = n * spatial;
  if (total == 0) return;
  counts_kernel<<<cuda::grid_blocks(cuda::ceil_div(total, kThreads), kThreads), kThreads, 0, cuda::stream()>>>(
      logits, labels, n, classes, spatial, counts);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
