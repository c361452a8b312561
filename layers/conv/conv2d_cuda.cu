// Conv2d on the GPU through cuDNN's legacy API, plus our own bias add and deterministic
// bias-gradient reduction.
//
// Plans: cuDNN's descriptors and the algorithm for each direction (forward, backward-data,
// backward-filter) are made once per problem and cached under (shape, stride, padding, dilation,
// groups, TF32, deterministic), so a training step does no descriptor setup and no algorithm
// search. Grouped and dilated problems are cuDNN's too (its group count and dilation on the
// convolution descriptor), but for the depthwise problems our own kernels serve
// (conv2d_depthwise.h). The algorithm of a direction is chosen on its first call:
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
//
// Few input channels (c * kh * kw <= 32, stride 1: a first layer on RGB images): forward and
// backward-filter go to our direct kernels (layers/conv/conv2d_small_cin_cuda.cu) in every mode. They
// are deterministic and full fp32, so they satisfy any setting, and run near the memory floor
// where cuDNN is 8-20x above it. Backward-data of such layers stays with cuDNN. On channels-last
// bfloat16/float16 operands the forward goes to a direct kernel of the same file; both backward
// directions stay with cuDNN there. A half forward with 17..31 input channels runs as the
// problem zero-padded to 32 (conv2d_nhwc_padded_channels, conv2d_kernels.h).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/settings.h"
#include "layers/conv/conv2d_depthwise.h"
#include "layers/conv/conv2d_kernels.h"
#include "layers/conv/conv2d_patchify.h"
#include "layers/conv/conv2d_small_cin.h"

namespace minidl::kernels {
namespace {

// The operands' storage: float32 NCHW (the default path), or channels-last (NHWC tensors, KRSC
// filter) of float32, bfloat16 or float16, the layout of cuDNN's tensor-core engines.
struct Operands {
  DType dtype = DType::Float32;
  bool nhwc = false;
};
constexpr Operands kNchwFloat{};

struct PlanKey {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dil_h, dil_w, groups;
  bool tf32, deterministic;
  DType dtype;
  bool nhwc;
  auto tie() const {
    return std::tie(n, c, h, w, o, kh, kw, sh, sw, ph, pw, dil_h, dil_w, groups, tf32, deterministic, dtype, nhwc);
  }
  bool operator<(const PlanKey& k) const { return tie() < k.tie(); }
};

// The algorithm of one direction, chosen on its first call.
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
size_t max_workspace() {
  return std::min<size_t>(size_t(1) << 30, cuda::props().totalGlobalMem / 16);
}

int checked_int(int64_t v, const char* what) {
  MINIDL_CHECK(v <= INT32_MAX, "conv2d on CUDA: ", what, " = ", v, " exceeds cuDNN's 32-bit limit");
  return static_cast<int>(v);
}

cudnnConvolutionDescriptor_t make_conv_desc(const Conv2dShape& s, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t d;
  MINIDL_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d));
  MINIDL_CUDA_CHECK(cudnnSetConvolution2dDescriptor(d, static_cast<int>(s.ph), static_cast<int>(s.pw),
                                                    static_cast<int>(s.sh), static_cast<int>(s.sw),
                                                    static_cast<int>(s.dil_h), static_cast<int>(s.dil_w),
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  MINIDL_CUDA_CHECK(cudnnSetConvolutionGroupCount(d, static_cast<int>(s.groups)));
  MINIDL_CUDA_CHECK(cudnnSetConvolutionMathType(d, math));
  return d;
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Float16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

Plan* make_plan(const Conv2dShape& s, bool tf32, Operands ops) {
  checked_int(s.n * s.c * s.h * s.w, "input elements");
  checked_int(s.n * s.o * s.oh() * s.ow(), "output elements");
  const cudnnTensorFormat_t format = ops.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t type = cudnn_type(ops.dtype);
  auto* p = new Plan();
  MINIDL_CUDA_CHECK(cudnnCreateTensorDescriptor(&p->x));
  MINIDL_CUDA_CHECK(cudnnSetTensor4dDescriptor(p->x, format, type, static_cast<int>(s.n), static_cast<int>(s.c),
                                               static_cast<int>(s.h), static_cast<int>(s.w)));
  MINIDL_CUDA_CHECK(cudnnCreateFilterDescriptor(&p->w));
  MINIDL_CUDA_CHECK(cudnnSetFilter4dDescriptor(p->w, type, format, static_cast<int>(s.o),
                                               static_cast<int>(s.group_c()), static_cast<int>(s.kh),
                                               static_cast<int>(s.kw)));
  // Half operands ask for tensor cores from the start: the heuristics rank under the
  // descriptor's math type.
  const cudnnMathType_t math =
      is_half(ops.dtype) ? CUDNN_TENSOR_OP_MATH : (tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  p->fwd.conv = make_conv_desc(s, math);
  p->bwd_data.conv = make_conv_desc(s, math);
  p->bwd_filter.conv = make_conv_desc(s, math);
  int n, c, h, w;
  MINIDL_CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(p->fwd.conv, p->x, p->w, &n, &c, &h, &w));
  MINIDL_ASSERT(n == s.n && c == s.o && h == s.oh() && w == s.ow());
  MINIDL_CUDA_CHECK(cudnnCreateTensorDescriptor(&p->y));
  MINIDL_CUDA_CHECK(cudnnSetTensor4dDescriptor(p->y, format, type, n, c, h, w));
  return p;
}

// The cached plan for s under the current settings (made on first use). Called with g_mu held.
PlanKey key_for(const Conv2dShape& s, Operands ops) {
  const ComputeSettings& cs = compute_settings();
  return {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.dil_h, s.dil_w, s.groups,
          cs.allow_tf32, cs.deterministic, ops.dtype, ops.nhwc};
}

Plan& plan_for(const Conv2dShape& s, Operands ops, PlanKey* key_out) {
  const PlanKey key = key_for(s, ops);
  *key_out = key;
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(s, key.tf32, ops)).first;
  return *it->second;
}

bool is_tensor_op(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

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
  fail(str("conv2d on CUDA: cuDNN offers no ", key.deterministic ? "deterministic " : "", direction,
           " algorithm for ", dtype_name(key.dtype), key.nhwc ? " channels_last" : "", " input (", key.n, ", ", key.c, ", ", key.h, ", ", key.w, "), weight (", key.o, ", ",
           key.c / key.groups, ", ", key.kh, ", ", key.kw, ")",
           key.groups > 1 ? str(", ", key.groups, " groups") : std::string(),
           key.dil_h > 1 || key.dil_w > 1 ? str(", dilation ", key.dil_h, "x", key.dil_w) : std::string(), " within a ",
           max_workspace() >> 20, " MiB workspace",
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
    MINIDL_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.fwd.conv, p.y, max_count, &count,
                                                             perf.data()));
  } else {
    auto ws = workspace(max_workspace());
    MINIDL_CUDA_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, p.x, x, p.w, w, p.fwd.conv, p.y, y, max_count,
                                                             &count, perf.data(), ws.get(), max_workspace()));
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
    MINIDL_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.bwd_data.conv, p.x, max_count,
                                                                  &count, perf.data()));
  } else {
    auto ws = workspace(max_workspace());
    MINIDL_CUDA_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, w, p.y, dy, p.bwd_data.conv, p.x, dx,
                                                                  max_count, &count, perf.data(), ws.get(),
                                                                  max_workspace()));
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
    MINIDL_CUDA_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x, x, p.y, dy, p.bwd_filter.conv, p.w, dw,
                                                                    max_count, &count, perf.data(), ws.get(),
                                                                    max_workspace()));
  }
  adopt_best(p.bwd_filter, perf, count, key, "backward-filter",
             [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
               return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.bwd_filter.conv, p.w, a, bytes);
             });
}

const char* fwd_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

const char* bwd_data_name(cudnnConvolutionBwdDataAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

const char* bwd_filter_name(cudnnConvolutionBwdFilterAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "FFT_TILING";
    default: return "?";
  }
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_conv";
    case CUDNN_FMA_MATH: return "fma";
    default: return "?";
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

// The three cuDNN directions on operands of any kind (conv2d_*_cuda and conv2d_nhwc_*_cuda).
template <class T>
void run_forward(const Conv2dShape& s, Operands ops, const T* x, const T* w, T* y) {
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
void run_backward_data(const Conv2dShape& s, Operands ops, const T* dy, const T* w, T* dx) {
  std::lock_guard<std::mutex> lock(g_mu);
  PlanKey key;
  Plan& p = plan_for(s, ops, &key);
  if (!p.bwd_data.ready) choose_backward_data(p, key, dy, w, dx);
  auto ws = workspace(p.bwd_data.workspace);
  const float one = 1.f, zero = 0.f;
  MINIDL_CUDA_CHECK(cudnnConvolutionBackwardData(cuda::cudnn(), &one, p.w, w, p.y, dy, p.bwd_data.conv,
                                                 p.bwd_data.algo, ws.get(), p.bwd_data.workspace, &zero, p.x, dx));
}

template <class T>
void run_backward_filter(const Conv2dShape& s, Operands ops, const T* x, const T* dy, T* dw) {
  if (s.n == 0) {
    MINIDL_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(T) * s.o * s.group_c() * s.kh * s.kw, cuda::stream()));
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

// Whether our depthwise kernels take this problem with these operands: they load 16-byte vectors.
template <class T>
bool depthwise(const Conv2dShape& s, const T* a, const T* b) {
  const auto aligned = [](const T* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return conv2d_depthwise_applies(s) && aligned(a) && aligned(b);
}

// The paths of bf16 and fp16 operands only (patchify, small-channel forward, channel padding).
template <class T>
constexpr bool kHalf = !std::is_same_v<T, float>;

// cuDNN's channels-last forward, on input channels padded first where conv2d_nhwc_padded_channels
// says so (half operands only).
template <class T>
void run_nhwc_forward(const Conv2dShape& s, const T* x, const T* w, T* y) {
  constexpr Operands ops{DTypeOf<T>::value, true};
  if constexpr (kHalf<T>) {
    if (const int64_t cp = conv2d_nhwc_padded_channels(s, ops.dtype)) {
      Conv2dShape p = s;
      p.c = cp;
      auto xp = allocate(sizeof(T) * s.n * s.h * s.w * cp, Device::cuda());
      auto wp = allocate(sizeof(T) * s.o * s.kh * s.kw * cp, Device::cuda());
      conv2d_nhwc_pad_channels_cuda(x, static_cast<T*>(xp.get()), s.n * s.h * s.w, s.c, cp);
      conv2d_nhwc_pad_channels_cuda(w, static_cast<T*>(wp.get()), s.o * s.kh * s.kw, s.c, cp);
      return run_forward(p, ops, static_cast<const T*>(xp.get()), static_cast<const T*>(wp.get()), y);
    }
  }
  run_forward(s, ops, x, w, y);
}

}  // namespace

void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  if (s.n == 0) return;
  if (conv2d_small_cin_applies(s)) return conv2d_small_cin_forward_cuda(s, x, w, b, y);
  run_forward(s, kNchwFloat, x, w, y);
  if (b) cuda::add_channel_bias(y, b, s.n, s.o, s.oh() * s.ow());
}

void conv2d_backward_data_cuda(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  if (s.n == 0) return;
  run_backward_data(s, kNchwFloat, dy, w, dx);
}

void conv2d_backward_filter_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw) {
  if (conv2d_small_cin_applies(s)) return conv2d_small_cin_backward_filter_cuda(s, x, dy, dw);
  run_backward_filter(s, kNchwFloat, x, dy, dw);
}

template <class T>
void conv2d_nhwc_forward_cuda(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  if (s.n == 0) return;
  if (depthwise(s, x, y)) return conv2d_depthwise_forward_cuda(s, x, w, b, y);
  if constexpr (kHalf<T>) {
    if (conv2d_patchify_applies(s, DTypeOf<T>::value)) return conv2d_patchify_forward_cuda(s, x, w, b, y);
    if (conv2d_small_cin_nhwc_applies(s, DTypeOf<T>::value)) return conv2d_small_cin_nhwc_forward_cuda(s, x, w, b, y);
  }
  run_nhwc_forward(s, x, w, y);
  if (b) conv2d_nhwc_add_bias_cuda(y, b, s.n * s.oh() * s.ow(), s.o);
}

template <class T>
void conv2d_nhwc_backward_data_cuda(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  if (s.n == 0) return;
  if (depthwise(s, dy, dx)) return conv2d_depthwise_backward_data_cuda(s, dy, w, dx);
  if constexpr (kHalf<T>) {
    if (conv2d_patchify_applies(s, DTypeOf<T>::value)) return conv2d_patchify_backward_data_cuda(s, dy, w, dx);
  }
  run_backward_data(s, {DTypeOf<T>::value, true}, dy, w, dx);
}

template <class T>
void conv2d_nhwc_backward_filter_cuda(const Conv2dShape& s, const T* x, const T* dy, T* dw) {
  if (depthwise(s, x, dy)) return conv2d_depthwise_backward_filter_cuda(s, x, dy, dw);
  if constexpr (kHalf<T>) {
    if (conv2d_patchify_applies(s, DTypeOf<T>::value)) return conv2d_patchify_backward_filter_cuda(s, x, dy, dw);
  }
  run_backward_filter(s, {DTypeOf<T>::value, true}, x, dy, dw);
}

#define MINIDL_CONV2D_NHWC_CUDA(T)                                                                 \
  template void conv2d_nhwc_forward_cuda<T>(const Conv2dShape&, const T*, const T*, const T*, T*); \
  template void conv2d_nhwc_backward_data_cuda<T>(const Conv2dShape&, const T*, const T*, T*);     \
  template void conv2d_nhwc_backward_filter_cuda<T>(const Conv2dShape&, const T*, const T*, T*);
MINIDL_FOR_FLOATING_TYPES(MINIDL_CONV2D_NHWC_CUDA)

void conv2d_backward_bias_cuda(const Conv2dShape& s, const float* dy, float* db) {
  const int64_t hw = s.oh() * s.ow(), total = s.n * hw;
  // Enough blocks to fill every resident slot once, but no slice shorter than one block's width.
  const int64_t by_device = std::max<int64_t>(1, cuda::resident_blocks(kBiasBlock) / std::max<int64_t>(s.o, 1));
  const int64_t by_size = std::max<int64_t>(1, (total + kBiasBlock - 1) / kBiasBlock);
  const int64_t slices = std::min<int64_t>({by_device, by_size, 65535});
  auto partials = allocate(sizeof(float) * slices * s.o, Device::cuda());
  float* part = static_cast<float*>(partials.get());
  bias_grad_partials_kernel<<<dim3(static_cast<unsigned>(s.o), static_cast<unsigned>(slices)), kBiasBlock, 0,
                              cuda::stream()>>>(dy, s.n, s.o, hw, slices, part);
  MINIDL_LAUNCH_CHECK();
  cuda::sum_partials_by_column(part, slices, s.o, db);
}

size_t conv2d_cuda_plan_count() {
  std::lock_guard<std::mutex> lock(g_mu);
  return plans().size();
}

namespace {

std::string plan_algorithms(const Plan& p) {
  return str("fwd ", choice_str(p.fwd, fwd_name), " | bwd_data ", choice_str(p.bwd_data, bwd_data_name),
             " | bwd_filter ", choice_str(p.bwd_filter, bwd_filter_name));
}

}  // namespace

std::string conv2d_cuda_algorithms(const Conv2dShape& s) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = plans().find(key_for(s, kNchwFloat));
  if (conv2d_small_cin_applies(s)) {
    const std::string bwd_data = it == plans().end() ? "-" : choice_str(it->second->bwd_data, bwd_data_name);
    return str("fwd small_cin fma | bwd_data ", bwd_data, " | bwd_filter small_cin fma");
  }
  return it == plans().end() ? "" : plan_algorithms(*it->second);
}

std::string conv2d_nhwc_cuda_algorithms(const Conv2dShape& s, DType dtype) {
  if (conv2d_depthwise_applies(s)) return "fwd depthwise direct | bwd_data depthwise direct | bwd_filter depthwise direct";
  if (conv2d_patchify_applies(s, dtype)) return "fwd patchify gemm | bwd_data patchify gemm | bwd_filter patchify gemm";
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = plans().find(key_for(s, {dtype, true}));
  const bool planned = it != plans().end();
  const std::string backward =
      str(" | bwd_data ", planned ? choice_str(it->second->bwd_data, bwd_data_name) : "-", " | bwd_filter ",
          planned ? choice_str(it->second->bwd_filter, bwd_filter_name) : "-");
  if (conv2d_small_cin_nhwc_applies(s, dtype)) return "fwd small_cin fma" + backward;
  if (const int64_t cp = conv2d_nhwc_padded_channels(s, dtype)) {
    Conv2dShape p = s;
    p.c = cp;
    auto padded = plans().find(key_for(p, {dtype, true}));
    return str("fwd ", padded == plans().end() ? "-" : choice_str(padded->second->fwd, fwd_name), " padded to ", cp,
               " channels", backward);
  }
  return planned ? plan_algorithms(*it->second) : "";
}

}  // namespace minidl::kernels
