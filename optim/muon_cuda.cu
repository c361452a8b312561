// CUDA Muon kernels. Newton-Schulz runs as cuBLAS SGEMMs in full fp32 (CUBLAS_DEFAULT_MATH, as
// Linear does: TF32 would change the iteration's rounding), or in bf16 on the tensor cores: GemmEx
// of bf16 iterates into a float32 product (beta = 0: with a bf16 C cuBLAS may split K and round
// every partial sum there, see linear_cuda.cu), then one elementwise pass adds the other term in
// float32 and rounds once to bf16. The Frobenius norms are summed in double in a fixed order
// (momentum_sums_kernel, sum_partials_kernel) and applied on the device, so nothing syncs with the
// host and the whole update sits in a CUDA graph. cuBLAS is deterministic on one stream.
//
// Why bf16: the iteration's GEMMs have small outputs (a 256 x 2304 filter bank gives a 256 x 256
// X X^T, a few tiles of output for 302 MFLOP), so fp32 SGEMM leaves most SMs idle; airbench's
// Muon runs them in bf16, where each tile is an order of magnitude faster (docs/perf/airbench.md).
//
// Layout: a row-major (r, k) matrix X is the column-major (k, r) matrix X^T, so with Xc = X^T:
//   wide (r <= k):  A = X X^T = Xc^T Xc (r x r),   X' = a X + B X  <=>  Xc' = a Xc + Xc B
//   tall (r > k):   A = X^T X = Xc Xc^T (k x k),   X' = a X + X B  <=>  Xc' = a Xc + B Xc
// (A and B = b A + c A A are symmetric, so their layout does not matter).
//
// A step's banks are grouped by shape: a group's iterates sit side by side in one buffer, so each
// product is one strided-batched GEMM for the whole group and each elementwise pass one launch.
// airbench's Muon has six filter banks, three of them 256 x 2304; one bank's products fill a few
// SMs and each launch costs more than its arithmetic, so launches, not FLOPs, set the step's time
// (docs/perf/airbench.md). For the same reason the momentum update shares its pass with the
// norms' partial sums, and the update reads the last iterate in its own type. With "ns_batching":
// "padded" every bank joins one group, each zero-padded into a slot of the largest shape: one
// launch per product and pass for all banks, at the padded banks' extra FLOPs.
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/cast_kernels.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/half_types.h"
#include "optim/muon_kernels.h"

namespace minidl::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;

// The sums of squares run in double in two launches: block b sums its chunk of kSumChunk elements
// (each thread a strided slice in index order, then a fixed tree) into a partial, then one block
// per sum adds the partials by the same tree. The chunks depend on n only, so the order, and the
// bits, are the same on every GPU. (One block for a whole 256 x 2304 filter bank took 134 us on
// an H100: one SM's bandwidth.)
constexpr int64_t kSumChunk = 16384;

int64_t sum_partials_count(int64_t n) { return std::max<int64_t>(1, (n + kSumChunk - 1) / kSumChunk); }

// The block's total of s; `part` is free again when it returns.
__device__ double block_sum(double s, double* part) {
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const double total = part[0];
  __syncthreads();
  return total;
}

// Chunk blockIdx.x of x[i]^2 into partials[blockIdx.x].
__global__ void sum_squares_partial_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partials) {
  __shared__ double part[kReduceThreads];
  const int64_t begin = blockIdx.x * kSumChunk, end = min(n, begin + kSumChunk);
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  const double total = block_sum(s, part);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// The momentum update in the chunks of the sums above, with the chunk's sums of u^2 and (when
// p_partials is set) of the weights' p^2: the same order, so the same bits, as summing u and p
// afterwards. A set skip flag ends every thread before it writes (here and in apply_kernel); the
// Newton-Schulz iterate of a skipped step is then formed from unwritten scratch and dropped.
__global__ void momentum_sums_kernel(const float* __restrict__ g, float* __restrict__ buf, float* __restrict__ u,
                                     const float* __restrict__ p, int64_t n, float m, int nesterov,
                                     const float* __restrict__ skip, double* __restrict__ u_partials,
                                     double* __restrict__ p_partials) {
  if (skip && *skip != 0.f) return;
  __shared__ double part[kReduceThreads];
  const int64_t begin = blockIdx.x * kSumChunk, end = min(n, begin + kSumChunk);
  double su = 0, sp = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    muon_momentum(g, buf, u, m, nesterov, i);
    su += static_cast<double>(u[i]) * u[i];
    if (p_partials) sp += static_cast<double>(p[i]) * p[i];
  }
  const double u_total = block_sum(su, part);
  if (threadIdx.x == 0) u_partials[blockIdx.x] = u_total;
  if (p_partials) {
    const double p_total = block_sum(sp, part);
    if (threadIdx.x == 0) p_partials[blockIdx.x] = p_total;
  }
}

// out[b] = the sum of partials[b * count, (b + 1) * count): block b finishes sum b.
__global__ void sum_partials_kernel(const double* __restrict__ partials, int64_t count, double* __restrict__ out) {
  __shared__ double part[kReduceThreads];
  const double* mine = partials + blockIdx.x * count;
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += mine[i];
  const double total = block_sum(s, part);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// A bank's (rows, cols) row-major matrix inside its group's (padded_rows, padded_cols) slot, whose
// extra rows and columns are zeros ("ns_batching": "padded"); without padding the two shapes agree.
struct BankShape {
  int64_t rows, cols, padded_rows, padded_cols;
  __host__ __device__ bool padded() const { return rows != padded_rows || cols != padded_cols; }
  // Where element i of the bank sits in its slot.
  __device__ int64_t slot_index(int64_t i) const { return padded() ? (i / cols) * padded_cols + i % cols : i; }
};

// out (the slot) = x / (sqrt(ss) + eps), the scale rounded to float once, as on the CPU, and zero
// in the padding; stored as T (float, or bf16: the float32 value rounded once).
template <class T>
__global__ void normalize_kernel(const float* __restrict__ x, T* __restrict__ out, BankShape shape,
                                 const double* __restrict__ ss, float eps) {
  const float scale = static_cast<float>(1.0 / (sqrt(ss[0]) + eps));
  const int64_t n = shape.padded_rows * shape.padded_cols;
  const bool padded = shape.padded();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!padded) {
      out[i] = from_float<T>(x[i] * scale);
      continue;
    }
    const int64_t r = i / shape.padded_cols, c = i - r * shape.padded_cols;
    out[i] = from_float<T>(r < shape.rows && c < shape.cols ? x[r * shape.cols + c] * scale : 0.f);
  }
}

// p = fmaf(-lr, x, p * (s * decay)): s = target / sqrt(ss) where ss is set and the bank's scalars
// say to renormalize this step, else 1; x the last iterate in its own type (a bf16 value widens
// exactly), read from the bank's slot. scalars: lr, renormalize, decay (optim/muon_kernels.h).
template <class T>
__global__ void apply_kernel(float* __restrict__ p, const T* __restrict__ x, BankShape shape,
                             const double* __restrict__ ss, float target, const float* __restrict__ scalars,
                             const float* __restrict__ skip) {
  if (skip && *skip != 0.f) return;
  const float scale = ss && scalars[1] != 0.f ? static_cast<float>(target / sqrt(ss[0])) : 1.f;
  const float lr = scalars[0], factor = scale * scalars[2];
  const int64_t n = shape.rows * shape.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = fmaf(-lr, to_float(x[shape.slot_index(i)]), p[i] * factor);
}

// out = bf16(alpha * p + beta * y): a float32 product plus the other term, rounded once. The
// multiplies and the add are kept apart (no fused multiply-add), as the CPU computes them.
// out may alias y.
__global__ void combine_bf16_kernel(const float* __restrict__ p, float alpha, const bf16* y, float beta, bf16* out,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = to_bf16(y ? __fadd_rn(__fmul_rn(alpha, p[i]), __fmul_rn(beta, to_float(y[i]))) : __fmul_rn(alpha, p[i]));
}

int grid_for(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads,
                                                                cuda::resident_blocks(kThreads))));
}

int as_int(int64_t v) {
  MINIDL_CHECK(v <= INT32_MAX, "Muon on CUDA: a dimension of ", v, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}

// One operand of a strided-batched GEMM: its pointer, leading dimension and the stride between
// the group's matrices.
template <class T>
struct Operand {
  T* p;
  int64_t ld, stride;
};

// C = alpha op(A) op(B) + beta C for `count` problems (C m x n, col-major), full fp32.
void sgemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, float alpha,
           Operand<const float> a, Operand<const float> b, float beta, Operand<float> c, int64_t count) {
  cublasHandle_t h = cuda::cublas();
  MINIDL_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MINIDL_CUDA_CHECK(cublasSgemmStridedBatched(h, ta, tb, as_int(m), as_int(n), as_int(k), &alpha, a.p, as_int(a.ld),
                                              a.stride, b.p, as_int(b.ld), b.stride, &beta, c.p, as_int(c.ld), c.stride,
                                              as_int(count)));
}

// C (m x n, col-major, float32) = op(A) op(B) for `count` problems with bf16 A and B,
// float32 accumulation on the tensor cores.
void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, Operand<const bf16> a,
               Operand<const bf16> b, Operand<float> c, int64_t count) {
  const float one = 1.f, zero = 0.f;
  cublasHandle_t h = cuda::cublas();
  MINIDL_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MINIDL_CUDA_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, as_int(m), as_int(n), as_int(k), &one, a.p, CUDA_R_16BF,
                                               as_int(a.ld), a.stride, b.p, CUDA_R_16BF, as_int(b.ld), b.stride, &zero,
                                               c.p, CUDA_R_32F, as_int(c.ld), c.stride, as_int(count),
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void combine(const float* p, float alpha, const bf16* y, float beta, bf16* out, int64_t n) {
  combine_bf16_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(p, alpha, y, beta, out, n);
  MINIDL_LAUNCH_CHECK();
}

void copy_async(float* dst, const float* src, int64_t n) {
  MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                    cuda::stream()));
}

// The Newton-Schulz iterations of `count` banks of one shape (rows, cols), side by side: bank j's
// input goes in by set_input(j), and after run() last_bf16(j) or last_fp32(j) is its final iterate.
// Xc, bank j's iterate seen as a (cols x rows) column-major matrix, sits at j * rows * cols;
// its A and B at j * s * s. The scratch comes from the stream-ordered caching allocator.
class NewtonSchulzGroup {
 public:
  NewtonSchulzGroup(int64_t rows, int64_t cols, int64_t count, const NewtonSchulz& ns)
      : r_(rows), k_(cols), n_(rows * cols), s_(std::min(rows, cols)), count_(count), ns_(ns) {
    if (ns.bf16) {
      // [product (float32, count * max(n, s * s)), also the momentum output], [X | A | B (bf16)]
      product_ = allocate(static_cast<size_t>(count * std::max(n_, s_ * s_)) * sizeof(float), Device::cuda());
      iterates_ = allocate(static_cast<size_t>(count * (n_ + 2 * s_ * s_)) * sizeof(bf16), Device::cuda());
    } else {
      // [X | X' | A | B (float32)]; X' also takes the momentum output
      iterates_ = allocate(static_cast<size_t>(count * (2 * n_ + 2 * s_ * s_)) * sizeof(float), Device::cuda());
    }
  }

  // Where bank j's momentum output u may go: scratch that the iteration overwrites only after the
  // input is normalized.
  float* momentum_out(int64_t j) const { return (ns_.bf16 ? product() : fp32() + count_ * n_) + j * n_; }

  // Bank j's X0 = u / (sqrt(ss[0]) + eps), u a (rows, cols) matrix that fits the group's shape,
  // zero-padded to it.
  void set_input(int64_t j, const float* u, int64_t rows, int64_t cols, const double* ss) const {
    const BankShape shape = slot(rows, cols);
    if (ns_.bf16) {
      normalize_kernel<<<grid_for(n_), kThreads, 0, cuda::stream()>>>(u, bf16_x() + j * n_, shape, ss, ns_.eps);
    } else {
      normalize_kernel<<<grid_for(n_), kThreads, 0, cuda::stream()>>>(u, fp32() + j * n_, shape, ss, ns_.eps);
    }
    MINIDL_LAUNCH_CHECK();
  }

  // A (rows, cols) bank in this group's slots.
  BankShape slot(int64_t rows, int64_t cols) const {
    MINIDL_CHECK(rows <= r_ && cols <= k_, "Muon: a ", rows, " x ", cols, " bank does not fit a ", r_, " x ", k_,
                 " slot");
    return {rows, cols, r_, k_};
  }

  void run() {
    if (ns_.bf16)
      run_bf16();
    else
      run_fp32();
  }

  bool bf16_result() const { return ns_.bf16; }
  const bf16* last_bf16(int64_t j) const { return bf16_x() + j * n_; }
  const float* last_fp32(int64_t j) const { return fp32() + (ns_.steps % 2 ? count_ * n_ : 0) + j * n_; }

 private:
  float* product() const { return static_cast<float*>(product_.get()); }
  bf16* bf16_x() const { return static_cast<bf16*>(iterates_.get()); }
  float* fp32() const { return static_cast<float*>(iterates_.get()); }
  bool tall() const { return r_ > k_; }

  void run_bf16() {
    const int64_t ss = s_ * s_, c = count_;
    bf16* x = bf16_x();
    bf16* A = x + c * n_;
    bf16* B = A + c * ss;
    float* P = product();
    const Operand<const bf16> X{x, k_, n_}, As{A, s_, ss}, Bs{B, s_, ss};
    for (int step = 0; step < ns_.steps; ++step) {
      if (!tall())
        gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, r_, r_, k_, X, X, {P, s_, ss}, c);
      else
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, k_, k_, r_, X, X, {P, s_, ss}, c);
      combine(P, 1.f, nullptr, 0.f, A, c * ss);
      gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, s_, s_, s_, As, As, {P, s_, ss}, c);
      combine(P, ns_.c, A, ns_.b, B, c * ss);
      if (!tall())
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, k_, r_, r_, X, Bs, {P, k_, n_}, c);
      else
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, k_, r_, k_, Bs, X, {P, k_, n_}, c);
      combine(P, 1.f, x, ns_.a, x, c * n_);
    }
  }

  // X and X' swap every step, so after an odd number of steps the result is in X'.
  void run_fp32() {
    const int64_t ss = s_ * s_, c = count_;
    float* x = fp32();
    float* next = x + c * n_;
    float* A = next + c * n_;
    float* B = A + c * ss;
    const Operand<const float> As{A, s_, ss}, Bs{B, s_, ss};
    for (int step = 0; step < ns_.steps; ++step) {
      const Operand<const float> X{x, k_, n_};
      if (!tall())
        sgemm(CUBLAS_OP_T, CUBLAS_OP_N, r_, r_, k_, 1.f, X, X, 0.f, {A, s_, ss}, c);
      else
        sgemm(CUBLAS_OP_N, CUBLAS_OP_T, k_, k_, r_, 1.f, X, X, 0.f, {A, s_, ss}, c);
      copy_async(B, A, c * ss);
      sgemm(CUBLAS_OP_N, CUBLAS_OP_N, s_, s_, s_, ns_.c, As, As, ns_.b, {B, s_, ss}, c);
      copy_async(next, x, c * n_);
      if (!tall())
        sgemm(CUBLAS_OP_N, CUBLAS_OP_N, k_, r_, r_, 1.f, X, Bs, ns_.a, {next, k_, n_}, c);
      else
        sgemm(CUBLAS_OP_N, CUBLAS_OP_N, k_, r_, k_, 1.f, Bs, X, ns_.a, {next, k_, n_}, c);
      std::swap(x, next);
    }
  }

  int64_t r_, k_, n_, s_, count_;
  NewtonSchulz ns_;
  std::shared_ptr<void> product_, iterates_;
};

// Every bank in one group ("ns_batching": "padded"), in their order.
std::vector<std::vector<const MuonBank*>> one_group(const std::vector<MuonBank>& banks) {
  std::vector<const MuonBank*> all;
  for (const MuonBank& b : banks) all.push_back(&b);
  return {all};
}

// The shape every bank of a group fits: the most rows, the most columns rounded up to 16 (whole
// tensor-core tiles, as the CIFAR-10 speedrun record pads); a group of one shape keeps it.
std::pair<int64_t, int64_t> group_shape(const std::vector<const MuonBank*>& members) {
  int64_t rows = 0, cols = 0;
  bool same = true;
  for (const MuonBank* b : members) {
    same = same && b->rows == members[0]->rows && b->cols == members[0]->cols;
    rows = std::max(rows, b->rows);
    cols = std::max(cols, b->cols);
  }
  if (same) return {rows, cols};
  return {rows, (cols + 15) / 16 * 16};
}

// Banks of one shape, in the order of their first appearance.
std::vector<std::vector<const MuonBank*>> group_by_shape(const std::vector<MuonBank>& banks) {
  std::vector<std::vector<const MuonBank*>> groups;
  for (const MuonBank& b : banks) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const std::vector<const MuonBank*>& g) {
      return g[0]->rows == b.rows && g[0]->cols == b.cols;
    });
    if (same == groups.end())
      groups.push_back({&b});
    else
      same->push_back(&b);
  }
  return groups;
}

}  // namespace

void newton_schulz_cuda(const float* g, float* out, int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  const int64_t n = rows * cols, partials = sum_partials_count(n);
  std::shared_ptr<void> sums = allocate(static_cast<size_t>(1 + partials) * sizeof(double), Device::cuda());
  double* ss = static_cast<double*>(sums.get());
  sum_squares_partial_kernel<<<static_cast<unsigned>(partials), kReduceThreads, 0, cuda::stream()>>>(g, n, ss + 1);
  MINIDL_LAUNCH_CHECK();
  sum_partials_kernel<<<1, kReduceThreads, 0, cuda::stream()>>>(ss + 1, partials, ss);
  MINIDL_LAUNCH_CHECK();
  NewtonSchulzGroup group(rows, cols, 1, ns);
  group.set_input(0, g, rows, cols, ss);
  group.run();
  if (group.bf16_result())
    cast_cuda(group.last_bf16(0), DType::BFloat16, out, DType::Float32, n);
  else
    copy_async(out, group.last_fp32(0), n);
}

void muon_step_cuda(const std::vector<MuonBank>& banks, const MuonStepArgs& args) {
  const int sums_per_bank = args.normalize ? 2 : 1;  // ||u||^2, and ||p||^2 with normalize
  for (const std::vector<const MuonBank*>& members : args.padded ? one_group(banks) : group_by_shape(banks)) {
    const int64_t count = static_cast<int64_t>(members.size());
    const auto [rows, cols] = group_shape(members);
    // Every bank's sums have the largest bank's number of partials: a smaller bank's chunks past
    // its end sum to zero, which leaves its total's bits as they are.
    int64_t partials = 1;
    for (const MuonBank* b : members) partials = std::max(partials, sum_partials_count(b->rows * b->cols));
    const int64_t sums = count * sums_per_bank;
    // [the sums (count * sums_per_bank)] [their partials, partials apiece, in the same order]
    std::shared_ptr<void> sums_buf = allocate(static_cast<size_t>(sums * (1 + partials)) * sizeof(double),
                                              Device::cuda());
    double* totals = static_cast<double*>(sums_buf.get());
    double* parts = totals + sums;
    NewtonSchulzGroup group(rows, cols, count, args.ns);
    for (int64_t j = 0; j < count; ++j) {
      const MuonBank& b = *members[j];
      double* own = parts + j * sums_per_bank * partials;
      momentum_sums_kernel<<<static_cast<unsigned>(partials), kReduceThreads, 0, cuda::stream()>>>(
          b.grad, b.buf, group.momentum_out(j), b.param, b.rows * b.cols, args.momentum, args.nesterov, args.skip, own,
          args.normalize ? own + partials : nullptr);
      MINIDL_LAUNCH_CHECK();
    }
    sum_partials_kernel<<<static_cast<unsigned>(sums), kReduceThreads, 0, cuda::stream()>>>(parts, partials, totals);
    MINIDL_LAUNCH_CHECK();
    for (int64_t j = 0; j < count; ++j) {
      const MuonBank& b = *members[j];
      group.set_input(j, group.momentum_out(j), b.rows, b.cols, totals + j * sums_per_bank);
    }
    group.run();
    for (int64_t j = 0; j < count; ++j) {
      const MuonBank& b = *members[j];
      const BankShape shape = group.slot(b.rows, b.cols);
      const int64_t n = b.rows * b.cols;
      const float target = std::sqrt(static_cast<float>(b.rows));
      const double* p_sum = args.normalize ? totals + j * sums_per_bank + 1 : nullptr;
      if (group.bf16_result())
        apply_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(b.param, group.last_bf16(j), shape, p_sum, target,
                                                                   b.scalars, args.skip);
      else
        apply_kernel<<<grid_for(n), kThreads, 0, cuda::stream()>>>(b.param, group.last_fp32(j), shape, p_sum, target,
                                                                   b.scalars, args.skip);
      MINIDL_LAUNCH_CHECK();
    }
  }
}

}  // namespace minidl::kernels
