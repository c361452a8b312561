// CUDA kernels of the cross-entropy loss and of argmax/accuracy (CPU references in loss_cpu.cpp).
//
// Cross-entropy is two launches. (1) One warp per row: the warp reduces the row's max, sum of
// exp and sum of logits with xor shuffles (a fixed tree), writes the row's loss and, in the
// same pass, its gradient row (softmax - q) / N, so the backward is a single scale. A warp per
// row fits CIFAR's K = 10 (one load per lane) as well as K in the thousands (lanes stride the
// row). (2) One block sums the row losses, each thread a fixed strided subset in float64 then a
// shared-memory tree: the mean has the same bits every run, without atomics.
//
// Bad labels: waiting for the GPU at every step just to check labels would stall the host's
// launch queue, so the kernels check them. The row kernel makes a bad row's loss and gradient
// NaN; the single-block kernel that follows finds the first bad row and writes it to a small
// status block in mapped (zero-copy) host memory, which the host reads without any copy or sync
// at its next call (raise_flagged_label_error). The status is plain pinned host memory allocated
// once, not device memory.
#include <cstdint>

#include "core/cuda/elementwise.cuh"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/half_types.h"
#include "layers/loss/loss_kernels.h"

namespace minidl::kernels {

namespace {

constexpr int kBlock = 256;
constexpr int kReduceBlock = 1024;
constexpr int kWarp = 32;

struct LabelStatus {
  int32_t flagged, row, label, classes;
};

// Pinned host memory that kernels write through the same pointer (unified addressing, which
// every 64-bit CUDA process has). Created on first use, never freed (a kernel may still write it
// at exit).
LabelStatus* label_status() {
  static LabelStatus* status = [] {
    MINIDL_CHECK(cuda::props().unifiedAddressing, "cross_entropy (CUDA): the GPU lacks unified addressing");
    LabelStatus* s = nullptr;
    MINIDL_CUDA_CHECK(cudaHostAlloc(&s, sizeof(LabelStatus), cudaHostAllocMapped));
    *s = LabelStatus{0, 0, 0, 0};
    return s;
  }();
  return status;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = kWarp / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Warps walk rows together; the loop bound is per warp, so all 32 lanes reach every shuffle.
__global__ void cross_entropy_rows_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                          int rows, int classes, float eps, float* __restrict__ row_loss,
                                          float* __restrict__ dlogits) {
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * (blockDim.x / kWarp);
  for (int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; row < rows; row += warps) {
    const float* x = logits + static_cast<size_t>(row) * classes;
    const int label = __ldg(labels + row);
    const bool bad = label < 0 || label >= classes;
    // fmaxf skips NaN, but a NaN logit still reaches the sum of exp below, so the loss is NaN.
    float m = -INFINITY;
    for (int k = lane; k < classes; k += kWarp) m = fmaxf(m, __ldg(x + k));
    m = warp_max(m);
    float sum_exp = 0.f, sum_x = 0.f;
    for (int k = lane; k < classes; k += kWarp) {
      const float v = __ldg(x + k);
      sum_exp += expf(v - m);
      sum_x += v;
    }
    sum_exp = cuda::warp_sum(sum_exp);
    sum_x = cuda::warp_sum(sum_x);
    const float lse = m + logf(sum_exp);
    const float x_label = bad ? NAN : __ldg(x + label);
    if (lane == 0) row_loss[row] = (1.f - eps) * (lse - x_label) + eps * (lse - sum_x / static_cast<float>(classes));
    if (dlogits) {
      float* d = dlogits + static_cast<size_t>(row) * classes;
      const float smooth = eps / static_cast<float>(classes);
      for (int k = lane; k < classes; k += kWarp) {
        const float q = k == label ? smooth + (1.f - eps) : smooth;
        d[k] = bad ? NAN : (expf(__ldg(x + k) - lse) - q) / static_cast<float>(rows);
      }
    }
  }
}

// Finds the first bad label's row over the block (each thread its strided rows, then a min tree
// in `shared`, blockDim.x ints) and, if there is one, writes it to the status, unless the status
// already holds one the host has not read yet.
__device__ void flag_first_bad_label(const int32_t* labels, int rows, int classes, LabelStatus* status, int* shared) {
  int first = INT32_MAX;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    const int label = __ldg(labels + i);
    if ((label < 0 || label >= classes) && i < first) first = i;
  }
  shared[threadIdx.x] = first;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = min(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0 && shared[0] != INT32_MAX && !*reinterpret_cast<volatile int32_t*>(&status->flagged)) {
    status->row = shared[0];
    status->label = labels[shared[0]];
    status->classes = classes;
    __threadfence_system();  // the fields land before the flag the host polls
    *reinterpret_cast<volatile int32_t*>(&status->flagged) = 1;
  }
  __syncthreads();
}

// One block: loss = mean of row_loss, float64 partials in a fixed order; flags bad labels.
__global__ void cross_entropy_mean_kernel(const float* __restrict__ row_loss, const int32_t* __restrict__ labels,
                                          int rows, int classes, float* __restrict__ loss, LabelStatus* status) {
  __shared__ double partial[kReduceBlock];
  __shared__ int first_bad[kReduceBlock];
  double sum = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sum += row_loss[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = static_cast<float>(partial[0] / rows);
  flag_first_bad_label(labels, rows, classes, status, first_bad);
}

__global__ void scale_by_device_scalar_kernel(const float* __restrict__ d, const float* __restrict__ g,
                                              float* __restrict__ dx, int64_t n) {
  const float s = __ldg(g);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = d[i] * s;
}

// Does (va, ka) beat (vb, kb) for argmax? torch.argmax's order: a NaN beats a number and the
// earlier NaN the later; among numbers the larger, and the earlier index on a tie. A total
// order, so the shuffle tree gives the sequential scan's answer.
__device__ __forceinline__ bool argmax_wins(float va, int ka, float vb, int kb) {
  if (isnan(va) || isnan(vb)) return isnan(va) && (!isnan(vb) || ka < kb);
  return va > vb || (va == vb && ka < kb);
}

// One warp per row. Rows that all start 16-byte aligned are read in packs of 4 floats or 8 halves
// (a language model's rows of 50304 logits); argmax_wins is a total order, so the order the lanes
// visit the columns in does not change the answer.
template <class E>
__global__ void argmax_rows_kernel(const E* __restrict__ logits, int rows, int classes, bool packed,
                                   int32_t* __restrict__ out) {
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * (blockDim.x / kWarp);
  for (int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; row < rows; row += warps) {
    const E* x = logits + static_cast<size_t>(row) * classes;
    // (-inf, INT32_MAX) loses to every real element.
    float best = -INFINITY;
    int best_k = INT32_MAX;
    const auto visit = [&](int k, float v) {
      if (argmax_wins(v, k, best, best_k)) {
        best = v;
        best_k = k;
      }
    };
    if (packed) {
      constexpr int K = cuda::Pack<E>::kN;
      for (int c = lane; c < classes / K; c += kWarp) {
        const cuda::Pack<E> u = reinterpret_cast<const cuda::Pack<E>*>(x)[c];
#pragma unroll
        for (int j = 0; j < K; ++j) visit(c * K + j, to_float(u.v[j]));
      }
    } else {
      for (int k = lane; k < classes; k += kWarp) visit(k, to_float(x[k]));
    }
    for (int off = kWarp / 2; off > 0; off /= 2) {
      const float v = __shfl_xor_sync(0xffffffffu, best, off);
      const int k = __shfl_xor_sync(0xffffffffu, best_k, off);
      visit(k, v);
    }
    if (lane == 0) out[row] = best_k;
  }
}

// One block: *count = rows with argmax == label (integers: any order gives the same count).
__global__ void count_correct_kernel(const int32_t* __restrict__ argmax, const int32_t* __restrict__ labels, int rows,
                                     int classes, int32_t* __restrict__ count, LabelStatus* status) {
  __shared__ int partial[kReduceBlock];
  int correct = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) correct += argmax[i] == labels[i];
  partial[threadIdx.x] = correct;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = partial[0];
  __syncthreads();
  flag_first_bad_label(labels, rows, classes, status, partial);
}

int grid_for_rows(int64_t rows) { return cuda::grid_blocks(cuda::ceil_div(rows, kBlock / kWarp), kBlock); }

void check_sizes(int64_t rows, int64_t classes, const char* what) {
  MINIDL_CHECK(rows < (int64_t{1} << 31) && classes < (int64_t{1} << 31) && rows * classes < (int64_t{1} << 40), what,
               " (CUDA): ", rows, " rows of ", classes, " classes is too large");
}

}  // namespace

void cross_entropy_forward_cuda(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                float label_smoothing, float* row_loss, float* loss, float* dlogits) {
  check_sizes(rows, classes, "cross_entropy");
  const int r = static_cast<int>(rows), k = static_cast<int>(classes);
  cross_entropy_rows_kernel<<<grid_for_rows(rows), kBlock, 0, cuda::stream()>>>(logits, labels, r, k, label_smoothing,
                                                                                row_loss, dlogits);
  MINIDL_LAUNCH_CHECK();
  cross_entropy_mean_kernel<<<1, kReduceBlock, 0, cuda::stream()>>>(row_loss, labels, r, k, loss, label_status());
  MINIDL_LAUNCH_CHECK();
}

void cross_entropy_mean_cuda(const float* row_loss, const int32_t* labels, int64_t rows, int64_t classes, float* loss) {
  check_sizes(rows, classes, "cross_entropy");
  cross_entropy_mean_kernel<<<1, kReduceBlock, 0, cuda::stream()>>>(row_loss, labels, static_cast<int>(rows),
                                                                    static_cast<int>(classes), loss, label_status());
  MINIDL_LAUNCH_CHECK();
}

void scale_by_device_scalar_cuda(const float* d, const float* g, float* dx, int64_t n) {
  if (n == 0) return;
  scale_by_device_scalar_kernel<<<cuda::grid_blocks(cuda::ceil_div(n, kBlock), kBlock), kBlock, 0, cuda::stream()>>>(
      d, g, dx, n);
  MINIDL_LAUNCH_CHECK();
}

template <class E>
void argmax_rows_cuda(const E* logits, int64_t rows, int64_t classes, int32_t* out) {
  check_sizes(rows, classes, "argmax_rows");
  const bool packed = cuda::packed_rows(logits, classes);
  argmax_rows_kernel<E><<<grid_for_rows(rows), kBlock, 0, cuda::stream()>>>(logits, static_cast<int>(rows),
                                                                            static_cast<int>(classes), packed, out);
  MINIDL_LAUNCH_CHECK();
}

template <class E>
void count_correct_cuda(const E* logits, const int32_t* labels, int64_t rows, int64_t classes, int32_t* argmax_scratch,
                        int32_t* count) {
  argmax_rows_cuda(logits, rows, classes, argmax_scratch);
  count_correct_kernel<<<1, kReduceBlock, 0, cuda::stream()>>>(argmax_scratch, labels, static_cast<int>(rows),
                                                               static_cast<int>(classes), count, label_status());
  MINIDL_LAUNCH_CHECK();
}

#define MINIDL_ARGMAX_CUDA(E)                                              \
  template void argmax_rows_cuda<E>(const E*, int64_t, int64_t, int32_t*); \
  template void count_correct_cuda<E>(const E*, const int32_t*, int64_t, int64_t, int32_t*, int32_t*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_ARGMAX_CUDA)

void raise_flagged_label_error() {
  volatile LabelStatus* s = label_status();
  if (!s->flagged) return;
  const int32_t row = s->row, label = s->label, classes = s->classes;
  s->flagged = 0;
  fail(str("labels[", row, "] = ", label, " is out of range for ", classes,
           " classes (found on the GPU by an earlier cross_entropy or count_correct call; a cross_entropy over it "
           "returned a NaN loss)"));
}

}  // namespace minidl::kernels
