// cuDNN's convolutions through its legacy API, of 2 spatial dimensions (Conv2d's problems that
// our own kernels do not take) and 3 (Conv3d, ConvTranspose3d), plus the deterministic
// bias-gradient reduction of float32 NCHW / NCDHW outputs.
//
// Plans: cuDNN's descriptors and the algorithm for each direction (forward, backward-data,
// backward-filter) are made once per problem and cached under (rank, shape, stride, padding,
// dilation, groups, TF32, deterministic, operands), so a training step does no descriptor setup
// and no algorithm search. The algorithm of a direction is chosen on its first call:
//  - deterministic mode (the default): cuDNN's heuristic ranking (Get_v7), first algorithm that
//    cuDNN reports CUDNN_DETERMINISTIC. The heuristic is a pure function of the problem and the
//    device, so two runs pick the same algorithm and give the same bits; a timed search would
//    pick by noisy timings and could pick differently run to run.
//  - otherwise: a timed search (FindEx) over all algorithms, fastest wins, as PyTorch with
//    torch.backends.cudnn.benchmark = True.
// Either way only algorithms whose workspace fits max_workspace() (1 GiB) are taken.
//
// TF32: CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores for float32 (PyTorch's default,
// torch.backends.cudnn.allow_tf32 = True); CUDNN_FMA_MATH forbids it. Each direction has its own
// convolution descriptor, since each carries the math type of its own chosen algorithm.
//
// Workspaces come from the caching allocator, so after the first step none costs a cudaMalloc.
// 2-d problems keep cuDNN's 4-d descriptor calls; 3-d ones take the N-d calls (5-d tensors).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/settings.h"
#include "layers/conv/cudnn_conv.h"

namespace minidl::kernels {

bool CudnnConvProblem::operator<(const CudnnConvProblem& p) const {
  return std::tie(rank, n, c, o, groups, in, k, stride, pad, dil) <
         std::tie(p.rank, p.n, p.c, p.o, p.groups, p.in, p.k, p.stride, p.pad, p.dil);
}

namespace {

struct PlanKey {
  CudnnConvProblem p;
  bool tf32, deterministic;
  DType dtype;
  bool channels_last;
  auto tie() const { return std::tie(p, tf32, deterministic, dtype, channels_last); }
  bool operator<(const PlanKey& k) const { return tie() < k.tie(); }
};

template <class Algo>
struct Choice {
  bool ready = false;
  Algo algo{};
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  Choice<cudnnConvolutionFwdAlgo_t> fwd;
  Choice<cudnnConvolutionBwdDataAlgo_t> bwd_data;
  Choice<cudnnConvolutionBwdFilterAlgo_t> bwd_filter;
};

// Plans live for the whole process (never destroyed, like the cuDNN handle they were made with).
std::mutex g_mu;
std::map<PlanKey, Plan*>& plans() {
  static auto* m = new std::map<PlanKey, Plan*>();
  return *m;
}

// Largest workspace an algorithm may use (and the size of the buffer a timed search runs in):
// 1 GiB, or 1/16 of the device's memory on small GPUs. One fixed size means the search buffer is
// one block of the caching allocator, reused by every search.
size_t max_workspace() { return std::min<size_t>(size_t(1) << 30, cuda::props().totalGlobalMem / 16); }

int checked_int(int64_t v, const char* what) {
  MINIDL_CHECK(v <= INT32_MAX, "convolution on CUDA: ", what, " = ", v, " exceeds cuDNN's 32-bit limit");
  return static_cast<int>(v);
}

// The first `rank` entries of a problem's per-dimension values, as cuDNN's ints.
std::vector<int> ints(const std::array<int64_t, 3>& v, int rank) {
  std::vector<int> r;
  for (int i = 0; i < rank; ++i) r.push_back(checked_int(v[i], "a convolution size"));
  return r;
}

cudnnConvolutionDescriptor_t make_conv_desc(const CudnnConvProblem& s, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t d;
  MINIDL_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d));
  if (s.rank == 2) {
    MINIDL_CUDA_CHECK(cudnnSetConvolution2dDescriptor(d, static_cast<int>(s.pad[0]), static_cast<int>(s.pad[1]),
                                                      static_cast<int>(s.stride[0]), static_cast<int>(s.stride[1]),
                                                      static_cast<int>(s.dil[0]), static_cast<int>(s.dil[1]),
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  } else {
    const std::vector<int> pad = ints(s.pad, s.rank), stride = ints(s.stride, s.rank), dil = ints(s.dil, s.rank);
    MINIDL_CUDA_CHECK(cudnnSetConvolutionNdDescriptor(d, s.rank, pad.data(), stride.data(), dil.data(),
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  }
  MINIDL_CUDA_CHECK(cudnnSetConvolutionGroupCount(d, static_cast<int>(s.groups)));
  MINIDL_CUDA_CHECK(cudnnSetConvolutionMathType(d, math));
  return d;
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

// A tensor descriptor of (n, c, spatial...) in the operands' layout.
void set_tensor(cudnnTensorDescriptor_t d, const CudnnConvProblem& s, CudnnOperands ops, int64_t c,
                const std::vector<int>& spatial) {
  const cudnnTensorFormat_t format = ops.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t type = cudnn_type(ops.dtype);
  if (s.rank == 2) {
    MINIDL_CUDA_CHECK(cudnnSetTensor4dDescriptor(d, format, type, static_cast<int>(s.n), static_cast<int>(c),
                                                 spatial[0], spatial[1]));
    return;
  }
  std::vector<int> dims{static_cast<int>(s.n), static_cast<int>(c)};
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  MINIDL_CUDA_CHECK(cudnnSetTensorNdDescriptorEx(d, format, type, static_cast<int>(dims.size()), dims.data()));
}

Plan* make_plan(const CudnnConvProblem& s, bool tf32, CudnnOperands ops) {
  int64_t in_elems = s.n * s.c, out_elems = s.n * s.o;
  for (int i = 0; i < s.rank; ++i) {
    in_elems *= s.in[i];
    out_elems *= s.out(i);
  }
  checked_int(in_elems, "input elements");
  checked_int(out_elems, "output elements");
  const cudnnTensorFormat_t format = ops.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t type = cudnn_type(ops.dtype);
  auto* p = new Plan();
  MINIDL_CUDA_CHECK(cudnnCreateTensorDescriptor(&p->x));
  set_tensor(p->x, s, ops, s.c, ints(s.in, s.rank));
  MINIDL_CUDA_CHECK(cudnnCreateFilterDescriptor(&p->w));
  const int group_c = static_cast<int>(s.c / s.groups);
  if (s.rank == 2) {
    MINIDL_CUDA_CHECK(cudnnSetFilter4dDescriptor(p->w, type, format, static_cast<int>(s.o), group_c,
                                                 static_cast<int>(s.k[0]), static_cast<int>(s.k[1])));
  } else {
    std::vector<int> dims{static_cast<int>(s.o), group_c};
    for (int v : ints(s.k, s.rank)) dims.push_back(v);
    MINIDL_CUDA_CHECK(cudnnSetFilterNdDescriptor(p->w, type, format, static_cast<int>(dims.size()), dims.data()));
  }
  // Half operands ask for tensor cores from the start: the heuristics rank under the
  // descriptor's math type.
  const cudnnMathType_t math = is_half(ops.dtype) ? CUDNN_TENSOR_OP_MATH : (tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  p->fwd.conv = make_conv_desc(s, math);
  p->bwd_data.conv = make_conv_desc(s, math);
  p->bwd_filter.conv = make_conv_desc(s, math);
  std::vector<int> out(static_cast<size_t>(s.rank + 2));
  MINIDL_CUDA_CHECK(cudnnGetConvolutionNdForwardOutputDim(p->fwd.conv, p->x, p->w, s.rank + 2, out.data()));
  MINIDL_ASSERT(out[0] == s.n && out[1] == s.o);
  for (int i = 0; i < s.rank; ++i) MINIDL_ASSERT(out[static_cast<size_t>(i + 2)] == s.out(i));
  MINIDL_CUDA_CHECK(cudnnCreateTensorDescriptor(&p->y));
  set_tensor(p->y, s, ops, s.o, std::vector<int>(out.begin() + 2, out.end()));
  return p;
}

// The cached plan for s under the current settings (made on first use). Called with g_mu held.
PlanKey key_for(const CudnnConvProblem& s, CudnnOperands ops) {
  const ComputeSettings& cs = compute_settings();
  return {s, cs.allow_tf32, cs.deterministic, ops.dtype, ops.channels_last};
}

Plan& plan_for(const CudnnConvProblem& s, CudnnOperands ops, PlanKey* key_out) {
  const PlanKey key = key_for(s, ops);
  *key_out = key;
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(s, key.tf32, ops)).first;
  return *it->second;
}

// "bfloat16 channels_last input (8, 32, 64, 64, 64), weight (32, 32, 3, 3, 3), 2 groups, dilation 2x2"
std::string describe(const PlanKey& key) {
  const CudnnConvProblem& s = key.p;
  std::string in = str("(", s.n, ", ", s.c), w = str("(", s.o, ", ", s.c / s.groups), dil;
  bool dilated = false;
  for (int i = 0; i < s.rank; ++i) {
    in += str(", ", s.in[i]);
    w += str(", ", s.k[i]);
    dil += str(i ? "x" : "", s.dil[i]);
    dilated = dilated || s.dil[i] > 1;
  }
  return str(dtype_name(key.dtype), key.channels_last ? " channels_last" : "", " input ", in, "), weight ", w, ")",
             s.groups > 1 ? str(", ", s.groups, " groups") : std::string(),
             dilated ? str(", dilation ", dil) : std::string());
}

bool is_tensor_op(cudnnMathType_t m) { return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION; }

// Takes the first usable entry of a ranked list (heuristic rank, or measured time: best first):
// cuDNN reports it ran (or would run) successfully, deterministic when asked, no TF32 when TF32 is
// off, and its workspace under the math type it will run with fits max_workspace(). Sets that
// math type on the direction's descriptor (FMA whenever TF32 is off). allow_tf32 is about float32
// operands only: bfloat16/float16 ones take the tensor cores (with float32 accumulation) always,
// as PyTorch's do.
template <class Algo, class Perf, class SizeFn>
void adopt_best(Choice<Algo>& choice, const std::vector<Perf>& perf, int count, const PlanKey& key,
                const char* direction, SizeFn workspace_size) {
  // Half operands: the tensor-core entries first (pass 0), any other only when none fits.
  for (int pass = is_half(key.dtype) ? 0 : 1; pass < 2; ++pass)
    for (int i = 0; i < count; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (pass == 0 && !is_tensor_op(p.mathType)) continue;
      if (key.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      const bool exact_float32 = !key.tf32 && key.dtype == DType::Float32;
      if (exact_float32 && is_tensor_op(p.mathType)) continue;
      const cudnnMathType_t math = exact_float32 ? CUDNN_FMA_MATH : p.mathType;
      MINIDL_CUDA_CHECK(cudnnSetConvolutionMathType(choice.conv, math));
      size_t bytes = 0;
      if (workspace_size(p.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > max_workspace()) continue;
      choice.algo = p.algo;
      choice.math = math;
      choice.workspace = bytes;
      choice.ready = true;
      return;
    }
  fail(str("convolution on CUDA: cuDNN offers no ", key.deterministic ? "deterministic " : "", direction,
           " algorithm for ", describe(key), " within a ", max_workspace() >> 20, " MiB workspace",
           key.deterministic ? " (set \"deterministic\": false to allow the others)" : ""));
}

std::shared_ptr<void> workspace(size_t bytes) {
  return bytes ? allocate(bytes, Device::cuda()) : std::shared_ptr<void>();
}

template <class T>
void choose_forward(Plan& p, const PlanKey& key, const T* x, const T* w, T* y) {
  cudnnHandle_t h = cuda::cudnn();
  int max_count = 0, count = 0;
  MINIDL_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(max_count);
  if (key.deterministic) {
    MINIDL_CUDA_CHECK(
        cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.fwd.conv, p.y, max_count, &count, perf.data()));
  } else {
    auto ws = workspace(max_workspace());
    MINIDL_CUDA_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, p.x, x, p.w, w, p.fwd.conv, p.y, y, max_count, &count,
                                                             perf.data(), ws.get(), max_workspace()));
  }
  adopt_best(p.fwd, perf, count, key, "forward", [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.fwd.conv, p.y, a, bytes);
  });
}

template <class T>
void choose_backward_data(Plan& p, const PlanKey& key, const T* dy, const T* w, T* dx) {
  cudnnHandle_t h = cuda::cudnn();
  int max_count = 0, count = 0;
  MINIDL_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(max_count);
  if (key.deterministic) {
    MINIDL_CUDA_CHECK(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.bwd_data.conv, p.x, max_count, &count, perf.data()));
  } else {
    auto ws = workspace(max_workspace());
    MINIDL_CUDA_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, p.w, w, p.y, dy, p.bwd_data.conv, p.x, dx, max_count, &count, perf.data(), ws.get(), max_workspace()));
  }
  adopt_best(p.bwd_data, perf, count, key, "backward-data", [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.bwd_data.conv, p.x, a, bytes);
  });
}

template <class T>
void choose_backward_filter(Plan& p, const PlanKey& key, const T* x, const T* dy, T* dw) {
  cudnnHandle_t h = cuda::cudnn();
  int max_count = 0, count = 0;
  MINIDL_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(max_count);
  if (key.deterministic) {
    MINIDL_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.bwd_filter.conv, p.w, max_count,
                                                                    &count, perf.data()));
  } else {
    auto ws = workspace(max_workspace());
    MINIDL_CUDA_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, p.x, x, p.y, dy, p.bwd_filter.conv, p.w, dw, max_count, &count, perf.data(), ws.get(), max_workspace()));
  }
  adopt_best(p.bwd_filter, perf, count, key, "backward-filter", [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.bwd_filter.conv, p.w, a, bytes);
  });
}

const char* fwd_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
      return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
      return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
      return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
      return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    default:
      return "?";
  }
}

const char* bwd_data_name(cudnnConvolutionBwdDataAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0:
      return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
      return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
      return "FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD:
      return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    default:
      return "?";
  }
}

const char* bwd_filter_name(cudnnConvolutionBwdFilterAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0:
      return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:
      return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
      return "ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
      return "FFT_TILING";
    default:
      return "?";
  }
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor_op_conv";
    case CUDNN_FMA_MATH:
      return "fma";
    default:
      return "?";
  }
}

template <class Algo>
std::string choice_str(const Choice<Algo>& c, const char* (*name)(Algo)) {
  if (!c.ready) return "-";
  return str(name(c.algo), " ", math_name(c.math),
             c.workspace ? str(" ws ", (c.workspace + (1 << 20) - 1) >> 20, "MiB") : std::string());
}

// Bias gradient, pass 1. dy viewed as (n, o, hw); block (ch, s) sums channel ch over slice s of
// its n*hw elements (contiguous runs of hw, so a warp reads consecutive addresses) and writes one
// partial: no atomics, a fixed summation order, the same bits every run.
constexpr int kBiasBlock = 256;

__global__ void bias_grad_partials_kernel(const float* __restrict__ dy, int64_t n, int64_t o, int64_t hw,
                                          int64_t slices, float* __restrict__ partials) {
  const int64_t ch = blockIdx.x, s = blockIdx.y, total = n * hw;
  const int64_t per = (total + slices - 1) / slices;
  const int64_t begin = s * per, end = min(total, begin + per);
  float acc = 0.f;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t img = j / hw;
    acc += dy[(img * o + ch) * hw + (j - img * hw)];
  }
  acc = cuda::warp_sum(acc);
  __shared__ float warp_sums[kBiasBlock / 32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int wi = 0; wi < kBiasBlock / 32; ++wi) sum += warp_sums[wi];
    partials[s * o + ch] = sum;
  }
}

}  // namespace

template <class T>
void cudnn_conv_forward(const CudnnConvProblem& s, CudnnOperands ops, const T* x, const T* w, T* y) {
  std::lock_guard<std::mutex> lock(g_mu);
  PlanKey key;
  Plan& p = plan_for(s, ops, &key);
  if (!p.fwd.ready) choose_forward(p, key, x, w, y);
  auto ws = workspace(p.fwd.workspace);
  const float one = 1.f, zero = 0.f;
  MINIDL_CUDA_CHECK(cudnnConvolutionForward(cuda::cudnn(), &one, p.x, x, p.w, w, p.fwd.conv, p.fwd.algo, ws.get(),
                                            p.fwd.workspace, &zero, p.y, y));
}

template <class T>
void cudnn_conv_backward_data(const CudnnConvProblem& s, CudnnOperands ops, const T* dy, const T* w, T* dx) {
  std::lock_guard<std::mutex> lock(g_mu);
  PlanKey key;
  Plan& p = plan_for(s, ops, &key);
  if (!p.bwd_data.ready) choose_backward_data(p, key, dy, w, dx);
  auto ws = workspace(p.bwd_data.workspace);
  const float one = 1.f, zero = 0.f;
  MINIDL_CUDA_CHECK(cudnnConvolutionBackwardData(cuda::cudnn(), &one, p.w, w, p.y, dy, p.bwd_data.conv, p.bwd_data.algo,
                                                 ws.get(), p.bwd_data.workspace, &zero, p.x, dx));
}

template <class T>
void cudnn_conv_backward_filter(const CudnnConvProblem& s, CudnnOperands ops, const T* x, const T* dy, T* dw) {
  if (s.n == 0) {
    int64_t elems = s.o * (s.c / s.groups);
    for (int i = 0; i < s.rank; ++i) elems *= s.k[i];
    MINIDL_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(T) * elems, cuda::stream()));
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  PlanKey key;
  Plan& p = plan_for(s, ops, &key);
  if (!p.bwd_filter.ready) choose_backward_filter(p, key, x, dy, dw);
  auto ws = workspace(p.bwd_filter.workspace);
  const float one = 1.f, zero = 0.f;
  MINIDL_CUDA_CHECK(cudnnConvolutionBackwardFilter(cuda::cudnn(), &one, p.x, x, p.y, dy, p.bwd_filter.conv,
                                                   p.bwd_filter.algo, ws.get(), p.bwd_filter.workspace, &zero, p.w,
                                                   dw));
}

#define MINIDL_CUDNN_CONV(T)                                                                                 \
  template void cudnn_conv_forward<T>(const CudnnConvProblem&, CudnnOperands, const T*, const T*, T*);       \
  template void cudnn_conv_backward_data<T>(const CudnnConvProblem&, CudnnOperands, const T*, const T*, T*); \
  template void cudnn_conv_backward_filter<T>(const CudnnConvProblem&, CudnnOperands, const T*, const T*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_CUDNN_CONV)

size_t cudnn_conv_plan_count() {
  std::lock_guard<std::mutex> lock(g_mu);
  return plans().size();
}

CudnnConvAlgorithms cudnn_conv_algorithms(const CudnnConvProblem& s, CudnnOperands ops) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = plans().find(key_for(s, ops));
  CudnnConvAlgorithms a;
  if (it == plans().end()) return a;
  a.planned = true;
  a.fwd = choice_str(it->second->fwd, fwd_name);
  a.bwd_data = choice_str(it->second->bwd_data, bwd_data_name);
  a.bwd_filter = choice_str(it->second->bwd_filter, bwd_filter_name);
  return a;
}

void conv_backward_bias_cuda(const float* dy, float* db, int64_t n, int64_t o, int64_t hw) {
  const int64_t total = n * hw;
  // Enough blocks to fill every resident slot once, but no slice shorter than one block's width.
  const int64_t by_device = std::max<int64_t>(1, cuda::resident_blocks(kBiasBlock) / std::max<int64_t>(o, 1));
  const int64_t by_size = std::max<int64_t>(1, (total + kBiasBlock - 1) / kBiasBlock);
  const int64_t slices = std::min<int64_t>({by_device, by_size, 65535});
  auto partials = allocate(sizeof(float) * slices * o, Device::cuda());
  float* part = static_cast<float*>(partials.get());
  bias_grad_partials_kernel<<<dim3(static_cast<unsigned>(o), static_cast<unsigned>(slices)), kBiasBlock, 0,
                              cuda::stream()>>>(dy, n, o, hw, slices, part);
  MINIDL_LAUNCH_CHECK();
  cuda::sum_partials_by_column(part, slices, o, db);
}

}  // namespace minidl::kernels
