// Half Linear forward with the bias in cuBLASLt's epilogue: one GEMM that writes y once, in the
// half type. The alternative, a float32 product in memory plus a pass that adds the bias and
// rounds, moves 10 bytes per output element instead of 2: at a ViT's 32768 x 1152 outputs that is
// ~0.1 ms per layer on an H100.
//
// Precision and determinism: float32 accumulation (CUBLAS_COMPUTE_32F), the bias added to the
// float32 sum, one rounding. Split-K is allowed only with no reduction or a reduction in float32
// (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE): the in-place and output-type schemes add partial sums
// up in the half type, which loses a cancelling sum's digits. The algorithm is cuBLASLt's
// heuristic first choice for the shape (no timing), kept per shape, with a fixed workspace, so a
// shape gets the same kernel, and the same bits, every run on a given GPU and library.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "layers/linear/linear_bias_gemm.h"

namespace minidl::kernels {
namespace {

constexpr size_t kWorkspace = 32 << 20;

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    MINIDL_CUDA_CHECK(cublasLtCreate(&created));
    return created;
  }();
  return h;
}

// The descriptors and the chosen algorithm of one (dtype, rows, in, out); found = false when
// cuBLASLt has none. Never destroyed: a handful per model, alive as long as the process.
struct Plan {
  bool found = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// Guards the plans and, since a call sets its bias pointer on the shared descriptor, each call.
std::mutex g_mu;

// Column-major, as linear_cuda.cu issues every product: y^T (out x rows) = W (out x in) x^T, so A
// is w read transposed (in x out, ld in), B is x (in x rows, ld in), D is y (out x rows, ld out).
// The alignment of the pointers is part of the key: cuBLASLt's choice depends on it. Called with
// g_mu held.
template <class T>
const Plan& plan_for(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y) {
  constexpr DType dtype = DTypeOf<T>::value;
  auto align = [](const T* p) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    return static_cast<int>(v % 16 == 0 ? 16 : v % 8 == 0 ? 8 : v % 4 == 0 ? 4 : 2);
  };
  const auto key = std::make_tuple(static_cast<int>(dtype), rows, in, out, align(x), align(w), align(b), align(y));
  static std::map<decltype(key), Plan> plans;
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  Plan& p = plans[key];
  const cudaDataType_t t = dtype == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  MINIDL_CUDA_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, none = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  MINIDL_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans));
  MINIDL_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none));
  MINIDL_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  MINIDL_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
  MINIDL_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.a, t, static_cast<uint64_t>(in), static_cast<uint64_t>(out), in));
  MINIDL_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.b, t, static_cast<uint64_t>(in), static_cast<uint64_t>(rows), in));
  MINIDL_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p.d, t, static_cast<uint64_t>(out), static_cast<uint64_t>(rows), out));
  cublasLtMatmulPreference_t pref = nullptr;
  MINIDL_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspace;
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  MINIDL_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                         sizeof workspace));
  MINIDL_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                         sizeof schemes));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &count);
  MINIDL_CUDA_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  p.found = status == CUBLAS_STATUS_SUCCESS && count > 0;
  if (p.found) p.algo = result.algo;
  return p;
}

}  // namespace

template <class T>
bool linear_forward_bias_gemm_cuda(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y) {
  MINIDL_CHECK(b != nullptr, "linear_forward_bias_gemm_cuda: takes a bias");
  std::lock_guard<std::mutex> lock(g_mu);
  const Plan& p = plan_for(rows, in, out, x, w, b, y);
  if (!p.found) return false;
  // The bias pointer of this call (the plan was made with one of the same alignment).
  MINIDL_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
  const float one = 1.f, zero = 0.f;
  auto workspace = allocate(kWorkspace, Device::cuda());
  MINIDL_CUDA_CHECK(cublasLtMatmul(lt_handle(), p.op, &one, w, p.a, x, p.b, &zero, y, p.d, y, p.d, &p.algo,
                                   workspace.get(), kWorkspace, cuda::stream()));
  return true;
}

template bool linear_forward_bias_gemm_cuda<bf16>(int64_t, int64_t, int64_t, const bf16*, const bf16*, const bf16*,
                                                 bf16*);
template bool linear_forward_bias_gemm_cuda<fp16>(int64_t, int64_t, int64_t, const fp16*, const fp16*, const fp16*,
                                                 fp16*);

}  // namespace minidl::kernels
